"""Diagrams of the course's core ideas, drawn in code (matplotlib patches) so that a notebook, the website and Colab
show the same picture with nothing more to install, and each figure keeps its white background in dark mode.

One small kit, :class:`Sketch` (boxes, arrows and matrices on an axis-free canvas), and one function per diagram,
named for what it shows and for the chapter that uses it. Every label is an ``ax.texts`` entry, so a test can
read what a diagram says. Chapter 3's flow of Q, K and V is :func:`attention_course.plots.qkv_schematic`.
"""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt

from ._checks import check_instance, check_int
from .plots import PALETTE

__all__ = ["Sketch", "softmax_shapes", "factor_product", "stacked_heads", "multihead_split", "encoder_decoder",
           "tiled_pass", "kv_cache_step", "gpt_block"]

#: Pale fills: attention (blue), the feed-forward network (grey), cross-attention (orange), a cached row (green).
FILL = {"attn": "#dbe9f6", "ffn": "#eeeeee", "cross": "#fde0c5", "cache": "#d5efe6", "new": "#fbe3d6"}


class Sketch:
    """A canvas in data coordinates, ``width`` × ``height``, with no axes, grid or aspect distortion (chapter 1).

    Args:
        ax: axes to draw on; a new figure of ``figsize`` (inches, the diagram's own size) when None.
        width, height: the canvas in data units (one unit is the same length across and up; a diagram that
            needs another aspect sets it on ``self.ax``, as :func:`encoder_decoder` does).
    """

    def __init__(self, ax: plt.Axes | None, width: float, height: float, figsize: tuple[float, float]) -> None:
        if ax is None:
            _, ax = plt.subplots(figsize=figsize)
        check_instance("ax", ax, plt.Axes)
        ax.set(xlim=(0, width), ylim=(0, height))
        ax.set_aspect("equal")
        ax.axis("off")
        ax.grid(False)
        self.ax = ax

    def box(self, x: float, y: float, w: float, h: float, text: str = "", *, fill: str = "white",
            size: float = 9.0, dashed: bool = False, edge: str = "0.3") -> tuple[float, float]:
        """A rounded box with centred text; returns its centre."""
        self.ax.add_patch(mpl.patches.FancyBboxPatch(
            (x, y), w, h, boxstyle="round,pad=0.06", facecolor="none" if dashed else fill, edgecolor=edge,
            lw=1.0, ls="--" if dashed else "-"))
        if text:
            self.ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size)
        return x + w / 2, y + h / 2

    def arrow(self, start: tuple[float, float], end: tuple[float, float], text: str = "", *, color: str = "0.25",
              at: tuple[float, float] | None = None, size: float = 8.5, ha: str = "left") -> None:
        """An arrow from ``start`` to ``end``, with an optional label at ``at`` (default: its middle)."""
        self.ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "color": color, "lw": 1.4})
        if text:
            x, y = at if at is not None else ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
            self.ax.text(x, y, text, fontsize=size, color=color, ha=ha, va="center")

    def text(self, x: float, y: float, text: str, *, size: float = 9.0, color: str = "0.15", **kw: object) -> None:
        self.ax.text(x, y, text, fontsize=size, color=color, **{"ha": "center", "va": "center", **kw})

    def matrix(self, x: float, y: float, rows: int, cols: int, name: str, *, cell: float = 0.3,
               fill: str | list[str] = "white", shape: str = "") -> tuple[float, float, float, float]:
        """A ``rows`` × ``cols`` grid with its top-left corner at ``(x, y)``, its name above and its shape below.
        ``fill``: one colour, or one per column. Returns (left, bottom, right, top)."""
        fills = fill if isinstance(fill, list) else [fill] * cols
        for r in range(rows):
            for c in range(cols):
                self.ax.add_patch(mpl.patches.Rectangle((x + c * cell, y - (r + 1) * cell), cell, cell,
                                                        facecolor=fills[c], edgecolor="0.45", lw=0.6))
        right, bottom = x + cols * cell, y - rows * cell
        self.text((x + right) / 2, y + 0.22, name, size=10)
        if shape:
            self.text((x + right) / 2, bottom - 0.08, shape, size=8, color="0.35", va="top")
        return x, bottom, right, y


