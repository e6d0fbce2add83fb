"""Figures a reader moves (chapters 1, 2, 5, 6 and 7), drawn with Bokeh so that the website, JupyterLab and Colab
show the same figure with no kernel and no network.

Every number a figure shows is computed here, in Python, by the package's own functions: one **frame** per
position of the figure's controls. The only JavaScript is :data:`SWITCH`, the few lines that copy the chosen frame
into the plot when a control moves; it recomputes nothing. An :class:`Interactive` displays itself in a notebook
as HTML that carries Bokeh's own JavaScript inline (about 1.65 MB, loaded once per page), so a saved notebook and
the site built from it need nothing from outside.

One function per figure, named for what it lets the reader move:

- :func:`temperature_explorer` (chapter 2): divide fixed scores by τ and watch the weights and their entropy at
  ``d_k = 16`` and ``1024``;
- :func:`circle_explorer` (chapter 1): turn a query around the unit circle and lengthen it, and watch the scores,
  the weights and the output, a weighted average of the values;
- :func:`head_explorer` (chapters 5 and 7): pick a layer, a head and an input of a trained model and see its
  attention map;
- :func:`online_softmax_explorer` (chapter 6): walk the key tiles of the online softmax, its running max, its
  rescaled sum and its output so far.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import bokeh
import numpy as np
import torch
from bokeh.embed import json_item
from bokeh.layouts import column, row
from bokeh.models import (
    ColorBar,
    ColumnDataSource,
    CustomJS,
    Div,
    HoverTool,
    LabelSet,
    LinearColorMapper,
    RadioButtonGroup,
    Select,
    Slider,
)
from bokeh.plotting import figure
from bokeh.resources import Resources

from ._checks import check_instance, check_int, check_ints, check_numbers, check_real, describe
from .attention import attention_entropy, scaled_dot_product_attention, softmax
from .plots import PALETTE
from .tiled import state_output, tiled_attention_steps

__all__ = ["Interactive", "temperature_explorer", "circle_explorer", "head_explorer",
           "online_softmax_explorer"]

#: The figures' one piece of JavaScript: read every control, turn their positions into a frame number (the last
#: control varies fastest), and set each named target's attributes to that frame's values.
SWITCH = """
let index = 0;
for (let c = 0; c < controls.length; c++) {
  const w = controls[c];
  let at;
  if (w.active !== undefined) { at = w.active; }                    // RadioButtonGroup
  else if (w.options !== undefined) { at = w.options.indexOf(w.value); }  // Select
  else { at = Math.round((w.value - w.start) / w.step); }          // Slider
  index = index * sizes[c] + at;
}
const frame = JSON.parse(frames)[index];
for (const name in frame) {
  for (const attr in frame[name]) { targets[name][attr] = frame[name][attr]; }
}
"""

#: The panel every figure sits on: dark text on white in light and dark mode alike.
_PANEL = {"color": "#222222", "background-color": "white", "padding": "8px", "border-radius": "4px"}


def _fmt(x: float, digits: int = 2) -> str:
    """``x`` to ``digits`` decimals, never "-0.00": a residual such as -1e-16, whose sign is the last bit of a
    machine's arithmetic, prints as 0.00 on every machine."""
    return f"{round(float(x), digits) + 0.0:.{digits}f}"


def _round(x: object, digits: int = 5) -> object:
    """Floats rounded (lists and dicts recursively), so that a frame prints the same on every machine."""
    if isinstance(x, dict):
        return {k: _round(v, digits) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_round(v, digits) for v in x]
    if isinstance(x, (float, np.floating)):
        return round(float(x), digits) + 0.0  # + 0.0: no "-0.0"
    if isinstance(x, np.integer):
        return int(x)
    return x


