"""Write the conformance vectors (format: :mod:`batchspec.conformance`)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .classes import HINTS, export_classes

FORMAT = "batchspec-conformance/1"

#: The prompts every vector starts from: unequal lengths, so rounds turn ragged.
PROMPTS = [[13, 41, 89, 42], [41, 24, 12, 82], [21, 94, 90, 41, 63, 22], [52, 77, 6, 63, 33, 53]]

#: name suffix -> (k, max_new_tokens, eos ids); the EOS ids are chosen per vector
#: as tokens the target really emits, so that some rows stop early (see :func:`_eos`).
SCENARIOS = {"ragged-k3": (3, 10, None), "eos-k2": (2, 12, "emitted")}
FAMILIES = ("llama", "qwen3", "gpt2")
VECTORS = tuple(f"{family}-{name}" for family in FAMILIES for name in SCENARIOS)
#: the bug classes with a vector of their own (:mod:`.classes`), named ``<class>-<family>``
CLASSES = tuple(HINTS)


def export(folder, families=FAMILIES, classes=CLASSES) -> list[str]:
    """Write the models and the vectors of ``families`` into ``folder``, then
    one vector per bug class in ``classes`` (on :data:`.classes.CLASS_FAMILY`);
    return the vector names."""
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
    return names + (export_classes(root, classes=classes) if classes else [])


def _eos(target, n: int) -> list[int]:
    """One EOS id: the third token the target emits for the first prompt, so that
    row stops after three tokens and the others run on (unless they emit it too)."""
    from ..testing import reference_greedy

    return [reference_greedy(target, PROMPTS[0], n, None)[2]]


def expected(target, draft, k: int, n: int, eos: list[int], prompts=PROMPTS, check_invariants=True,
             sampling: dict | None = None) -> dict:
    """Sequences, stop reasons and per-round records of the reference EQSPEC
    (speculative sampling with a vector's ``sampling``: :mod:`.sampled`)."""
    from .. import api
    from .sampled import options

    result = api.generate(target, draft, prompts, method="eqspec", num_draft_tokens=k, max_new_tokens=n,
                          eos_token_id=eos or None, check_invariants=check_invariants,
                          **(options(sampling) if sampling else {}))
    return {"sequences": result.sequences, "stop_reasons": result.stop_reasons,
            "rounds": rounds(result.stats.per_round, max(map(len, prompts)))}


def rounds(per_round, width: int) -> list[dict]:
    """The vector's round records from EQSPEC's :class:`RoundRecord` s; ``width``: ``L`` before round 1."""
    out = []
    for i, rec in enumerate(per_round):
        staying = set(per_round[i + 1].requests) if i + 1 < len(per_round) else set()
        delta = [rec.width - width - a if r in staying else None for r, a in zip(rec.requests, rec.appended)]
        out.append({"round": rec.round, "requests": rec.requests, "accepted": rec.accepted,
                    "appended": rec.appended, "width_before": width, "width": rec.width, "delta": delta})
        width = rec.width
    return out
