"""Multi-head attention, fused and from scratch, with multi-/grouped-query attention (chapter 4).

Notation (the paper's, row vectors): head ``i`` computes ``Attention(X W_i^Q, X W_i^K, X W_i^V)``, where
``W_i^Q`` is the ``i``-th block of ``d_k`` *columns* of one ``d_model × d_model`` matrix ``W^Q``. Computing the
big product ``X W^Q`` once and reshaping it to ``(batch, heads, n, d_k)`` is the same as computing every head's
projection separately (chapter 4 proves it); the outputs are concatenated and multiplied by ``W^O``.

:class:`MultiHeadAttention` is built like :class:`torch.nn.MultiheadAttention` — same constructor, same parameter
names and layout (``in_proj_weight`` stacks the three projections, PyTorch orientation ``(out, in)``), so
:meth:`MultiHeadAttention.from_torch` copies a PyTorch module's weights directly — with two differences:

* **Masks follow the package convention: boolean, True = may attend** (as
  :func:`torch.nn.functional.scaled_dot_product_attention`). PyTorch's module uses the opposite sense for
  ``key_padding_mask`` and for boolean ``attn_mask`` (True = ignore); :func:`masks_from_torch` converts such
  masks, once, at that boundary. To make a mix-up impossible the padding argument is called ``key_mask``
  (True = a real key) and all masks are keyword-only. A query that may attend to no key gets zero weights and a
  zero attention output, never NaN.
* ``num_kv_heads`` (default ``num_heads``) gives grouped-query attention (Ainslie et al., 2023): the query heads
  are split into ``num_kv_heads`` groups and each group shares one key and one value head; ``num_kv_heads=1`` is
  multi-query attention (Shazeer, 2019). Query head ``i`` uses key/value head
  ``i // (num_heads // num_kv_heads)``, as ``F.scaled_dot_product_attention(..., enable_gqa=True)`` does.

Two computation paths give the same result (tested): with ``need_weights=False`` the module calls PyTorch's
fused ``F.scaled_dot_product_attention`` (the fast path); with ``need_weights=True`` it computes the scores,
the package's :func:`~attention_course.attention.softmax` and the weighted sum explicitly, and returns the
weights, averaged over heads or per head, like PyTorch's ``need_weights``/``average_attn_weights``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .attention import softmax
from .masks import from_torch_masks as masks_from_torch  # (moved to masks.py)

__all__ = ["MultiHeadAttention", "HeadWeights", "masks_from_torch", "split_heads", "merge_heads"]


class HeadWeights(NamedTuple):
    """Every head's projection matrices in the paper's orientation (``x @ W``), from
    :meth:`MultiHeadAttention.head_weights`.

    Attributes:
        w_q: ``(num_heads, embed_dim, d_k)``; ``w_q[i]`` is :math:`W_i^Q`.
        w_k: ``(num_kv_heads, kdim, d_k)``; ``w_k[j]`` is :math:`W_j^K`.
        w_v: ``(num_kv_heads, vdim, d_k)``; ``w_v[j]`` is :math:`W_j^V`.
        w_o: ``(num_heads, d_k, embed_dim)``; ``w_o[i]`` is :math:`W_i^O`, the rows of :math:`W^O` that head ``i``'s
            output multiplies.
    """

    w_q: torch.Tensor
    w_k: torch.Tensor
    w_v: torch.Tensor
    w_o: torch.Tensor


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(batch, n, num_heads·d_k) → (batch, num_heads, n, d_k)``: the column blocks of a fused projection.

    Block ``i`` of ``d_k`` columns of ``X W^Q`` is head ``i``'s ``X W_i^Q`` (chapter 4, §4.5). Returns a view.
    """
    if x.ndim != 3 or x.shape[-1] % num_heads:
        raise ValueError(
            f"expected (batch, n, num_heads·d_k) with the last dimension divisible by num_heads={num_heads}, "
            f"got shape {tuple(x.shape)}"
        )
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(batch, num_heads, n, d_k) → (batch, n, num_heads·d_k)``: Concat(head_1, …, head_h), the inverse of
    :func:`split_heads`."""
    if x.ndim != 4:
        raise ValueError(f"expected (batch, num_heads, n, d_k), got shape {tuple(x.shape)}")
    return x.transpose(1, 2).flatten(2)


class MultiHeadAttention(nn.Module):
    r"""Multi-head attention :math:`\operatorname{Concat}(\text{head}_1,\dots,\text{head}_h)\,W^O` (chapter 4).

    Args:
        embed_dim: :math:`d_\text{model}`, the width of queries and of the output.
        num_heads: :math:`h`; must divide ``embed_dim``; each head has :math:`d_k = d_v = d_\text{model}/h`.
        dropout: dropout probability on the attention weights (training mode only).
        bias: add biases to the input and output projections.
        batch_first: inputs and outputs are ``(batch, n, features)``; otherwise ``(n, batch, features)``
            (PyTorch's default). Unbatched ``(n, features)`` inputs are accepted either way.
        kdim, vdim: widths of the key and value inputs (default ``embed_dim``), e.g. for cross-attention to a
            memory of another width.
        num_kv_heads: number of key/value heads; must divide ``num_heads``. Default ``num_heads`` (standard
            multi-head attention); 1 is multi-query attention, values in between grouped-query attention.
        device, dtype: where and in which dtype to create the parameters.

    Parameters (PyTorch's names and ``(out_features, in_features)`` layout; the paper's :math:`W^Q` is the
    transpose of the query block): ``in_proj_weight`` of shape ``(embed_dim + 2·num_kv_heads·d_k, embed_dim)`` when
    ``kdim == vdim == embed_dim``, otherwise ``q_proj_weight``, ``k_proj_weight``, ``v_proj_weight``; ``in_proj_bias``
    of shape ``(embed_dim + 2·num_kv_heads·d_k,)``; ``out_proj`` (an ``nn.Linear(embed_dim, embed_dim)``).
    Self-attention (``query is key is value``) projects with one fused matrix product; cross-attention projects
    the query and the key/value inputs separately.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        batch_first: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        num_kv_heads: int | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        kdim = embed_dim if kdim is None else kdim
        vdim = embed_dim if vdim is None else vdim
        for name, value in (("embed_dim", embed_dim), ("num_heads", num_heads), ("num_kv_heads", num_kv_heads),
                            ("kdim", kdim), ("vdim", vdim)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads} (d_k = embed_dim/h)")
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must be divisible by num_kv_heads={num_kv_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        factory = {"device": device, "dtype": dtype}
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.kv_dim = num_kv_heads * self.head_dim
        self.kdim, self.vdim = kdim, vdim
        self.dropout, self.batch_first = float(dropout), bool(batch_first)
        self._qkv_same_embed_dim = kdim == embed_dim and vdim == embed_dim
        total = embed_dim + 2 * self.kv_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = nn.Parameter(torch.empty(total, embed_dim, **factory))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = nn.Parameter(torch.empty(embed_dim, embed_dim, **factory))
            self.k_proj_weight = nn.Parameter(torch.empty(self.kv_dim, kdim, **factory))
            self.v_proj_weight = nn.Parameter(torch.empty(self.kv_dim, vdim, **factory))
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(total, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.reset_parameters()

    # ----------------------------------------------------------------------------------------------- set-up
    def reset_parameters(self) -> None:
        """PyTorch's initialisation: Xavier-uniform input projections, zero biases, default ``out_proj``."""
        if self._qkv_same_embed_dim:
            nn.init.xavier_uniform_(self.in_proj_weight)
        else:
            nn.init.xavier_uniform_(self.q_proj_weight)
            nn.init.xavier_uniform_(self.k_proj_weight)
            nn.init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    def extra_repr(self) -> str:
        kv = "" if self.num_kv_heads == self.num_heads else f", num_kv_heads={self.num_kv_heads}"
        dims = "" if self._qkv_same_embed_dim else f", kdim={self.kdim}, vdim={self.vdim}"
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}{kv}{dims}, batch_first={self.batch_first}"

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """A :class:`MultiHeadAttention` holding a copy of ``module``'s weights (same device and dtype).

        Copies ``in_proj_weight`` (or ``q_proj_weight``/``k_proj_weight``/``v_proj_weight`` when ``kdim``/``vdim``
        differ from ``embed_dim``), ``in_proj_bias`` and ``out_proj``, and the settings ``dropout`` and
        ``batch_first``. Masks passed to the copy use the package convention (see :func:`masks_from_torch`).

        Raises:
            TypeError: ``module`` is not an ``nn.MultiheadAttention``.
            ValueError: it uses ``add_bias_kv`` or ``add_zero_attn``, which this class does not implement.
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(f"from_torch expects a torch.nn.MultiheadAttention, got {type(module).__name__}")
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError("add_bias_kv and add_zero_attn are not supported by MultiHeadAttention")
        ref = module.out_proj.weight
        new = cls(module.embed_dim, module.num_heads, dropout=module.dropout, bias=module.in_proj_bias is not None,
                  batch_first=module.batch_first, kdim=module.kdim, vdim=module.vdim, device=ref.device,
                  dtype=ref.dtype)
        names = ["in_proj_weight"] if module._qkv_same_embed_dim else ["q_proj_weight", "k_proj_weight",
                                                                        "v_proj_weight"]
        if module.in_proj_bias is not None:
            names.append("in_proj_bias")
        with torch.no_grad():
            for name in names:
                getattr(new, name).copy_(getattr(module, name))
            new.out_proj.weight.copy_(module.out_proj.weight)
            if module.out_proj.bias is not None:
                new.out_proj.bias.copy_(module.out_proj.bias)
        return new

    def to_torch(self) -> nn.MultiheadAttention:
        """The inverse of :meth:`from_torch`: an ``nn.MultiheadAttention`` with a copy of these weights.

        Raises:
            ValueError: grouped-query attention (``num_kv_heads < num_heads``) has no PyTorch module equivalent.
        """
        if self.num_kv_heads != self.num_heads:
            raise ValueError("nn.MultiheadAttention has no grouped-query form (num_kv_heads < num_heads)")
        ref = self.out_proj.weight
        mod = nn.MultiheadAttention(self.embed_dim, self.num_heads, dropout=self.dropout,
                                    bias=self.in_proj_bias is not None, batch_first=self.batch_first,
                                    kdim=self.kdim, vdim=self.vdim, device=ref.device, dtype=ref.dtype)
        with torch.no_grad():
            for name, p in self.named_parameters():
                mod.get_parameter(name).copy_(p)
        return mod

    # -------------------------------------------------------------------------------------------- inspection
    def in_projections(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(W_q, W_k, W_v)`` in PyTorch's ``(out, in)`` orientation (the paper's matrices transposed)."""
        if self._qkv_same_embed_dim:
            return tuple(self.in_proj_weight.split([self.embed_dim, self.kv_dim, self.kv_dim]))  # type: ignore[return-value]
        return self.q_proj_weight, self.k_proj_weight, self.v_proj_weight

    def _projection_biases(self) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        if self.in_proj_bias is None:
            return None, None, None
        return tuple(self.in_proj_bias.split([self.embed_dim, self.kv_dim, self.kv_dim]))  # type: ignore[return-value]

    def head_weights(self, dtype: torch.dtype | None = None) -> HeadWeights:
        """Each head's :math:`W_i^Q, W_i^K, W_i^V, W_i^O` in the paper's orientation, detached (see
        :class:`HeadWeights`). Head ``i``'s matrices are column blocks of the fused projections.

        Args:
            dtype: return copies in this dtype (e.g. ``torch.float64``, to form products of float32 weights
                without rounding noise); default: the parameters' dtype.
        """
        w_q, w_k, w_v = (w.detach().to(dtype) for w in self.in_projections())
        w_out = self.out_proj.weight.detach().to(dtype)
        h, h_kv, d = self.num_heads, self.num_kv_heads, self.head_dim
        return HeadWeights(
            w_q=w_q.T.unflatten(1, (h, d)).permute(1, 0, 2),
            w_k=w_k.T.unflatten(1, (h_kv, d)).permute(1, 0, 2),
            w_v=w_v.T.unflatten(1, (h_kv, d)).permute(1, 0, 2),
            w_o=w_out.T.unflatten(0, (h, d)),
        )

    def qk_matrices(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        r"""Every head's :math:`W_{QK,i} = W_i^Q {W_i^K}^\top`, shape ``(num_heads, embed_dim, kdim)``: the bilinear
        form whose value :math:`x_a W_{QK,i} x_b^\top` is head ``i``'s (unscaled, bias-free) score. Rank ≤ d_k.
        ``dtype``: compute in this dtype (see :meth:`head_weights`)."""
        hw = self.head_weights(dtype)
        group = self.num_heads // self.num_kv_heads
        return hw.w_q @ hw.w_k.repeat_interleave(group, dim=0).transpose(1, 2)

    def ov_matrices(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        r"""Every head's :math:`W_{OV,i} = W_i^V W_i^O`, shape ``(num_heads, vdim, embed_dim)``: what head ``i``
        writes to the output for each unit of weight on a value input. Rank ≤ d_k.
        ``dtype``: compute in this dtype (see :meth:`head_weights`)."""
        hw = self.head_weights(dtype)
        group = self.num_heads // self.num_kv_heads
        return hw.w_v.repeat_interleave(group, dim=0) @ hw.w_o

    # ----------------------------------------------------------------------------------------------- forward
    def _check_inputs(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[bool, int, int, int]:
        """Validate; return (batched, batch, n_q, n_k)."""
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch tensor, got {type(t).__name__}")
            if not t.is_floating_point():
                raise TypeError(f"{name} must have a floating-point dtype, got {t.dtype}")
        layout = "(batch, n, features)" if self.batch_first else "(n, batch, features)"
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ValueError(
                f"query, key and value must all be 3-D {layout} or all 2-D (n, features), got query "
                f"{tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}"
            )
        for name, t, want in (("query", query, self.embed_dim), ("key", key, self.kdim), ("value", value, self.vdim)):
            if t.shape[-1] != want:
                raise ValueError(f"{name} must have {want} features in its last dimension, got shape {tuple(t.shape)}")
        batched = query.ndim == 3
        seq_dim = 1 if (self.batch_first and batched) else 0
        n_q, n_k = query.shape[seq_dim], key.shape[seq_dim]
        if value.shape[seq_dim] != n_k:
            raise ValueError(f"key and value must have the same length n_k, got key {tuple(key.shape)} and "
                             f"value {tuple(value.shape)} in layout {layout}")
        batch = 1
        if batched:
            b_dim = 0 if self.batch_first else 1
            batch = query.shape[b_dim]
            if key.shape[b_dim] != batch or value.shape[b_dim] != batch:
                raise ValueError(f"query, key and value must share the batch size in layout {layout}, got query "
                                 f"{tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}")
        dtype = self.out_proj.weight.dtype
        if not (query.dtype == key.dtype == value.dtype == dtype):
            raise TypeError(f"query, key and value must have the parameters' dtype {dtype}, got {query.dtype}, "
                            f"{key.dtype}, {value.dtype}")
        return batched, batch, n_q, n_k

    def _combined_mask(
        self,
        key_mask: torch.Tensor | None,
        attn_mask: torch.Tensor | None,
        is_causal: bool,
        batched: bool,
        batch: int,
        n_q: int,
        n_k: int,
        device: torch.device,
    ) -> torch.Tensor | None:
        """One boolean mask broadcastable to ``(batch, num_heads, n_q, n_k)``, True = may attend, or None."""
        mask = None
        if attn_mask is not None:
            if not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype != torch.bool:
                got = attn_mask.dtype if isinstance(attn_mask, torch.Tensor) else type(attn_mask).__name__
                raise TypeError(f"attn_mask must be a boolean tensor (True = may attend), got {got}; "
                                "convert nn.MultiheadAttention masks with masks_from_torch")
            ok = attn_mask.ndim == 2 and attn_mask.shape == (n_q, n_k)
            if attn_mask.ndim == 4:
                b, h = attn_mask.shape[:2]
                ok = attn_mask.shape[2:] == (n_q, n_k) and b in (1, batch) and h in (1, self.num_heads)
            if not ok:
                raise ValueError(
                    f"attn_mask must have shape (n_q, n_k) = {(n_q, n_k)} or (batch|1, num_heads|1, n_q, n_k) = "
                    f"({batch}|1, {self.num_heads}|1, {n_q}, {n_k}), got {tuple(attn_mask.shape)}"
                )
            mask = attn_mask if attn_mask.ndim == 4 else attn_mask[None, None]
        if key_mask is not None:
            if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool:
                got = key_mask.dtype if isinstance(key_mask, torch.Tensor) else type(key_mask).__name__
                raise TypeError(f"key_mask must be a boolean tensor (True = a real key that may be attended), got "
                                f"{got}; convert nn.MultiheadAttention's key_padding_mask with masks_from_torch")
            want = (batch, n_k) if batched else (n_k,)
            if tuple(key_mask.shape) != want:
                raise ValueError(f"key_mask must have shape {want} (batch, n_k), got {tuple(key_mask.shape)}")
            km = key_mask.reshape(-1, 1, 1, n_k)
            mask = km if mask is None else mask & km
        if is_causal:
            causal = torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril()[None, None]
            mask = causal if mask is None else mask & causal
        return mask

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        *,
        key_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``query`` to ``key``/``value``; pass the same tensor three times for self-attention.

        Args:
            query: ``(batch, n_q, embed_dim)`` if ``batch_first`` else ``(n_q, batch, embed_dim)``, or unbatched
                ``(n_q, embed_dim)``.
            key: ``(batch, n_k, kdim)`` / ``(n_k, batch, kdim)`` / ``(n_k, kdim)``.
            value: ``(batch, n_k, vdim)`` / ``(n_k, batch, vdim)`` / ``(n_k, vdim)``.
            key_mask: boolean ``(batch, n_k)`` (``(n_k,)`` unbatched), **True = a real key** that may be attended
                (the opposite of PyTorch's ``key_padding_mask``; see :func:`masks_from_torch`).
            attn_mask: boolean ``(n_q, n_k)`` or ``(batch|1, num_heads|1, n_q, n_k)``, **True = may attend**.
            need_weights: return the attention weights (explicit path); if False, use PyTorch's fused kernel and
                return ``None`` for the weights.
            average_attn_weights: average the returned weights over heads (else return them per head).
            is_causal: also apply the causal mask ``tril(ones(n_q, n_k))`` (query ``i`` sees keys ``j ≤ i``).

        Returns:
            ``(output, weights)``: output in the query's layout with ``embed_dim`` features; weights
            ``(batch, n_q, n_k)`` averaged or ``(batch, num_heads, n_q, n_k)`` per head (without the batch
            dimension for unbatched input), or ``None``. A query with no allowed key has zero weights and its
            attention output (before ``out_proj``) is zero.

        Raises:
            TypeError: non-tensor or non-floating inputs, dtypes that differ from the parameters', non-boolean masks.
            ValueError: wrong numbers of dimensions or features, mismatched batch sizes or lengths, mask shapes.
        """
        batched, batch, n_q, n_k = self._check_inputs(query, key, value)
        mask = self._combined_mask(key_mask, attn_mask, is_causal, batched, batch, n_q, n_k, query.device)
        h, h_kv, d = self.num_heads, self.num_kv_heads, self.head_dim
        # Bring every input to (n, batch, features) or (batch, n, features) *views*; no copies.
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        seq_first = not (self.batch_first and batched)
        # (n, batch, heads, d) -> (batch, heads, n, d) when sequence-first, (batch, n, heads, d) -> same otherwise
        to_heads = (1, 2, 0, 3) if seq_first else (0, 2, 1, 3)

        w_q, w_k, w_v = self.in_projections()
        b_q, b_k, b_v = self._projection_biases()
        if self._qkv_same_embed_dim and key is query and value is query:
            # Self-attention: one matrix product for all heads' Q, K and V (the "fused" form).
            q, k, v = F.linear(query, self.in_proj_weight, self.in_proj_bias).split(
                [self.embed_dim, self.kv_dim, self.kv_dim], dim=-1)
        else:
            # Cross-attention: the query and the key/value inputs are projected separately.
            q = F.linear(query, w_q, b_q)
            if self._qkv_same_embed_dim and key is value:
                kv_b = None if b_k is None else self.in_proj_bias[self.embed_dim:]
                k, v = F.linear(key, self.in_proj_weight[self.embed_dim:], kv_b).split([self.kv_dim] * 2, dim=-1)
            else:
                k, v = F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
        q = q.unflatten(-1, (h, d)).permute(to_heads)  # (batch, h, n_q, d)
        k = k.unflatten(-1, (h_kv, d)).permute(to_heads)  # (batch, h_kv, n_k, d)
        v = v.unflatten(-1, (h_kv, d)).permute(to_heads)
        p_drop = self.dropout if self.training else 0.0

        if need_weights:
            out, weights = self._attend_explicit(q, k, v, mask, p_drop)
        else:
            weights = None
            only_causal = is_causal and attn_mask is None and key_mask is None
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=None if only_causal else mask, dropout_p=p_drop, is_causal=only_causal,
                enable_gqa=h_kv != h)
            if mask is not None and not only_causal:
                out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)  # no allowed key: zeros, never NaN
        # (batch, h, n_q, d) -> Concat(head_1..head_h) in the query's layout, then W^O
        concat = out.permute(2, 0, 1, 3) if seq_first else out.transpose(1, 2)
        output = self.out_proj(concat.flatten(2))
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)
        if not batched:
            output = output.squeeze(1)
            weights = None if weights is None else weights.squeeze(0)
        return output, weights

    def _attend_explicit(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, p_drop: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The from-scratch path: scores, the package's masked softmax, dropout, weighted sum of the values.

        ``q`` is ``(batch, h, n_q, d)``; ``k``, ``v`` are ``(batch, h_kv, n_k, d)``. For grouped-query attention
        the ``h / h_kv`` query heads of a group are stacked on a new axis and broadcast against their shared
        key/value head, so nothing is copied. Returns outputs ``(batch, h, n_q, d)`` and weights
        ``(batch, h, n_q, n_k)``.
        """
        batch, h, n_q, d = q.shape
        h_kv, n_k = k.shape[1], k.shape[2]
        qg = q.reshape(batch, h_kv, h // h_kv, n_q, d)  # group g of query heads shares key/value head g
        scores = (qg @ k.unsqueeze(2).transpose(-2, -1)) * (1.0 / math.sqrt(d))
        weights = softmax(scores.reshape(batch, h, n_q, n_k), axis=-1, mask=mask)
        dropped = F.dropout(weights, p_drop) if p_drop > 0 else weights
        out = dropped.reshape(batch, h_kv, h // h_kv, n_q, n_k) @ v.unsqueeze(2)
        return out.reshape(batch, h, n_q, d), weights