@dataclass
class Interactive:
    """A figure with controls, its frames computed in Python (chapter 1 onwards).

    Attributes:
        name: the figure's id on its page (``ac-<name>``), unique on the page.
        layout: the Bokeh layout: controls, plots and text.
        frames: one dict per position of the controls, ``{target name: {attribute: value}}``.
        sizes: how many positions each control has, in the order the frame number reads them.

    Displayed in a notebook (``_repr_html_``), it writes Bokeh's JavaScript inline, guarded so that a page with
    several figures runs it once, then the figure. ``frame(i, ...)`` gives the frame for control positions
    ``i, ...``, as the page's JavaScript picks it.
    """

    name: str
    layout: object
    frames: list[dict] = field(repr=False)
    sizes: list[int]

    def frame(self, *positions: int) -> dict:
        """The frame the page shows with the controls at ``positions`` (one per control)."""
        if len(positions) != len(self.sizes):
            raise ValueError(f"positions must give one position per control ({len(self.sizes)}), got {positions}")
        index = 0
        for at, size in zip(positions, self.sizes, strict=True):
            check_int("positions", at, low=0, high=size - 1)
            index = index * size + at
        return self.frames[index]

    def _repr_html_(self) -> str:
        resources = Resources(mode="inline", components=["bokeh", "bokeh-widgets"])
        version = json.dumps(bokeh.__version__)
        bundle = "\n".join(resources.js_raw[:2])  # bokeh.min.js and bokeh-widgets.min.js
        item = json.dumps(json_item(self.layout, f"ac-{self.name}"))  # key order as Bokeh wrote it: a
        # model is defined where it first appears and referred to by id after
        return (
            f'<div class="course-interactive" id="ac-{self.name}"></div>\n'
            # Bokeh registers itself as window.Bokeh[version] beside any other version a page already has
            f"<script>\nif (!(window.Bokeh && window.Bokeh[{version}] && window.Bokeh[{version}].Widgets)) {{\n"
            f"(function () {{\n{bundle}\n}}).call(window);\n}}\n</script>\n"
            # the figure shown twice on one page (a cell run again): the later display draws into its own element
            f"<script>\n(function () {{\nconst all = document.querySelectorAll('[id=\"ac-{self.name}\"]');\n"
            f"const target = all[all.length - 1];\nconst item = {item};\n"
            f"if (all.length > 1) {{ target.id = item.target_id = 'ac-{self.name}-' + all.length; }}\n"
            f"window.Bokeh[{version}].embed.embed_item(item);\n}})();\n</script>"
        )

    def __repr__(self) -> str:
        return f"Interactive({self.name!r}: {len(self.frames)} frames, controls of {self.sizes} positions)"


def _positions(control: object) -> int:
    """How many positions a control has: a slider's steps, a button group's buttons, a menu's options."""
    if isinstance(control, RadioButtonGroup):
        return len(control.labels)
    if isinstance(control, Select):
        return len(control.options)
    return round((control.end - control.start) / control.step) + 1


def _make(name: str, layout: object, controls: list, targets: dict[str, object], frames: list[dict],
          start: Sequence[int]) -> Interactive:
    """Wire the controls to the frames (one :data:`SWITCH` callback) and set every target to the starting
    frame, the one the controls show when the page opens. The whole figure gets dark text on white, as every
    figure of the book keeps in dark mode (the controls would otherwise take the dark page's light text)."""
    layout.styles = _PANEL
    sizes = [_positions(c) for c in controls]
    if math.prod(sizes) != len(frames):
        raise ValueError(f"the controls have {math.prod(sizes)} positions but {len(frames)} frames were computed")
    frames = _round(frames)
    callback = CustomJS(args={"controls": list(controls), "sizes": sizes, "targets": targets,
                              "frames": json.dumps(frames, sort_keys=True)}, code=SWITCH)
    for c in controls:
        c.js_on_change("active" if isinstance(c, RadioButtonGroup) else "value", callback)
    fig = Interactive(name, layout, frames, sizes)
    for target, attrs in fig.frame(*start).items():
        for attr, value in attrs.items():
            setattr(targets[target], attr, value)
    return fig


def _plot(title: str, *, width: int | None = None, **options) -> figure:
    """A plot with the book's look: no toolbar, white background; ``width`` fixes its size (for a row that
    wraps, :func:`_wrap`), else it stretches to the page."""
    if width is None:
        options["sizing_mode"] = "stretch_width"
    else:
        options["width"] = width
    p = figure(title=title, toolbar_location=None, **options)
    p.title.text_font_size = "11pt"
    p.background_fill_color = "white"
    p.border_fill_color = "white"
    return p


def _wrap(*items: object) -> object:
    """Plots or controls side by side on a wide page, one under another on a narrow one (a phone)."""
    return row(*items, sizing_mode="stretch_width", stylesheets=[":host { flex-wrap: wrap; gap: 8px; }"])


