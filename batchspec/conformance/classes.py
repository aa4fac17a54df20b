"""Vectors that probe one bug class each (format: :mod:`batchspec.conformance`).

Every vector here carries ``class`` (the bug class it probes), ``hint`` (what
a decoder that fails it typically does wrong; ``check`` prints both with the
failure) and ``probe`` (where the vector sets the trap). The vectors run on
one tiny family (:data:`CLASS_FAMILY`) with a self-draft, so that every draft
is accepted and only the probed feature can go wrong, except
``none_accepted`` (an unrelated draft), the classes of :data:`RAGGED` (a
perturbed draft: rows accept different counts, so every bug that acts on a
rejected draft fails them too) and the sampled classes of :mod:`.sampled` (a
perturbed draft; the keyed uniforms in the vector).
Prompts come from a fixed, deterministic pool, chosen by what the target's batch-1 greedy decoding does
with them; the expected outputs are computed as for the other vectors.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import sampled

CLASS_FAMILY = "qwen3"
K = 3  #: draft length of most class vectors; ``eos_at_slot_0`` .. ``eos_at_slot_K``
N = 12  #: budget of most class vectors (a multiple of K + 1: full rounds only)
PAD = 0  #: the tiny models' pad id

HINTS = {
    "pad_id_emitted": "a decoder that derives its attention mask or padding from token values "
                      f"(ids != {PAD}) hides the pad id the target emits and changes what follows",
    "eos_in_prompt": "a decoder that stops a row on any EOS in its row, prompt included, returns nothing",
    **{f"eos_at_slot_{j}": f"a decoder that looks for EOS only at a round's last token (or cuts the round "
                           f"at the wrong slot) returns the tokens after an EOS at slot {j}" for j in range(K)},
    f"eos_at_slot_{K}": f"a decoder that looks for EOS only among the accepted drafts misses one in the "
                        f"bonus token (slot {K} = k) and runs on past it",
    "all_accepted": "a decoder that keeps the bonus token when the last round drafted its whole remaining "
                    "budget (every draft accepted) returns max_new_tokens + 1 tokens",
    "none_accepted": "a decoder that takes the token after a rejected draft from the draft (its own "
                     "rejected proposal, DSD's 'bonus') instead of the target's correction returns the "
                     "draft's text",
    "k_zero_rounds": "a decoder that drafts k tokens whatever the budget, or commits the verify pass's "
                     "k'+1 tokens unclipped, returns more than max_new_tokens (here 1) tokens",
    "one_token_prompt": "a decoder that prefills all but the last prompt token (an empty prefill here), "
                        "or squeezes a length-1 dimension, crashes or misreads a one-token prompt",
    "per_request_budget": "a decoder that applies one budget to every row (the largest, or the first) "
                          "returns rows too long or too short; the budgets are max_new_tokens_per_request, "
                          "passed to a Python decoder as a list in max_new_tokens",
    **sampled.HINTS,
    "offset_whole_block": "a decoder that advances every row's cache offset (and positions) by the whole draft "
                          "block, whatever the row accepted, keeps attending rejected drafts",
    "bonus_duplicated": "a decoder that puts the bonus token again as the next round's first draft and counts it "
                        "as accepted returns that token twice",
    "positions_batch_max": "a decoder that counts every row's positions from the batch's largest acceptance feeds "
                           "wrong positions once rows accept different counts (batch >= 2, k >= 2)",
    "rejected_attended": "a decoder that keeps a rejected draft's key and value in the cache where the target still "
                         "attends it (left stale, zeroed, or skipped by an offset) blurs what the target sees and "
                         "drifts from its own decoding",
    "zero_draft_rows": "a decoder that drafts nothing for a row in some round (a per-row k of 0, or drafts capped "
                       "at the budget left less one) and commits the draft's token for that row unverified returns "
                       "the draft's text",
}
#: Classes whose trap is rows that accept different counts in one round: a perturbed draft, so any
#: decoder that goes wrong on a rejected draft fails them too.
RAGGED = ("offset_whole_block", "bonus_duplicated", "positions_batch_max")
CLASSES = tuple(HINTS)
BUDGETS = [2, 12, 5, 9]  #: per_request_budget's budgets, one per prompt


class Pool:
    """Candidate prompts and the target's batch-1 greedy continuations of them."""

    def __init__(self, target, unrelated, size: int = 32):
        from ..testing import random_prompts

        self.target, self.unrelated = target, unrelated
        self.prompts = random_prompts(0, size, low=1, high=7)
        self._out: dict[tuple, list[int]] = {}

    def out(self, prompt) -> list[int]:
        """The target's greedy continuation of ``prompt``, ``N`` tokens, no EOS."""
        from ..testing import reference_greedy

        key = tuple(prompt)
        if key not in self._out:
            self._out[key] = reference_greedy(self.target, list(prompt), N, None)
        return self._out[key]

    def clean(self, prompt) -> bool:
        return PAD not in self.out(prompt)

    def base(self, count: int = 4) -> list[list[int]]:
        """The first ``count`` clean prompts of distinct lengths >= 2 (rounds start ragged)."""
        chosen: list[list[int]] = []
        for p in self.prompts:
            if len(p) >= 2 and len(p) not in map(len, chosen) and self.clean(p):
                chosen.append(p)
            if len(chosen) == count:
                return chosen
        raise RuntimeError("class vectors: too few clean prompts in the pool")

    def never_accepted(self, k: int, n: int, count: int = 4) -> list[list[int]]:
        """Clean prompts on which the unrelated draft never has a draft accepted."""
        from .. import api

        found = []
        for p in self.prompts:
            if self.clean(p):
                run = api.generate(self.target, self.unrelated, [p], num_draft_tokens=k, max_new_tokens=n)
                if all(m == 0 for rec in run.stats.per_round for m in rec.accepted):
                    found.append(p)
            if len(found) == count:
                return found
        raise RuntimeError("class vectors: too few prompts with no accepted draft")


