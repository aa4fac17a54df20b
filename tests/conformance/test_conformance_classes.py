"""Conformance vectors that probe one bug class each (``batchspec.conformance.classes``):
every class has its vector, set up as its class says; the reference passes them
all; a decoder with one deliberate bug fails exactly the vectors of that bug's
class, with the class and its hint in the message; and the checker's command
line (a decoder from the current folder, a command printing more than JSON, one
vector file, mistakes)."""

from __future__ import annotations

import sys

import pytest
import torch

from batchspec import faults
from batchspec.cli import main as cli
from batchspec.conformance import check, export, load_vector
from batchspec.conformance.classes import CLASS_FAMILY, CLASSES, HINTS, PAD, RAGGED
from batchspec.conformance.run import models, reference_decoder
from batchspec.conformance.sampled import PURPOSES, SAMPLED
from batchspec.reference.sampling import Warping, accept_probability, draw, residual, uniform
from batchspec.testing import reference_greedy, reference_sampled

GREEDY = [c for c in CLASSES if c not in SAMPLED]


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    folder = tmp_path_factory.mktemp("class-vectors")
    loaded = [load_vector(folder / f"{name}.json") for name in export(folder, families=(), classes=CLASSES)]
    return folder, {v["class"]: v for v in loaded}


def budgets(v) -> list[int]:
    return v.get("max_new_tokens_per_request") or [v["max_new_tokens"]] * len(v["prompts"])


@pytest.mark.slow
def test_every_class_has_one_vector_of_the_targets_own_greedy_decoding(vectors):
    folder, by_class = vectors
    assert set(by_class) == set(CLASSES) == {"pad_id_emitted", "eos_in_prompt", *(f"eos_at_slot_{j}" for j in range(4)),
                                             "all_accepted", "none_accepted", "k_zero_rounds", "one_token_prompt",
                                             "per_request_budget", "sampled_keyed", "sampled_warped",
                                             "offset_whole_block", "bonus_duplicated", "positions_batch_max",
                                             "zero_draft_rows", "rejected_attended"}
    for cls, v in by_class.items():
        assert v["name"] == f"{cls}-{CLASS_FAMILY}" and v["hint"] == HINTS[cls] and v["hint"].startswith("a ")
        if cls in SAMPLED:
            continue  # the next test
        target, _ = models(folder, v)
        eos = v["eos_token_id"] or None
        want = [reference_greedy(target, p, n, eos) for p, n in zip(v["prompts"], budgets(v))]
        assert v["expected"]["sequences"] == want, cls


def rows_rounds(v):
    """Per round: {row: (accepted, committed, k', generated before)}, k' as EQSPEC drafts it."""
    done, out = [0] * len(v["prompts"]), []
    for r in v["expected"]["rounds"]:
        k_round = min([v["k"]] + [v["max_new_tokens"] - done[i] for i in r["requests"]])
        out.append({i: (m, a, k_round, done[i]) for i, m, a in zip(r["requests"], r["accepted"], r["appended"])})
        for i, a in zip(r["requests"], r["appended"]):
            done[i] += a
    return out


