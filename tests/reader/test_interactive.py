"""The interactive figures (attention_course.interactive) on the built site, moved as a reader moves them: in
Chromium, with no kernel and every request leaving the machine refused, in light and in dark mode.

For each figure the test moves every control through the page itself (a slider's handle with the arrow keys, a
button with a click, a menu by choosing an option), then checks that the control took the new position, that the
drawing changed (a screenshot of the figure before and after), and that what the page now shows is what the
package computes for that position: the softmax of the scores on the page divided by τ, the attention of the
query on the page, the running max and sum of the tiles read, a head's map whose rows sum to 1. The page must log
no console error and ask for nothing outside the machine.
"""

from __future__ import annotations

import inspect
import math
import re

import numpy as np
import pytest
import torch

from attention_course import attention_entropy, interactive, scaled_dot_product_attention, softmax

from .test_site import _visit

pytestmark = pytest.mark.reader

# page (relative to the site root) -> the figures on it
PAGES = {
    "book/01_soft_lookup.html": ["circle"],
    "book/02_scaling.html": ["temperature"],
    "book/06_at_scale.html": ["online"],
    "book/05_transformer_lab.html": ["cross-heads"],
    "book/07_gpt_lab.html": ["gpt-heads"],
}

_MODEL = """([name]) => {
  for (const d of Bokeh.documents) {
    const m = d.get_model_by_name(name);
    if (m) {
      const out = {};
      for (const attr of ["value", "active", "text"]) if (m[attr] !== undefined) out[attr] = m[attr];
      if (m.data !== undefined) {
        out.data = {};
        for (const [k, v] of Object.entries(m.data)) out.data[k] = Array.from(v);
      }
      return out;
    }
  }
  return null;
}"""


def _model(page, name: str) -> dict:
    got = page.evaluate(_MODEL, [name])
    assert got is not None, f"no Bokeh model named {name!r} on the page"
    return got


def _slide(page, fig: str, steps: int) -> None:
    handle = page.locator(f"#ac-{fig} .noUi-handle").first
    handle.focus()
    for _ in range(steps):
        page.keyboard.press("ArrowRight")


def _click(page, fig: str, label: str) -> None:
    page.locator(f"#ac-{fig} .bk-btn", has_text=re.compile(f"^{re.escape(label)}$")).first.click()


def _shot(page, fig: str) -> bytes:
    page.wait_for_timeout(300)  # Bokeh repaints on the next animation frame
    return page.locator(f"#ac-{fig}").screenshot()


def _circle(page) -> None:
    before = _shot(page, "circle")
    assert _model(page, "circle:angle")["value"] == 60
    _slide(page, "circle", 4)
    _click(page, "circle", "|q| = 8")
    assert _model(page, "circle:angle")["value"] == 80 and _model(page, "circle:length")["active"] == 3
    query = _model(page, "circle:query")["data"]
    q = torch.tensor([[query["qx"][0], query["qy"][0]]], dtype=torch.float64)
    assert np.allclose(q[0].numpy(), [8 * math.cos(math.radians(80)), 8 * math.sin(math.radians(80))], atol=1e-4)
    defaults = inspect.signature(interactive.circle_explorer).parameters
    keys = torch.tensor([[math.cos(math.radians(a)), math.sin(math.radians(a))]
                         for a in defaults["key_angles"].default], dtype=torch.float64)
    values = torch.tensor(defaults["values"].default, dtype=torch.float64)
    out, w = scaled_dot_product_attention(q, keys, values, scale=1.0)
    shown = _model(page, "circle:weights")["data"]
    assert np.allclose(shown["weight"], w[0].numpy(), atol=1e-4)
    assert np.allclose([float(x) for x in shown["text"]], (q @ keys.T)[0].numpy(), atol=0.006)
    output = _model(page, "circle:output")["data"]
    assert np.allclose([output["x"][0], output["y"][0]], out[0].numpy(), atol=1e-4)
    assert "θ = 80°, |q| = 8" in _model(page, "circle:readout")["text"]
    assert _shot(page, "circle") != before


