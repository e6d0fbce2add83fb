"""Input checking and numpy/torch conversion shared by every public function.

Every public function of the package accepts numpy arrays or torch tensors and returns the kind it got. The
computation itself is written once, in torch; these helpers convert at the boundary and raise clear errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

ArrayLike = np.ndarray | torch.Tensor
#: Half-precision dtypes: the package computes scores, softmax and sums in float32 for them, as fused kernels do.
LOW_PRECISION = (torch.float16, torch.bfloat16)


# ------------------------------------------------------------------------------------------------ describing
def describe(x: object) -> str:
    """What an argument is, for an error message: ``float32 tensor of shape (2, 3)``, ``int 3``, ``list``."""
    if isinstance(x, torch.Tensor):
        where = "" if x.device.type == "cpu" else f" on {x.device}"
        return f"{x.dtype} tensor of shape {tuple(x.shape)}{where}"
    if isinstance(x, np.ndarray):
        return f"{x.dtype} numpy array of shape {x.shape}"
    if isinstance(x, (bool, int, float, str, np.generic)) or x is None:
        return f"{type(x).__name__} {x!r}"
    return type(x).__name__


# ---------------------------------------------------------------------------------------------- plain values
def check_int(name: str, value: object, *, low: int | None = 1, high: int | None = None) -> int:
    """``value`` as a Python int in ``[low, high]`` (``None``: no bound). ``TypeError`` for a bool, a float or
    anything not an integer (numpy integers are accepted); ``ValueError`` for an integer out of range."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {describe(value)}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        wanted = {1: "a positive integer", 0: "a non-negative integer"}.get(low, f"an integer ≥ {low}")
        if high is not None:
            wanted = f"an integer in [{low}, {high}]" if low is not None else f"an integer ≤ {high}"
        raise ValueError(f"{name} must be {wanted}, got {value}")
    return value


def check_numbers(name: str, values: object) -> tuple[float, ...]:
    """``values`` as a tuple of at least one finite float (one per seed, say)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence of numbers, got {describe(values)}")
    out = tuple(float(v) for v in values)
    if not out or not all(math.isfinite(v) for v in out):
        raise ValueError(f"{name} must hold at least one finite number, got {list(out)}")
    return out


def check_real(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    open_low: bool = False,
    open_high: bool = False,
) -> float:
    """``value`` as a finite Python float in the interval given (``open_*`` excludes the end). ``TypeError`` for
    a bool or a non-number (a 0-d tensor or numpy scalar is accepted); ``ValueError`` for NaN, ±inf or out of
    range."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {describe(value)}")
    value = float(value)
    below = low is not None and (value <= low if open_low else value < low)
    above = high is not None and (value >= high if open_high else value > high)
    if not math.isfinite(value) or below or above:
        lo = "(-inf" if low is None else ("(" if open_low else "[") + f"{low:g}"
        hi = "inf)" if high is None else f"{high:g}" + (")" if open_high else "]")
        raise ValueError(f"{name} must be a finite number in {lo}, {hi}, got {value!r}")
    return value


