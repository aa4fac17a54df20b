"""batchspec: correct batch speculative decoding, specified and checked.

``batchspec.generate`` runs EQSPEC (and its baselines) on Hugging Face causal
LMs; ``batchspec.invariants`` holds the synchronisation invariants as
predicates; ``batchspec.reference`` the algorithm; ``batchspec.models`` tiny
offline model pairs.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what the names below are, for type checkers and the API pages (griffe)
    from .api import METHODS, DecodeConfig, GenerationResult, Method, generate, register_method
    from .audit import audit
    from .invariants import InvariantViolation, Violation

__version__ = "0.1.0"
#: each public name and the module that defines it, imported on first use (PEP 562):
#: ``import batchspec`` loads neither torch nor transformers, so ``batchspec --help``
#: starts at once
_HOMES = {"METHODS": "api", "DecodeConfig": "api", "GenerationResult": "api", "Method": "api",
          "generate": "api", "register_method": "api", "audit": "audit",
          "InvariantViolation": "invariants", "Violation": "invariants"}
__all__ = ["METHODS", "DecodeConfig", "GenerationResult", "Method", "register_method", "InvariantViolation", "Violation", "generate", "audit", "__version__"]


def __getattr__(name: str):
    """A public name from its module, or a subpackage (``batchspec.invariants``) imported on use."""
    if name in _HOMES:
        value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    else:
        try:
            value = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The package module, keeping a public function over its submodule's name.

    Python binds a submodule to its parent's attribute when it is first imported
    (``from batchspec.audit import tolerance`` sets ``batchspec.audit`` to the
    module), which would hide the function ``batchspec.audit`` once the names
    load on first use; that binding is skipped for the names of :data:`_HOMES`."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and name in _HOMES and value.__name__ == f"{__name__}.{name}":
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