def test_each_vector_sets_up_its_class(vectors):
    _, by_class = vectors
    seqs = {cls: v["expected"]["sequences"] for cls, v in by_class.items()}
    # the pad id is emitted, with tokens after it; nowhere else
    assert any(PAD in s[:-1] for s in seqs["pad_id_emitted"])
    assert all(PAD not in s + p for cls, v in by_class.items() if cls != "pad_id_emitted"
               for s, p in zip(seqs[cls], v["prompts"]))
    # an EOS id inside a prompt (not its last token) and one as a prompt's last token, never emitted
    v = by_class["eos_in_prompt"]
    eos = set(v["eos_token_id"])
    assert any(eos & set(p[:-1]) for p in v["prompts"]) and any(p[-1] in eos for p in v["prompts"])
    assert not eos & {t for s in seqs["eos_in_prompt"] for t in s}
    assert all(not set(v["eos_token_id"]) & set(p) for cls, v in by_class.items() if cls != "eos_in_prompt"
               for p in v["prompts"])
    for j in range(4):  # the first EOS of the output at slot j of a round, an accepted draft or the bonus
        v = by_class[f"eos_at_slot_{j}"]
        stopped = [i for i, r in enumerate(v["expected"]["stop_reasons"]) if r == "eos"]
        assert len(stopped) == 1 and v["k"] == 3 and v["probe"]["slot"] == j
        m, a, k_round, _ = [rr[stopped[0]] for rr in rows_rounds(v) if stopped[0] in rr][-1]
        assert (a, k_round, m) == (j + 1, 3, 3)
    assert all("eos" not in v["expected"]["stop_reasons"] for cls, v in by_class.items()
               if not cls.startswith("eos_at_slot"))
    # every draft accepted, the last round's k' cut to the remaining budget
    rounds = rows_rounds(by_class["all_accepted"])
    assert all(m == k_round for rr in rounds for m, _, k_round, _ in rr.values())
    assert {k_round for rr in rounds for _, _, k_round, _ in rr.values()} == {3, 2}
    for cls in ("none_accepted", "zero_draft_rows"):  # the draft's token is wrong at every round's first slot
        assert all(m == 0 for rr in rows_rounds(by_class[cls]) for m, *_ in rr.values())
        assert by_class[cls]["draft"] != by_class[cls]["target"]
    assert by_class["zero_draft_rows"]["k"] == 3
    v = by_class["rejected_attended"]  # k 4, an unrelated draft: rounds that reject drafts, most of them all four
    assert v["k"] == 4 and v["draft"] != v["target"]
    assert sum(all(m == 0 for m in r["accepted"]) for r in v["expected"]["rounds"]) >= len(v["expected"]["rounds"]) - 3
    assert all(v["draft"] == v["target"] for cls, v in by_class.items()
               if cls in GREEDY and cls not in ("none_accepted", "zero_draft_rows", "rejected_attended", *RAGGED))
    for cls in RAGGED:  # a perturbed draft: some round where the rows accept different counts
        assert by_class[cls]["draft"] != by_class[cls]["target"]
        assert any(len(set(r["accepted"])) > 1 for r in by_class[cls]["expected"]["rounds"])
    v = by_class["k_zero_rounds"]
    assert v["max_new_tokens"] == 1 < v["k"] and all(len(s) == 1 for s in seqs["k_zero_rounds"])
    assert min(map(len, by_class["one_token_prompt"]["prompts"])) == 1
    v = by_class["per_request_budget"]
    assert len(set(budgets(v))) == len(v["prompts"]) and [len(s) for s in seqs["per_request_budget"]] == budgets(v)


@pytest.mark.slow
def test_the_reference_decoder_passes_every_class(vectors):
    folder, by_class = vectors
    assert check(folder, reference_decoder) == {v["name"]: None for v in by_class.values()}


# --- a small speculative decoder, no cache (every call sees the whole padded batch), with bugs to plant

def argmax(model, seqs, last: int, values: bool) -> list[list[int]]:
    """The argmax of ``model`` at the ``last`` positions of each left-padded row; the mask from
    the lengths, or (``values``) from the token values, ``ids != PAD``."""
    width = max(map(len, seqs))
    ids = torch.tensor([[PAD] * (width - len(s)) + s for s in seqs])
    mask = (ids != PAD).long() if values else torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
    logits = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits
    return logits[:, -last:].argmax(-1).tolist()


