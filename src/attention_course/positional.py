"""Positional information: the paper's sinusoidal encoding and rotary position embeddings (chapter 5).

Attention itself ignores order (chapter 1: permuting the tokens permutes the outputs). Two ways to tell the
model where each token is:

* **Sinusoidal encoding** (Vaswani et al., 2017, §3.5): add to the token embeddings the vector
  ``PE[p, 2i] = sin(p·ω_i)``, ``PE[p, 2i+1] = cos(p·ω_i)`` with ``ω_i = base^(-2i/d_model)``, ``base = 10000``.
  Each pair of coordinates is a point on a circle turning at frequency ``ω_i``, so ``PE(p + k)`` is ``PE(p)``
  rotated pair by pair by angles ``k·ω_i``: a linear map that depends on the offset ``k`` only (chapter 5
  proves it in SymPy).
* **Rotary position embedding, RoPE** (Su et al., 2021): rotate each query and key pair ``(x_{2i}, x_{2i+1})``
  by the angle ``p·θ_i`` of its own position ``p`` instead of adding anything. Then
  ``rope(q, m)·rope(k, n)`` depends on the positions only through ``m − n`` (chapter 5 proves it).
"""

from __future__ import annotations

import torch
from torch import nn

from ._checks import check_device, check_dtype, check_int, check_real, check_same_device, check_tensor, describe

__all__ = ["SinusoidalPositionalEncoding", "apply_rope", "rope_angles", "sinusoidal_encoding"]


def _check_dims(n: object, d: object, name_d: str = "d_model", *, min_d: int = 0) -> tuple[int, int]:
    n, d = check_int("n", n, low=0), check_int(name_d, d, low=min_d)
    if d % 2:
        raise ValueError(f"{name_d} must be even (coordinates come in (sin, cos) pairs), got {d}")
    return n, d


#: Positions are computed in float64, exact for integers up to 2**53.
MAX_POSITION = 2**53


def _check_base(base: object) -> float:
    """Frequencies ``base^(-2i/d)`` need a positive base (0 gives inf and NaN columns, a negative one complex)."""
    return check_real("base", base, low=0.0, open_low=True)


def sinusoidal_encoding(
    n: int,
    d_model: int,
    *,
    base: float = 10000.0,
    offset: int = 0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    r"""The paper's positional encoding for positions ``offset, …, offset + n − 1``: shape ``(n, d_model)``.

    :math:`PE_{p,2i} = \sin(p\,\omega_i)`, :math:`PE_{p,2i+1} = \cos(p\,\omega_i)`,
    :math:`\omega_i = \text{base}^{-2i/d_\text{model}}` (chapter 5). Computed in float64, returned in ``dtype``.

    At the edges: ``n = 0`` gives a ``(0, d_model)`` tensor.

    Raises:
        TypeError: ``n``, ``d_model`` or ``offset`` not integers, ``base`` not a number, ``dtype`` not floating.
        ValueError: negative ``n`` or ``offset``, ``d_model`` odd, ``base`` not positive and finite.
    """
    n, d_model = _check_dims(n, d_model)
    offset = check_int("offset", offset, low=0, high=MAX_POSITION)
    base = _check_base(base)
    dtype = check_dtype("dtype", dtype)
    device = None if device is None else check_device("device", device)
    pos = torch.arange(offset, offset + n, dtype=torch.float64, device=device)[:, None]
    omega = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64, device=device) / d_model)
    pe = torch.empty(n, d_model, dtype=torch.float64, device=device)
    pe[:, 0::2] = torch.sin(pos * omega)
    pe[:, 1::2] = torch.cos(pos * omega)
    return pe.to(dtype)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the sinusoidal encoding to ``(batch, n, d_model)`` embeddings, then applies dropout (chapter 5).

    The encoding is precomputed for ``max_len`` positions as a non-trainable buffer (not in ``state_dict``).
    ``forward(x, offset=t)`` encodes positions ``t, …, t + n − 1`` (used when decoding one token at a time).
    """

    def __init__(
        self,
        d_model: int,
        max_len: int = 512,
        dropout: float = 0.0,
        base: float = 10000.0,
        *,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        check_int("d_model", d_model)
        check_int("max_len", max_len)
        check_real("dropout", dropout, low=0.0, high=1.0)
        self.d_model, self.max_len = d_model, max_len
        pe = sinusoidal_encoding(max_len, d_model, base=base, dtype=dtype or torch.get_default_dtype(), device=device)
        self.register_buffer("pe", pe, persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``x``: ``(batch, n, d_model)`` → ``x + PE[offset : offset + n]``, same shape and dtype.

        At the edges: ``n = 0`` or batch 0 returns the empty ``x``; an integer ``x`` is refused (adding the
        encoding to token ids would truncate it to integers).
        """
        check_tensor("x", x, ndim=3, layout=f"(batch, n, d_model={self.d_model})")
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must have shape (batch, n, d_model={self.d_model}), got {tuple(x.shape)}")
        if x.device != self.pe.device:
            raise ValueError(f"x must be on the encoding's device {self.pe.device}, got {describe(x)}")
        n = x.shape[1]
        offset = check_int("offset", offset, low=0)
        if offset + n > self.max_len:
            raise ValueError(f"positions offset..offset + n - 1 must be below max_len={self.max_len}, got "
                             f"{offset}..{offset + n - 1}")
        return self.dropout(x + self.pe[offset : offset + n].to(x.dtype))


