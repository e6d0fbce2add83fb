"""One figure style for the whole book, and the plots every chapter reuses (chapter 1 onwards)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import torch

from ._checks import ArrayLike, check_flag, check_instance, check_real, describe

__all__ = ["PALETTE", "use_style", "attention_heatmap", "qkv_schematic"]

#: Okabe & Ito's colour-blind-safe palette.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]


def use_style() -> None:
    """Apply the book's figure style: white background (readable in the site's dark mode too), readable
    fonts, light grid, colour-blind-safe colours, and PNG output at a resolution that stays sharp."""
    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 3.8),
            "figure.dpi": 100,
            "savefig.dpi": 150,
            "figure.facecolor": "white",
            "axes.facecolor": "white",
            "savefig.facecolor": "white",
            "font.size": 11,
            "axes.titlesize": 12,
            "axes.labelsize": 11,
            "legend.fontsize": 10,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.prop_cycle": mpl.cycler(color=PALETTE),
            "image.cmap": "viridis",
            "figure.constrained_layout.use": True,
        }
    )


def attention_heatmap(
    weights: ArrayLike,
    queries: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    ax: plt.Axes | None = None,
    title: str | None = None,
    annotate: bool = True,
    vmax: float | None = 1.0,
) -> plt.Axes:
    """Draw attention weights of shape ``(n_q, n_k)`` as a heatmap: rows are queries, columns keys.

    Args:
        weights: ``(n_q, n_k)`` weights (numpy or torch); each row sums to 1.
        queries, keys: tick labels for the rows and columns.
        ax: axes to draw on (a new figure when None).
        title: the axes' title.
        annotate: write each weight in its cell (for small matrices).
        vmax: upper end of the colour scale (1 by default, so figures are comparable).

    Returns:
        The axes. At the edges: a ``(0, n_k)`` or ``(n_q, 0)`` matrix draws empty axes.

    Raises:
        TypeError: weights not a numpy array or tensor of real numbers; labels not sequences; ``ax`` not Axes.
        ValueError: weights not 2-D; label counts that differ from the matrix's; a NaN or negative ``vmax``.
    """
    if not isinstance(weights, (torch.Tensor, np.ndarray)):
        raise TypeError(f"weights must be a numpy array or a torch tensor (n_q, n_k), got {describe(weights)}")
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().numpy() if not weights.is_floating_point() else weights.detach().cpu().float()
    w = np.asarray(weights)
    if w.dtype.kind not in "fiub":
        raise TypeError(f"weights must hold real numbers, got {describe(weights)}")
    if w.ndim != 2:
        raise ValueError(f"weights must have shape (n_q, n_k), got {w.shape}")
    for name, labels, n in (("queries", queries, w.shape[0]), ("keys", keys, w.shape[1])):
        if labels is None:
            continue
        if isinstance(labels, str) or not isinstance(labels, Sequence):
            raise TypeError(f"{name} must be a sequence of labels, got {describe(labels)}")
        if len(labels) != n:
            raise ValueError(f"{name} must have one label per {'row' if name == 'queries' else 'column'} ({n}), "
                             f"got {len(labels)}")
    if ax is not None:
        check_instance("ax", ax, plt.Axes)
    annotate = check_flag("annotate", annotate)
    if vmax is not None:
        vmax = check_real("vmax", vmax, low=0.0, open_low=True)
    if ax is None:
        _, ax = plt.subplots(figsize=(0.55 * w.shape[1] + 2.2, 0.45 * w.shape[0] + 1.4))
    im = ax.imshow(w, vmin=0.0, vmax=vmax, cmap="viridis", aspect="auto")
    ax.grid(False)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_xticks(range(w.shape[1]), keys if keys is not None else range(w.shape[1]),
                  rotation=45 if keys is not None else 0, ha="right" if keys is not None else "center")
    ax.set_yticks(range(w.shape[0]), queries if queries is not None else range(w.shape[0]))
    if annotate:
        top = vmax if vmax is not None else (w.max() if w.size else 1.0)
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="black" if w[i, j] > 0.6 * top else "white")
    if title:
        ax.set_title(title)
    if w.size:  # an empty image has no colour range to show
        ax.figure.colorbar(im, ax=ax, label="weight")
    return ax


def qkv_schematic(ax: plt.Axes | None = None, *, cross: bool = False) -> plt.Axes:
    r"""Draw how Q, K and V flow through one attention head, with its QK and OV circuits shaded (chapter 3).

    The tokens that ask are projected by :math:`W^Q`; the tokens that are read, by :math:`W^K` and :math:`W^V`
    (in self-attention they are the same tokens).
    :math:`Q` and :math:`K` meet only in the scores, whose row-wise softmax gives the weights :math:`A`; :math:`V`
    enters after the softmax, in :math:`AV`, then :math:`W^O`. The shaded regions are the two circuits of
    Elhage et al. (2021): QK (:math:`W^Q {W^K}^\top`, where each row looks) and OV (:math:`W^V W^O`, what it
    brings back).

    Args:
        ax: axes to draw on (a new figure when None); the axes' frame and grid are switched off.
        cross: draw encoder–decoder attention, with two sources: the decoder's states ask, the encoder's are
            read, and the output has one row per target position, added to the decoder's residual stream. By
            default, self-attention: one sequence feeds :math:`W^Q`, :math:`W^K` and :math:`W^V`.

    Returns:
        The axes. Every label is an ``ax.texts`` entry.

    Raises:
        TypeError: ``ax`` not Axes, ``cross`` not a bool.
    """
    cross = check_flag("cross", cross)
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4.6))
    else:
        check_instance("ax", ax, plt.Axes)
    ax.set_xlim(0, 10.6)
    ax.set_ylim(-0.2, 5.9)
    ax.axis("off")
    ax.grid(False)
    qk_color, ov_color = PALETTE[0], PALETTE[1]

    def region(x0: float, y0: float, w: float, h: float, color: str, label: str, label_x: float) -> None:
        patch = mpl.patches.FancyBboxPatch((x0, y0), w, h, boxstyle="round,pad=0.05", facecolor=color,
                                           alpha=0.12, edgecolor=color, lw=1.2)
        ax.add_patch(patch)
        ax.text(label_x, y0 + h - 0.12, label, ha="center", va="top", fontsize=9.5, color=color)

    def box(x: float, y: float, w: float, text: str, color: str = "white", h: float = 0.7) -> tuple[float, float]:
        patch = mpl.patches.FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.04", facecolor=color,
                                           edgecolor="0.3", lw=1)
        ax.add_patch(patch)
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9.5)
        return x + w / 2, y + h / 2

    def arrow(start: tuple[float, float], end: tuple[float, float]) -> None:
        ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "color": "0.25", "lw": 1.2})

    region(2.55, 2.0, 5.55, 3.75, qk_color, r"QK circuit $W^Q {W^K}^\top$: where each row looks", 6.2)
    region(2.55, -0.15, 6.25, 1.6, ov_color, r"OV circuit $W^V W^O$: what it brings back", 4.6)
    if cross:  # two sources: the decoder's states ask, the encoder's are read
        src_q = box(0.1, 4.3, 2.2, "decoder states $Y$\n($n_{tgt}$ rows)", h=0.9)
        src_kv = box(0.1, 1.6, 2.2, "encoder states $X$\n($n_{src}$ rows)", h=0.9)
    else:  # one source: every token asks and is read
        box(0.1, 1.6, 2.2, "one sequence $X$\n($n$ rows):\nit asks and is read", h=3.6)
        src_q, src_kv = (1.2, 4.75), (1.2, 2.05)
    wq, wk, wv = box(2.8, 4.4, 1.0, r"$\times W^Q$"), box(2.8, 2.6, 1.0, r"$\times W^K$"), box(
        2.8, 0.2, 1.0, r"$\times W^V$")
    q, k, v = box(4.2, 4.4, 0.6, "$Q$"), box(4.2, 2.6, 0.6, "$K$"), box(4.2, 0.2, 0.6, "$V$")
    scores = box(5.3, 3.4, 2.6, "$A$ = softmax($QK^\\top/\\sqrt{d_k}$)\neach row sums to 1", h=0.9)
    av = box(6.1, 0.2, 1.0, "$AV$")
    wo = box(7.5, 0.2, 1.0, r"$\times W^O$")
    out = "output: $n_{tgt}$ rows,\nadded to the decoder" if cross else "output:\none row per query"
    result = box(8.75, 1.6, 1.8, out, h=0.9)
    arrow((src_q[0] + 1.1, src_q[1]), (wq[0] - 0.5, wq[1]))
    arrow((src_kv[0] + 1.1, src_kv[1] + 0.15), (wk[0] - 0.5, wk[1]))
    arrow((src_kv[0] + 1.1, src_kv[1] - 0.15), (wv[0] - 0.5, wv[1]))
    for a, b in ((wq, q), (wk, k), (wv, v), (v, av)):
        arrow((a[0] + 0.5 if a is not v else a[0] + 0.3, a[1]), (b[0] - (0.3 if b in (q, k, v) else 0.5), b[1]))
    arrow((q[0] + 0.3, q[1]), (scores[0] - 0.6, scores[1] + 0.45))
    arrow((k[0] + 0.3, k[1]), (scores[0] - 0.6, scores[1] - 0.45))
    arrow((scores[0], scores[1] - 0.45), (av[0], av[1] + 0.35))
    arrow((av[0] + 0.5, av[1]), (wo[0] - 0.5, wo[1]))
    arrow((wo[0] + 0.5, wo[1]), (result[0], result[1] - 0.45))
    return ax