def decoder(bug: str | None = None):
    def decode(target, draft, prompts, k, max_new_tokens, eos_token_id):
        budget = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(prompts)
        budget = [max(budget)] * len(prompts) if bug == "one_budget" else budget
        if bug == "prefill_all_but_last":  # a warm-up on prompt[:-1], empty for a one-token prompt
            [target(input_ids=torch.tensor([p[:-1]], dtype=torch.long)).logits[:, -1] for p in prompts]
        eos, values, out = set(eos_token_id), bug == "mask_from_values", [[] for _ in prompts]
        live = [i for i, p in enumerate(prompts) if budget[i] > 0 and not (bug == "eos_anywhere" and eos & set(p))]
        while live:
            k_round = min([k] + [budget[i] - len(out[i]) for i in live])
            seqs, drafts = [prompts[i] + out[i] for i in live], [[] for _ in live]
            for _ in range(k_round):
                for d, (t,) in zip(drafts, argmax(draft, [s + d for s, d in zip(seqs, drafts)], 1, values)):
                    d.append(t)
            choices = argmax(target, [s + d for s, d in zip(seqs, drafts)], k_round + 1, values)
            for i, d, c in zip(list(live), drafts, choices):
                m = next((j for j in range(k_round) if d[j] != c[j]), k_round)
                tokens = d[:m] + [d[m] if bug == "bonus_from_draft" and m < k_round else c[m]]
                looked = {"eos_last_only": [len(tokens) - 1],  # where it looks for an EOS
                          "eos_in_drafts_only": range(m)}.get(bug, range(len(tokens)))
                hit = next((j for j in looked if tokens[j] in eos), None)
                tokens = tokens if hit is None else tokens[:hit + 1]
                keep = tokens if bug == "no_budget_clip" else tokens[:budget[i] - len(out[i])]
                out[i] += keep
                if (hit is not None and hit < len(keep)) or len(out[i]) >= budget[i]:  # its EOS, or its budget
                    live.remove(i)
        return out
    return decode


#: bug -> the classes whose vectors it fails (every other vector passes)
BUGS = {
    None: set(),
    "mask_from_values": {"pad_id_emitted"},
    "eos_anywhere": {"eos_in_prompt"},
    "eos_last_only": {"eos_at_slot_0", "eos_at_slot_1", "eos_at_slot_2"},
    "eos_in_drafts_only": {"eos_at_slot_3"},
    "bonus_from_draft": {"none_accepted", "zero_draft_rows", "rejected_attended", *RAGGED},  # these reject drafts too
    "no_budget_clip": {"all_accepted", "k_zero_rounds", "per_request_budget", *RAGGED},
    "prefill_all_but_last": {"one_token_prompt"},
    "one_budget": {"per_request_budget"},
}


@pytest.mark.slow_except('bonus_from_draft')
@pytest.mark.parametrize("bug", BUGS, ids=str)
def test_a_planted_bug_fails_exactly_the_vectors_of_its_class(vectors, bug):
    folder, by_class = vectors
    results = check(folder, decoder(bug), sampled=False)
    failed = {load_vector(folder / f"{name}.json")["class"]: r for name, r in results.items() if r}
    assert set(failed) == BUGS[bug] and len(results) == len(GREEDY)
    for cls, reason in failed.items():
        assert reason.endswith(f"(class {cls}: {HINTS[cls]})"), reason
    if bug == "eos_anywhere":  # the first row with an EOS in its prompt: nothing returned
        v = by_class["eos_in_prompt"]
        row = min(i for i, p in enumerate(v["prompts"]) if set(p) & set(v["eos_token_id"]))
        want = v["expected"]["sequences"][row][:3]
        assert failed["eos_in_prompt"].startswith(f"prompt {row} differs at token 0: expected {want}..., got []...")
    if bug == "prefill_all_but_last":
        assert failed["one_token_prompt"].startswith("the decoder raised")


# --- sampled vectors: the keyed uniforms in the vector suffice to decode them token for token

