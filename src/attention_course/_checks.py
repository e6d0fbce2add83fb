"""Input checking and numpy/torch conversion shared by every public function.

Every public function of the package accepts numpy arrays or torch tensors and returns the kind it got. The
computation itself is written once, in torch; these helpers convert at the boundary and raise clear errors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

ArrayLike = np.ndarray | torch.Tensor
#: Half-precision dtypes: the package computes scores, softmax and sums in float32 for them, as fused kernels do.
LOW_PRECISION = (torch.float16, torch.bfloat16)


def as_tensor(name: str, x: Any, *, floating: bool = True) -> torch.Tensor:
    """Return ``x`` as a torch tensor (sharing memory with a numpy array), checking its kind and dtype."""
    if isinstance(x, torch.Tensor):
        t = x
    elif isinstance(x, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(x))
    else:
        raise TypeError(f"{name} must be a numpy array or a torch tensor, got {type(x).__name__}")
    if floating and not t.is_floating_point():
        raise TypeError(f"{name} must have a floating-point dtype, got {t.dtype}")
    return t


def same_kind(names: Sequence[str], xs: Sequence[Any]) -> bool:
    """Check that all inputs are numpy arrays or all are torch tensors; return True for numpy."""
    kinds = {isinstance(x, np.ndarray) for x in xs}
    if len(kinds) > 1:
        got = ", ".join(f"{n}: {type(x).__name__}" for n, x in zip(names, xs, strict=True))
        raise TypeError(f"mix of numpy arrays and torch tensors ({got}); pass all of one kind")
    return kinds == {True}


def to_output(t: torch.Tensor, as_numpy: bool) -> ArrayLike:
    """Convert a result back to the kind of the inputs."""
    return t.detach().cpu().numpy() if as_numpy else t


def check_ndim(name: str, t: torch.Tensor, min_ndim: int, layout: str) -> None:
    if t.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions {layout}, got shape {tuple(t.shape)}")


def check_bool_mask(mask: torch.Tensor, target: tuple[int, ...]) -> None:
    """A mask must be boolean and broadcastable to ``target`` = (..., n_q, n_k)."""
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be boolean (True = may attend), got dtype {mask.dtype}; "
            "convert an additive float mask with `mask = additive == 0`"
        )
    try:
        shape = torch.broadcast_shapes(mask.shape, target)
    except RuntimeError:
        shape = None
    if shape != torch.Size(target):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} is not broadcastable to the scores' shape {target} "
            "(..., n_q, n_k)"
        )


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, ...]:
    """Check the shapes and dtypes of queries ``(..., n_q, d_k)``, keys ``(..., n_k, d_k)`` and values
    ``(..., n_k, d_v)``; return the scores' shape ``(..., n_q, n_k)``."""
    check_ndim("q", q, 2, "(..., n_q, d_k)")
    check_ndim("k", k, 2, "(..., n_k, d_k)")
    check_ndim("v", v, 2, "(..., n_k, d_v)")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must have the same last dimension d_k: got q {tuple(q.shape)} = (..., n_q, d_k) and "
            f"k {tuple(k.shape)} = (..., n_k, d_k)"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length n_k (one value per key): got k {tuple(k.shape)} = "
            f"(..., n_k, d_k) and v {tuple(v.shape)} = (..., n_k, d_v)"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch/head) dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} and "
            f"v {tuple(v.shape)} are not broadcastable"
        ) from None
    return (*batch, q.shape[-2], k.shape[-2])


class AttentionInputs(NamedTuple):
    """Queries, keys and values checked and ready for an attention function (:func:`attention_inputs`)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor | None  #: boolean, expanded (a view) to the scores' shape
    scale: float
    dtype: torch.dtype  #: the inputs' dtype, to return results in
    as_numpy: bool  #: the inputs were numpy arrays
    scores_shape: tuple[int, ...]  #: ``(..., n_q, n_k)``


def attention_inputs(q: Any, k: Any, v: Any, mask: Any, scale: float | None) -> AttentionInputs:
    """What every attention function does first: accept numpy or torch (not a mix), check the shapes with
    :func:`check_qkv` and the mask with :func:`check_bool_mask`, default ``scale`` to 1/√d_k, and compute
    float16/bfloat16 in float32 (as fused kernels do; q·k can exceed float16's 65504)."""
    names, xs = ["q", "k", "v"], [q, k, v]
    if mask is not None:
        names, xs = [*names, "mask"], [*xs, mask]
    as_numpy = same_kind(names, xs)
    qt, kt, vt = (as_tensor(n, x) for n, x in zip(names[:3], xs[:3], strict=True))
    target = check_qkv(qt, kt, vt)
    mt = None
    if mask is not None:
        mt = as_tensor("mask", mask, floating=False)
        check_bool_mask(mt, target)
        mt = mt.expand(target)  # a view: no memory
    scale = 1.0 / math.sqrt(qt.shape[-1]) if scale is None else scale
    dtype = qt.dtype
    if dtype in LOW_PRECISION:
        qt, kt, vt = qt.float(), kt.float(), vt.float()
    return AttentionInputs(qt, kt, vt, mt, float(scale), dtype, as_numpy, target)
