"""Run a decoder on the conformance vectors and compare (format: :mod:`batchspec.conformance`).

A Python decoder is a callable::

    decode(target, draft, prompts, k, max_new_tokens, eos_token_id) -> list[list[int]] | dict

``target`` and ``draft`` are the vector's models, loaded in float64 with SDPA
attention on the CPU; ``prompts`` lists of token ids; ``eos_token_id`` a list
of ids (possibly empty). It returns the generated ids per prompt (cut after
the first EOS), or ``{"sequences": ..., "rounds": ...}`` to have its
per-round ``a_i`` / ``L'`` / ``δ_i`` compared too.

A command is run once per vector as ``COMMAND... VECTOR.json`` (the path
appended as its last argument); it prints that same JSON answer on standard
output and exits 0.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import torch

from .export import FORMAT, rounds

ROUND_FIELDS = ("requests", "accepted", "committed", "width_before", "width", "delta")


def load_vector(path) -> dict:
    """A vector, with ``ValueError`` naming what is wrong with the file."""
    try:
        vector = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a readable JSON vector ({error})") from None
    if vector.get("format") != FORMAT:
        raise ValueError(f"{path}: format is {vector.get('format')!r}, this checker reads {FORMAT!r}")
    return vector


def models(folder: Path, vector: dict):
    """The vector's target and draft, float64, SDPA."""
    from transformers import AutoModelForCausalLM

    return [AutoModelForCausalLM.from_pretrained(folder / vector[role], dtype=torch.float64,
                                                 attn_implementation="sdpa").eval() for role in ("target", "draft")]


def compare(vector: dict, answer) -> str | None:
    """Why ``answer`` fails ``vector``, or None when it passes."""
    answer = {"sequences": answer} if isinstance(answer, list) else answer
    if not isinstance(answer, dict) or not isinstance(answer.get("sequences"), list):
        return "the answer is not {'sequences': [...]} nor a list of sequences"
    want, got = vector["expected"]["sequences"], answer["sequences"]
    if len(got) != len(want):
        return f"{len(got)} sequences for {len(want)} prompts"
    for i, (w, g) in enumerate(zip(want, got)):
        if list(g) != w:
            at = next((j for j, (a, b) in enumerate(zip(w, g)) if a != b), min(len(w), len(g)))
            return f"prompt {i} differs at token {at}: expected {w[at:at + 3]}..., got {list(g)[at:at + 3]}..."
    if answer.get("rounds") is not None:
        for want_r, got_r in zip(vector["expected"]["rounds"], answer["rounds"]):
            for key in ROUND_FIELDS:
                if got_r.get(key) != want_r[key]:
                    return f"round {want_r['round']}: {key} expected {want_r[key]}, got {got_r.get(key)}"
        if len(answer["rounds"]) != len(vector["expected"]["rounds"]):
            return f"{len(answer['rounds'])} rounds, expected {len(vector['expected']['rounds'])}"
    return None


def run_decoder(decode, folder: Path, vector: dict):
    target, draft = models(folder, vector)
    with torch.no_grad():
        return decode(target, draft, vector["prompts"], vector["k"], vector["max_new_tokens"],
                      list(vector["eos_token_id"]))


def run_command(command: str, path: Path):
    done = subprocess.run(shlex.split(command) + [str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"exit status {done.returncode}: {done.stderr.strip()[-300:]}")
    return json.loads(done.stdout)


def check(folder, decoder=None, command: str | None = None, names=None) -> dict[str, str | None]:
    """``{vector name: None (pass) or the reason it fails}`` for every vector in
    ``folder`` (or those in ``names``), running ``decoder`` or ``command``."""
    folder = Path(folder)
    paths = sorted(folder.glob("*.json"))
    if names:
        paths = [p for p in paths if p.stem in set(names)]
    results = {}
    for path in paths:
        vector = load_vector(path)
        try:
            answer = run_decoder(decoder, folder, vector) if decoder else run_command(command, path)
        except Exception as error:  # the decoder's own failure is this vector's verdict
            results[vector["name"]] = f"the decoder raised {type(error).__name__}: {error}"
            continue
        results[vector["name"]] = compare(vector, answer)
    return results


def reference_decoder(target, draft, prompts, k, max_new_tokens, eos_token_id) -> dict:
    """batchspec's own EQSPEC, answering with its rounds too (the vectors' producer)."""
    from .. import api

    result = api.generate(target, draft, prompts, method="eqspec", num_draft_tokens=k,
                          max_new_tokens=max_new_tokens, eos_token_id=eos_token_id or None)
    return {"sequences": result.sequences, "rounds": rounds(result.stats.per_round, max(map(len, prompts)))}