def test_a_sampled_vector_holds_the_keyed_uniforms_and_the_per_position_reference(vectors):
    folder, by_class = vectors
    for cls in SAMPLED:
        v = by_class[cls]
        target, draft = models(folder, v)
        sampling, n = v["sampling"], v["max_new_tokens"]
        assert v["draft"] != v["target"]
        assert sampling["keys"] == [[sampling["seed"], r] for r in range(len(v["prompts"]))]
        for prompt, key, table, got in zip(v["prompts"], sampling["keys"], v["uniforms"], v["expected"]["sequences"]):
            assert table["from"] == len(prompt)
            assert all(table[purpose] == [uniform(tuple(key), len(prompt) + i, purpose) for i in range(n + 1)]
                       for purpose in PURPOSES)
            assert got == reference_sampled(target, draft, prompt, n, tuple(key), None, sampling["temperature"],
                                            sampling["top_k"], sampling["top_p"])
        accepted = [m for r in v["expected"]["rounds"] for m in r["accepted"]]
        assert 0 in accepted and max(accepted) > 0, accepted  # drafts rejected and drafts accepted
    assert by_class["sampled_warped"]["sampling"]["top_k"] and by_class["sampled_keyed"]["sampling"]["top_k"] is None


def sampled_decoder(bug: str | None = None):
    """Speculative sampling one position at a time at batch 1 (no cache), from the vector's uniforms only."""
    def decode(target, draft, prompts, k, max_new_tokens, eos_token_id, sampling):
        warp = Warping(sampling["temperature"], sampling["top_k"], sampling["top_p"])
        out = []
        for r, prompt in enumerate(prompts):
            table = sampling["uniforms"][0 if bug == "one_key" else r]  # one_key: row 0's numbers for every row
            seq = list(prompt)
            while len(seq) < len(prompt) + max_new_tokens:
                i, ids = len(seq) - len(prompt), torch.tensor([seq])
                u = {purpose: torch.tensor([table[purpose][i]], dtype=torch.float64) for purpose in PURPOSES}
                p = (Warping() if bug == "no_warping" else warp).probs(target(input_ids=ids).logits[:, -1])
                q_warp = Warping() if bug in ("no_warping", "target_warped_only") else warp
                q = q_warp.probs(draft(input_ids=ids).logits[:, -1])
                y = draw(q, u["draft"])
                x = y if u["accept"] < accept_probability(p, q, y) else draw(residual(p, q), u["residual"])
                seq.append(int(x[0]))
            out.append(seq[len(prompt):])
        return out
    return decode


SAMPLED_BUGS = {None: set(), "one_key": set(SAMPLED), "no_warping": {"sampled_warped"},
                "target_warped_only": {"sampled_warped"}}


@pytest.mark.slow_except('None', 'one_key')
@pytest.mark.parametrize("bug", SAMPLED_BUGS, ids=str)
def test_a_sampled_decoder_from_the_uniforms_passes_and_a_planted_bug_fails_its_class(vectors, bug):
    folder, _ = vectors
    results = check(folder, sampled_decoder(bug), names=[f"{cls}-{CLASS_FAMILY}" for cls in SAMPLED])
    assert {name.rsplit("-", 1)[0] for name, r in results.items() if r} == SAMPLED_BUGS[bug] and len(results) == 2
    assert all(r.endswith(f"(class {name.rsplit('-', 1)[0]}: {HINTS[name.rsplit('-', 1)[0]]})")
               for name, r in results.items() if r)


def fault(name: str):
    """The reference EQSPEC with a catalogue fault (``batchspec.faults``) injected."""
    def decode(target, draft, prompts, k, max_new_tokens, eos_token_id):
        cut = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(prompts)
        result = faults.run(name, target, draft, prompts, num_draft_tokens=k, max_new_tokens=max(cut),
                            eos_token_id=eos_token_id or None, check_invariants=False)
        return [s[:n] for s, n in zip(result.sequences, cut)]
    return decode


@pytest.mark.slow
@pytest.mark.parametrize("name, cls, also", [("bonus_from_draft", "none_accepted", ("zero_draft_rows", "rejected_attended")),
                                             ("pad_from_token_id", "pad_id_emitted", ())])
