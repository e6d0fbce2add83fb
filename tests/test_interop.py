"""interop.py: conversions between the package's modules and PyTorch's, both ways, and what they refuse."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attention_course import layers, seq2seq
from attention_course.interop import from_torch, to_torch
from attention_course.multihead import MultiHeadAttention

TOL = {torch.float64: dict(atol=1e-10, rtol=1e-8)}


def test_to_torch_round_trip():
    torch.manual_seed(14)
    ours = MultiHeadAttention(16, 2, batch_first=True, kdim=6, vdim=10, dtype=torch.float64)
    back = to_torch(ours)
    assert isinstance(back, nn.MultiheadAttention) and back.batch_first
    gen = torch.Generator().manual_seed(15)
    q, k, v = (torch.randn(2, 3, d, generator=gen, dtype=torch.float64) for d in (16, 6, 10))
    torch.testing.assert_close(ours(q, k, v)[0], back(q, k, v)[0], **TOL[torch.float64])


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        (nn.MultiheadAttention(16, 4, batch_first=True), MultiHeadAttention),
        (nn.TransformerEncoderLayer(16, 4, 24, norm_first=True), layers.TransformerEncoderLayer),
        (nn.TransformerDecoderLayer(16, 4, 24, activation="gelu"), layers.TransformerDecoderLayer),
        (nn.Transformer(16, 4, 1, 2, 24, batch_first=True), seq2seq.Transformer),
    ],
    ids=["mha", "encoder-layer", "decoder-layer", "transformer"],
)
def test_from_torch_gives_the_matching_class_with_the_same_weights(reference, expected):
    ours = from_torch(reference)
    assert type(ours) is expected
    theirs = reference.state_dict()
    assert ours.state_dict().keys() == theirs.keys()
    assert all(torch.equal(p, theirs[name]) for name, p in ours.state_dict().items())


def test_from_torch_and_to_torch_refuse_what_they_cannot_convert():
    with pytest.raises(TypeError, match="got Linear"):
        from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="add_bias_kv"):
        from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(ValueError, match="grouped-query"):
        to_torch(MultiHeadAttention(8, 2, num_kv_heads=1))
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        to_torch(nn.MultiheadAttention(8, 2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_conversions_keep_dtype_and_device(dtype):
    """A copy lives where the original does, in its dtype: here on the meta device (no memory, no data)."""
    for module in (nn.MultiheadAttention(16, 4, dtype=dtype, device="meta"),
                   nn.TransformerEncoderLayer(16, 4, 24, dtype=dtype, device="meta")):
        ours = from_torch(module)
        assert {(p.dtype, p.device.type) for p in ours.parameters()} == {(dtype, "meta")}
    back = to_torch(MultiHeadAttention(16, 4, dtype=dtype, device="meta"))
    assert {(p.dtype, p.device.type) for p in back.parameters()} == {(dtype, "meta")}


def test_from_torch_refuses_a_transformer_with_custom_stacks():
    custom = nn.Transformer(16, 4, 1, 1, 24, custom_encoder=nn.Identity(), custom_decoder=nn.Identity())
    with pytest.raises(TypeError, match="got Identity and Identity"):
        from_torch(custom)


def test_from_torch_keeps_the_modules_mode():
    """An evaluation-mode module converts to an evaluation-mode module (else its dropout would be on)."""
    import torch
    from torch import nn

    from attention_course.interop import from_torch

    source = nn.MultiheadAttention(8, 2, batch_first=True, dropout=0.5)
    assert from_torch(source).training
    assert not from_torch(source.eval()).training
    x = torch.randn(2, 3, 8)
    ours = from_torch(source)
    torch.testing.assert_close(ours(x, x, x)[0], source(x, x, x)[0])
