"""Helpers shared by the spec tests and the exhaustive check (not collected by pytest)."""

from __future__ import annotations

import contextlib
import re
import sys
import types
from pathlib import Path

import torch

from batchspec.reference.storage import layer_tensors

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "spec"

#: Prompts of the exhaustive check and the refinement test: ragged lengths,
#: one of a single token (its row has no cached slot after prefill).
PROMPTS = [[17, 33, 50, 8, 71], [42], [9, 64, 27]]


@contextlib.contextmanager
def one_thread():
    """Tiny models run fastest on one thread; restore the setting afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@torch.no_grad()
def greedy_continuation(target, prompt: list[int], n: int) -> list[int]:
    """The target's batch-1 greedy continuation: ``n`` argmax steps, each a fresh
    forward of the whole prefix at positions ``0 .. len-1`` (no cache, no padding)."""
    tokens = list(prompt)
    for _ in range(n):
        ids = torch.tensor([tokens], dtype=torch.long, device=target.device)
        logits = target(input_ids=ids, position_ids=torch.arange(len(tokens))[None, :]).logits
        tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(prompt):]


def cut(tokens: list[int], eos: set[int], budget: int) -> list[int]:
    """``tokens`` cut after the first EOS and at ``budget`` tokens."""
    out = []
    for t in tokens[:budget]:
        out.append(t)
        if t in eos:
            break
    return out


def spec_files() -> list[Path]:
    """The spec's Markdown sections, in order."""
    return sorted(p for p in SPEC.glob("*.md") if re.match(r"\d\d-", p.name))


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """``(line, source)`` of every fenced ``python`` block of ``path``."""
    blocks, current, start = [], None, 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if current is None and line.strip() == "```python":
            current, start = [], number + 1
        elif current is not None and line.strip() == "```":
            blocks.append((start, "\n".join(current) + "\n"))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def spec_namespace() -> dict:
    """Execute every Python block of the spec, in order, in one namespace."""
    module = types.ModuleType("batchspec_spec")  # registered: dataclasses look their module up
    sys.modules[module.__name__] = module
    namespace = module.__dict__
    for path in spec_files():
        for line, source in python_blocks(path):
            code = compile("\n" * (line - 1) + source, str(path), "exec")
            exec(code, namespace)  # noqa: S102 - the spec is ours
    return namespace


#: Relative error allowed between a cache slot and a fresh forward's (float64).
TOLERANCE = 1e-9


def as_function(model):
    """The abstract model of a real one: record -> argmax after a fresh batch-1
    forward of the record's tokens. Only canonical records (positions 0, 1, ..)
    have a batch-1 meaning; EQSPEC never makes another."""
    memo: dict = {}

    @torch.no_grad()
    def predict(record):
        tokens = tuple(t for t, _ in record)
        assert [p for _, p in record] == list(range(len(record))), f"non-canonical record {record}"
        if tokens not in memo:
            ids = torch.tensor([tokens], dtype=torch.long, device=model.device)
            memo[tokens] = int(model(input_ids=ids, position_ids=torch.arange(len(tokens))[None, :]).logits[0, -1].argmax())
        return memo[tokens]

    return predict


class Compare:
    """Maps one real event to lists and compares it with one abstract observation."""

    def __init__(self, spec, oracle):
        self.spec, self.oracle, self.fresh = spec, oracle, {}
        self.steps, self.realigned = 0, False

    def __call__(self, event, obs) -> None:
        self.steps += 1
        state, batch = event.state, obs.batch
        assert event.step == obs.step, f"step {event.step} != {obs.step}"
        assert state.batch == len(batch.tokens), f"{state.batch} rows != {len(batch.tokens)}"
        if event.record is not None:
            r = event.record
            self.realigned |= r.realigned
            assert (r.drafted, r.accepted, r.appended, r.width, r.realigned) == tuple(
                obs.record[n] for n in ("drafted", "accepted", "appended", "width", "realigned")), (r, obs.record)
        if not state.batch:
            return
        pad = state.pad.tolist()
        assert pad == batch.pad and state.length.tolist() == batch.length and state.width == self.spec["width"](batch), (
            "p_i, c_i, L", pad, state.length.tolist(), batch.pad, batch.length)
        assert [state.tokens[i, p:].tolist() for i, p in enumerate(pad)] == [
            self.spec["content"](batch, i) for i in range(state.batch)], ("content", state.tokens.tolist(), batch.tokens)
        assert state.requests == batch.requests and state.prompt_length.tolist() == batch.prompt_length, "requests"
        real_drafts = None if event.drafts is None else event.drafts.tolist()
        assert real_drafts == obs.drafts or (real_drafts is None and obs.step in ("prefill",)), (
            "drafts", real_drafts, obs.drafts)
        assert getattr(event, "committed", None) == obs.committed, ("committed", event.committed, obs.committed)
        assert len(event.calls) == len(obs.calls), ("calls", len(event.calls), len(obs.calls))
        for real, call in zip(event.calls, obs.calls):
            assert (real.model, real.cache_length) == (call.model, call.cache_length), ("call", real.model, call.model)
            assert real.input_ids.tolist() == call.input_ids, (call.model, "inputs", real.input_ids.tolist(), call.input_ids)
            assert real.attention_mask.tolist() == call.attention_mask, (call.model, "mask", real.attention_mask.tolist(), call.attention_mask)
            assert real.position_ids.tolist() == call.position_ids, (
                call.model, "positions", real.position_ids.tolist(), call.position_ids)
            logits = getattr(real, "logits", None)  # [B, n or kept, V]
            if logits is not None:  # compare the predictions after attended inputs (padding's are noise)
                kept, width = logits.shape[1], len(call.attention_mask[0])
                for i, (got, out) in enumerate(zip(logits.argmax(-1).tolist(), call.logits)):
                    attended = call.attention_mask[i][width - kept:]
                    assert [g for g, m in zip(got, attended) if m] == [o for o, m in zip(out[len(out) - kept:], attended) if m], (
                        call.model, "predictions of row", i, got, out)
        caches = {"target": state.target_cache, "draft": state.draft_cache}
        for name, rows in batch.caches.items():
            self.cache(name, layer_tensors(caches[name]), rows, pad)

    def cache(self, name, layers, rows, pad) -> None:
        length = layers[0][0].shape[2] if layers else 0
        assert length == len(rows[0]), (name, "cache length", length, len(rows[0]))
        got, ref, owner = [], [], []  # flattened slots of every row and layer, then one comparison
        for i, slots in enumerate(rows):
            records = slots[pad[i]:]
            if not records:
                continue
            longest = records[-1]
            assert all(r == longest[: j + 1] for j, r in enumerate(records)), (name, "row", i, "not one chain")
            key = (name, tuple(t for t, _ in longest))
            if key not in self.fresh:
                self.fresh[key] = self.oracle(name, list(key[1]))
            for (keys, values), (fk, fv) in zip(layers, self.fresh[key]):
                for tensor, fresh in ((keys, fk), (values, fv)):
                    got.append(tensor[i, :, pad[i]:].reshape(-1))  # [H, n, D] flattened
                    ref.append(fresh[0].reshape(-1))
                    owner.append(i)
        if got:
            fresh = torch.cat(ref)
            errors = (torch.cat(got) - fresh).abs() / (1 + fresh.abs())
            worst = int(errors.argmax())
            row = torch.repeat_interleave(torch.tensor(owner), torch.tensor([g.numel() for g in got]))[worst]
            assert float(errors[worst]) < TOLERANCE, (name, "cache row", int(row), "relative error", float(errors[worst]))
