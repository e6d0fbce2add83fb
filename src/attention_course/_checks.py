"""Input checking and numpy/torch conversion shared by every public function.

Every public function of the package accepts numpy arrays or torch tensors and returns the kind it got. The
computation itself is written once, in torch; these helpers convert at the boundary and raise clear errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

ArrayLike = np.ndarray | torch.Tensor


def to_torch(name: str, x: Any, *, floating: bool = True) -> torch.Tensor:
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