def _fail(cls: str):
    raise RuntimeError(f"class vectors: no prompt in the pool sets up {cls} (did the tiny models change?)")


def spec(cls: str, pool: Pool) -> dict:
    """The vector of ``cls``: prompts, k, max_new_tokens, eos ids, draft kind, probe."""
    base = pool.base()
    vector = {"prompts": base, "k": K, "max_new_tokens": N, "eos_token_id": [], "draft": "self"}
    if cls == "pad_id_emitted":
        zeros = [p for p in pool.prompts if PAD in pool.out(p)[:N - 1]][:2] or _fail(cls)
        vector["prompts"] = zeros + base[:2]
        vector["probe"] = {"rows_emitting_pad": list(range(len(zeros))), "pad_id": PAD}
    elif cls == "eos_in_prompt":
        vector.update(max_new_tokens=8, **_eos_in_prompt(cls, pool, base))
    elif cls.startswith("eos_at_slot_"):
        vector.update(_eos_at_slot(cls, int(cls.rsplit("_", 1)[1]), pool, base))
    elif cls == "all_accepted":
        vector["max_new_tokens"] = 10  # rounds of 4, 4, then k' = 2 = the remaining budget
        vector["probe"] = {"accepted": "every draft, every round", "last_round_k": 10 % (K + 1)}
    elif cls == "none_accepted":
        vector.update(prompts=pool.never_accepted(2, 8), k=2, max_new_tokens=8, draft="unrelated",
                      probe={"accepted": "no draft, every round"})
    elif cls == "k_zero_rounds":
        vector.update(k=4, max_new_tokens=1, probe={"k_prime": 1, "appended": 1})
    elif cls == "one_token_prompt":
        one = next((p for p in pool.prompts if len(p) == 1 and pool.clean(p)), None) or _fail(cls)
        vector.update(prompts=[one] + base[:3], max_new_tokens=8, probe={"prompt": 0})
    elif cls in sampled.SAMPLED:
        vector.update(max_new_tokens=8, draft=sampled.SAMPLED[cls][3], probe={"accepted": "some drafts, not all"},
                      **sampled.fields(cls, base, 8))
    elif cls in RAGGED:
        vector.update(draft="perturbed", probe={"accepted": "rows accept different counts in one round"})
    elif cls == "rejected_attended":  # an unrelated draft of 4: most rounds reject up to 4 drafts a row
        vector.update(k=4, draft="unrelated", probe={"accepted": "few drafts; most rounds reject several a row"})
    elif cls == "zero_draft_rows":  # the draft's choice is wrong at the first slot of every round
        vector.update(prompts=pool.never_accepted(K, 8), max_new_tokens=8, draft="unrelated",
                      probe={"accepted": "no draft, every round", "zero_draft_row": "its draft's token is wrong"})
    elif cls == "per_request_budget":
        vector.update(max_new_tokens=max(BUDGETS), max_new_tokens_per_request=BUDGETS,
                      probe={"budgets": BUDGETS})
    else:
        raise ValueError(f"unknown class {cls!r}; choose from {list(CLASSES)}")
    return vector


