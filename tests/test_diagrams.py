"""diagrams.py: each diagram says what its chapter needs it to say (its labels are ax.texts), draws on given axes,
stays on its canvas, and refuses bad arguments by name."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from attention_course import diagrams  # noqa: E402

DIAGRAMS = [diagrams.softmax_shapes, diagrams.factor_product, diagrams.stacked_heads, diagrams.multihead_split,
            diagrams.encoder_decoder, diagrams.tiled_pass, diagrams.kv_cache_step, diagrams.gpt_block]


def _texts(ax) -> str:
    return "\n".join(t.get_text() for t in ax.texts)


@pytest.mark.parametrize("draw", DIAGRAMS, ids=lambda f: f.__name__)
def test_each_diagram_draws_on_given_axes_and_fits_its_own_figure(draw):
    fig, (other, ax) = plt.subplots(1, 2)
    assert draw(ax) is ax and not other.texts and not other.patches
    assert not ax.axison and ax.texts and ax.patches
    plt.close(fig)
    ax = draw()  # at the size it chooses, every label inside the drawing's frame
    ax.figure.canvas.draw()
    canvas = ax.get_window_extent()
    for text in ax.texts:
        box = text.get_window_extent()
        assert box.x0 >= canvas.x0 - 2 and box.x1 <= canvas.x1 + 2, text.get_text()
        assert box.y0 >= canvas.y0 - 2 and box.y1 <= canvas.y1 + 2, text.get_text()
    plt.close(ax.figure)


def test_softmax_shapes_takes_the_softmax_over_each_row_and_shows_the_wrong_axis():
    ax = diagrams.softmax_shapes()
    texts = _texts(ax)
    assert "softmax over\neach row" in texts and "rows\nsum to 1" in texts and "wrong: down the columns" in texts
    assert "$n_q \\times n_k$" in texts and "$n_k \\times d_v$" in texts
    plt.close(ax.figure)


def test_factor_product_is_two_thin_factors_and_a_square_of_rank_at_most_d_k():
    ax = diagrams.factor_product()
    texts = _texts(ax)
    assert "$W_i^Q$" in texts and "${W_i^K}^\\top$" in texts and "rank $\\leq d_k$" in texts
    (wq, wkt, product) = (p.get_bbox() for p in ax.patches)
    assert wq.height == pytest.approx(wkt.width) == product.width == product.height  # d_model
    assert wq.width == pytest.approx(wkt.height) and wq.width < wq.height  # d_k, thinner
    plt.close(ax.figure)


@pytest.mark.parametrize("heads", [2, 5])
def test_stacked_heads_is_one_block_of_columns_per_head(heads):
    ax = diagrams.stacked_heads(heads=heads)
    assert len(ax.patches) == heads and f"$h$ = {heads}" in _texts(ax)
    assert [t.get_text() for t in ax.texts].count("$d_k$") == heads
    plt.close(ax.figure)


@pytest.mark.parametrize("heads", [2, 4, 6])
def test_multihead_split_draws_one_box_per_head_and_w_o(heads):
    ax = diagrams.multihead_split(heads=heads)
    texts = _texts(ax)
    assert [f"head {i}:" in texts for i in range(1, 8)] == [i <= heads for i in range(1, 8)]
    assert "$\\times W^O$" in texts and "concatenate" in texts and f"$h = {heads}$" in texts
    plt.close(ax.figure)


def test_encoder_decoder_wires_cross_attention_queries_from_the_decoder():
    ax = diagrams.encoder_decoder()
    texts = _texts(ax)
    assert "queries from the decoder" in texts and "values from\nthe encoder" in texts
    assert "$Q = xW^Q$,  $K = MW^K$,  $V = MW^V$" in texts
    plt.close(ax.figure)


def test_kv_cache_step_appends_one_row_and_reads_the_rest():
    ax = diagrams.kv_cache_step(cached=5)
    texts = _texts(ax)
    assert "cached rows: positions 0 to 4" in texts and "all 6 keys" in texts and "appended" in texts
    assert "new token $x_{5}$" in texts and "$q_{5}$" in texts
    cells = [p for p in ax.patches if isinstance(p, matplotlib.patches.Rectangle)
             and not isinstance(p, matplotlib.patches.FancyBboxPatch)]
    assert len(cells) == 12  # 6 keys and 6 values
    assert sum(p.get_facecolor() == matplotlib.colors.to_rgba(diagrams.FILL["new"]) for p in cells) == 2
    plt.close(ax.figure)


def test_gpt_block_is_pre_layer_norm_on_a_residual_stream():
    ax = diagrams.gpt_block()
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("LayerNorm") == 2 and texts.count("+") == 2
    assert any("causal self-attention" in t for t in texts) and any("tied" in t for t in texts)
    plt.close(ax.figure)


@pytest.mark.parametrize(("call", "error"), [
    (lambda: diagrams.multihead_split(heads=1), ValueError),
    (lambda: diagrams.multihead_split(heads=2.5), TypeError),
    (lambda: diagrams.stacked_heads(heads=7), ValueError),
    (lambda: diagrams.kv_cache_step(cached=10), ValueError),
    (lambda: diagrams.gpt_block(ax="axes"), TypeError),
])
def test_bad_arguments_are_named(call, error):
    with pytest.raises(error, match="heads|cached|ax"):
        call()
    plt.close("all")


def test_every_diagram_in_the_book_has_alt_text():
    """A diagram is a picture of an idea: a reader who cannot see it gets its description (mystnb image.alt, which
    the site writes into the img tag)."""
    import json
    from pathlib import Path

    found = []
    for path in sorted((Path(__file__).resolve().parents[1] / "book").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and ("diagrams." in source or "qkv_schematic(" in source):
                alt = cell["metadata"].get("mystnb", {}).get("image", {}).get("alt", "")
                found.append((path.name, len(alt.split())))
    assert len(found) >= 8, found
    assert all(words >= 15 for _, words in found), found


def test_every_diagram_is_drawn_by_a_lesson_that_refers_to_it():
    """Each diagram function is drawn in a lesson (not a lab), in a figure cell whose name the lesson's text links
    to: a diagram no lesson shows, or one the text never points to, is not doing its job."""
    import json
    import re
    from pathlib import Path

    drawn = {}
    for path in sorted((Path(__file__).resolve().parents[1] / "book").glob("0*.ipynb")):
        if path.stem.endswith("_lab"):
            continue
        cells = json.loads(path.read_text())["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        for cell in cells:
            name = cell["metadata"].get("mystnb", {}).get("figure", {}).get("name")
            for fn in re.findall(r"diagrams\.(\w+)\(", "".join(cell["source"])):
                drawn[fn] = (path.name, name, bool(name) and f"(#{name})" in text)
    expected = [f.__name__ for f in DIAGRAMS]
    assert sorted(drawn) == sorted(expected), (sorted(drawn), expected)
    assert all(linked for _, _, linked in drawn.values()), drawn


def test_tiled_pass_reads_one_tile_into_the_running_state_and_writes_the_output_once():
    ax = diagrams.tiled_pass(tiles=5, current=3)
    texts = _texts(ax)
    assert all(f"$K_{j}$" in texts and f"$V_{j}$" in texts for j in range(1, 6)) and "$K_6$" not in texts
    assert "this step" in texts and "merge, then\nforget the tile" in texts
    assert "written once" in texts and "$O_i = \\mathrm{acc}/\\ell$" in texts
    assert "e^{m_\\mathrm{old} - m}" in texts  # the rescaling of ℓ and acc
    plt.close(ax.figure)
