"""I5 greedy verification (Spec §3.5).

I1–I4 say that every row's grid, positions and caches describe its committed
stream. None of them says that the stream is the *target's*: a decoder that
commits the draft's token instead of the target's bonus keeps every cache in
step with its (wrong) stream. I5 closes that gap for greedy decoding, on the
tensors the target really returned (Contributing §4.3), not on a re-derivation.
"""

from __future__ import annotations

from ._util import from_newest, reporter
from .observation import Observation
from .violation import Violation


def greedy_verification(obs: Observation) -> list[Violation]:
    """Every token a round commits is the target's greedy choice (Spec §3.5).

    Checked at the step that decides acceptance (``obs.committed`` set), on
    the last target call of that step, whose input for row ``i`` is the
    newest committed token followed by the drafts (I4 checks that lead;
    after a prefill that fed nothing the committed slots its cache lacked come first,
    Spec §4.1), and whose logits are what the target returned:

    * committed token ``j`` is the argmax of the logits at input ``j``;
    * for ``j >= 1``, input ``j`` is committed token ``j - 1``: the logits
      that chose token ``j`` were computed on the committed prefix, not on a
      rejected draft.

    Applies to greedy decoding; a sampled round (``obs.sampled`` set) is
    checked by I8 instead (Spec §3.8). Observations without ``committed`` are
    not checked.
    """
    if obs.committed is None or obs.sampled is not None:
        return []
    report = reporter(obs, "I5", "greedy_verification")
    verify = [c for c in obs.calls if c.model == "target"]
    if not verify or verify[-1].logits is None:
        return [report(None, "a target call with recorded logits", len(verify),
                       "tokens committed without a recorded verification call", "target")]
    inputs, logits = from_newest(obs, verify[-1])  # [B, n] from the newest token on, their logits
    n = inputs.shape[1]
    if logits.shape[1] != n:
        return [report(None, f"logits for all {n} inputs", logits.shape[1],
                       "verification call did not return logits for every input", "target")]
    choice = logits.argmax(-1).tolist()  # [B][n]: two small transfers, then plain Python
    fed = inputs.tolist()  # [B][n]
    out: list[Violation] = []
    for i, tokens in enumerate(obs.committed):
        if len(tokens) > n:
            out.append(report(i, f"at most {n} tokens from one call", len(tokens),
                              "row commits more tokens than the call verified", "target"))
            continue
        for j, token in enumerate(tokens):
            if j and fed[i][j] != tokens[j - 1]:
                out.append(report(i, tokens[j - 1], fed[i][j],
                                  f"committed token {j} was chosen after input {j}, which is not "
                                  f"committed token {j - 1}", "target"))
                break
            if choice[i][j] != token:
                out.append(report(i, choice[i][j], token,
                                  f"committed token {j} is not the target's greedy choice", "target"))
                break
    return out
