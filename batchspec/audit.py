"""The equivalence auditor: a real bug, or floating-point noise? (exactness: Spec §5.2)

Compare candidate outputs with reference outputs for the same prompts, from
this project or from any other engine (vLLM, SGLang, a user's own loop). Per
prompt: exact match, the first divergence, the paper's partial match
(matching prefix length over reference length), and a classification of the
divergence:

* **numeric near-tie**: at the divergence point, computed by the target on
  the shared prefix, the reference token and the candidate token are both
  within the tolerance of the top logit. Rounding in the precision the
  outputs were produced in can pick either; no algorithm is at fault.
* **algorithmic**: anything else. No rounding of that precision explains the
  choice, or the outputs differ in length after a common prefix (a stopping
  rule differs, not a token choice).

Only the first divergence of a prompt is classified: after it the two
outputs continue different prefixes, and nothing later is comparable.

Tolerance (:func:`tolerance`): ``τ = FACTOR · ε(dtype) · max(1, max_v |l_v|)``
where ``ε`` is the machine epsilon of the precision the compared outputs were
computed in and ``l`` the target's logits there. Measured on the tiny pairs
(2 layers), one low-precision forward's logits differ from float64 by about
1.2 ε·s in float16, 1.3 ε·s in bfloat16 and 4 ε·s in float32 (s the largest
|logit|); two runs (a batched and a batch-1 kernel) can differ by twice one
run's error, and deep models accumulate more error than two layers, roughly
with depth. ``FACTOR = 16`` covers both with room: a near-tie is called numeric
only within 16 ulps of the logit scale. That is 1.6e-2·s in float16, 0.125·s
in bfloat16, 1.9e-6·s in float32 and 3.6e-15·s in float64.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

#: ulps of the logit scale within which two tokens count as tied (see the module doc).
FACTOR = 16
NUMERIC = "numeric near-tie"
ALGORITHMIC = "algorithmic"
UNCLASSIFIED = "unclassified"  # no target model given


def tolerance(dtype: torch.dtype, logits: torch.Tensor, factor: float = FACTOR) -> float:
    """``τ`` for outputs produced in ``dtype``, at a point with logits ``[V]``."""
    scale = max(1.0, float(logits.abs().max()))
    return factor * torch.finfo(dtype).eps * scale


@dataclass
class PromptAudit:
    """The verdict on one prompt."""

    index: int
    exact: bool
    matched: int  # length of the common prefix
    reference_length: int
    partial: float  # matched / reference_length (the paper's partial match)
    first_divergence: int | None = None  # None when exact
    classification: str | None = None  # None when exact
    reason: str | None = None  # "token" | "length"
    reference_token: int | None = None
    candidate_token: int | None = None
    margin: float | None = None  # the target's top-2 logit margin at the divergence
    gap: float | None = None  # top logit minus the lower of the two divergent tokens' logits
    tolerance: float | None = None


@dataclass
class AuditReport:
    """Per-prompt verdicts and their totals."""

    prompts: list[PromptAudit]
    dtype: str | None = None
    factor: float = FACTOR
    counts: dict = field(default_factory=dict)

    @property
    def exact_rate(self) -> float:
        """Fraction of prompts whose outputs match exactly."""
        return sum(p.exact for p in self.prompts) / len(self.prompts) if self.prompts else 1.0

    @property
    def partial_rate(self) -> float:
        """Mean partial match."""
        return sum(p.partial for p in self.prompts) / len(self.prompts) if self.prompts else 1.0

    def as_dict(self) -> dict:
        """A JSON-ready summary with every prompt."""
        return {"exact_rate": self.exact_rate, "partial_rate": self.partial_rate, "dtype": self.dtype,
                "factor": self.factor, "counts": self.counts, "prompts": [asdict(p) for p in self.prompts]}


def compare_one(index: int, reference: list[int], candidate: list[int]) -> PromptAudit:
    """Exact match, common prefix and partial match of one pair of outputs."""
    matched = 0
    for r, c in zip(reference, candidate):
        if r != c:
            break
        matched += 1
    exact = list(reference) == list(candidate)
    partial = matched / len(reference) if reference else float(exact)
    out = PromptAudit(index, exact, matched, len(reference), partial)
    if not exact:
        out.first_divergence = matched
        both = matched < len(reference) and matched < len(candidate)
        out.reason = "token" if both else "length"
        out.reference_token = reference[matched] if matched < len(reference) else None
        out.candidate_token = candidate[matched] if matched < len(candidate) else None
    return out


@torch.no_grad()
def next_logits(target, tokens: list[int]) -> torch.Tensor:
    """The target's logits ``[V]`` after ``tokens`` (one batch-1 forward)."""
    ids = torch.tensor([tokens], dtype=torch.long, device=target.device)
    return target(input_ids=ids, attention_mask=torch.ones_like(ids), logits_to_keep=1).logits[0, -1]


