"""Bad inputs for plots.py (use_style takes no arguments)."""

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import torch  # noqa: E402

from attention_course.plots import attention_heatmap, qkv_schematic  # noqa: E402
from bad_inputs import case  # noqa: E402

W = np.full((2, 3), 1 / 3)


CASES = [
    case(attention_heatmap, lambda: attention_heatmap(W[0]), ValueError, arg="weights", says="(n_q, n_k)",
         id="plots.attention_heatmap-1d"),
    case(attention_heatmap, lambda: attention_heatmap([[0.5, 0.5]]), TypeError, arg="weights",
         id="plots.attention_heatmap-list"),
    case(attention_heatmap, lambda: attention_heatmap(W, keys=["a", "b"]), ValueError, arg="keys", says="(3)",
         id="plots.attention_heatmap-key-labels"),
    case(attention_heatmap, lambda: attention_heatmap(W, queries="ab"), TypeError, arg="queries",
         id="plots.attention_heatmap-string-labels"),
    case(attention_heatmap, lambda: attention_heatmap(W, vmax=0.0), ValueError, arg="vmax",
         id="plots.attention_heatmap-vmax"),
    case(attention_heatmap, lambda: attention_heatmap(W, ax="left"), TypeError, arg="ax",
         id="plots.attention_heatmap-ax"),
    case(attention_heatmap, lambda: attention_heatmap(np.array([["a", "b"]])), TypeError,
         arg="weights", says="real numbers", id="plots.attention_heatmap-strings"),
    case(attention_heatmap, lambda: attention_heatmap(torch.ones(2, 2, dtype=torch.complex64)), TypeError,
         arg="weights", id="plots.attention_heatmap-complex"),
    case(qkv_schematic, lambda: qkv_schematic(ax="left"), TypeError, arg="ax", id="plots.qkv_schematic-ax"),
    case(qkv_schematic, lambda: qkv_schematic(cross="yes"), TypeError, arg="cross",
         id="plots.qkv_schematic-cross-str"),
]
