"""The shared heatmap: what it draws, including empty matrices and tensors of any real dtype."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from attention_course.plots import attention_heatmap, qkv_schematic, use_style  # noqa: E402


def test_heatmap_draws_the_weights_and_labels():
    use_style()
    w = torch.tensor([[0.25, 0.75], [1.0, 0.0]], dtype=torch.bfloat16)
    ax = attention_heatmap(w, queries=["q0", "q1"], keys=["a", "b"])
    assert np.allclose(ax.images[0].get_array(), w.float().numpy())
    assert [t.get_text() for t in ax.texts] == ["0.25", "0.75", "1.00", "0.00"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
    plt.close(ax.figure)


def test_heatmap_of_an_empty_matrix_draws_empty_axes():
    for shape in [(0, 3), (2, 0)]:
        ax = attention_heatmap(np.zeros(shape))
        assert ax.images[0].get_array().shape == shape and not ax.texts
        plt.close(ax.figure)
    ax = attention_heatmap(np.zeros((0, 3)), vmax=None)
    plt.close(ax.figure)


def test_qkv_schematic_labels_the_flow_and_both_circuits():
    ax = qkv_schematic()
    texts = [t.get_text() for t in ax.texts]
    for label in (r"$\times W^Q$", r"$\times W^K$", r"$\times W^V$", r"$\times W^O$", "$AV$"):
        assert label in texts
    assert any(t.startswith("QK circuit") for t in texts) and any(t.startswith("OV circuit") for t in texts)
    assert any("one sequence" in t for t in texts) and not any("decoder" in t for t in texts)
    assert sum(isinstance(p, matplotlib.patches.FancyBboxPatch) and p.get_x() < 1 for p in ax.patches) == 1  # one input
    plt.close(ax.figure)
    fig, axes = plt.subplots(1, 2)
    assert qkv_schematic(axes[1], cross=True) is axes[1] and not axes[0].texts
    texts = [t.get_text() for t in axes[1].texts]
    assert any("decoder states" in t for t in texts) and any("encoder states" in t for t in texts)
    assert any("added to the decoder" in t for t in texts)
    plt.close(fig)
