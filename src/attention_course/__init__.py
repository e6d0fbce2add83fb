"""attention_course: the package behind the course *Attention, Derived*.

Every reusable piece the book builds lives here, one module per idea; the chapters import it and the tests in
``tests/`` check it against PyTorch's own implementations. See the book's notation page for shapes.
"""

from __future__ import annotations

import importlib.metadata

from .attention import (
    attention_entropy,
    attention_per_query,
    hard_lookup,
    scaled_dot_product_attention,
    softmax,
)
from .device import get_device, seed_everything
from .flash import flash_attention
from .multihead import MultiHeadAttention
from .plots import PALETTE, attention_heatmap, use_style
from .seq2seq import Seq2SeqTransformer, Transformer, greedy_decode
from .tiled import online_softmax, tiled_attention

__version__ = importlib.metadata.version("attention-course")  # the one copy is pyproject.toml's

__all__ = [
    "MultiHeadAttention",
    "PALETTE",
    "Seq2SeqTransformer",
    "Transformer",
    "attention_entropy",
    "attention_heatmap",
    "attention_per_query",
    "flash_attention",
    "get_device",
    "greedy_decode",
    "hard_lookup",
    "online_softmax",
    "scaled_dot_product_attention",
    "seed_everything",
    "setup_notebook",
    "softmax",
    "tiled_attention",
    "use_style",
]


def setup_notebook(seed: int = 0) -> None:
    """What every chapter's setup cell calls: seed every RNG and apply the book's figure style.

    Also sets NumPy's print precision to 4 digits, so printed arrays show what is robust across machines; and, on a
    machine without CUDA, asks Triton for its CPU interpreter (``TRITON_INTERPRET=1``, unless already set), so that
    chapter 6's Triton kernels run there. Triton reads the variable when it is first imported — and PyTorch's own
    modules (its FLOP counter) import it — so it must be set before any of them, which the setup cell is.
    """
    import os

    import numpy as np
    import torch

    seed_everything(seed)
    use_style()
    np.set_printoptions(precision=4, suppress=True)
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
