"""Helpers shared by the tests that compare the package's layers and models with PyTorch's."""

from __future__ import annotations

import torch
from torch import nn

TOL = {torch.float64: dict(atol=1e-10, rtol=1e-8), torch.float32: dict(atol=1e-5, rtol=1e-4)}
DTYPES = [torch.float64, torch.float32]
D, H, FF = 16, 4, 24

def randomise_vectors(module: nn.Module) -> None:
    """PyTorch zero-initialises biases and sets LayerNorm to identity; randomise them so they are tested too."""
    with torch.no_grad():
        for p in module.parameters():
            if p.ndim == 1:
                p.normal_()


def sequence(gen, batch, n, dtype, batch_first):
    x = torch.randn(batch, n, D, generator=gen, dtype=dtype)
    return x if batch_first else x.transpose(0, 1).contiguous()


def real_positions(x, key_mask, batch_first):
    """The positions of real tokens (PyTorch's encoder may zero padded positions on its nested-tensor path)."""
    xb = x if batch_first else x.transpose(0, 1)
    return xb[key_mask]


LENGTHS_SRC, LENGTHS_TGT = [7, 4, 1], [5, 2, 5]
