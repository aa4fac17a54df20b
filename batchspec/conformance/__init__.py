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

Besides the vectors above, ``export`` writes one vector per bug class
(:mod:`.classes`, named ``<class>-<family>``), each with ``class``, ``hint``
(what a decoder that fails it typically does wrong, printed with a failure)
and ``probe`` (where the trap is). Optional fields, all backward compatible:
``max_new_tokens_per_request`` (one budget per prompt; ``max_new_tokens`` is
then their maximum and ``expected.rounds`` is ``null``); ``sampling`` and
``uniforms`` (speculative sampling with the keyed uniforms written out,
:mod:`.sampled`).
"""

from .export import CLASSES, FORMAT, VECTORS, export
from .run import check, load_vector

__all__ = ["CLASSES", "FORMAT", "VECTORS", "check", "export", "load_vector"]