def test_a_catalogue_fault_fails_its_class(vectors, name, cls, also):
    """``also``: the vectors whose draft is rejected at every round (none_accepted's trap) fail too."""
    folder, _ = vectors
    failed = {n: r for n, r in check(folder, fault(name), sampled=False).items() if r}
    ragged = {f"{c}-{CLASS_FAMILY}" for c in (*RAGGED, *also)}  # their rejected drafts set off both faults too
    assert set(failed) == {f"{cls}-{CLASS_FAMILY}"} | ragged and f"(class {cls}: " in failed[f"{cls}-{CLASS_FAMILY}"]


# --- the command line

def test_check_runs_one_vector_file_with_a_decoder_from_the_current_folder(vectors, tmp_path, monkeypatch, capsys):
    folder, _ = vectors
    (tmp_path / "my_class_decoder.py").write_text(
        "from batchspec.conformance.run import reference_decoder as decode\n"
        "def greedy(target, draft, prompts, k, max_new_tokens, eos_token_id):\n"
        "    return decode(target, draft, prompts, k, max_new_tokens, eos_token_id)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    code = cli(["conformance", "check", str(folder / f"k_zero_rounds-{CLASS_FAMILY}.json"),
                "--decoder", "my_class_decoder:decode"])
    out = capsys.readouterr().out
    assert code == 0 and out.splitlines() == [f"PASS k_zero_rounds-{CLASS_FAMILY}", "1/1 vectors pass"], out
    two = ["--vectors", f"k_zero_rounds-{CLASS_FAMILY}", f"sampled_keyed-{CLASS_FAMILY}"]
    assert cli(["conformance", "check", str(folder), "--decoder", "my_class_decoder:greedy", *two]) == 1
    assert "takes no sampling= argument" in capsys.readouterr().out
    assert cli(["conformance", "check", str(folder), "--decoder", "my_class_decoder:greedy", "--greedy-only",
                *two]) == 0
    assert capsys.readouterr().out.endswith("1/1 vectors pass (1 sampled vector skipped: --greedy-only)\n")


def test_a_command_printing_more_than_json_fails_saying_so(vectors, capsys):
    folder, _ = vectors
    command = f"{sys.executable} -c \"print('Loading weights...'); print('{{}}')\""
    code = cli(["conformance", "check", str(folder / f"none_accepted-{CLASS_FAMILY}.json"), "--command", command])
    out = capsys.readouterr().out
    assert code == 1 and "not the JSON answer" in out and "its first line: 'Loading weights...'" in out, out
    assert "(class none_accepted: " in out
    code = cli(["conformance", "check", str(folder / f"none_accepted-{CLASS_FAMILY}.json"), "--command",
                f"{sys.executable} -c pass"])
    assert code == 1 and "printed nothing on standard output" in capsys.readouterr().out


def test_cli_mistakes_are_one_line_and_exit_2(vectors, tmp_path, monkeypatch, capsys):
    folder, _ = vectors
    one = str(folder / f"k_zero_rounds-{CLASS_FAMILY}.json")
    (tmp_path / "broken_at_import.py").write_text("raise RuntimeError('no GPU here')\n")
    (tmp_path / "list.json").write_text("[1, 2]\n")
    (tmp_path / "novector.json").write_text('{"format": "batchspec-conformance/1"}\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    mistakes = [
        ([one, "--command", "no-such-program-3141 --fast"], "cannot run 'no-such-program-3141'"),
        ([one, "--command", "python 'unclosed"], "No closing quotation"),
        ([str(folder), "--decoder", "broken_at_import:decode", "--vectors", f"k_zero_rounds-{CLASS_FAMILY}"],
         "importing broken_at_import raised RuntimeError: no GPU here"),
        ([str(folder), "--decoder", "batchspec.conformance.run:reference_decoder", "--vectors", "nonesuch"],
         "--vectors: no vector nonesuch"),
        (["list.json", "--command", "true"], "format is None"),
        (["novector.json", "--command", "true"], "not a vector, missing 'name'"),
        (["nothing.json", "--command", "true"], "nothing.json: no such vector file"),
    ]
    for argv, words in mistakes:
        assert cli(["conformance", "check", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and "Traceback" not in err, (argv, err)