def _check_name(name: object) -> str:
    check_instance("name", name, str)
    if not name.replace("-", "").isalnum():
        raise ValueError(f"name must be letters, digits and '-' (it becomes an HTML id), got {name!r}")
    return name


def temperature_explorer(n: int = 12, d_ks: Sequence[int] = (16, 1024), *, seed: int = 2,
                         name: str = "temperature") -> Interactive:
    r"""Chapter 2: a slider divides fixed scores by τ; bars show the weights :math:`\mathrm{softmax}(s/τ)` and the
    titles their entropy, for one query against ``n`` keys at each head size in ``d_ks``.

    The scores are dot products of a query and ``n`` keys drawn from N(0, 1) in float64 (seeded by ``seed`` and
    ``d_k``), so their spread grows like :math:`\sqrt{d_k}`; τ runs from 1 (no scaling) to 48 in steps of 0.5,
    and τ = √d_k is the Transformer's scale. Keys are sorted by score. One draw of 12 scores spreads by chance
    (its standard deviation is √d_k times 0.58 to 1.66 across seeds 0 to 5), and two top scores can nearly tie
    (seed 1 splits the unscaled d_k = 1024 weights 0.52 / 0.48). The default, seed 2, is the first of seeds 0 to
    29 whose two spreads lie within 30 % of √d_k and whose unscaled d_k = 1024 weights put more than 0.99 on one
    key; 14 of the 30 do (tests/test_interactive.py holds the default to both).
    """
    n = check_int("n", n, low=2, high=40)
    sizes = check_ints("d_ks", d_ks, low=1, high=4096)
    if len(sizes) != 2 or sizes[0] == sizes[1]:
        raise ValueError(f"d_ks must hold two different head sizes, got {describe(d_ks)}")
    seed = check_int("seed", seed, low=0)
    name = _check_name(name)
    scores = []
    for d in sizes:
        g = torch.Generator().manual_seed(seed * 10_000 + d)
        q = torch.randn(d, generator=g, dtype=torch.float64)
        k = torch.randn(n, d, generator=g, dtype=torch.float64)
        scores.append(torch.sort(k @ q, descending=True).values)
    slider = Slider(start=1.0, end=48.0, step=0.5, value=1.0, title="τ, the divisor of the scores",
                    sizing_mode="stretch_width", name=f"{name}:tau")
    readout = Div(styles={"font-size": "0.95em"}, name=f"{name}:readout")
    plots, sources = [], []
    for d in sizes:
        p = _plot("", x_range=(0.4, n + 0.6), y_range=(0, 1.02), width=330, height=260,
                  x_axis_label="keys, sorted by score", y_axis_label="weight")
        src = ColumnDataSource({"key": [], "weight": [], "score": []}, name=f"{name}:bars{d}")
        p.vbar(x="key", top="weight", width=0.7, source=src, color=PALETTE[0] if d == sizes[0] else PALETTE[3])
        p.line([0.4, n + 0.6], [1 / n, 1 / n], line_dash="dashed", color="gray")
        p.add_tools(HoverTool(tooltips=[("score", "@score{0.00}"), ("weight", "@weight{0.000}")]))
        p.title.name = f"{name}:title{d}"
        plots.append(p)
        sources.append(src)
    frames = []
    taus = np.arange(1.0, 48.0 + 0.25, 0.5)
    for tau in taus:
        frame: dict[str, dict] = {}
        notes, largest = [], []
        for d, s in zip(sizes, scores, strict=True):
            w = softmax(s / tau)
            h = float(attention_entropy(w))
            frame[f"bars{d}"] = {"data": {"key": list(range(1, n + 1)), "weight": w.tolist(), "score": s.tolist()}}
            frame[f"title{d}"] = {"text": f"d_k = {d}: entropy {h:.2f} nats"}
            largest.append(f"{float(w.max()):.2f} at d_k = {d}")
            if abs(tau - math.sqrt(d)) < 0.25:
                notes.append(f"τ = √{d}, the Transformer's scale for d_k = {d}")
        frame["readout"] = {"text": f"<b>τ = {tau:.1f}</b>{': ' + '; '.join(notes) if notes else ''}<br>largest "
                                    f"weight {', '.join(largest)}; the entropy is at most ln {n} = "
                                    f"{math.log(n):.2f} nats (uniform weights, the dashed line 1/n)"}
        frames.append(frame)
    targets = {"readout": readout}
    for d, p, src in zip(sizes, plots, sources, strict=True):
        targets[f"bars{d}"], targets[f"title{d}"] = src, p.title
    layout = column(slider, readout, _wrap(*plots), sizing_mode="stretch_width")
    return _make(name, layout, [slider], targets, frames, [0])


