"""batchspec: correct batch speculative decoding, specified and checked.

``batchspec.generate`` runs EQSPEC (and its baselines) on Hugging Face causal
LMs; ``batchspec.invariants`` holds the synchronisation invariants as
predicates; ``batchspec.reference`` the algorithm; ``batchspec.models`` tiny
offline model pairs.
"""

from .api import METHODS, DecodeConfig, GenerationResult, Method, generate, register_method
from .audit import audit
from .invariants import InvariantViolation, Violation

__version__ = "0.1.0"
__all__ = ["METHODS", "DecodeConfig", "GenerationResult", "Method", "register_method", "InvariantViolation", "Violation", "generate", "audit", "__version__"]
