"""Run a decoder on the conformance vectors and compare (format: :mod:`batchspec.conformance`).

A Python decoder is a callable::

    decode(target, draft, prompts, k, max_new_tokens, eos_token_id) -> list[list[int]] | dict

``target`` and ``draft`` are the vector's models, loaded in float64 with SDPA
attention on the CPU; ``prompts`` lists of token ids; ``eos_token_id`` a list
of ids (possibly empty). It returns the generated ids per prompt (cut after
the first EOS), or ``{"sequences": ..., "rounds": ...}`` to have its
per-round ``a_i`` / ``L'`` / ``δ_i`` compared too. A vector with
``max_new_tokens_per_request`` (one budget per prompt) passes that list as
``max_new_tokens``; a decoder that takes one int fails it.

A command is run once per vector as ``COMMAND... VECTOR.json`` (the path
appended as its last argument); it prints that same JSON answer, and nothing
else, on standard output and exits 0 (logs go to standard error).

A sampled vector (:mod:`.sampled`) also passes ``sampling=`` (the
temperature, top-k, top-p, keys and the keyed uniforms); a greedy-only
decoder skips those vectors with ``check(..., sampled=False)``.

A vector that probes a bug class (:mod:`.classes`) has its ``class`` and
``hint`` appended to a failure's reason.
"""

from __future__ import annotations

import json
import operator
import shlex
import subprocess
from pathlib import Path

import torch

from .sampled import argument as sampling_argument, options as sampling_options
from .export import FORMAT, rounds

#: the protocol in one line: what a decoder of the wrong signature is told
SIGNATURE = ("a decoder is called as f(target, draft, prompts, k, max_new_tokens, eos_token_id) "
             "and returns the generated ids per prompt")
KEYS = ("name", "target", "draft", "prompts", "k", "max_new_tokens", "eos_token_id", "expected")
ROUND_FIELDS = ("requests", "accepted", "appended", "width_before", "width", "delta")


class AnswerError(Exception):
    """A command's output that is not an answer: the message is the vector's verdict as it is."""


def load_vector(path) -> dict:
    """A vector, with ``ValueError`` naming what is wrong with the file."""
    try:
        vector = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a readable JSON vector ({error})") from None
    if not isinstance(vector, dict) or vector.get("format") != FORMAT:
        found = vector.get("format") if isinstance(vector, dict) else None
        raise ValueError(f"{path}: format is {found!r}, this checker reads {FORMAT!r}")
    missing = [key for key in KEYS if key not in vector]
    if missing:
        raise ValueError(f"{path}: not a vector, missing {', '.join(map(repr, missing))}")
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
    want = vector["expected"]["sequences"]
    try:
        got = [[operator.index(t) for t in g] for g in answer["sequences"]]
    except (TypeError, ValueError):
        return "the sequences are not lists of token ids"
    if len(got) != len(want):
        return f"{len(got)} sequences for {len(want)} prompts"
    for i, (w, g) in enumerate(zip(want, got)):
        if g != w:
            at = next((j for j, (a, b) in enumerate(zip(w, g)) if a != b), min(len(w), len(g)))
            return f"prompt {i} differs at token {at}: expected {w[at:at + 3]}..., got {g[at:at + 3]}..."
    if answer.get("rounds") is not None and vector["expected"].get("rounds") is not None:
        if not isinstance(answer["rounds"], list) or not all(isinstance(r, dict) for r in answer["rounds"]):
            return "the rounds are not a list of round records"
        for want_r, got_r in zip(vector["expected"]["rounds"], answer["rounds"]):
            for key in ROUND_FIELDS:
                if got_r.get(key) != want_r[key]:
                    return f"round {want_r['round']}: {key} expected {want_r[key]}, got {got_r.get(key)}"
        if len(answer["rounds"]) != len(vector["expected"]["rounds"]):
            return f"{len(answer['rounds'])} rounds, expected {len(vector['expected']['rounds'])}"
    return None


