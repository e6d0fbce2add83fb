"""One figure style for the whole book, and the plots every chapter reuses (chapter 1 onwards)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
import torch

from ._checks import ArrayLike, check_flag, check_instance, check_real, describe

__all__ = ["PALETTE", "use_style", "attention_heatmap"]

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