def softmax_shapes(ax: plt.Axes | None = None) -> plt.Axes:
    r"""The shapes of :math:`\mathrm{softmax}(QK^\top/\sqrt{d_k})\,V` for 3 queries and 4 keys, the softmax taken
    over each row (over the keys), and beside it the wrong axis (chapter 1).

    Row :math:`a` of the weights is query :math:`a`'s distribution over the keys; it multiplies :math:`V` to give
    row :math:`a` of the output, the per-query weighted sum :math:`\sum_i A_{ai} v_i` (chapter 1's indices). A
    softmax down the columns would share each key among the queries instead, and a query's weights would no
    longer sum to 1.
    """
    sk = Sketch(ax, 14.9, 4.1, (12.5, 3.4))
    mid = 2.75  # operators at the matrices' mid-height
    sk.matrix(0.2, 3.2, 3, 2, "$Q$", fill=PALETTE[0] + "40", shape="$n_q \\times d_k$")
    sk.text(1.05, mid, "×", size=13)
    sk.matrix(1.3, 3.05, 2, 4, "$K^\\top$", fill=PALETTE[1] + "40", shape="$d_k \\times n_k$")
    sk.text(2.75, mid, "=", size=13)
    s = sk.matrix(3.0, 3.2, 3, 4, "scores $S$", shape="$n_q \\times n_k$")
    sk.arrow((s[2] + 0.1, mid), (5.6, mid), "softmax over\neach row", at=(4.95, 3.4), ha="center")
    w = sk.matrix(5.7, 3.2, 3, 4, "weights $A$", fill=PALETTE[2] + "30", shape="$n_q \\times n_k$")
    for r in range(3):  # each row sums to 1
        sk.ax.annotate("", xy=(w[2] - 0.02, 3.2 - 0.15 - 0.3 * r), xytext=(w[0] + 0.02, 3.2 - 0.15 - 0.3 * r),
                       arrowprops={"arrowstyle": "->", "color": PALETTE[2], "lw": 1.2})
    sk.text(w[2] + 0.5, mid, "rows\nsum to 1", size=8, color=PALETTE[2])
    sk.text(8.0, mid, "×", size=13)
    sk.matrix(8.3, 3.35, 4, 2, "$V$", fill=PALETTE[4] + "40", shape="$n_k \\times d_v$")
    sk.text(9.2, mid, "=", size=13)
    sk.matrix(9.5, 3.2, 3, 2, "output", fill=PALETTE[4] + "25",
              shape="$n_q \\times d_v$:\nrow $a$ = $\\sum_i A_{ai} v_i$")
    # the wrong axis
    sk.box(11.1, 0.75, 3.6, 3.05, dashed=True, edge=PALETTE[3])
    wrong = sk.matrix(12.3, 3.2, 3, 4, "wrong: down the columns", fill="0.93")
    for c in range(4):
        sk.ax.annotate("", xy=(12.45 + 0.3 * c, wrong[1] + 0.02), xytext=(12.45 + 0.3 * c, 3.18),
                       arrowprops={"arrowstyle": "->", "color": PALETTE[3], "lw": 1.2})
    sk.text(12.9, 1.55, "each key's weights sum to 1\nover the queries; a query's\nweights no longer sum to 1",
            size=8, color=PALETTE[3])
    return sk.ax


def factor_product(ax: plt.Axes | None = None) -> plt.Axes:
    r"""One head's two thin factors, :math:`W_i^Q` (:math:`d_\mathrm{model}\times d_k`) and :math:`{W_i^K}^\top`
    (:math:`d_k\times d_\mathrm{model}`), and their square product :math:`W_{QK,i}` of rank at most :math:`d_k`
    (chapter 4), drawn to scale for :math:`d_k = d_\mathrm{model}/5`, in greys (colour is left to the heads)."""
    sk = Sketch(ax, 12.3, 6.3, (5.2, 2.9))
    shapes = [(1.3, 0.0, 0.8, 4.0, "0.72", "$d_\\mathrm{model}\\times d_k$"),
              (2.9, 3.2, 4.0, 0.8, "0.72", "$d_k\\times d_\\mathrm{model}$"),
              (7.9, 0.0, 4.0, 4.0, "0.88", "$d_\\mathrm{model}\\times d_\\mathrm{model}$\nrank $\\leq d_k$")]
    for x0, y0, w, h, fill, shape in shapes:
        sk.ax.add_patch(mpl.patches.Rectangle((x0, y0 + 1.9), w, h, facecolor=fill, edgecolor="0.4", lw=0.8))
        sk.text(x0 + w / 2, y0 + 1.65, shape, size=9, va="top")
    sk.text(0.65, 3.9, "$W_i^Q$", size=13)  # beside its thin bar
    sk.text(4.9, 5.5, "${W_i^K}^\\top$", size=13)
    sk.text(9.9, 3.9, "$W_{QK,i}$", size=13)
    sk.text(2.5, 3.9, "×", size=16)
    sk.text(7.4, 3.9, "=", size=16)
    return sk.ax