def circle_explorer(key_angles: Sequence[float] = (30.0, 100.0, 190.0, 300.0),
                    values: Sequence[Sequence[float]] = ((1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0)),
                    lengths: Sequence[float] = (1.0, 2.0, 4.0, 8.0), *, name: str = "circle") -> Interactive:
    r"""Chapter 1: the query :math:`q = \ell(\cos θ, \sin θ)` among unit keys at ``key_angles`` (degrees); a slider
    turns θ in steps of 5°, buttons set its length ℓ. Shown: the keys and the query on the circle, each key's
    score :math:`q\cdot k_i` and weight (bars; scale 1, no division), and the output — the weighted average of the
    ``values`` (2-D points) — from the package's :func:`scaled_dot_product_attention`.
    """
    angles = [math.radians(a) for a in check_numbers("key_angles", key_angles)]
    check_instance("values", values, (list, tuple))
    vals = torch.tensor([check_numbers("values", v) for v in values], dtype=torch.float64)
    if vals.ndim != 2 or vals.shape != (len(angles), 2):
        raise ValueError(f"values must be one 2-D point per key ({len(angles)} × 2), got {tuple(vals.shape)}")
    if not 2 <= len(angles) <= 8:
        raise ValueError(f"key_angles must hold 2 to 8 keys, got {len(angles)}")
    lens = [check_real("lengths", x, low=0.0, open_low=True) for x in check_numbers("lengths", lengths)]
    name = _check_name(name)
    n = len(angles)
    keys = torch.tensor([[math.cos(a), math.sin(a)] for a in angles], dtype=torch.float64)
    colors = [PALETTE[i % len(PALETTE)] for i in range(n)]
    labels = [f"k{i + 1}" for i in range(n)]

    theta = Slider(start=0, end=355, step=5, value=60, title="the query's angle θ (degrees)",
                   sizing_mode="stretch_width", name=f"{name}:angle")
    length = RadioButtonGroup(labels=[f"|q| = {x:g}" for x in lens], active=1, name=f"{name}:length")
    readout = Div(styles={"font-size": "0.95em"}, name=f"{name}:readout")

    circle = _plot("keys; q's direction", x_range=(-1.35, 1.35), y_range=(-1.35, 1.35), width=220,
                   height=230)
    t = [2 * math.pi * i / 199 for i in range(200)]  # lists of rounded floats: the same bytes on every machine
    circle.line(_round([math.cos(a) for a in t], 4), _round([math.sin(a) for a in t], 4), color="lightgray")
    circle.segment(x0=0, y0=0, x1="x", y1="y", color="color", line_width=2, source=ColumnDataSource(
        {"x": _round(keys[:, 0].tolist()), "y": _round(keys[:, 1].tolist()), "color": colors}))
    circle.add_layout(LabelSet(x="x", y="y", text="label", x_offset=4, y_offset=4, source=ColumnDataSource(
        {"x": _round((1.1 * keys[:, 0]).tolist()), "y": _round((1.1 * keys[:, 1]).tolist()), "label": labels})))
    query = ColumnDataSource({"x": [], "y": [], "qx": [], "qy": []}, name=f"{name}:query")
    circle.segment(x0=0, y0=0, x1="x", y1="y", color="black", line_width=3, source=query)
    circle.scatter(x="x", y="y", size=9, color="black", source=query)

    bars = _plot("weights; scores q·k above", x_range=labels, y_range=(0, 1.15), width=220, height=230,
                 y_axis_label="weight")
    weights = ColumnDataSource({"key": [], "weight": [], "text": [], "color": []}, name=f"{name}:weights")
    bars.vbar(x="key", top="weight", width=0.7, color="color", source=weights)
    bars.add_layout(LabelSet(x="key", y="weight", text="text", y_offset=3, text_align="center",
                             text_font_size="9pt", source=weights))

    space = _plot("values; the output ★", x_range=(-1.35, 1.35), y_range=(-1.35, 1.35), width=220,
                  height=230)
    vx, vy = _round(vals[:, 0].tolist()), _round(vals[:, 1].tolist())
    space.scatter(x="x", y="y", color="color", size=12, marker="square",
                  source=ColumnDataSource({"x": vx, "y": vy, "color": colors}))
    space.add_layout(LabelSet(x="x", y="y", text="label", x_offset=6, y_offset=6, source=ColumnDataSource(
        {"x": vx, "y": vy, "label": [f"v{i + 1}" for i in range(n)]})))
    output = ColumnDataSource({"x": [], "y": []}, name=f"{name}:output")
    space.scatter(x="x", y="y", size=14, marker="star", color="black", source=output)

    frames = []
    for degrees in range(0, 360, 5):
        a = math.radians(degrees)
        for ell in lens:
            q = torch.tensor([[ell * math.cos(a), ell * math.sin(a)]], dtype=torch.float64)
            out, w = scaled_dot_product_attention(q, keys, vals, scale=1.0)
            s = (q @ keys.T)[0]
            frames.append({
                # drawn as its direction (length 1.2, inside the plot); qx, qy: the query itself
                "query": {"data": {"x": [1.2 * math.cos(a)], "y": [1.2 * math.sin(a)], "qx": q[:, 0].tolist(),
                                   "qy": q[:, 1].tolist()}},
                "weights": {"data": {"key": labels, "weight": w[0].tolist(),
                                     "text": [_fmt(x) for x in s.tolist()], "color": colors}},
                "output": {"data": {"x": out[:, 0].tolist(), "y": out[:, 1].tolist()}},
                "readout": {"text": f"θ = {degrees}°, |q| = {ell:g}: output ({_fmt(out[0, 0])}, "
                                    f"{_fmt(out[0, 1])}); largest weight {_fmt(w.max())} on "
                                    f"{labels[int(w.argmax())]}"},
            })
    targets = {"query": query, "weights": weights, "output": output, "readout": readout}
    layout = column(theta, length, readout, _wrap(circle, bars, space),
                    sizing_mode="stretch_width")
    return _make(name, layout, [theta, length], targets, frames, [60 // 5, 1])


def head_explorer(maps: Sequence[torch.Tensor], query_labels: Sequence[Sequence[str]],
                  key_labels: Sequence[Sequence[str]] | None = None, *, name: str = "heads",
                  kind: str = "attention", start: tuple[int, int] = (0, 0)) -> Interactive:
    """Chapters 5 and 7: buttons pick a layer and a head, a menu one of the inputs; a heat map shows that head's
    weights, queries down and keys across, with a hover readout.

    Args:
        maps: per layer, the weights ``(batch, heads, n_q, n_k)`` (as ``attention_maps`` returns them).
        query_labels: per input (batch element), the ``n_q`` labels of its queries.
        key_labels: per input, the ``n_k`` labels of its keys; default ``query_labels`` (self-attention).
        name: the figure's id on its page; kind: what the maps are, for the title (e.g. "cross-attention").
        start: the (layer, head) the page opens on (a lab opens on the head its text discusses).
    """
    check_instance("maps", maps, (list, tuple))
    if not maps:
        raise ValueError("maps must hold at least one layer, got none")
    for i, m in enumerate(maps):
        check_instance(f"maps[{i}]", m, torch.Tensor)
        if m.ndim != 4 or m.shape != maps[0].shape:
            raise ValueError(f"maps must be layers of one shape (batch, heads, n_q, n_k), got {describe(m)} at "
                             f"layer {i} and {describe(maps[0])} at layer 0")
        if not m.is_floating_point() or not bool(torch.isfinite(m).all()) or m.min() < 0 or m.max() > 1 + 1e-6:
            raise ValueError(f"maps must hold attention weights (finite, in [0, 1]), got {describe(m)} at layer {i}")
    batch, heads, n_q, n_k = maps[0].shape
    key_labels = query_labels if key_labels is None else key_labels
    for arg, labels, n in (("query_labels", query_labels, n_q), ("key_labels", key_labels, n_k)):
        check_instance(arg, labels, (list, tuple))
        if len(labels) != batch or any(len(x) != n for x in labels):
            raise ValueError(f"{arg} must give {n} labels for each of the {batch} inputs, got lengths "
                             f"{[len(x) for x in labels]}")
        if not all(isinstance(t, str) for x in labels for t in x):
            raise TypeError(f"{arg} must be strings (a token's text), got {describe(labels)}")
    name = _check_name(name)
    check_instance("kind", kind, str)
    check_instance("start", start, tuple)
    if len(start) != 2:
        raise ValueError(f"start must be a (layer, head) pair, got {start!r}")
    first_layer = check_int("start", start[0], low=0, high=len(maps) - 1)
    first_head = check_int("start", start[1], low=0, high=heads - 1)
    layer = RadioButtonGroup(labels=[f"layer {i}" for i in range(len(maps))], active=first_layer,
                             name=f"{name}:layer")
    head = RadioButtonGroup(labels=[f"head {h}" for h in range(heads)], active=first_head, name=f"{name}:head")
    # the menu names each input by its keys: the text itself in self-attention, the source in cross-attention
    inputs = ["".join(x) if len("".join(x)) <= 60 else "".join(x)[:57] + "…" for x in key_labels]
    inputs = [f"{i + 1}: {s}" for i, s in enumerate(inputs)]
    which = Select(options=inputs, value=inputs[0], title="input", sizing_mode="stretch_width", name=f"{name}:input")
    side = max(320, min(620, 18 * max(n_q, n_k)))
    p = _plot(kind, x_range=(-0.5, n_k - 0.5), y_range=(n_q - 0.5, -0.5), height=side,
              x_axis_location="above")
    p.title.name = f"{name}:title"
    p.xaxis.visible = p.yaxis.visible = False
    p.grid.visible = False
    cells = ColumnDataSource({"i": [], "j": [], "w": [], "q": [], "k": []}, name=f"{name}:cells")
    mapper = LinearColorMapper(palette="Blues256", low=1.0, high=0.0)  # reversed: 0 white, 1 dark blue
    p.rect(x="j", y="i", width=1, height=1, source=cells, line_color=None,
           fill_color={"field": "w", "transform": mapper})
    p.add_tools(HoverTool(tooltips=[("query", "@q"), ("key", "@k"), ("weight", "@w{0.000}")]))
    p.add_layout(ColorBar(color_mapper=mapper, width=10, title="weight"), "right")
    ticks = ColumnDataSource({"x": [], "y": [], "t": []}, name=f"{name}:ticks")
    p.text(x="x", y="y", text="t", source=ticks, text_font_size="8pt", text_align="center",
           text_baseline="middle", color="#333333")
    p.x_range.start, p.y_range.end = -1.5, -1.5  # room for the labels
    frames = []
    ii, jj = np.meshgrid(np.arange(n_q), np.arange(n_k), indexing="ij")
    for lyr in range(len(maps)):
        for h in range(heads):
            for b in range(batch):
                w = maps[lyr][b, h].detach().to("cpu", torch.float64)
                ql, kl = list(query_labels[b]), list(key_labels[b])
                frames.append({
                    "cells": {"data": {"i": ii.ravel().tolist(), "j": jj.ravel().tolist(),
                                       "w": [round(x, 3) for x in w.ravel().tolist()],
                                       "q": [ql[i] for i in ii.ravel()], "k": [kl[j] for j in jj.ravel()]}},
                    "ticks": {"data": {"x": [-1] * n_q + list(range(n_k)), "y": list(range(n_q)) + [-1] * n_k,
                                       "t": ql + kl}},
                    "title": {"text": f"{kind}: layer {lyr}, head {h}"},
                })
    targets = {"cells": cells, "ticks": ticks, "title": p.title}
    layout = column(_wrap(layer, head), which, p, sizing_mode="stretch_width")
    return _make(name, layout, [layer, head, which], targets, frames, [first_layer, first_head, 0])


def online_softmax_explorer(scores: Sequence[float] | None = None, values: Sequence[float] | None = None,
                            block: int = 4, *, name: str = "online") -> Interactive:
    r"""Chapter 6: a slider walks the key tiles of one query's online softmax (:func:`tiled_attention_steps`,
    ``block`` keys a tile). Bars: the scores, coloured once their tile is read; a line: the running max m; text:
    the running sum ℓ, the factor :math:`e^{m_\text{old}-m_\text{new}}` that rescales what came before, and the
    output so far :math:`\mathrm{acc}/\ell` against the exact one.

    ``scores`` and ``values``: one per key (default: 24 scores that raise the max in later tiles, seeded values).
    """
    if scores is None:
        g = torch.Generator().manual_seed(3)
        s = torch.randn(24, generator=g, dtype=torch.float64) + 0.12 * torch.arange(24, dtype=torch.float64)
    else:
        s = torch.tensor(check_numbers("scores", scores), dtype=torch.float64)
    if values is None:
        g = torch.Generator().manual_seed(4)
        v = torch.rand(len(s), generator=g, dtype=torch.float64) * 4 - 2
    else:
        v = torch.tensor(check_numbers("values", values), dtype=torch.float64)
    if len(s) < 2 or len(v) != len(s):
        raise ValueError(f"scores and values must be two or more, one value per score; got {len(s)} scores and "
                         f"{len(v)} values")
    block = check_int("block", block, low=1, high=len(s))
    name = _check_name(name)
    n = len(s)
    # one query, d_k = 1, q = 1 and k_j = s_j: the scores are s; scale 1
    steps = list(tiled_attention_steps(torch.ones(1, 1, dtype=torch.float64), s[:, None], v[:, None],
                                       scale=1.0, block_q=1, block_k=block))
    exact, _ = scaled_dot_product_attention(torch.ones(1, 1, dtype=torch.float64), s[:, None], v[:, None],
                                            scale=1.0)
    exact = float(exact[0, 0])
    slider = Slider(start=0, end=len(steps), step=1, value=0, title="tiles read", sizing_mode="stretch_width",
                    name=f"{name}:step")
    readout = Div(styles={"font-size": "0.95em"}, name=f"{name}:readout")
    lo, hi = min(0.0, float(s.min())) - 0.5, float(s.max()) + 0.8
    p = _plot("", x_range=(-0.6, n - 0.4), y_range=(lo, hi), height=300, x_axis_label="key",
              y_axis_label="score")
    p.title.name = f"{name}:title"
    bars = ColumnDataSource({"key": [], "score": [], "color": []}, name=f"{name}:bars")
    p.vbar(x="key", top="score", bottom=0, width=0.8, color="color", source=bars)  # from 0: a negative score shows
    running = ColumnDataSource({"x": [], "y": []}, name=f"{name}:max")
    p.line(x="x", y="y", color=PALETTE[3], line_width=2, line_dash="dashed", source=running)
    for j in range(block, n, block):
        p.line([j - 0.5, j - 0.5], [lo, hi], color="#888888", line_width=1.5, line_dash="dotted")
    frames = []
    prev_m = -math.inf
    for t in range(len(steps) + 1):
        seen = steps[t - 1].k_stop if t else 0
        colors = [PALETTE[0] if j < seen else "#dddddd" for j in range(n)]
        if t:
            state = steps[t - 1].state
            m, ell = float(state.m[0]), float(state.l[0])
            so_far = float(state_output(state)[0, 0])
            alpha = math.exp(prev_m - m) if t > 1 else 0.0
            what = (f"tile {t}: keys {steps[t - 1].k_start}–{seen - 1}. "
                    + (f"The max rose from {prev_m:.2f} to {m:.2f}, so ℓ and acc so far were multiplied by "
                       f"e^({prev_m:.2f} − {m:.2f}) = {alpha:.3f}. " if t > 1 and m > prev_m else
                       "The max stayed, nothing is rescaled. " if t > 1 else "The first tile sets m. ")
                    + f"m = {m:.2f}, ℓ = {ell:.3f}, output so far acc/ℓ = {so_far:.3f} (exact: {exact:.3f})")
            prev_m = m
            line = {"x": [-0.6, seen - 0.5], "y": [m, m]}
        else:
            what = f"no tile read yet: m = −∞, ℓ = 0, acc = 0 (the exact output is {exact:.3f})"
            line = {"x": [], "y": []}
        frames.append({"bars": {"data": {"key": list(range(n)), "score": s.tolist(), "color": colors}},
                       "max": {"data": line}, "readout": {"text": what},
                       "title": {"text": f"tiles of {block} keys: {seen} of {n} read"}})
    targets = {"bars": bars, "max": running, "readout": readout, "title": p.title}
    layout = column(slider, readout, p, sizing_mode="stretch_width")
    return _make(name, layout, [slider], targets, frames, [0])
