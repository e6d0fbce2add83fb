"""GPU kernels written in Triton (chapter 6). Importing this package does not import triton: the kernels are
compiled at their first call, so the package imports on machines without triton (macOS has no wheel)."""

from __future__ import annotations

from .aot import SHARED_MEMORY, GpuCompilation, compile_for_gpu, tiles_for_gpu
from .flash_triton import interpreting, triton_attention

__all__ = ["SHARED_MEMORY", "GpuCompilation", "compile_for_gpu", "interpreting", "tiles_for_gpu", "triton_attention"]