def stacked_heads(ax: plt.Axes | None = None, heads: int = 4) -> plt.Axes:
    r"""The stacked :math:`W^Q` of ``heads`` heads: one :math:`d_\mathrm{model}\times d_\mathrm{model}` matrix whose
    column blocks of width :math:`d_k` are the heads' :math:`W_i^Q` (chapter 4).

    Args:
        ax: axes to draw on (a new figure when None). heads: 2 to 6.
    """
    heads = check_int("heads", heads, low=2, high=6)
    sk = Sketch(ax, heads + 1.0, 6.8, (2.6, 3.0))
    for i in range(heads):
        sk.ax.add_patch(mpl.patches.Rectangle((0.5 + i, 1.9), 1, 4, facecolor=PALETTE[i], alpha=0.35,
                                              edgecolor="k"))
        sk.text(1.0 + i, 3.9, f"$W_{i + 1}^Q$", size=12)
        sk.text(1.0 + i, 6.05, "$d_k$", size=9, va="bottom")
    sk.text(0.5 + heads / 2, 1.65, f"$W^Q$: $d_\\mathrm{{model}}\\times d_\\mathrm{{model}}$, $h$ = {heads}", size=9,
            va="top")
    return sk.ax


def multihead_split(ax: plt.Axes | None = None, heads: int = 4) -> plt.Axes:
    r"""Multi-head attention as one projection split into ``heads`` column blocks, attention in each, the outputs
    concatenated and mixed by :math:`W^O` (chapter 4). Block :math:`i` of :math:`Q = XW^Q` is :math:`XW_i^Q`.

    Args:
        ax: axes to draw on (a new figure when None). heads: how many heads to draw, 2 to 6.
    """
    heads = check_int("heads", heads, low=2, high=6)
    solid = [PALETTE[i] for i in (0, 1, 2, 4, 5, 6)][:heads]
    colors = [c + "55" for c in solid]
    sk = Sketch(ax, 14.0, 5.0, (12.5, 4.4))
    sk.matrix(0.2, 3.6, 4, 4, "$X$", shape="$n \\times d_\\mathrm{model}$")
    sk.arrow((1.5, 3.0), (2.4, 3.0), "$\\times W^Q$\n(and $W^K$, $W^V$)", at=(1.95, 4.05), ha="center")
    q = sk.matrix(2.5, 3.6, 4, heads, "$Q = XW^Q$", fill=colors,
                  shape=f"split into $h = {heads}$ blocks\nof $d_k$ columns")
    cat = sk.matrix(9.0, 3.6, 4, heads, "concatenate", fill=colors, shape="$n \\times h\\,d_v$")
    top = 4.7
    for i in range(heads):
        y = top - i * 1.05
        column = 0.3 * i + 0.15  # block i's centre, from the matrix's left edge
        sk.arrow((q[0] + column, 3.0), (5.2, y - 0.35), color=solid[i])
        formula = f"softmax$(Q_{i + 1}K_{i + 1}^\\top/\\sqrt{{d_k}})\\,V_{i + 1}$"
        sk.box(5.25, y - 0.7, 2.9, 0.7, f"head {i + 1}: {formula}", fill=colors[i], size=7.5)
        sk.arrow((8.2, y - 0.35), (cat[0] + column, 3.0), color=solid[i])
    out = cat[2] + 1.2
    sk.arrow((cat[2] + 0.1, 3.0), (out - 0.1, 3.0), "$\\times W^O$", at=(cat[2] + 0.6, 3.35), ha="center")
    sk.matrix(out, 3.6, 4, 4, "output", shape="$n \\times d_\\mathrm{model}$:\n$W^O$ mixes the heads")
    return sk.ax


