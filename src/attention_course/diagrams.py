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
           "kv_cache_step", "gpt_block"]

#: Pale fills: attention (blue), the feed-forward network (grey), cross-attention (orange), a cached row (green).
FILL = {"attn": "#dbe9f6", "ffn": "#eeeeee", "cross": "#fde0c5", "cache": "#d5efe6", "new": "#fbe3d6"}


class Sketch:
    """A canvas in data coordinates, ``width`` × ``height``, with no axes, grid or aspect distortion (chapter 1).

    Args:
        ax: axes to draw on; a new figure of ``figsize`` when None.
        width, height: the canvas in data units (one unit is the same length across and up).
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

    Row :math:`i` of the weights is query :math:`i`'s distribution over the keys; it multiplies :math:`V` to give
    row :math:`i` of the output, the per-query weighted sum. A softmax down the columns would share each key
    among the queries instead, and a query's weights would no longer sum to 1.
    """
    sk = Sketch(ax, 14.4, 4.0, (12, 3.4))
    sk.matrix(0.2, 3.2, 3, 2, "$Q$", fill=PALETTE[0] + "40", shape="$n_q \\times d_k$")
    sk.text(1.05, 2.25, "×", size=13)
    sk.matrix(1.3, 3.35, 2, 4, "$K^\\top$", fill=PALETTE[1] + "40", shape="$d_k \\times n_k$")
    sk.text(2.75, 2.25, "=", size=13)
    s = sk.matrix(3.0, 3.2, 3, 4, "scores $S$", shape="$n_q \\times n_k$")
    sk.arrow((s[2] + 0.1, 2.25), (5.1, 2.25), "softmax\nover each row", at=(4.65, 3.05), ha="center")
    w = sk.matrix(5.2, 3.2, 3, 4, "weights $A$", fill=PALETTE[2] + "30", shape="$n_q \\times n_k$")
    for r in range(3):  # each row sums to 1
        sk.ax.annotate("", xy=(w[2] - 0.02, 3.2 - 0.15 - 0.3 * r), xytext=(w[0] + 0.02, 3.2 - 0.15 - 0.3 * r),
                       arrowprops={"arrowstyle": "->", "color": PALETTE[2], "lw": 1.2})
    sk.text(w[2] + 0.55, 2.75, "rows\nsum to 1", size=8, color=PALETTE[2])
    sk.text(7.1, 2.25, "×", size=13)
    sk.matrix(7.4, 3.35, 4, 2, "$V$", fill=PALETTE[4] + "40", shape="$n_k \\times d_v$")
    sk.text(8.35, 2.25, "=", size=13)
    sk.matrix(8.65, 3.2, 3, 2, "output", fill=PALETTE[4] + "25",
              shape="$n_q \\times d_v$:\nrow $i$ = $\\sum_j a_{ij} v_j$")
    # the wrong axis
    sk.box(10.3, 0.35, 3.95, 3.45, dashed=True, edge=PALETTE[3])
    wrong = sk.matrix(11.67, 3.2, 3, 4, "wrong: down the columns", fill="0.93")
    for c in range(4):
        sk.ax.annotate("", xy=(11.82 + 0.3 * c, wrong[1] + 0.02), xytext=(11.82 + 0.3 * c, 3.18),
                       arrowprops={"arrowstyle": "->", "color": PALETTE[3], "lw": 1.2})
    sk.text(12.27, 1.3, "each key's weights sum to 1\nover the queries; a query's\nweights no longer sum to 1",
            size=8, color=PALETTE[3])
    return sk.ax


