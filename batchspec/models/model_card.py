"""Render ``MODEL_CARD.md`` of the default pair from its ``card.json`` figures."""

from __future__ import annotations


def _size_rows(card: dict) -> str:
    rows = []
    for name in ("target", "draft"):
        m, t = card["models"][name], card["training"][name]
        rows.append(f"| {name} | {m['layers']} | {m['hidden']} | {m['intermediate']} | {m['heads']} | "
                    f"{m['params']:,} | {m['file_bytes'] / 1e6:.2f} MB | {t['steps']} x {t['batch']} x "
                    f"{t['window']} | {t['train_bytes_seen'] / 1e6:.2f} MB | {t['train_seconds']:.0f} s, "
                    f"{t.get('threads', 2)} thread(s) |")
    return "\n".join(rows)


def _quality_rows(card: dict) -> str:
    rows = []
    for key, label in (("held_out", "held-out evaluation"), ("test_sample", "committed test sample")):
        q = card[key]
        rows.append(f"| {label} | {q['windows']} x {q['window_bytes']} | {q['bits_per_byte']['target']:.4f} | "
                    f"{q['bits_per_byte']['draft']:.4f} | {q['greedy_agreement']:.4f} |")
    return "\n".join(rows)


def _cost_section(card: dict) -> str:
    c = card.get("forward_cost")
    if not c:
        return "Not measured yet: run `python -m batchspec.models.measure_default`.\n"
    return (f"One cached forward call at batch 1 after a {c['prompt_bytes']}-byte prompt, median, "
            f"{c['threads']} torch thread(s) ({c['cpu']}): target {c['target_ms_per_call']:.2f} ms, "
            f"draft {c['draft_ms_per_call']:.2f} ms, **ratio {c['ratio_target_over_draft']:.1f}**. "
            f"A verification call of the target on 6 tokens: {c['target_ms_per_call_6_tokens']:.2f} ms. "
            "On models this small the cost is per-call and per-layer overhead more than arithmetic, "
            "hence a deep narrow target and a one-layer draft.\n")


def _speculative_section(card: dict) -> str:
    spec = card.get("speculative")
    if not spec:
        return "Not measured yet: run `python -m batchspec.models.measure_default`.\n"
    rows = "\n".join(
        f"| {r['k']} | {r['tokens_per_target_call']:.2f} | {r['acceptance_rate']:.3f} | "
        f"{r['tokens_per_second']:.1f} | {r['speedup']:.2f}x |" for r in spec["by_k"])
    exact = "yes" if all(r["matches_autoregressive"] for r in spec["by_k"]) else "**NO**"
    return (f"Greedy, batch 1, method `{spec['method']}`, {spec['prompts']} held-out prompts of "
            f"{spec['prompt_bytes']} bytes, {spec['max_new_tokens']} new bytes each, "
            f"{spec['threads']} torch thread(s), median of {spec['repeats']} alternating runs. "
            f"Autoregressive target alone: {spec['autoregressive_tokens_per_second']:.1f} bytes/s.\n\n"
            "| k | tokens per target call | acceptance rate | bytes/s | speedup over AR |\n"
            "|---|---|---|---|---|\n"
            f"{rows}\n\nEvery speculative output equals the autoregressive one token for token: "
            f"{exact}.\n\n**Best k = {spec['best_k']}: {spec['best_speedup']:.2f}x over autoregressive "
            f"decoding of the target, {spec['best_tokens_per_target_call']:.2f} tokens per target call.**\n")


def render(card: dict) -> str:
    """The Markdown model card for ``card`` (the dict written to ``card.json``)."""
    d = card["data"]
    return f"""# Default model pair: byte-level Llamas trained on the Python standard library

A small target/draft pair for the examples, tests and benchmarks of batchspec,
trained by `python -m batchspec.models.train_default` from text every machine has
offline. Load it with `batchspec.models.default_pair.load_default_pair()`.
All figures below are also in `card.json`.

## Tokens

Bytes: vocabulary of 256, token id = byte value (`batchspec.models.bytes`). No EOS
token: generation always runs to `max_new_tokens` (the newline byte would stop
after one line).

## Data

The `*.py` files of the CPython {d['python_version']} standard library (the
`sysconfig` stdlib path), without the directories {", ".join(f"`{x}`" for x in d['excluded_dirs'])}.
Split by file: {d['split_rule']}.

| split | files | bytes |
|---|---|---|
| train | {d['train_files']} | {d['train_bytes']:,} |
| held out | {d['held_out_files']} | {d['held_out_bytes']:,} |

The held-out file list is in `card.json`. Since the stdlib differs between Python
versions, the held-out windows used by the test are committed
(`held_out_sample.safetensors`).

## Models

Stock `LlamaForCausalLM`, tied input/output embeddings, RoPE, SDPA attention,
trained on random {card['training']['target']['window']}-byte windows with AdamW
(warm-up, cosine decay), seeded. Weights are stored in **{card['storage_dtype']}**;
every figure here is measured after that round trip, computing in {card['eval_dtype']}.

| model | layers | hidden | MLP | heads | params | file | steps x batch x window | bytes seen | train time |
|---|---|---|---|---|---|---|---|---|---|
{_size_rows(card)}

Train time is wall-clock time with the thread count shown; the machine may have
been running other work at the time, so it is an upper bound for an idle one.

## Quality (teacher-forced, held-out)

Each window of W bytes scores the predictions of bytes 1..W-1. Greedy agreement is the
fraction of those positions where the draft's argmax next byte equals the target's.

| text | windows x bytes | target bits/byte | draft bits/byte | greedy agreement |
|---|---|---|---|---|
{_quality_rows(card)}

## Forward cost

{_cost_section(card)}
## Speculative decoding

{_speculative_section(card)}
## Versions

torch {card['versions']['torch']}, transformers {card['versions']['transformers']}.
"""
