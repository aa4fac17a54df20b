"""batchspec's batched speculative decoding behind transformers' ``custom_generate`` (Spec §4, §8).

A thin import: the code, its documentation and its tests live in the
``batchspec`` package (``batchspec.hf``).
"""

from batchspec.hf import hub_generate as generate  # noqa: F401
