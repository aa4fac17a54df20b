"""Write the conformance vectors (format: :mod:`batchspec.conformance`)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

FORMAT = "batchspec-conformance/1"

#: The prompts every vector starts from: unequal lengths, so rounds turn ragged.
PROMPTS = [[13, 41, 89, 42], [41, 24, 12, 82], [21, 94, 90, 41, 63, 22], [52, 77, 6, 63, 33, 53]]

#: name suffix -> (k, max_new_tokens, eos ids); the EOS ids are chosen per vector
#: as tokens the target really emits, so that some rows stop early (see :func:`_eos`).
SCENARIOS = {"ragged-k3": (3, 10, None), "eos-k2": (2, 12, "emitted")}
FAMILIES = ("llama", "qwen3", "gpt2")
VECTORS = tuple(f"{family}-{name}" for family in FAMILIES for name in SCENARIOS)


def export(folder, families=FAMILIES) -> list[str]:
    """Write the models and the vectors of ``families`` into ``folder``; return the vector names."""
    from ..models import tiny

    root = Path(folder)
    names = []
    for family in families:
        target, draft = tiny.pair(family, "perturbed", seed=0)
        for role, model in (("target", target), ("draft", draft)):
            model.save_pretrained(root / "models" / family / role)
        for suffix, (k, n, eos) in SCENARIOS.items():
            name = f"{family}-{suffix}"
            eos_ids = _eos(target, n) if eos else []
            vector = {"format": FORMAT, "name": name, "family": family,
                      "target": f"models/{family}/target", "draft": f"models/{family}/draft",
                      "dtype": "float64", "prompts": PROMPTS, "k": k, "max_new_tokens": n,
                      "eos_token_id": eos_ids, "expected": expected(target, draft, k, n, eos_ids)}
            (root / f"{name}.json").write_text(json.dumps(vector, indent=1) + "\n")
            names.append(name)
    return names


def _eos(target, n: int) -> list[int]:
    """One EOS id: the third token the target emits for the first prompt, so that
    row stops after three tokens and the others run on (unless they emit it too)."""
    from ..testing import reference_greedy

    return [reference_greedy(target, PROMPTS[0], n, None)[2]]


def expected(target, draft, k: int, n: int, eos: list[int]) -> dict:
    """Sequences, stop reasons and per-round records of the reference EQSPEC."""
    from .. import api

    result = api.generate(target, draft, PROMPTS, method="eqspec", num_draft_tokens=k, max_new_tokens=n,
                          eos_token_id=eos or None, check_invariants=True)
    return {"sequences": result.sequences, "stop_reasons": result.stop_reasons,
            "rounds": rounds(result.stats.per_round, max(map(len, PROMPTS)))}


def rounds(per_round, width: int) -> list[dict]:
    """The vector's round records from EQSPEC's :class:`RoundRecord` s; ``width``: ``L`` before round 1."""
    out = []
    for i, rec in enumerate(per_round):
        staying = set(per_round[i + 1].requests) if i + 1 < len(per_round) else set()
        delta = [rec.width - width - a if r in staying else None for r, a in zip(rec.requests, rec.committed)]
        out.append({"round": rec.round, "requests": rec.requests, "accepted": rec.accepted,
                    "committed": rec.committed, "width_before": width, "width": rec.width, "delta": delta})
        width = rec.width
    return out
