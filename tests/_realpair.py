"""The opt-in of the real-pair tests (``pytest -m realpair``); not collected by pytest."""

from __future__ import annotations

import pytest

from batchspec.models import registry


def opt_in(request, how: str) -> None:
    """Skip, saying ``how`` to run them, unless ``-m`` names ``realpair`` and the pair is on disk."""
    markexpr = request.config.option.markexpr or ""
    if "realpair" not in markexpr or "not realpair" in markexpr:
        pytest.skip(f"real-pair tests are opt-in: {how}")
    available, reason = registry.availability("qwen2.5-coder")
    if not available:
        pytest.skip(f"qwen2.5-coder is {reason}: {how}")
