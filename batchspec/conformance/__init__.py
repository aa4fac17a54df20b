"""Conformance vectors: test vectors any batch speculative decoder, in any language, can consume.

In the manner of Ethereum's consensus-spec tests: :func:`export` writes a
folder of vectors produced by the reference EQSPEC, :func:`check` runs a
decoder on each and reports pass/fail per vector. The format (version
:data:`FORMAT`)::

    DIR/
      models/<family>/target/{config.json, model.safetensors}   # float64 HF checkpoints
      models/<family>/draft/{config.json, model.safetensors}
      <vector>.json

Each ``<vector>.json`` holds ``format``, ``name``, ``family``, ``target``
and ``draft`` (checkpoint folders relative to ``DIR``), ``dtype``
(``"float64"``), ``prompts`` (lists of token ids), ``k``,
``max_new_tokens``, ``eos_token_id`` (a list, possibly empty) and
``expected``:

* ``sequences``: per prompt, the generated ids, cut after the first EOS;
  equal to the target's own batch-1 greedy decoding;
* ``stop_reasons``: per prompt, ``"eos"`` or ``"length"``;
* ``rounds``: per EQSPEC round (all prompts in one batch), ``requests`` (the
  rows, as prompt indices), ``accepted`` (drafts accepted, ``m_i``),
  ``committed`` (``a_i``), ``width_before`` (``L``), ``width`` (``L'``) and
  ``delta`` (``δ_i = L' - L - a_i`` for each row that stays, ``null`` for a
  row that finished).

A decoder answers with ``{"sequences": [...]}`` and optionally ``"rounds"``
(the same records; compared when present). See :mod:`.run` for the callable's
signature and the command protocol.
"""

from .export import FORMAT, VECTORS, export
from .run import check, load_vector

__all__ = ["FORMAT", "VECTORS", "check", "export", "load_vector"]