def check_flag(name: str, value: object) -> bool:
    """``value`` must be a bool (``TypeError`` otherwise: ``causal=1`` or ``causal="yes"`` is refused)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {describe(value)}")
    return bool(value)


def check_choice(name: str, value: object, choices: Sequence[object]) -> Any:
    """``value`` must be one of ``choices`` (``ValueError`` naming them)."""
    if not isinstance(value, (str, int, float, type(None))) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {describe(value)}")
    return value


def check_callable(name: str, value: object, what: str = "a function") -> Callable:
    if not callable(value):
        raise TypeError(f"{name} must be {what}, got {describe(value)}")
    return value


def check_instance(name: str, value: object, cls: type | tuple[type, ...]) -> Any:
    """``value`` must be an instance of ``cls`` (``TypeError`` naming the class wanted)."""
    if not isinstance(value, cls):
        wanted = " or ".join(c.__name__ for c in (cls if isinstance(cls, tuple) else (cls,)))
        article = "an" if wanted[0].lower() in "aeiou" else "a"
        raise TypeError(f"{name} must be {article} {wanted}, got {describe(value)}")
    return value


def check_device(name: str, value: object) -> torch.device:
    """A ``torch.device`` or a string torch understands (``"cpu"``, ``"cuda:0"``, ``"mps"``, ``"meta"``) that this
    machine has (``ValueError`` for CUDA without a GPU, rather than torch's ``AssertionError`` at first use)."""
    if isinstance(value, torch.device):
        device = value
    elif not isinstance(value, str):
        raise TypeError(f"{name} must be a torch.device or a string such as 'cpu', got {describe(value)}")
    else:
        try:
            device = torch.device(value)
        except RuntimeError:
            raise ValueError(f"{name} must name a device such as 'cpu', 'cuda' or 'cuda:0', got {value!r}") from None
    if device.type == "cuda" and not (torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count()):
        raise ValueError(f"{name} must be a device this machine has, got {device} "
                         f"({torch.cuda.device_count()} CUDA devices here)")
    mps = getattr(torch.backends, "mps", None)
    if device.type == "mps" and not (mps is not None and mps.is_available()):
        raise ValueError(f"{name} must be a device this machine has, got mps (not available here)")
    return device


def check_dtype(name: str, value: object, *, floating: bool = True) -> torch.dtype:
    if not isinstance(value, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype such as torch.float32, got {describe(value)}")
    if floating and not value.is_floating_point:
        raise TypeError(f"{name} must be a floating-point torch.dtype, got {value}")
    return value


# ---------------------------------------------------------------------------------------------------- tensors
KINDS = {"floating": "a floating-point", "integer": "an integer", "bool": "a boolean", None: "a"}


def _has_kind(t: torch.Tensor, kind: str | None) -> bool:
    if kind == "floating":
        return t.is_floating_point()
    if kind == "integer":
        return not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool
    if kind == "bool":
        return t.dtype == torch.bool
    return True


def check_tensor(
    name: str,
    x: object,
    *,
    kind: str | None = "floating",
    ndim: int | Sequence[int] | None = None,
    layout: str = "",
) -> torch.Tensor:
    """``x`` must be a torch tensor of ``kind`` (``"floating"``, ``"integer"``, ``"bool"`` or None for any) with
    ``ndim`` dimensions (one number or the numbers allowed). ``layout`` describes the expected shape in the
    message, e.g. ``"(batch, n, d_model)"``. Costs the shape and the dtype, never a pass over the data."""
    if not isinstance(x, torch.Tensor):
        hint = " (convert it with torch.as_tensor)" if isinstance(x, (list, tuple, np.ndarray)) else ""
        raise TypeError(f"{name} must be a torch tensor {layout}{hint}, got {describe(x)}".replace("  ", " "))
    if not _has_kind(x, kind):
        raise TypeError(f"{name} must be {KINDS[kind]} tensor {layout}, got {describe(x)}".replace("  ", " "))
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if x.ndim not in allowed:
            dims = " or ".join(f"{d}-D" for d in allowed)
            raise ValueError(f"{name} must be a {dims} tensor {layout}, got shape {tuple(x.shape)}".replace("  ", " "))
    return x


def check_same_device(names: Sequence[str], xs: Sequence[torch.Tensor]) -> torch.device:
    """All tensors on one device (``ValueError`` listing where each one is); return that device."""
    devices = {x.device for x in xs}
    if len(devices) > 1:
        where = ", ".join(f"{n} on {x.device}" for n, x in zip(names, xs, strict=True))
        raise ValueError(f"expected all tensors on one device, got {where}; move them with .to(device)")
    return xs[0].device


def check_token_ids(name: str, ids: object, vocab: int, *, ndim: int | Sequence[int] | None = 2,
                    layout: str = "(batch, n)", what: str = "token ids", ignore: int | None = None) -> torch.Tensor:
    """Integer ids (token ids, or class ids as targets) in ``[0, vocab)``; ids equal to ``ignore`` (a loss's
    ignore index) are skipped. The range check reads the ids (the one pass over data the package's checks make:
    ids are d_model times smaller than the embeddings they select, and an out-of-range id on a GPU is an
    unrecoverable device-side assert rather than an error)."""
    t = check_tensor(name, ids, kind="integer", ndim=ndim, layout=f"of {what} {layout}")
    kept = t if ignore is None else t[t != ignore]
    if kept.numel():
        lo, hi = int(kept.min()), int(kept.max())
        if lo < 0 or hi >= vocab:
            skipped = "" if ignore is None else f" or {ignore} (ignored)"
            raise ValueError(f"{name} must hold {what} in [0, {vocab}){skipped}, got ids in [{lo}, {hi}]")
    return t


def as_index(ids: torch.Tensor) -> torch.Tensor:
    """Integer ids in a dtype that indexing and ``nn.Embedding`` take (int32/int64; others become int64)."""
    return ids if ids.dtype in (torch.int32, torch.int64) else ids.long()


def as_tensor(name: str, x: Any, *, floating: bool = True) -> torch.Tensor:
    """Return ``x`` as a torch tensor (sharing memory with a numpy array), checking its kind and dtype."""
    if isinstance(x, torch.Tensor):
        t = x
    elif isinstance(x, np.ndarray):
        if x.dtype.kind not in "biuf":
            raise TypeError(f"{name} must hold numbers (a bool, integer or floating dtype), got {describe(x)}")
        t = torch.from_numpy(x if x.flags.c_contiguous else np.ascontiguousarray(x))  # keeps 0-d arrays 0-d
    else:
        hint = " (convert a list with np.asarray or torch.as_tensor)" if isinstance(x, (list, tuple)) else ""
        raise TypeError(f"{name} must be a numpy array or a torch tensor{hint}, got {describe(x)}")
    if floating and not t.is_floating_point():
        raise TypeError(f"{name} must have a floating-point dtype, got {describe(x)}")
    return t


def same_kind(names: Sequence[str], xs: Sequence[Any]) -> bool:
    """Check that all inputs are numpy arrays or all are torch tensors; return True for numpy."""
    kinds = {isinstance(x, np.ndarray) for x in xs}
    if len(kinds) > 1:
        got = ", ".join(f"{n}: {type(x).__name__}" for n, x in zip(names, xs, strict=True))
        raise TypeError(f"inputs must be all numpy arrays or all torch tensors, got a mix ({got})")
    return kinds == {True}


def to_output(t: torch.Tensor, as_numpy: bool) -> ArrayLike:
    """Convert a result back to the kind of the inputs."""
    return t.detach().cpu().numpy() if as_numpy else t


def check_ndim(name: str, t: torch.Tensor, min_ndim: int, layout: str) -> None:
    if t.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions {layout}, got shape {tuple(t.shape)}")


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
        raise ValueError(f"q, k and v must have broadcastable leading (batch, head) dimensions, got shapes "
                         f"{tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}") from None
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


def check_mask(name: str, mask: object, shape: Sequence[int], of: str = "the scores' shape") -> torch.Tensor:
    """A boolean mask (True = keep), numpy or torch, broadcastable to ``shape``; returned expanded to it (a view,
    no memory). ``TypeError`` for another dtype, naming the conversion of an additive float mask."""
    t = as_tensor(name, mask, floating=False)
    if t.dtype != torch.bool:
        raise TypeError(f"{name} must be boolean (True = may attend), got {describe(t)}; "
                        "convert an additive float mask with `mask = additive == 0`")
    try:
        fits = torch.broadcast_shapes(t.shape, shape) == torch.Size(shape)
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"{name} must be broadcastable to {of} {tuple(shape)}, got shape {tuple(t.shape)}")
    return t.expand(shape)


def attention_inputs(q: Any, k: Any, v: Any, mask: Any = None, scale: object = None) -> AttentionInputs:
    """What every attention function does first: accept numpy or torch (not a mix), check the shapes with
    :func:`check_qkv`, the mask with :func:`check_mask` and that every tensor is on one device; check ``scale``
    (a finite number) and default it to 1/√d_k; compute float16/bfloat16 in float32 (as fused kernels do; q·k
    can exceed float16's 65504). ``d_k = 0`` is allowed: the scores are all 0 and each output row averages the
    values, as in PyTorch (the default scale is then 1)."""
    scale = None if scale is None else check_real("scale", scale)
    names, xs = ["q", "k", "v", "mask"], [q, k, v, mask]
    if mask is None:
        names, xs = names[:3], xs[:3]
    as_numpy = same_kind(names, xs)
    qt, kt, vt = (as_tensor(n, x) for n, x in zip(names[:3], xs[:3], strict=True))
    target = check_qkv(qt, kt, vt)
    mt = None if mask is None else check_mask("mask", mask, target, of="the scores' shape (..., n_q, n_k) =")
    check_same_device(names, [qt, kt, vt] + ([] if mt is None else [mt]))
    d_k = qt.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d_k) if d_k else 1.0
    dtype = qt.dtype
    if dtype in LOW_PRECISION:
        qt, kt, vt = qt.float(), kt.float(), vt.float()
    return AttentionInputs(qt, kt, vt, mt, scale, dtype, as_numpy, target)