def rope_angles(
    n: int,
    d: int,
    *,
    base: float = 10000.0,
    positions: torch.Tensor | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    r"""The rotation angles :math:`p\,\theta_i` of RoPE, :math:`\theta_i = \text{base}^{-2i/d}`: ``(n, d/2)``, float64.

    ``positions`` (shape ``(n,)``, integer or floating) overrides the default ``0, …, n − 1``.

    At the edges: ``n = 0`` or ``d = 0`` gives an empty tensor.

    Raises:
        TypeError: sizes not integers, ``positions`` not a real tensor.
        ValueError: negative sizes, odd ``d``, ``positions`` not of shape ``(n,)``, ``base`` not positive.
    """
    n, d = _check_dims(n, d, "d")
    base = _check_base(base)
    if positions is None:
        pos = torch.arange(n, dtype=torch.float64, device=None if device is None else check_device("device", device))
    else:
        check_tensor("positions", positions, kind=None, layout="(n,)")
        if device is not None and positions.device != check_device("device", device):
            raise ValueError(f"positions must be on device={device} when both are given, got {describe(positions)}")
        if positions.dtype == torch.bool or positions.is_complex():
            raise TypeError(f"positions must be an integer or floating tensor (n,), got {describe(positions)}")
        if positions.shape != (n,):
            raise ValueError(f"positions must have shape (n,) = ({n},), got {tuple(positions.shape)}")
        pos = positions.to(torch.float64)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=pos.device) / d)
    return pos[:, None] * theta


def apply_rope(x: torch.Tensor, *, base: float = 10000.0, positions: torch.Tensor | None = None) -> torch.Tensor:
    r"""Rotary position embedding of queries or keys ``x``: ``(..., n, d)`` → same shape (chapter 5).

    Each pair :math:`(x_{2i}, x_{2i+1})` at position :math:`p` is rotated by the angle :math:`p\,\theta_i`:
    :math:`(x_{2i}\cos - x_{2i+1}\sin,\; x_{2i}\sin + x_{2i+1}\cos)` (the interleaved pairs of Su et al.).
    Rotations preserve norms, and :math:`\text{rope}(q, m)\cdot\text{rope}(k, n)` depends only on
    :math:`m - n`. ``positions`` ``(n,)`` defaults to ``0, …, n − 1``.

    At the edges: an empty ``x`` (``n = 0``, ``d = 0`` or batch 0) is returned as it is. Low precision: the
    angles are computed in float64 and their cosines and sines rounded to ``x``'s dtype.

    Raises:
        TypeError: ``x`` not a floating-point tensor.
        ValueError: fewer than 2 dimensions, odd ``d``, ``positions`` on another device than ``x``.
    """
    check_tensor("x", x, layout="(..., n, d)")
    if x.ndim < 2:
        raise ValueError(f"x must have shape (..., n, d), got {tuple(x.shape)}")
    if positions is not None and isinstance(positions, torch.Tensor):
        check_same_device(("x", "positions"), (x, positions))
    n, d = x.shape[-2], x.shape[-1]
    ang = rope_angles(n, d, base=base, positions=positions, device=x.device)
    cos, sin = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return out.flatten(-2)

