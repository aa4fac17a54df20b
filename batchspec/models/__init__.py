"""Model pairs: tiny offline pairs for tests, the embedded default pair, real pairs (:mod:`.registry` lists them)."""

from .tiny import DRAFTS, FAMILIES, PAPER_FAMILIES, build, pair, perturb

__all__ = ["DRAFTS", "FAMILIES", "PAPER_FAMILIES", "build", "pair", "perturb"]