def check_ints(name: str, values: object, *, low: int | None = 1, high: int | None = None) -> list[int]:
    """A non-empty sequence of integers (a list, tuple, range or integer numpy array), each checked by
    :func:`check_int` under the name ``name[i]``; returned as a list of Python ints."""
    if isinstance(values, np.ndarray):
        flat = values.ndim == 1
    else:
        flat = isinstance(values, Sequence) and not isinstance(values, (str, bytes))
    if not flat:
        raise TypeError(f"{name} must be a sequence of integers such as [1, 2, 4], got {describe(values)}")
    if len(values) == 0:
        raise ValueError(f"{name} must hold at least one integer, got an empty {type(values).__name__}")
    return [check_int(f"{name}[{i}]", v, low=low, high=high) for i, v in enumerate(values)]


def check_generator(name: str, generator: object) -> torch.Generator | None:
    """``None`` or a CPU ``torch.Generator`` (the package draws its random tensors on the CPU)."""
    if generator is None:
        return None
    check_instance(name, generator, torch.Generator)
    if generator.device.type != "cpu":
        raise ValueError(f"{name} must be a CPU torch.Generator, got one on {generator.device}")
    return generator


def causal_offset(causal: object, n_q: int, n_k: int) -> int | None:
    """A tiled pass's ``causal`` argument as the offset of its diagonal: query ``i`` sees keys ``j ≤ i + offset``.

    ``False``: None (no causal rule). ``True`` or ``"upper_left"``: 0, PyTorch's ``is_causal``. ``"lower_right"``:
    ``n_k − n_q``, the queries being the last ``n_q`` positions (new tokens after a cache) — the two alignments of
    :func:`attention_course.masks.causal_mask`, which coincide when ``n_q = n_k``.
    """
    if isinstance(causal, (bool, np.bool_)):
        return 0 if causal else None
    if not isinstance(causal, str):
        raise TypeError(f"causal must be True, False, 'upper_left' or 'lower_right', got {describe(causal)}")
    if causal not in ("upper_left", "lower_right"):
        raise ValueError(f"causal must be True (upper-left, as is_causal), False, 'upper_left' or 'lower_right'; "
                         f"got {causal!r}")
    return 0 if causal == "upper_left" else n_k - n_q


def tiling_inputs(
    q: Any, k: Any, v: Any, mask: Any, scale: object, causal: object, block_q: object, block_k: object
) -> tuple[AttentionInputs, tuple[bool, int, int]]:
    """:func:`attention_inputs` for a tiled pass (tiled attention and its backward pass): the checked inputs with
    ``q``, ``k`` and ``v`` expanded (views, no memory) to the common batch, and the checked tiling options
    ``(causal offset or None, block_q, block_k)`` (:func:`causal_offset`)."""
    x = attention_inputs(q, k, v, mask, scale)
    n_q, n_k = x.q.shape[-2], x.k.shape[-2]
    options = (causal_offset(causal, n_q, n_k), check_int("block_q", block_q), check_int("block_k", block_k))
    batch = x.scores_shape[:-2]
    qt, kt, vt = (t.expand(*batch, *t.shape[-2:]) for t in (x.q, x.k, x.v))
    return x._replace(q=qt, k=kt, v=vt), options