def encoder_decoder(ax: plt.Axes | None = None) -> plt.Axes:
    r"""The encoder–decoder Transformer with cross-attention wired as in Vaswani et al. (2017): the queries come
    from the decoder's own stream, the keys and values from the encoder's output, the memory :math:`M`
    (chapter 5). Residual connections and layer normalisation are not drawn."""
    sk = Sketch(ax, 10.0, 10.4, (10, 5.2))
    sk.ax.set_aspect("auto")
    sk.box(0.3, 1.9, 3.6, 4.6, dashed=True, edge="0.5")
    sk.text(0.45, 6.2, "encoder layer × N", size=9, color="0.4", ha="left")
    sk.box(0.6, 2.3, 3.0, 1.3, "self-attention\n(padding mask)", fill=FILL["attn"])
    sk.box(0.6, 4.3, 3.0, 1.0, "feed-forward", fill=FILL["ffn"])
    sk.box(0.6, 0.3, 3.0, 0.9, "source tokens + positions")
    sk.box(0.6, 7.4, 3.0, 0.9, "memory $M$")
    sk.box(5.4, 1.9, 4.3, 6.9, dashed=True, edge="0.5")
    sk.text(5.55, 8.5, "decoder layer × N", size=9, color="0.4", ha="left")
    sk.box(5.8, 2.3, 3.6, 1.3, "causal self-attention\n(causal mask;\npast $K, V$ cached)", fill=FILL["attn"],
           size=8.5)
    sk.box(5.8, 4.4, 3.6, 1.6, "cross-attention (source padding mask)\n$Q = xW^Q$,  $K = MW^K$,  $V = MW^V$",
           fill=FILL["cross"], size=8.5)
    sk.box(5.8, 6.8, 3.6, 1.0, "feed-forward", fill=FILL["ffn"])
    sk.box(5.8, 0.3, 3.6, 0.9, "output so far + positions")
    sk.box(5.8, 9.3, 3.6, 0.8, "scores of the next token")
    for x, y0, y1 in ((2.1, 1.2, 2.3), (2.1, 3.6, 4.3), (2.1, 5.3, 7.4), (7.6, 1.2, 2.3), (7.6, 6.0, 6.8),
                      (7.6, 7.8, 9.3)):
        sk.arrow((x, y0), (x, y1))
    sk.arrow((7.6, 3.6), (7.6, 4.4), "queries from the decoder\n(its stream $x$)", color=PALETTE[0],
             at=(7.75, 3.95))
    sk.arrow((3.6, 7.85), (5.8, 5.3), "", color=PALETTE[3])
    sk.text(4.1, 5.1, "keys and\nvalues from\nthe encoder\n(once per\nsource)", size=8.5, color=PALETTE[3],
            ha="left")
    return sk.ax


