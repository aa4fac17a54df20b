"""Pictures of batch speculative decoding, drawn from a recorded trace (:mod:`batchspec.trace`).

* :mod:`batchspec.viz.cells`: what each picture shows, as plain data (no matplotlib);
* :mod:`batchspec.viz.draw`: the matplotlib pictures (``draw_grid``,
  ``draw_positions``, ``draw_cache``, ``draw_shift``, ``draw_round``,
  ``draw_violation``; ``draw_provenance`` for what :func:`batchspec.invariants.watch`
  saw of an outside decoder, :mod:`batchspec.viz.recorded`), imported on first
  use so that ``tutorial_setup`` and the cells need no matplotlib;
* :func:`tutorial_setup`: the first cell of every tutorial;
* :mod:`batchspec.viz.html`: the step-through viewer, a trace as one
  self-contained HTML page (``write_html``; ``batchspec trace --html``).
"""

from __future__ import annotations

from .setup import TutorialSetup, tutorial_setup

_DRAWINGS = ("draw_cells", "draw_grid", "draw_positions", "draw_cache", "draw_shift", "draw_round",
             "draw_violation", "draw_provenance")

__all__ = ["TutorialSetup", "tutorial_setup", *_DRAWINGS]


def __getattr__(name):
    if name in _DRAWINGS:
        from . import draw

        return getattr(draw, name)
    raise AttributeError(f"module 'batchspec.viz' has no attribute {name!r}")
