"""positional.py: the paper's sinusoidal encoding (values, the rotation property) and RoPE (norms, relative
positions), with their errors."""

from __future__ import annotations

import math

import pytest
import torch

from attention_course.positional import SinusoidalPositionalEncoding, apply_rope, rope_angles, sinusoidal_encoding


def test_sinusoidal_values_match_the_paper_formula():
    pe = sinusoidal_encoding(50, 16, dtype=torch.float64)
    assert pe.shape == (50, 16)
    for p in (0, 1, 7, 49):
        for i in range(8):
            w = 10000 ** (-2 * i / 16)
            assert math.isclose(pe[p, 2 * i], math.sin(p * w), abs_tol=1e-12)
            assert math.isclose(pe[p, 2 * i + 1], math.cos(p * w), abs_tol=1e-12)
    torch.testing.assert_close(sinusoidal_encoding(5, 16, offset=10, dtype=torch.float64), pe[10:15])


def test_sinusoidal_shift_is_a_rotation_independent_of_position():
    d, k = 8, 3
    pe = sinusoidal_encoding(40, d, dtype=torch.float64)
    blocks = []
    for i in range(d // 2):
        a = k * 10000 ** (-2 * i / d)
        blocks.append(torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64))
    rot = torch.block_diag(*blocks)  # acts on row vectors from the right
    torch.testing.assert_close(pe[:-k] @ rot, pe[k:], atol=1e-12, rtol=0)


def test_sinusoidal_module_adds_and_checks():
    mod = SinusoidalPositionalEncoding(8, max_len=10)
    x = torch.zeros(2, 4, 8)
    torch.testing.assert_close(mod(x), sinusoidal_encoding(4, 8).expand(2, 4, 8))
    torch.testing.assert_close(mod(x, offset=3)[0], sinusoidal_encoding(4, 8, offset=3))
    assert "pe" not in mod.state_dict()
    with pytest.raises(ValueError, match="max_len=10"):
        mod(torch.zeros(1, 11, 8))
    with pytest.raises(ValueError, match=r"d_model=8"):
        mod(torch.zeros(1, 3, 6))
    with pytest.raises(ValueError, match="even"):
        sinusoidal_encoding(4, 7)


def test_rope_rotates_pairs_preserves_norms_and_depends_on_relative_position():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 12, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 12, 8, generator=gen, dtype=torch.float64)
    rq = apply_rope(q)
    torch.testing.assert_close(apply_rope(k).norm(dim=-1), k.norm(dim=-1))
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1))
    torch.testing.assert_close(rq[:, 0], q[:, 0])  # position 0: no rotation
    # the first pair at position 3 is rotated by 3 radians (theta_0 = 1)
    c, s = math.cos(3), math.sin(3)
    torch.testing.assert_close(rq[0, 3, :2], torch.stack([q[0, 3, 0] * c - q[0, 3, 1] * s,
                                                          q[0, 3, 0] * s + q[0, 3, 1] * c]))
    # the same vectors at positions (m, n) and (m + 5, n + 5) score the same
    x, y = q[0, 0], k[0, 0]
    pos = torch.arange(12)
    qs, ks = apply_rope(x.expand(12, 8), positions=pos), apply_rope(y.expand(12, 8), positions=pos)
    scores = qs @ ks.T  # scores[m, n]
    torch.testing.assert_close(torch.diagonal(scores, 2)[:-5], torch.diagonal(scores, 2)[5:])
    assert not torch.allclose(scores[0, 0], scores[0, 3])  # but they do depend on the offset
    assert rope_angles(4, 8).shape == (4, 4)


def test_rope_errors():
    with pytest.raises(TypeError, match="floating-point"):
        apply_rope(torch.ones(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(\.\.\., n, d\)"):
        apply_rope(torch.ones(4))
    with pytest.raises(ValueError, match="even"):
        apply_rope(torch.ones(3, 5))
    with pytest.raises(ValueError, match=r"positions must have shape \(n,\)"):
        apply_rope(torch.ones(3, 4), positions=torch.arange(4))


def test_edges_empty_and_low_precision():
    """Empty inputs give empty outputs; float16/bfloat16 come back in their own dtype, close to float32."""
    assert sinusoidal_encoding(0, 4).shape == (0, 4)
    assert rope_angles(0, 4).shape == (0, 2) and rope_angles(3, 0).shape == (3, 0)
    for shape in [(2, 0, 4), (0, 3, 4), (2, 3, 0)]:
        x = torch.randn(shape)
        assert torch.equal(apply_rope(x), x)
    pe = SinusoidalPositionalEncoding(4, max_len=8)
    assert pe(torch.zeros(2, 0, 4)).shape == (2, 0, 4)
    x = torch.randn(2, 5, 8)
    for dtype in (torch.float16, torch.bfloat16):
        out = apply_rope(x.to(dtype))
        assert out.dtype == dtype
        torch.testing.assert_close(out.float(), apply_rope(x), atol=2e-2, rtol=2e-2)
        assert pe(x[..., :4].to(dtype)).dtype == dtype
    assert pe(x[..., :4].double()).dtype == torch.float64
