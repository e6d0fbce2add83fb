"""Property test: MultiHeadAttention equals torch.nn.MultiheadAttention on random shapes, masks and settings.

Hypothesis draws the sizes (batch 0 and unbatched inputs, zero queries, zero keys included), the heads (grouped-query
attention too: compared with PyTorch's module holding every key/value head repeated for its query heads, which is
what grouped-query attention computes), ``kdim``/``vdim``, bias, layout, ``need_weights``, ``average_attn_weights``,
``is_causal``, the dtype (float32, float64) and random key-padding and attention masks, which often leave a query
with no key at all.

PyTorch's answers, and the package's choice where they differ (installed PyTorch, CPU):

* A query that may attend to no key (every key masked): ``nn.MultiheadAttention`` returns a zero attention output
  with ``need_weights=False`` (its fused kernel), but NaN outputs and NaN weights with ``need_weights=True``. The
  package returns the fused answer, zeros (so ``out_proj``'s bias), and zero weights, on both paths: a padded row
  must not turn a loss or a gradient into NaN. The test checks all three facts.
* Zero keys (``n_k = 0``) or batch 0 with a key-padding mask or a per-head attention mask: PyTorch's fused path
  raises (it reshapes an empty mask with ``-1``); its explicit path answers, and the package gives that answer on
  both paths (empty results; zero attention outputs for ``n_k = 0``).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attention_course.interop import from_torch, to_torch
from attention_course.multihead import MultiHeadAttention

TOL = {torch.float32: dict(atol=2e-5, rtol=1e-4), torch.float64: dict(atol=1e-10, rtol=1e-8)}
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # PyTorch's notices about mask types


@st.composite
def settings_(draw) -> dict:
    num_heads = draw(st.sampled_from([1, 2, 3, 4]))
    batch = draw(st.sampled_from([None, 0, 1, 2, 3]))  # None: unbatched (n, features) inputs
    inputs = draw(st.sampled_from(["self-attention", "shared key/value", "distinct", "kdim/vdim"]))
    n_q = draw(st.integers(0, 4))
    n_k = n_q if inputs == "self-attention" else draw(st.integers(0, 4))
    separate_kv = inputs == "kdim/vdim"
    return dict(
        num_heads=num_heads,
        num_kv_heads=draw(st.sampled_from([h for h in range(1, num_heads + 1) if num_heads % h == 0])),
        head_dim=draw(st.integers(1, 3)),
        kdim=draw(st.integers(1, 5)) if separate_kv else None,
        vdim=draw(st.integers(1, 5)) if separate_kv else None,
        bias=draw(st.booleans()),
        batch_first=draw(st.booleans()),
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        batch=batch,
        n_q=n_q,
        n_k=n_k,
        self_attention=inputs == "self-attention",  # query is key is value: one projection for all three
        shared_kv=inputs == "shared key/value",  # key is value: one projection for both
        key_mask=draw(st.sampled_from([None, 0.0, 0.5, 0.8, 1.0])),  # the probability that a key is real
        attn_mask=draw(st.sampled_from([None, "2d", "4d"])),
        attn_keep=draw(st.sampled_from([0.0, 0.5, 0.8])),
        is_causal=draw(st.booleans()),
        need_weights=draw(st.booleans()),
        average=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
    )


def _modules(s: dict) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    """The package's module and PyTorch's, holding the same weights (biases made non-zero so they count)."""
    embed_dim = s["num_heads"] * s["head_dim"]
    options = dict(bias=s["bias"], batch_first=s["batch_first"], kdim=s["kdim"], vdim=s["vdim"], dtype=s["dtype"])
    torch.manual_seed(s["seed"])
    if s["num_kv_heads"] == s["num_heads"]:  # PyTorch's module first, copied with from_torch
        ref = nn.MultiheadAttention(embed_dim, s["num_heads"], **options).eval()
        _randomise_biases(ref)
        return from_torch(ref).eval(), ref
    ours = MultiHeadAttention(embed_dim, s["num_heads"], num_kv_heads=s["num_kv_heads"], **options).eval()
    _randomise_biases(ours)
    return ours, to_torch(_every_head(ours)).eval()


def _randomise_biases(module: nn.Module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            if p.ndim == 1:
                p.normal_()


def _every_head(gqa: MultiHeadAttention) -> MultiHeadAttention:
    """Standard multi-head attention equal to ``gqa``: each key/value head repeated for the query heads it serves."""
    full = MultiHeadAttention(gqa.embed_dim, gqa.num_heads, bias=gqa.in_proj_bias is not None,
                              batch_first=gqa.batch_first, kdim=gqa.kdim, vdim=gqa.vdim,
                              dtype=gqa.out_proj.weight.dtype)
    group = gqa.num_heads // gqa.num_kv_heads

    def repeat(t: torch.Tensor) -> torch.Tensor:
        return t.unflatten(0, (gqa.num_kv_heads, gqa.head_dim)).repeat_interleave(group, dim=0).flatten(0, 1)

    w_q, w_k, w_v = gqa.in_projections()
    with torch.no_grad():
        if full.in_proj_weight is not None:
            full.in_proj_weight.copy_(torch.cat([w_q, repeat(w_k), repeat(w_v)]))
        else:
            full.q_proj_weight.copy_(w_q), full.k_proj_weight.copy_(repeat(w_k)), full.v_proj_weight.copy_(repeat(w_v))
        if gqa.in_proj_bias is not None:
            b_q, b_k, b_v = gqa.in_proj_bias.split([gqa.embed_dim, gqa.kv_dim, gqa.kv_dim])
            full.in_proj_bias.copy_(torch.cat([b_q, repeat(b_k), repeat(b_v)]))
        full.out_proj.load_state_dict(gqa.out_proj.state_dict())
    return full


def _inputs(s: dict, gen: torch.Generator, ours: MultiHeadAttention):
    """query, key, value in the module's layout, and the masks in the package's sense (True = may attend)."""
    b = 1 if s["batch"] is None else s["batch"]
    kdim, vdim = s["kdim"] or ours.embed_dim, s["vdim"] or ours.embed_dim

    def seq(n: int, d: int) -> torch.Tensor:
        x = torch.randn(b, n, d, generator=gen, dtype=s["dtype"])
        if s["batch"] is None:
            return x[0]
        return x if s["batch_first"] else x.transpose(0, 1)

    query = seq(s["n_q"], ours.embed_dim)
    key = value = query if s["self_attention"] else seq(s["n_k"], kdim)
    if not s["self_attention"]:
        value = key if s["shared_kv"] else seq(s["n_k"], vdim)
    key_mask = attn_mask = None
    if s["key_mask"] is not None:
        key_mask = torch.rand(b, s["n_k"], generator=gen) < s["key_mask"]
    if s["attn_mask"] == "2d":
        attn_mask = torch.rand(s["n_q"], s["n_k"], generator=gen) < s["attn_keep"]
    elif s["attn_mask"] == "4d":
        attn_mask = torch.rand(b, ours.num_heads, s["n_q"], s["n_k"], generator=gen) < s["attn_keep"]
    return query, key, value, key_mask, attn_mask


def _allowed(s: dict, heads: int, key_mask, attn_mask) -> torch.Tensor:
    """What each query of each head may attend to, ``(batch, heads, n_q, n_k)``."""
    b, n_q, n_k = 1 if s["batch"] is None else s["batch"], s["n_q"], s["n_k"]
    allowed = torch.ones(b, heads, n_q, n_k, dtype=torch.bool)
    if key_mask is not None:
        allowed = allowed & key_mask[:, None, None, :]
    if attn_mask is not None:
        allowed = allowed & attn_mask
    if s["is_causal"]:
        allowed = allowed & torch.ones(n_q, n_k, dtype=torch.bool).tril()
    return allowed


def _batch_first(t: torch.Tensor, s: dict) -> torch.Tensor:
    """An output as ``(batch, n_q, embed_dim)`` whatever the layout."""
    if s["batch"] is None:
        return t[None]
    return t if s["batch_first"] else t.transpose(0, 1)


@settings(max_examples=300)
@given(settings_())
def test_multihead_attention_equals_torch(s):
    ours, ref = _modules(s)
    query, key, value, key_mask, attn_mask = _inputs(s, torch.Generator().manual_seed(s["seed"]), ours)
    allowed = _allowed(s, ours.num_heads, key_mask, attn_mask)
    # PyTorch's masks: True = ignore; is_causal is only a hint there, so the causal mask is given explicitly
    combined = attn_mask
    if s["is_causal"]:
        causal = torch.ones(s["n_q"], s["n_k"], dtype=torch.bool).tril()
        combined = causal if attn_mask is None else attn_mask & causal
    torch_mask = None if combined is None else ~(combined.flatten(0, 1) if combined.ndim == 4 else combined)
    if s["batch"] is None and key_mask is not None:
        key_mask = key_mask[0]  # unbatched: (n_k,)
    padding = None if key_mask is None else ~key_mask

    out, weights = ours(query, key, value, key_mask=key_mask, attn_mask=attn_mask, is_causal=s["is_causal"],
                        need_weights=s["need_weights"], average_attn_weights=s["average"])
    ref_out, ref_weights = ref(query, key, value, key_padding_mask=padding, attn_mask=torch_mask, need_weights=True,
                               average_attn_weights=s["average"])
    assert out.shape == ref_out.shape and out.dtype == s["dtype"]
    assert torch.isfinite(out).all()

    # PyTorch's explicit path: NaN exactly where a head's query may attend to no key; equal elsewhere
    dead = ~allowed.any(-1) if s["n_k"] else torch.zeros(allowed.shape[:3], dtype=torch.bool)  # (batch, h, n_q)
    row_dead = dead.any(1)  # (batch, n_q): a NaN in one head makes the whole output row NaN
    ours_rows, ref_rows = _batch_first(out, s), _batch_first(ref_out, s)
    assert torch.isnan(ref_rows[row_dead]).all()
    torch.testing.assert_close(ours_rows[~row_dead], ref_rows[~row_dead], **TOL[s["dtype"]])

    # PyTorch's fused path (zeros for a query without keys), wherever it answers: equal everywhere
    empty = s["batch"] == 0 or s["n_k"] == 0
    if not (empty and (padding is not None or (torch_mask is not None and torch_mask.ndim == 3))):
        fused, _ = ref(query, key, value, key_padding_mask=padding, attn_mask=torch_mask, need_weights=False)
        torch.testing.assert_close(out, fused, **TOL[s["dtype"]])
    elif s["n_k"] == 0 and s["batch"] != 0:  # no key at all: a zero attention output, out_proj's bias
        bias = ours.out_proj.bias if ours.out_proj.bias is not None else torch.zeros(ours.embed_dim, dtype=s["dtype"])
        torch.testing.assert_close(out, bias.expand_as(out), **TOL[s["dtype"]])

    if not s["need_weights"]:
        assert weights is None
        return
    assert weights.shape == ref_weights.shape and torch.isfinite(weights).all()
    w, w_ref = (t[None] if s["batch"] is None else t for t in (weights, ref_weights))  # (batch, [h,] n_q, n_k)
    if s["average"]:  # (batch, n_q, n_k): a row with a dead head is NaN in PyTorch's average
        torch.testing.assert_close(w[~row_dead], w_ref[~row_dead], **TOL[s["dtype"]])
    else:  # (batch, h, n_q, n_k): a dead query of a head gets zero weights, PyTorch's NaN
        assert torch.isnan(w_ref[dead]).all() and torch.all(w[dead] == 0)
        torch.testing.assert_close(w[~dead], w_ref[~dead], **TOL[s["dtype"]])