def _temperature(page) -> None:
    before = _shot(page, "temperature")
    _slide(page, "temperature", 6)  # τ from 1 to 4 = √16
    assert _model(page, "temperature:tau")["value"] == 4.0
    for d in (16, 1024):
        bars = _model(page, f"temperature:bars{d}")["data"]
        expected = softmax(torch.tensor(bars["score"], dtype=torch.float64) / 4.0)
        assert np.allclose(bars["weight"], expected.numpy(), atol=1e-4), d
        title = _model(page, f"temperature:title{d}")["text"]
        assert title.startswith(f"d_k = {d}:") and f"entropy {float(attention_entropy(expected)):.2f}" in title
    assert "τ = √16" in _model(page, "temperature:readout")["text"]
    assert _shot(page, "temperature") != before


def _online(page) -> None:
    before = _shot(page, "online")
    _slide(page, "online", 3)
    assert _model(page, "online:step")["value"] == 3
    bars = _model(page, "online:bars")["data"]
    read = [s for s, c in zip(bars["score"], bars["color"], strict=True) if c != "#dddddd"]
    assert len(read) == 12  # three tiles of 4
    m = max(read)
    ell = sum(math.exp(s - m) for s in read)  # ℓ after the tiles read, from the definition
    text = _model(page, "online:readout")["text"]
    assert f"m = {m:.2f}" in text and f"ℓ = {ell:.3f}" in text, text
    assert text == interactive.online_softmax_explorer().frame(3)["readout"]["text"]
    assert _shot(page, "online") != before


def _heads(page, fig: str, causal: bool) -> None:
    before = _shot(page, fig)
    cells = _model(page, f"{fig}:cells")["data"]
    _click(page, fig, "layer 1")
    _click(page, fig, "head 2")
    page.locator(f"#ac-{fig} select").select_option(index=1)
    assert _model(page, f"{fig}:layer")["active"] == 1 and _model(page, f"{fig}:head")["active"] == 2
    assert _model(page, f"{fig}:input")["value"].startswith("2: ")
    assert _model(page, f"{fig}:title")["text"].endswith("layer 1, head 2")  # the frame those three positions pick
    now = _model(page, f"{fig}:cells")["data"]
    ticks = _model(page, f"{fig}:ticks")["data"]
    keys = "".join(t for t, y in zip(ticks["t"], ticks["y"], strict=True) if y == -1)  # the labels along the top
    assert keys.startswith(_model(page, f"{fig}:input")["value"].removeprefix("2: ").rstrip("…"))  # input 2's
    assert now["w"] != cells["w"]
    n_q, n_k = max(now["i"]) + 1, max(now["j"]) + 1
    w = np.array(now["w"]).reshape(n_q, n_k)
    assert np.allclose(w.sum(axis=1), 1, atol=n_k * 5e-4 + 1e-6)  # weights rounded to 3 decimals
    if causal:
        assert np.all(np.triu(w, 1) == 0)
    assert _shot(page, fig) != before


MOVES = {
    "circle": _circle,
    "temperature": _temperature,
    "online": _online,
    "cross-heads": lambda page: _heads(page, "cross-heads", causal=False),
    "gpt-heads": lambda page: _heads(page, "gpt-heads", causal=True),
}


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("rel", list(PAGES), ids=lambda r: r.split("/")[-1].removesuffix(".html"))
def test_each_figure_moves_offline(browser, site_url, rel, scheme):
    # test_site's page visit: network guarded, console errors collected, the page loaded
    context, page, errors, attempted = _visit(browser, f"{site_url}/{rel}", {"width": 1280, "height": 900}, scheme)
    try:
        figures = PAGES[rel]
        page.wait_for_function(f"() => window.Bokeh && Bokeh.documents.length >= {len(figures)}", timeout=30000)
        for fig in figures:
            page.locator(f"#ac-{fig}").scroll_into_view_if_needed()
            MOVES[fig](page)
    finally:
        context.close()
    assert not errors, errors
    assert not attempted, attempted