def classify(verdict: PromptAudit, prompt: list[int], reference: list[int], target, dtype,
             factor: float = FACTOR) -> None:
    """Fill margin, gap, tolerance and classification of a divergent ``verdict``."""
    if verdict.reason == "length":
        verdict.classification = ALGORITHMIC
        return
    if target is None:
        verdict.classification = UNCLASSIFIED
        return
    logits = next_logits(target, list(prompt) + list(reference[: verdict.first_divergence])).double()
    top2 = logits.topk(2).values
    verdict.margin = float(top2[0] - top2[1])
    low = min(float(logits[verdict.reference_token]), float(logits[verdict.candidate_token]))
    verdict.gap = float(top2[0]) - low
    verdict.tolerance = tolerance(dtype, logits, factor)
    verdict.classification = NUMERIC if verdict.gap <= verdict.tolerance else ALGORITHMIC


def check_ids(prompts, references, candidates, target=None) -> None:
    """A ``ValueError`` naming the list, the prompt and the position of the first
    entry that is not a token id: not an int, negative, or (with ``target``)
    outside its vocabulary. A negative id would index the logits from the end
    and could be labelled a numeric near-tie."""
    from .validate import vocab_size

    vocab = vocab_size(target) if target is not None else None
    for name, lists in (("prompts", prompts), ("references", references), ("candidates", candidates)):
        if not isinstance(lists, (list, tuple)):
            raise TypeError(f"{name} must be a list of lists of token ids, got {type(lists).__name__}")
        for i, ids in enumerate(lists):
            if not isinstance(ids, (list, tuple)):
                raise TypeError(f"{name}[{i}] must be a list of token ids, got {type(ids).__name__}")
            for j, t in enumerate(ids):
                if isinstance(t, bool) or not isinstance(t, int) or t < 0 or (vocab and t >= vocab):
                    bound = f"[0, {vocab})" if vocab else ">= 0"
                    raise ValueError(f"{name}[{i}][{j}] = {t!r} is not a token id {bound}")


def audit(prompts, references, candidates, target=None, dtype: torch.dtype | None = None,
          factor: float = FACTOR) -> AuditReport:
    """Audit ``candidates`` against ``references`` (lists of new token ids per prompt).

    ``target``: the target model that computes margins at each divergence on
    the shared prefix (best loaded in float32 or float64, so the margin itself
    is accurate); without it divergences are ``"unclassified"``. ``dtype``: the
    precision the compared outputs were produced in (the lower of the two);
    defaults to the target's dtype. ``factor`` overrides :data:`FACTOR`.
    Ids that are not tokens (:func:`check_ids`) raise before any forward.
    """
    check_ids(prompts, references, candidates, target)
    if not (len(prompts) == len(references) == len(candidates)):
        raise ValueError(f"prompts, references and candidates differ in number: "
                         f"{len(prompts)}, {len(references)}, {len(candidates)}")
    if dtype is None and target is not None:
        dtype = target.dtype
    verdicts = []
    for i, (prompt, reference, candidate) in enumerate(zip(prompts, references, candidates)):
        verdict = compare_one(i, reference, candidate)
        if not verdict.exact:
            classify(verdict, prompt, reference, target, dtype, factor)
        verdicts.append(verdict)
    counts = {"exact": sum(v.exact for v in verdicts)}
    for label in (NUMERIC, ALGORITHMIC, UNCLASSIFIED):
        counts[label] = sum(v.classification == label for v in verdicts)
    return AuditReport(verdicts, str(dtype).replace("torch.", "") if dtype else None, factor, counts)
