"""The broken (and the merely wasteful) alternatives to EQSPEC (Spec §6, paper notes §5).

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

``BASELINES`` maps each name to ``decode(models, prompts, requests, config)``
(a decoder generator per batch, see ``batchspec.api.Method``).
"""

from . import dsd, masking, rollback

BASELINES = {"masking": masking.decode, "rollback": rollback.decode, "dsd": dsd.decode}

__all__ = ["BASELINES"]
