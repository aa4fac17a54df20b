"""The step-through viewer: a recorded trace as one self-contained HTML page.

The page steps through a trace (``batchspec.trace``, the JSON lines format
documented there) forward and back and draws, after every step, what the
invariants saw (Spec §3) and what the round decided (Spec §4.7):

* the batch grid: pad / prompt / committed / drafted / accepted / rejected /
  bonus cells, each row labelled with its request, ``p_i`` and ``c_i``
  (Spec §2), holes in the mask hatched;
* the position ids each forward call was really given, at the cache slots
  they fill, with a position that is not ``cumsum(mask) - 1`` marked (I2,
  Spec §3.2);
* each model's cache, slot by slot: the token whose key it holds and whether
  the step wrote it, kept it, or moved it (by ``δ_i`` after a repad, Spec §4.4);
* the violation panel: every invariant the checker found broken on that step,
  with row, expected and actual; the decision table (``m_i``, ``a_i``, bonus,
  ``δ_i``) on the step that ends a round.

Several traces of the same prompts share one timeline and sit side by side
(:func:`comparison_html`), so EQSPEC and masking are seen at the same round.
Everything is inline (vanilla JS and CSS from ``assets/``: ``draw.js`` draws
one step, ``viewer.js`` steps; the traces as JSON): no CDN, no network, the file opens from disk.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

ASSETS = Path(__file__).with_name("assets")
LEGEND = (("pad", "padding"), ("prompt", "prompt"), ("committed", "committed"), ("drafted", "drafted"),
          ("accepted", "accepted draft"), ("rejected", "rejected draft"), ("bonus", "bonus token"),
          ("hole", "masked hole"), ("wrong", "position off cumsum(mask) - 1"),
          ("written", "slot written"), ("kept", "slot kept"), ("moved", "slot moved"),
          ("foreign", "slot from another row"))


def _load(trace):
    """A ``Trace`` as is; a path is read with ``Trace.load``."""
    if isinstance(trace, (str, Path)):
        from ..trace import Trace

        return Trace.load(trace)
    return trace


def compact(trace, label: str) -> dict:
    """The trace as the page embeds it: every step, minus the cache keys' layer-0 sums
    (the recorder already turned them into each slot's provenance, ``source``)."""
    steps = []
    for step in trace.steps:
        obs = step["observation"]
        if obs is not None:
            caches = {m: {k: v for k, v in c.items() if k != "layer0_sum"} for m, c in obs["caches"].items()}
            step = {**step, "observation": {**obs, "caches": caches}}
        steps.append(step)
    return {"label": label, "header": trace.header, "steps": steps, "result": trace.result}


def _script_json(data) -> str:
    """JSON safe inside ``<script>``: no ``<`` can close the element early."""
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")


def fragment(traces: dict) -> str:
    """The viewer for ``{label: trace}`` as an HTML fragment (styles and script inline)."""
    data = [compact(_load(trace), label) for label, trace in traces.items()]
    legend = "".join(f'<span><span class="bsv-cell bsv-{cls}"></span>{html.escape(text)}</span>'
                     for cls, text in LEGEND)
    return (
        '<div class="bsv-viewer" tabindex="0">\n'
        f"<style>{(ASSETS / 'viewer.css').read_text()}</style>\n"
        '<div class="bsv-controls">'
        '<button type="button" data-action="prev-round">&laquo; round</button>'
        '<button type="button" data-action="prev">&lsaquo; step</button>'
        '<button type="button" data-action="next">step &rsaquo;</button>'
        '<button type="button" data-action="next-round">round &raquo;</button>'
        '<button type="button" data-action="next-violation">next violation</button>'
        '<span class="bsv-where"></span></div>\n'
        f'<div class="bsv-legend">{legend}</div>\n'
        '<div class="bsv-panes"></div>\n'
        f'<script type="application/json" class="bsv-data">{_script_json(data)}</script>\n'
        f"<script>{(ASSETS / 'draw.js').read_text()}\n{(ASSETS / 'viewer.js').read_text()}</script>\n"
        "</div>\n")


def _page(title: str, body: str) -> str:
    return ("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n"
            '<link rel="icon" href="data:,">\n'  # no favicon request: the page works from disk alone
            "<style>body { margin: 1.5em; font-family: system-ui, sans-serif; }</style>\n"
            f"</head>\n<body>\n<h1>{html.escape(title)}</h1>\n"
            "<p>Step with the buttons or the arrow keys (click the viewer first). "
            "Hover a cell for its slot, token and position.</p>\n"
            f"{body}</body>\n</html>\n")


def comparison_html(traces: dict, path, title: str = "batchspec trace") -> Path:
    """Write several traces (``{label: trace}``, same prompts) side by side to ``path``."""
    path = Path(path)
    path.write_text(_page(title, fragment(traces)), encoding="utf-8")
    return path


def write_html(trace, path, title: str | None = None) -> Path:
    """Write ``trace`` (a ``Trace`` or the path of a saved one) as a self-contained page."""
    trace = _load(trace)
    header = trace.header
    label = header["method"] + (f" with fault {header['fault']}" if header.get("fault") else "")
    pair = f" on {header['pair']}" if header.get("pair") else ""
    return comparison_html({label: trace}, path, title or f"batchspec trace: {label}{pair}")
