"""GPU kernels written in Triton (chapter 6). Importing this package does not import triton: the kernels are
compiled at their first call, so the package imports on machines without triton (macOS has no wheel)."""

from __future__ import annotations

from .flash_triton import GpuCompilation, compile_for_gpu, interpreting, triton_attention

__all__ = ["GpuCompilation", "compile_for_gpu", "interpreting", "triton_attention"]
