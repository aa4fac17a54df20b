"""From a recorded trace to cells: what each picture draws, as plain data.

Pure functions, no matplotlib: ``tests/docs/test_viz.py`` checks this mapping
against the trace (the pictures in :mod:`batchspec.viz.draw` only colour it).
Every function reads the step dicts of :mod:`batchspec.trace`.

Cell kinds (the legend of every grid picture):

``pad``        slot ``s < p_i`` (Spec §2.1)
``prompt``     a prompt token
``committed``  a token committed in an earlier round
``drafted``    a draft proposed this round, not verified yet
``accepted``   a draft the target accepted (m_i of them, Spec §4.3)
``bonus``      the target's own token after the accepted drafts
``rejected``   a rejected draft; in the grid, a hole the mask zeroes (masking)
``foreign``    a cache slot whose key came from another request's row
``unknown``    a cache slot whose key no call wrote and no earlier slot held
``cached``     (positions) a slot already in the cache when the call ran
``fed``        (positions) an input of the call
"""

from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("pad", "prompt", "committed", "drafted", "accepted", "bonus", "rejected", "foreign", "unknown",
         "cached", "fed")


@dataclass
class Cells:
    """A ``[B][W]`` table of cells: kinds, token ids (None: no token), row labels."""

    kinds: list[list[str]]
    tokens: list[list[int | None]]
    labels: list[str]
    title: str = ""
    columns: list[int] = field(default_factory=list)  # slot index of each column
    marks: list[tuple[int, int]] = field(default_factory=list)  # (row, column) cells to outline
    divider: int | None = None  # column where this round's speculative tokens start (drawn as a line)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.kinds), len(self.kinds[0]) if self.kinds else 0


def row_label(obs: dict, i: int) -> str:
    """``"r3: p=2, c=9"``: request, p_i and c_i of row ``i``."""
    return f"r{obs['requests'][i]}: p={obs['pad'][i]}, c={obs['length'][i]}"


def decided(trace, step: dict) -> dict | None:
    """The decision of ``step``'s round (None at prefill or for an unfinished round)."""
    for s in trace.round_steps(step["round"], step["batch"]):
        if s["decision"] is not None:
            return s["decision"]
    return None


def grid_cells(trace, step: dict) -> Cells:
    """The grid of one step (Spec §2.1), with this round's speculative tokens.

    Draft steps add a ``drafted`` column per draft. A verify step adds
    ``k' + 1`` columns: the ``m_i`` accepted drafts, the bonus, then the
    rejected drafts. After ``realign``, the ``a_i`` tokens the round appended
    are marked ``accepted`` (the last one ``bonus`` when the round had one).
    """
    obs = step["observation"]
    decision = decided(trace, step)
    kinds, tokens = [], []
    for i, request in enumerate(obs["requests"]):
        row_kinds = _row_kinds(obs, i, len(trace.header["prompts"][request]))
        row_tokens = list(obs["tokens"][i])
        if step["step"] == "realign" and decision is not None:
            _mark_appended(row_kinds, decision, request)
        extra_kinds, extra_tokens = _speculative(step, decision, i)
        kinds.append(row_kinds + extra_kinds)
        tokens.append([t if k != "pad" else None for t, k in zip(row_tokens, row_kinds)] + extra_tokens)
    width = len(obs["tokens"][0])
    return Cells(kinds, tokens, [row_label(obs, i) for i in range(len(kinds))],
                 f"round {step['round']}, {step['step']}", list(range(len(kinds[0]))) if kinds else [],
                 divider=width if kinds and len(kinds[0]) > width else None)


def _row_kinds(obs: dict, i: int, prompt_length: int) -> list[str]:
    out, attended = [], 0
    for s, held in enumerate(obs["mask"][i]):
        if s < obs["pad"][i]:
            out.append("pad")
        elif not held:
            out.append("rejected")  # a hole: kept in the grid, zeroed in the mask (Spec §6.1)
        else:
            attended += 1
            out.append("prompt" if attended <= prompt_length else "committed")
    return out


def _mark_appended(row_kinds: list[str], decision: dict, request: int) -> None:
    """Mark the tokens this round appended to ``request``'s row (its last ``a_i`` attended slots)."""
    i = decision["requests"].index(request)
    a, has_bonus = decision["appended"][i], decision["bonus"][i] is not None
    attended = [s for s, k in enumerate(row_kinds) if k in ("prompt", "committed")]
    for n, s in enumerate(attended[len(attended) - a:]):
        row_kinds[s] = "bonus" if has_bonus and n == a - 1 else "accepted"


def _speculative(step: dict, decision: dict | None, i: int) -> tuple[list[str], list[int | None]]:
    obs = step["observation"]
    drafts = (obs["draft_tokens"] or [[]] * (i + 1))[i]
    if step["step"] == "draft" or (step["step"] == "verify" and decision is None):
        return ["drafted"] * len(drafts), list(drafts)
    if step["step"] != "verify":
        return [], []
    m, bonus = decision["accepted"][i], decision["bonus"][i]
    kinds = ["accepted"] * m + ["bonus" if bonus is not None else "pad"] + ["rejected"] * (len(drafts) - m)
    return kinds, list(drafts[:m]) + [bonus] + list(drafts[m:])


