"""The broken (and the merely wasteful) alternatives to EQSPEC (Spec §6, Paper §5).

Each module is one way to batch speculative decoding that the paper measured
against; ``batchspec.generate(..., method=name)`` runs them through the same
driver as EQSPEC, with the invariants checked on what each really feeds and
holds:

* ``"masking"`` (BSP-style, :mod:`.masking`): holes in the mask; fails I1 at
  the first ragged round, then I2;
* ``"rollback"`` (:mod:`.rollback`): truncate to the batch minimum; exact,
  passes every invariant, wastes verified tokens;
* ``"dsd"`` (:mod:`.dsd`): no mask, accumulating padding, the draft's bonus;
  fails I5 at the first rejection even at ``B = 1``, and I1 as soon as a row
  is padded.

``BASELINES`` maps each name to ``(decode, section)``: ``decode(models,
prompts, requests, config)`` returns a decoder generator per batch (see
``batchspec.api.Method``), and ``section`` is the spec section that defines it.
"""

from . import dsd, masking, rollback

BASELINES = {"masking": (masking.decode, "6.1"), "rollback": (rollback.decode, "6.2"), "dsd": (dsd.decode, "6.3")}

__all__ = ["BASELINES"]
