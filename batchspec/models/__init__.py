"""Model pairs: tiny offline pairs for tests, and (see issue 6) trained and real pairs."""

from .tiny import DRAFTS, FAMILIES, PAPER_FAMILIES, build, pair, perturb

__all__ = ["DRAFTS", "FAMILIES", "PAPER_FAMILIES", "build", "pair", "perturb"]