def expected_positions(call: dict) -> list[list[int | None]]:
    """I2's rule over one call's slots (Spec §3.2): the token in slot ``s`` of row
    ``i`` should sit at ``cumsum(mask) - 1`` of the call's attention mask, the
    number of attended slots before it; None where the mask does not attend."""
    out = []
    for mask in call["attention_mask"]:
        count, row = 0, []
        for held in mask:
            count += held
            row.append(count - 1 if held else None)
        out.append(row)
    return out


def position_cells(call: dict, obs: dict) -> tuple[Cells, list[list[int | None]]]:
    """The positions of one call over its slots: cached slots at the position
    their key was computed with (the recorded provenance), then the inputs at
    the position ids fed. Inputs breaking I2 are marked (I2 judges the inputs;
    a cached slot was judged by the call that wrote it).

    Returns the cells (token = position) and the expected positions per slot.
    """
    expected = expected_positions(call)
    t = call["cache_length"]
    cached = obs["caches"][call["model"]]["position"]
    kinds, tokens, marks = [], [], []
    for i, fed in enumerate(call["position_ids"]):
        mask = call["attention_mask"][i]
        row_kinds = ["pad" if s < obs["pad"][i] else "rejected" if not held else "cached" if s < t else "fed"
                     for s, held in enumerate(mask)]
        kinds.append(row_kinds)
        # a padding slot shows its position only when the call attends it (the DSD bug)
        tokens.append([p if (k != "pad" or held) else None
                       for p, k, held in zip(list(cached[i][:t]) + list(fed), row_kinds, mask)])
        marks += [(i, t + j) for j, p in enumerate(fed) if expected[i][t + j] is not None and p != expected[i][t + j]]
    labels = [row_label(obs, i) for i in range(len(kinds))]
    return Cells(kinds, tokens, labels, f"{call['model']} call: positions", list(range(len(kinds[0]))) if kinds
                 else [], marks), expected


def cache_cells(step: dict, model: str = "target") -> Cells:
    """One model's cache after ``step``: the token each slot's key came from.

    Slots of the row's own committed tokens are ``committed`` (``prompt`` for
    the prompt), speculative slots past ``L - 1`` are ``drafted``, padding
    ``pad``; a slot copied from another request is ``foreign``, one of
    unknown origin ``unknown``.
    """
    obs = step["observation"]
    cache = obs["caches"][model]
    width = len(obs["tokens"][0])
    kinds, tokens = [], []
    for i, request in enumerate(obs["requests"]):
        row_kinds = []
        for s, (token, source) in enumerate(zip(cache["token"][i], cache["source"][i])):
            if token is None:
                row_kinds.append("unknown")
            elif source is not None and source[0] != request:
                row_kinds.append("foreign")
            elif s < obs["pad"][i]:
                row_kinds.append("pad")
            elif s >= width - 1:
                row_kinds.append("drafted")
            else:
                row_kinds.append("committed")
        kinds.append(row_kinds)
        tokens.append([t if k != "pad" else None for t, k in zip(cache["token"][i], row_kinds)])
    return Cells(kinds, tokens, [row_label(obs, i) for i in range(len(kinds))],
                 f"{model} cache after {step['step']} (round {step['round']})",
                 list(range(cache["length"])))


def shift_arrows(before: dict, after: dict, model: str = "target") -> list[tuple[int, int, int, int, int]]:
    """``(row_before, slot_before, row_after, slot_after, δ)`` for every content slot
    of ``after`` whose key came from a different slot or row of ``before``
    (the realignment, Spec §4.5), read from the recorded provenance."""
    rows_before = {r: i for i, r in enumerate(before["observation"]["requests"])}
    obs = after["observation"]
    out = []
    for j, request in enumerate(obs["requests"]):
        for s, source in enumerate(obs["caches"][model]["source"][j]):
            if s < obs["pad"][j] or source is None or source[0] not in rows_before:
                continue
            if source != [request, s]:
                out.append((rows_before[source[0]], source[1], j, s, s - source[1]))
    return out


def violation_cell(step: dict, violation: dict) -> tuple[int | None, int | None]:
    """``(row, column)`` in :func:`grid_cells` coordinates where ``violation``
    shows: I1 the first grid slot whose mask differs from ``p_i`` zeros then
    ones; I2 the grid slot of the first input fed a wrong position; other
    invariants the row only (column None)."""
    row, obs = violation["row"], step["observation"]
    if row is None or obs is None:
        return row, None
    if violation["invariant"] == "I1":
        mask, p = obs["mask"][row], obs["pad"][row]
        wrong = [s for s, held in enumerate(mask) if held != (s >= p)]
        return row, (wrong[0] if wrong else None)
    if violation["invariant"] == "I2":
        for call in obs["calls"]:
            if violation["model"] in (None, call["model"]):
                cells, _ = position_cells(call, obs)
                columns = [j for i, j in cells.marks if i == row]
                if columns:
                    return row, columns[0]
        return row, None
    return row, None


def caption(violation: dict) -> str:
    """One line: invariant, where, expected vs actual."""
    where = f"round {violation['round']}, step {violation['step']}, row {violation['row']}"
    if violation.get("model"):
        where += f", {violation['model']}"
    return (f"{violation['invariant']} {violation['name']} at {where}: {violation['detail']}\n"
            f"expected {_short(violation['expected'])}   actual {_short(violation['actual'])}")


def _short(value, limit: int = 60) -> str:
    text = str(value)
    return text if len(text) <= limit else "…" + text[-limit:]
