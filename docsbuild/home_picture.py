"""The home page's picture: one ragged round, and what each method makes of it.

Three rows of a left-padded batch after one verification with k = 3 drafts
(row 1 accepts all three, row 2 none, row 3 one; each also gains the target's
own next token), then the grid each method goes on with: masking, rollback,
DSD-style padding, EQSPEC and EXSPEC (Spec §4.4, §6, §8). Drawn as SVG text by
:func:`svg`; the build publishes it as ``assets/home-methods.svg``
(docsbuild/hooks.py). Colours are the tutorials' (batchspec.viz.draw.STYLE).
"""

from __future__ import annotations

from html import escape

CELL, GAP = 16, 2  # px: a grid slot, and the space between slots
FONT = 13  # px: every label (the picture is shown at its drawn size, never shrunk)
WIDTH = 680  # px: the site's reading column
FILL = {"pad": "#EEEEEE", "content": "#56B4E9", "accepted": "#009E73", "rejected": "#D55E00",
        "bonus": "#CC79A7", "hole": "url(#hole)", "gone": "#FFFFFF", "draft-bonus": "#F0E442"}

# One round of three rows: (pad, content) before, then the round's slots, k = 3.
BEFORE = ((1, 5), (3, 3), (2, 4))
ROUND = (("accepted", "accepted", "accepted", "bonus"), ("bonus", "rejected", "rejected"),
         ("accepted", "bonus", "rejected"))
COMMITTED = [sum(s in ("accepted", "bonus") for s in r) for r in ROUND]  # a_i: 4, 1, 2


def after(method: str) -> list[list[str]]:
    """Each row's slots after the round's alignment, as cell kinds."""
    rows = []
    for (pad, content), slots, a in zip(BEFORE, ROUND, COMMITTED):
        kept = [s for s in slots if s in ("accepted", "bonus")]
        if method == "masking":  # every row grows by max a_i; rejected slots stay, masked out
            grown = [s if s != "rejected" else "hole" for s in slots] + ["hole"] * (max(COMMITTED) - len(slots))
            rows.append(["pad"] * pad + ["content"] * content + grown[:max(COMMITTED)])
        elif method == "rollback":  # every row keeps min a_i tokens, the rest is thrown away
            keep = min(COMMITTED)
            rows.append(["pad"] * pad + ["content"] * content + kept[:keep] + ["gone"] * (a - keep))
        elif method == "dsd":  # old padding stays, new padding is added, no mask; the bonus is the draft's
            rows.append(["pad"] * pad + ["content"] * content + [k if k != "bonus" else "draft-bonus" for k in kept])
        else:  # eqspec: unpad, append, repad to L' = max(c_i + a_i)
            rows.append(["content"] * content + kept)
    if method == "rollback":  # still rectangular: the thrown-away cells stick out on the right
        return rows
    width = max(map(len, rows))
    return [["pad"] * (width - len(r)) + r for r in rows]


def cells(x: float, y: float, rows: list[list[str]]) -> list[str]:
    out = []
    for i, row in enumerate(rows):
        for j, kind in enumerate(row):
            cx, cy = x + j * (CELL + GAP), y + i * (CELL + GAP)
            stroke = ' stroke="#999" stroke-dasharray="3 2"' if kind == "gone" else ""
            out.append(f'<rect x="{cx}" y="{cy}" width="{CELL}" height="{CELL}" fill="{FILL[kind]}"{stroke}/>')
            if kind == "rejected":
                out.append(f'<line x1="{cx + 2}" y1="{cy + CELL - 2}" x2="{cx + CELL - 2}" y2="{cy + 2}" '
                           f'stroke="white" stroke-width="2"/>')
    return out


def text(x: float, y: float, words: str, weight: str = "normal") -> str:
    return f'<text x="{x}" y="{y}" font-weight="{weight}">{escape(words)}</text>'


PANELS = (  # method, heading, then what it does / exact? / wasted work
    ("masking", "Masking (BSP-style)", "keeps every slot; rejected ones become holes in the mask",
     "not exact: positions count the holes (breaks I1, I2, I3)"),
    ("rollback", "Rollback", "cuts every row back to the smallest a_i",
     f"exact; wastes {sum(COMMITTED) - min(COMMITTED) * len(COMMITTED)} of {sum(COMMITTED)} verified tokens"),
    ("dsd", "DSD-style padding", "pads again without unpadding; no mask; bonus from the draft",
     "not exact, even at batch 1 (breaks I1, I2, I4, I5)"),
    ("eqspec", "EQSPEC", "unpad, append, repad: each row shifts by δ_i",
     "exact; costs the moves of the cache (the realignment)"),
)


def svg() -> str:
    """The picture as a standalone SVG document, WIDTH px wide."""
    out, y = [], 18
    out.append(text(0, y, "One round, k = 3 drafts per row: the rows commit a_i = 4, 1, 2 tokens", "bold"))
    y += 10
    verified = [["pad"] * p + ["content"] * c + list(r) for (p, c), r in zip(BEFORE, ROUND)]
    width = max(map(len, verified))
    out += cells(0, y, [["pad"] * (width - len(r)) + r for r in verified])
    key_x = width * (CELL + GAP) + 16
    for n, (kind, label) in enumerate((("content", "prompt and output"), ("accepted", "accepted draft"),
                                       ("rejected", "rejected draft"), ("bonus", "target's own token"))):
        kx, ky = key_x + (n % 2) * 200, y + (n // 2) * 24
        out += cells(kx, ky, [[kind]])
        out.append(text(kx + CELL + 6, ky + 12, label))
    y += 3 * (CELL + GAP) + 30
    out.append(text(0, y, "What each method does before the next round", "bold"))
    y += 12
    for method, heading, does, verdict in PANELS:
        rows = after(method)
        out += cells(0, y, rows)
        tx = 12 * (CELL + GAP) + 8
        out.append(text(tx, y + 12, heading, "bold"))
        out.append(text(tx, y + 30, does))
        out.append(text(tx, y + 48, verdict))
        y += 3 * (CELL + GAP) + 22
    out += exspec(y)
    y += 3 * (CELL + GAP) + 16
    legend = (("hole", "masked hole"), ("gone", "thrown away"), ("draft-bonus", "the draft's token as bonus"))
    for n, (kind, label) in enumerate(legend):
        out += cells(n * 220, y, [[kind]])
        out.append(text(n * 220 + CELL + 6, y + 12, label))
    height = y + CELL + 6
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" font-family="system-ui, sans-serif" font-size="{FONT}" '
            f'role="img" aria-label="One ragged round and what masking, rollback, DSD-style padding, '
            f'EQSPEC and EXSPEC do to it">\n<defs><pattern id="hole" width="4" height="4" '
            f'patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="4" height="4" '
            f'fill="#fff"/><rect width="2" height="4" fill="#F3B1B1"/></pattern></defs>\n'
            + "\n".join(out) + "\n</svg>\n")


def exspec(y: float) -> list[str]:
    """EXSPEC's panel: the next batch is three rows of one length from the pool, no padding."""
    group = [["content"] * 9 for _ in range(3)]
    out = cells(0, y, group)
    tx = 12 * (CELL + GAP) + 8
    out.append(text(tx, y + 12, "EXSPEC", "bold"))
    out.append(text(tx, y + 30, "next round takes rows of one length from a pool of waiting rows"))
    out.append(text(tx, y + 48, "exact; no padding, no moves; a row may wait (EQSPEC if no group)"))
    return out


if __name__ == "__main__":
    print(svg())
