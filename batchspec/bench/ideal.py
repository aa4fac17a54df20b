"""The speedup speculation could reach with zero bookkeeping.

Priced with the measured forward costs (:mod:`.costs`) only. Both sides
pay the prefill of each static batch (measured, not priced: its shape is
the prompts'). ``generate`` then makes one target call of one token per
step at its batch size until its longest row is done, the first token
coming from the prefill; a speculative run costs, besides the draft's
prefill, round by round at the batch it really had, ``k'`` draft calls,
the catch-up draft call where one was needed, and one target call of
``k' + 1`` tokens; where the prefill fed nothing (EQSPEC, Spec §4.1), the
first round's first draft call and its verify call are those prefills. EXSPEC, which prefills requests as they enter its
window, is priced with the same static-batch prefill: the same prompts,
batched as ``generate`` batches them. The ratio of the two is the ideal
speedup for the acceptance that run really saw; achieved / ideal says how
much the rest (alignment, Python, tensors built per call) costs.
"""

from __future__ import annotations

from ..reference.draft_costs import Costs


def ideal_generate_seconds(costs: Costs, steps: list[int], batch: int, prefill: float) -> float:
    """``steps``: per static batch of ``batch`` prompts, its longest output;
    ``prefill``: the target's prefill of those batches, in seconds."""
    return prefill + sum(max(n - 1, 0) * costs.target_call(batch, 1) for n in steps)


def ideal_speculative_seconds(costs: Costs, rounds, prefill: float, fed_in_round_1: bool = False,
                              deferred: bool = False, drafted: bool = True) -> float:
    """``rounds``: the run's round records (rows, ``k'``, each ``m_i``);
    ``prefill``: the target's and the draft's prefill, in seconds.

    ``fed_in_round_1``: the run's prefill fed nothing (EQSPEC, Spec §4.1), so
    in each static batch's first round the first draft call and the verify
    call are the prefills, priced once, by ``prefill`` (as ``generate``'s
    first token comes from its prefill). ``deferred``: greedy EQSPEC, whose
    catch-up of a round with drafts rides on the next round's first draft
    call (Spec §4.2.1) and is not a call of its own. ``drafted=False``: a
    run that decoded without the draft (``auto`` where drafting was not
    expected to pay, Spec §4.2.2): no draft calls at all."""
    total = prefill
    for r in rounds:
        b, k = len(r.requests), r.drafted
        catch_up = drafted and (k == 0 or (not deferred and any(m == k for m in r.accepted)))  # last draft's KV
        first = fed_in_round_1 and r.round == 1
        draft_calls = k + catch_up - (first and drafted)
        total += draft_calls * costs.draft_call(b) + (0.0 if first else costs.target_call(b, k + 1))
    return total
