"""I8 sampled verification (Spec §3.8), the counterpart of I5 under sampling.

With keyed uniforms (Spec §4.3.2) a sampled run is a deterministic function
of the logits, so "the committed tokens are the target's" becomes checkable
one run at a time again: every committed token must be what the rule decides
from the logits the verify call really returned, the logits the draft calls
really returned and the uniforms keyed by (request, position, purpose).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._util import from_newest, reporter
from .observation import Observation
from .violation import Violation


def sampled_verification(obs: Observation) -> list[Violation]:
    """Every token a sampled round commits is the rule's decision (Spec §3.8).

    Checked at the step that decides acceptance under sampling
    (``obs.committed`` and ``obs.sampled`` set), on the last target call of
    that step. For row ``i`` and committed token ``j`` at position ``t = c_i + j``:

    * for ``j >= 1``, input ``j`` of the call is committed token ``j - 1``;
    * for ``j < k'``, draft ``j`` is the rule's proposal ``y_t`` drawn from
      the recorded draft logits at slot ``j`` (a greedy draft fails here);
    * the token is the rule's ``x_t`` from the recorded target logits at
      input ``j``, the recorded draft logits at slot ``j`` (slot ``k'``: the
      catch-up call's, for the bonus) and the keyed uniforms.
    """
    if obs.committed is None or obs.sampled is None:
        return []
    report = reporter(obs, "I8", "sampled_verification")
    verify = [c for c in obs.calls if c.model == "target"]
    if not verify or verify[-1].logits is None:
        return [report(None, "a target call with recorded logits", len(verify),
                       "tokens committed without a recorded verification call", "target")]
    call, record = _FromNewest(*from_newest(obs, verify[-1])), obs.sampled
    n = call.input_ids.shape[1]
    k = 0 if obs.draft_tokens is None else obs.draft_tokens.shape[1]
    if call.logits.shape[1] != n or (record.draft_logits and len(record.draft_logits) != k + 1):
        return [report(None, f"logits for {n} inputs and {k + 1} draft slots",
                       (call.logits.shape[1], len(record.draft_logits)),
                       "the round's recorded logits do not cover every slot", "target")]
    out: list[Violation] = []
    for i, tokens in enumerate(obs.committed):
        found = _row(obs, call, record, i, tokens, n, k)
        if found:
            out.append(report(i, *found))
    return out


@dataclass
class _FromNewest:
    """A verification call's inputs and logits from the newest committed token on."""

    input_ids: torch.Tensor  # [B, n]
    logits: torch.Tensor  # [B, n, V]


def _row(obs, call, record, i, tokens, n, k):
    """The first way row ``i``'s committed ``tokens`` break the rule, as
    ``(expected, actual, detail, model)``, or None."""
    if len(tokens) > n:
        return f"at most {n} tokens from one call", len(tokens), "row commits more tokens than the call verified", "target"
    request = obs.requests[i] if obs.requests else i
    for j, token in enumerate(tokens):
        t = record.positions[i] + j
        if j and int(call.input_ids[i, j]) != tokens[j - 1]:
            return (tokens[j - 1], int(call.input_ids[i, j]),
                    f"committed token {j} was chosen after input {j}, which is not committed token {j - 1}", "target")
        q = record.draft_logits[j][i] if record.draft_logits else None
        drafted = int(obs.draft_tokens[i, j]) if j < k else None
        if drafted is not None:
            y, _ = record.rule(request, t, call.logits[i, j], q)
            if y != drafted:
                return y, drafted, f"draft {j} (position {t}) is not the rule's proposal from the draft's logits", "draft"
        _, x = record.rule(request, t, call.logits[i, j], q, drafted)
        if x != token:
            return x, token, f"committed token {j} (position {t}) is not the rule's decision", "target"
    return None