def tiled_pass(ax: plt.Axes | None = None, tiles: int = 4, current: int = 2) -> plt.Axes:
    r"""One step of the tiled forward pass (chapter 6): a block of queries :math:`Q_i` meets key tile ``current``
    of ``tiles``; only that tile of scores exists, its state (running max :math:`m`, sum :math:`\ell`, weighted sum
    :math:`\mathrm{acc}`) is merged into the block's running state, rescaled by :math:`e^{m_\text{old} -
    m_\text{new}}`, and the output :math:`\mathrm{acc}/\ell` is written once, after the last tile.

    Args:
        ax: axes to draw on (a new figure when None). tiles: key tiles, 2 to 5. current: the tile being read,
            1 to ``tiles`` (tiles before it are read, after it to come).
    """
    tiles = check_int("tiles", tiles, low=2, high=5)  # five tiles fill the canvas
    current = check_int("current", current, low=1, high=tiles)
    sk = Sketch(ax, 12.0, 6.9, (7.6, 4.4))  # small, so that its labels read at the page's width
    w, gap, x0 = 1.3, 0.2, 3.3
    xs = [x0 + j * (w + gap) for j in range(tiles)]
    for j, x in enumerate(xs, start=1):
        fill = FILL["cache"] if j < current else FILL["new"] if j == current else "white"
        sk.box(x, 5.8, w, 0.6, f"$K_{j}$", fill=fill)
        sk.box(x, 0.3, w, 0.6, f"$V_{j}$", fill=fill)
    sk.text(x0 - 0.25, 6.1, "keys, in tiles\nof $B_k$ rows", size=8, ha="right")
    sk.text(x0 - 0.25, 0.6, "values, the\nsame tiles", size=8, ha="right")
    if current > 1:
        sk.text(xs[0], 6.75, "read", size=8, color="0.35", ha="left")
    sk.text(xs[current - 1] + w / 2, 6.75, f"this step: $j = {current}$", size=8, color=PALETTE[3])
    if current < tiles:
        sk.text(xs[-1] + w, 6.75, "to come", size=8, color="0.35", ha="right")
    cx = xs[current - 1]  # the tile being read
    sk.box(0.2, 4.0, 2.3, 0.9, "$Q_i$: a block of\n$B_q$ queries", fill=FILL["attn"], size=8.5)
    sk.box(cx - 0.45, 4.0, w + 0.9, 0.9, "scores $S_{ij}$\n$= Q_i K_j^\\top/\\sqrt{d_k}$", size=8.5)
    sk.arrow((2.55, 4.45), (cx - 0.5, 4.45))
    sk.arrow((cx + w / 2, 5.75), (cx + w / 2, 4.95))
    sk.box(3.3, 1.7, 8.4, 1.5, "", fill=FILL["attn"])
    sk.text(7.5, 2.45, "running state of $Q_i$, on chip:  $m \\leftarrow \\max(m, \\max_j S_{ij})$\n"
            "$\\ell \\leftarrow e^{m_\\mathrm{old} - m}\\,\\ell + \\sum_j e^{S_{ij} - m}$,   "
            "$\\mathrm{acc} \\leftarrow e^{m_\\mathrm{old} - m}\\,\\mathrm{acc} + e^{S_{ij} - m}\\,V_j$", size=8.5)
    sk.arrow((cx + w / 2, 3.95), (cx + w / 2, 3.25), "merge, then\nforget the tile", at=(cx + w / 2 + 0.15, 3.6),
             size=7.5)
    sk.arrow((cx + w / 2, 0.95), (cx + w / 2, 1.65))
    sk.box(0.2, 1.7, 2.3, 1.5, "after the last\ntile: output\n$O_i = \\mathrm{acc}/\\ell$,\nwritten once", size=8.5)
    sk.arrow((3.25, 2.45), (2.55, 2.45))
    return sk.ax


def kv_cache_step(ax: plt.Axes | None = None, cached: int = 5) -> plt.Axes:
    r"""One decoding step with a key–value cache (chapter 6): positions count from 0, ``cached`` tokens are in the
    cache, and the new token at position ``cached`` is decoded. Only its query, key and value are computed; its key
    and value are appended as the last rows of :math:`K` and :math:`V`, whose earlier rows are read, never
    recomputed.

    Args:
        ax: axes to draw on (a new figure when None). cached: tokens already cached, 1 to 9.
    """
    cached = check_int("cached", cached, low=1, high=9)
    t = cached  # the new token's position
    sk = Sketch(ax, 11.6, 5.9, (10, 5.0))
    row = 0.3
    top = 5.0
    bottom = top - (t + 1) * row
    for name, x in (("keys $K$", 3.9), ("values $V$", 5.9)):
        for j in range(t + 1):
            fill = FILL["new"] if j == t else FILL["cache"]
            sk.ax.add_patch(mpl.patches.Rectangle((x, top - (j + 1) * row), 1.3, row, facecolor=fill,
                                                  edgecolor="0.45", lw=0.6))
        sk.text(x + 0.65, top + 0.25, name, size=9.5)
    sk.text(5.55, bottom - 0.45, f"cached rows: positions 0 to {t - 1}\n(read, never recomputed)", size=8,
            color="0.3")
    sk.text(7.35, bottom + row / 2, "appended\nthis step", size=8, color=PALETTE[3], ha="left")
    sk.box(0.2, bottom - 0.05, 2.1, 0.6, f"new token $x_{{{t}}}$", fill=FILL["new"])
    sk.arrow((2.35, bottom + 0.25), (3.85, bottom + row / 2), "$\\times W^K$, $\\times W^V$", at=(2.4, bottom + 0.6))
    sk.arrow((1.25, bottom - 0.1), (1.25, 1.25), "$\\times W^Q$", at=(1.4, bottom - 0.75))
    sk.box(0.75, 0.55, 1.0, 0.6, f"$q_{{{t}}}$", fill=FILL["new"])
    sk.box(3.4, 0.45, 2.7, 0.8, f"scores: $q_{{{t}}}$ against\nall {t + 1} keys, softmax", fill=FILL["attn"], size=8.5)
    sk.arrow((1.8, 0.85), (3.35, 0.85))
    sk.arrow((4.55, bottom - 0.85), (4.75, 1.3), color="0.55")
    sk.arrow((6.15, 0.85), (8.1, 0.85), "weights", at=(7.1, 1.1), ha="center")
    sk.box(8.15, 0.45, 3.2, 0.8, f"output $o_{{{t}}}$ = weights × $V$", size=8.5)
    sk.arrow((6.55, bottom - 0.85), (9.4, 1.3), color="0.55")
    return sk.ax