def factor_product(ax: plt.Axes | None = None) -> plt.Axes:
    r"""One head's two thin factors, :math:`W_i^Q` (:math:`d_\mathrm{model}\times d_k`) and :math:`{W_i^K}^\top`
    (:math:`d_k\times d_\mathrm{model}`), and their square product :math:`W_{QK,i}` of rank at most :math:`d_k`
    (chapter 4), drawn to scale for :math:`d_k = d_\mathrm{model}/5`."""
    sk = Sketch(ax, 11.8, 6.3, (5.2, 2.9))
    shapes = [(0.8, 0.0, 0.8, 4.0, "$W_i^Q$", "$d_\\mathrm{model}\\times d_k$"),
              (2.4, 3.2, 4.0, 0.8, "${W_i^K}^\\top$", "$d_k\\times d_\\mathrm{model}$"),
              (7.4, 0.0, 4.0, 4.0, "$W_{QK,i}$", "$d_\\mathrm{model}\\times d_\\mathrm{model}$\nrank $\\leq d_k$")]
    for k, (x0, y0, w, h, name, shape) in enumerate(shapes):
        sk.ax.add_patch(mpl.patches.Rectangle((x0, y0 + 1.9), w, h, facecolor=PALETTE[k], alpha=0.35))
        sk.text(x0 + w / 2, y0 + 1.9 + h / 2, name, size=13)
        sk.text(x0 + w / 2, y0 + 1.65, shape, size=9, va="top")
    sk.text(2.0, 3.9, "×", size=16)
    sk.text(6.9, 3.9, "=", size=16)
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
    concatenated and mixed by :math:`W^O` (chapter 4).

    Args:
        ax: axes to draw on (a new figure when None). heads: how many heads to draw, 2 to 6.
    """
    heads = check_int("heads", heads, low=2, high=6)
    colors = [PALETTE[i] + "55" for i in (0, 1, 2, 4, 5, 6)][:heads]
    sk = Sketch(ax, 14.0, 5.0, (12.5, 4.4))
    sk.matrix(0.2, 3.6, 4, 4, "$X$", shape="$n \\times d_\\mathrm{model}$")
    sk.arrow((1.5, 3.0), (2.4, 3.0), "$\\times W^Q$\n(and $W^K$, $W^V$)", at=(1.95, 4.05), ha="center")
    q = sk.matrix(2.5, 3.6, 4, heads, "$Q = XW^Q$", fill=colors,
                  shape=f"split into $h = {heads}$ blocks\nof $d_k$ columns")
    top = 4.7
    for i in range(heads):
        y = top - i * 1.05
        sk.arrow((q[2] + 0.05, 3.0), (5.2, y - 0.35), color="0.55")
        formula = f"softmax$(Q_{i + 1}K_{i + 1}^\\top/\\sqrt{{d_k}})\\,V_{i + 1}$"
        sk.box(5.25, y - 0.7, 2.9, 0.7, f"head {i + 1}: {formula}", fill=colors[i], size=7.5)
        sk.arrow((8.2, y - 0.35), (8.95, 3.0), color="0.55")
    cat = sk.matrix(9.0, 3.6, 4, heads, "concatenate", fill=colors, shape="$n \\times h\\,d_v$")
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
    sk.arrow((3.6, 7.85), (5.8, 5.3), "keys and values\nfrom the encoder\n(once per source)", color=PALETTE[1],
             at=(3.75, 5.75))
    return sk.ax


def kv_cache_step(ax: plt.Axes | None = None, step: int = 6) -> plt.Axes:
    r"""One decoding step with a key–value cache (chapter 6): the new token's query meets the ``step − 1`` cached
    keys and its own; only its key and value are computed, then appended, and the earlier rows are read, never
    recomputed.

    Args:
        ax: axes to draw on (a new figure when None). step: the position being decoded, 2 to 10.
    """
    step = check_int("step", step, low=2, high=10)
    sk = Sketch(ax, 15.0, 5.4, (12, 4.3))
    cell = 0.36
    sk.box(0.2, 2.3, 1.9, 0.7, f"new token $x_{{{step}}}$", fill=FILL["new"])
    sk.arrow((2.45, 2.65), (3.3, 3.85), "$\\times W^K, W^V$", at=(2.4, 3.55), ha="left")
    sk.arrow((2.45, 2.65), (3.3, 1.05), "$\\times W^Q$", at=(2.55, 1.55), ha="left")
    for name, y in (("keys $K$", 4.85), ("values $V$", 3.35)):
        fills = [FILL["cache"]] * (step - 1) + [FILL["new"]]
        for j in range(step):
            sk.ax.add_patch(mpl.patches.Rectangle((3.4 + j * cell, y - 0.75), cell, 0.75, facecolor=fills[j],
                                                  edgecolor="0.45", lw=0.6))
        sk.text(3.4 + step * cell / 2, y + 0.2, name, size=9.5)
    sk.text(3.4 + (step - 1) * cell / 2, 2.35, f"cached: positions 1 to {step - 1}\n(read, never recomputed)",
            size=8, color="0.3")
    sk.text(3.4 + (step - 0.5) * cell + 0.55, 4.5, "appended\nthis step", size=8, color=PALETTE[3], ha="left")
    sk.box(3.4, 0.7, cell * 1.6, 0.7, f"$q_{{{step}}}$", fill=FILL["new"])
    right = 3.4 + step * cell
    sk.arrow((4.05, 1.05), (right + 1.0, 1.05), "", color="0.25")
    sk.box(right + 1.05, 0.55, 2.9, 1.0, f"one row of scores,\n$q_{{{step}}}$ against all {step} keys", size=8.5,
           fill=FILL["attn"])
    sk.arrow((right + 4.0, 1.05), (right + 4.6, 1.05))
    sk.box(right + 4.65, 0.55, 2.0, 1.0, f"output $o_{{{step}}}$\n= weights × $V$", size=8.5)
    sk.arrow((right + 0.1, 4.45), (right + 2.5, 1.6), color="0.55")
    sk.arrow((right + 0.1, 2.95), (right + 5.6, 1.6), color="0.55")
    return sk.ax


def gpt_block(ax: plt.Axes | None = None) -> plt.Axes:
    r"""The decoder-only model as the course builds it (:class:`attention_course.gpt.GPT`, chapter 7): token
    embeddings, ``n_layers`` pre-LN blocks on a residual stream — LayerNorm, causal self-attention (rotary
    positions inside it), add; LayerNorm, feed-forward, add — a final LayerNorm and an output layer tied to the
    embedding, giving the next token's scores at every position."""
    sk = Sketch(ax, 9.0, 11.2, (6.6, 8.0))
    sk.box(2.2, 0.2, 3.6, 0.8, "tokens $t_1 \\dots t_n$")
    sk.box(2.2, 1.5, 3.6, 0.8, "token embedding", fill=FILL["ffn"])
    sk.box(0.3, 2.8, 7.4, 5.9, dashed=True, edge="0.5")
    sk.text(0.45, 8.45, "block × $n_\\mathrm{layers}$", size=9, color="0.4", ha="left")
    stream = 1.4  # the residual stream runs up the left
    sk.ax.plot([stream, stream], [2.3, 9.3], color=PALETTE[0], lw=2.2)
    sk.text(stream - 0.1, 5.6, "residual stream", size=8, color=PALETTE[0], rotation=90, ha="right")
    for y, (first, second) in ((3.2, ("LayerNorm", "causal self-attention\n(rotary positions on $q$, $k$)")),
                               (6.0, ("LayerNorm", "feed-forward"))):
        sk.arrow((stream, y + 0.3), (2.4, y + 0.3), color="0.5")
        sk.box(2.4, y, 2.2, 0.6, first, fill=FILL["ffn"], size=8.5)
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