def _eos_in_prompt(cls: str, pool: Pool, base) -> dict:
    """Two EOS ids the target never emits here: one inside a prompt, one a prompt's last token."""
    emitted = {t for p in base for t in pool.out(p)[:8]}
    inside = next(((r, i) for r in (1, 0, 2, 3) for i in range(1, len(base[r]) - 1)
                   if base[r][i] not in emitted), None) or _fail(cls)
    last = next((r for r in (2, 3, 0, 1) if r != inside[0] and base[r][-1] not in emitted), None)
    last = _fail(cls) if last is None else last
    return {"eos_token_id": [base[inside[0]][inside[1]], base[last][-1]],
            "probe": {"inside": {"prompt": inside[0], "at": inside[1]},
                      "last": {"prompt": last, "at": len(base[last]) - 1}, "emitted": False}}


def _eos_at_slot(cls: str, j: int, pool: Pool, base) -> dict:
    """An EOS id whose first occurrence in one row's output is slot ``j`` of a
    round (every round commits K + 1 tokens with a self-draft), absent from
    every prompt and every other row's output; a later round than the first
    where one is."""
    outs = [pool.out(p) for p in base]
    found = []
    for row, out in enumerate(outs):
        others = {t for i, o in enumerate(outs) if i != row for t in o} | {t for p in base for t in p}
        found += [(t <= K, row, t) for t in range(j, N, K + 1) if out[t] not in out[:t] and out[t] not in others]
    if not found:
        _fail(cls)
    _, row, t = min(found)
    return {"eos_token_id": [outs[row][t]], "probe": {"prompt": row, "round": t // (K + 1) + 1, "slot": j, "token": t}}


def export_classes(root: Path, family: str = CLASS_FAMILY, classes=CLASSES) -> list[str]:
    """Write the models and the class vectors into ``root``; return the vector names."""
    from ..models import tiny
    from .export import FORMAT, expected

    target, unrelated = tiny.pair(family, "unrelated", seed=0)
    drafts = {"self": target, "unrelated": unrelated, "perturbed": tiny.pair(family, "perturbed", seed=0)[1]}
    folders = {"self": f"models/{family}/target", "unrelated": f"models/{family}/draft-unrelated",
               "perturbed": f"models/{family}/draft"}
    for kind, model in drafts.items():
        model.save_pretrained(root / folders[kind])
    pool, names = Pool(target, unrelated), []
    for cls in classes:
        s = spec(cls, pool)
        budgets = s.get("max_new_tokens_per_request")
        want = expected(target, drafts[s["draft"]], s["k"], s["max_new_tokens"], s["eos_token_id"], s["prompts"],
                        check_invariants=False, sampling=s.get("sampling"))
        if budgets:  # the reference takes one budget: decode to the largest, cut each row at its own
            want = per_request(want, budgets)
        name = f"{cls}-{family}"
        vector = {"format": FORMAT, "name": name, "family": family, "class": cls, "hint": HINTS[cls],
                  "probe": s["probe"], "target": folders["self"], "draft": folders[s["draft"]],
                  "dtype": "float64", "prompts": s["prompts"], "k": s["k"], "max_new_tokens": s["max_new_tokens"],
                  **({"max_new_tokens_per_request": budgets} if budgets else {}),
                  "eos_token_id": s["eos_token_id"],
                  **{key: s[key] for key in ("sampling", "uniforms") if key in s}, "expected": want}
        (root / f"{name}.json").write_text(json.dumps(vector, indent=1) + "\n")
        names.append(name)
    return names


def per_request(want: dict, budgets: list[int]) -> dict:
    """``want`` (decoded to ``max(budgets)``) with row ``i`` cut at ``budgets[i]``; no
    round records (the rounds of a per-request budget are not the reference's)."""
    sequences = [s[:b] for s, b in zip(want["sequences"], budgets)]
    stops = [r if len(s) == len(full) else "length" for s, full, r in
             zip(sequences, want["sequences"], want["stop_reasons"])]
    return {"sequences": sequences, "stop_reasons": stops, "rounds": None}