def gpt_block(ax: plt.Axes | None = None) -> plt.Axes:
    r"""The decoder-only model as the course builds it (:class:`attention_course.gpt.GPT`, chapter 7): token
    embeddings, ``n_layers`` pre-LN blocks on a residual stream — LayerNorm, causal self-attention (rotary
    positions inside it), add; LayerNorm, feed-forward, add — a final LayerNorm and an output layer tied to the
    embedding, giving the next token's scores at every position."""
    sk = Sketch(ax, 9.0, 11.2, (6.6, 8.0))
    sk.box(2.2, 0.2, 3.6, 0.8, "tokens $x_0 \\dots x_{n-1}$")
    sk.box(2.2, 1.5, 3.6, 0.8, "token embedding", fill=FILL["ffn"])
    sk.box(0.3, 2.8, 7.4, 5.9, dashed=True, edge="0.5")
    sk.text(2.4, 8.45, "block × $n_\\mathrm{layers}$", size=9, color="0.4", ha="left")
    stream = 1.4  # the residual stream runs up the left
    sk.ax.plot([stream, stream], [2.6, 9.3], color=PALETTE[0], lw=2.2)
    sk.text(stream - 0.1, 5.6, "residual stream", size=8, color=PALETTE[0], rotation=90, ha="right")
    for y, second in ((3.2, "causal self-attention\n(rotary positions on $q$, $k$)"), (6.0, "feed-forward")):
        sk.arrow((stream, y + 0.3), (2.4, y + 0.3), color="0.5")
        sk.box(2.4, y, 2.2, 0.6, "LayerNorm", fill=FILL["ffn"], size=8.5)
        sk.arrow((4.65, y + 0.3), (5.0, y + 0.75))
        sk.box(4.1, y + 0.8, 3.3, 0.95, second, fill=FILL["attn"] if y < 5 else FILL["ffn"], size=8.5)
        sk.arrow((4.1, y + 1.27), (stream + 0.25, y + 1.27), color="0.5")
        sk.ax.add_patch(mpl.patches.Circle((stream, y + 1.27), 0.22, facecolor="white", edgecolor=PALETTE[0], lw=1.5,
                                           zorder=3))
        sk.text(stream, y + 1.27, "+", size=11, color=PALETTE[0], zorder=4)
    sk.box(2.2, 9.3, 3.6, 0.6, "final LayerNorm", fill=FILL["ffn"], size=8.5)
    sk.box(2.2, 10.2, 3.6, 0.8, "output layer (tied to the\nembedding): next-token scores", size=8)
    sk.arrow((4.0, 1.0), (4.0, 1.5))
    sk.arrow((4.0, 2.3), (stream, 2.6), color="0.5")
    sk.arrow((stream, 9.3), (2.2, 9.6), color="0.5")
    sk.arrow((4.0, 9.9), (4.0, 10.2))
    return sk.ax