def budget(vector: dict):
    """``max_new_tokens`` as a decoder gets it: the per-request list when the vector has one."""
    return vector.get("max_new_tokens_per_request") or vector["max_new_tokens"]


def run_decoder(decode, folder: Path, vector: dict):
    target, draft = models(folder, vector)
    extra = {"sampling": sampling_argument(vector)} if "sampling" in vector else {}
    with torch.no_grad():
        return decode(target, draft, vector["prompts"], vector["k"], budget(vector), list(vector["eos_token_id"]),
                      **extra)


def run_command(command: str, path: Path):
    done = subprocess.run(shlex.split(command) + [str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"exit status {done.returncode}: {done.stderr.strip()[-300:]}")
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        lines = done.stdout.strip().splitlines()
        raise AnswerError("the command printed nothing on standard output, expected the JSON answer "
                          "{\"sequences\": [...]}" if not lines else
                          "the command's standard output is not the JSON answer {\"sequences\": [...]} "
                          f"(print logs on standard error); its first line: {lines[0][:120]!r}") from None


def vector_paths(path) -> list[Path]:
    """The vector files at ``path``: itself if it is a file, else the folder's ``*.json``."""
    path = Path(path)
    return [path] if path.is_file() else sorted(path.glob("*.json"))


def verdict(vector: dict, reason: str | None) -> str | None:
    """``reason``, with the vector's bug class and hint when it probes one."""
    if reason is None or "class" not in vector:
        return reason
    return f"{reason} (class {vector['class']}: {vector['hint']})"


def check(folder, decoder=None, command: str | None = None, names=None, sampled: bool = True) -> dict[str, str | None]:
    """``{vector name: None (pass) or the reason it fails}`` for every vector in
    ``folder`` (a folder, or one vector file; or those in ``names``; not the
    sampled ones unless ``sampled``), running ``decoder`` or ``command``."""
    paths = vector_paths(folder)
    if names:
        paths = [p for p in paths if p.stem in set(names)]
    results = {}
    for path in paths:
        vector = load_vector(path)
        if "sampling" in vector and not sampled:
            continue
        try:
            answer = run_decoder(decoder, path.parent, vector) if decoder else run_command(command, path)
        except AnswerError as error:
            results[vector["name"]] = verdict(vector, str(error))
            continue
        except TypeError as error:  # most often a decoder of another signature: no bug-class hint
            greedy_only = "sampling" in vector and "sampling" in str(error)
            results[vector["name"]] = ("the decoder takes no sampling= argument (a greedy-only "
                                       "decoder skips the sampled vectors: check(..., sampled=False), "
                                       "--greedy-only)" if greedy_only else
                                       f"the decoder raised TypeError: {error} ({SIGNATURE})")
            continue
        except Exception as error:  # the decoder's own failure is this vector's verdict
            results[vector["name"]] = verdict(vector, f"the decoder raised {type(error).__name__}: {error}")
            continue
        results[vector["name"]] = verdict(vector, compare(vector, answer))
    return results


def reference_decoder(target, draft, prompts, k, max_new_tokens, eos_token_id, sampling=None) -> dict:
    """batchspec's own EQSPEC, answering with its rounds too (the vectors' producer).
    One budget per prompt (a list): decoded to the largest, each row cut at its
    own (greedy output is a prefix of a longer budget's), without rounds.
    ``sampling`` (a sampled vector's): speculative sampling, keyed as the
    vector's uniforms are (batchspec computes them itself)."""
    from .. import api

    budgets = max_new_tokens if isinstance(max_new_tokens, list) else None
    result = api.generate(target, draft, prompts, method="eqspec", num_draft_tokens=k,
                          max_new_tokens=max(budgets, default=0) if budgets else max_new_tokens,
                          eos_token_id=eos_token_id or None, **(sampling_options(sampling) if sampling else {}))
    if budgets:
        return {"sequences": [s[:b] for s, b in zip(result.sequences, budgets)]}
    return {"sequences": result.sequences, "rounds": rounds(result.stats.per_round, max(map(len, prompts)))}
