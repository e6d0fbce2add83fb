"""kernels/flash_triton.py: the Triton FlashAttention-2 kernels, run on the CPU by Triton's interpreter, against
flash.flash_attention (the same algorithm in PyTorch) and F.scaled_dot_product_attention — values, log-sum-exp and
gradients, causal and not, lengths that leave a ragged last tile, n_q ≠ n_k.

``TRITON_INTERPRET=1`` is set here, at the top, before anything imports triton. The kernels are handed to
``triton.jit`` at their first call (which is when triton reads the variable), so the order in which pytest
imports test files does not matter. Where triton is absent (macOS) the kernel tests are skipped; the import tests
at the end run everywhere.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import ast  # noqa: E402 -- after the environment variable, on purpose
import importlib.util  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from attention_course.flash import flash_attention  # noqa: E402
from attention_course.kernels import (  # noqa: E402
    SHARED_MEMORY,
    aot,
    compile_for_gpu,
    flash_triton,
    tiles_for_gpu,
    triton_attention,
)
from attention_course.masks import causal_mask  # noqa: E402

needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None,
    reason="triton is not installed (it has wheels for Linux only; on macOS the chapter skips its kernel)",
)

def _interpreter_refusal() -> str | None:
    """Why this triton's CPU interpreter cannot run the kernels here (triton_attention refuses it), or None."""
    if importlib.util.find_spec("triton") is None:
        return None
    try:
        flash_triton._check_interpreter(torch.float32)
    except RuntimeError as error:
        return str(error)
    return None


#: The interpreter runs the kernels: skipped, with triton_attention's own reason, where it cannot (triton < 3.9
#: under NumPy ≥ 2.4; test_an_old_interpreter_is_refused_clearly checks that refusal).
needs_interpreter = pytest.mark.skipif(_interpreter_refusal() is not None, reason=str(_interpreter_refusal()))

LENGTHS = [(1, 1), (17, 17), (33, 33), (17, 33), (33, 17)]  # 16-wide tiles: 1, 2 and 3 tiles, the last ragged


def _inputs(batch, heads, n_q, n_k, d, *, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, n, d, generator=g, dtype=dtype).requires_grad_(True) for n in (n_q, n_k, n_k)]


def _grads(out, inputs, grad_out):
    return torch.autograd.grad(out, inputs, grad_out)


@needs_triton
@needs_interpreter
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("n_q", "n_k"), LENGTHS)
def test_values_and_gradients_equal_sdpa_and_flash_attention(causal, n_q, n_k):
    q, k, v = _inputs(1, 2, n_q, n_k, 24, seed=n_q + 3 * n_k)  # d = 24: the head dimension is masked to 32 too
    out, lse = triton_attention(q, k, v, causal=causal, block_q=16, block_k=16)
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    flash_out, flash_lse = flash_attention(q, k, v, causal=causal, block_q=16, block_k=16)
    assert out.shape == q.shape and out.dtype == torch.float32 and lse.shape == (1, 2, n_q)
    torch.testing.assert_close(out, reference, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(out, flash_out, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(lse, flash_lse, atol=2e-6, rtol=1e-5)
    assert not lse.requires_grad

    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
    mine = _grads(out, (q, k, v), grad_out)
    for theirs in (_grads(reference, (q, k, v), grad_out), _grads(flash_out, (q, k, v), grad_out)):
        for a, b in zip(mine, theirs, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@needs_triton
@needs_interpreter
@pytest.mark.parametrize("causal", [False, True])
def test_default_tiles_and_a_given_scale(causal):
    """The tile sizes the wrapper picks (one 128 × 64 tile here, mostly overhang) and an explicit scale."""
    q, k, v = _inputs(1, 3, 33, 21, 16, seed=5)
    out, _ = triton_attention(q, k, v, causal, 0.3)
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.3)
    torch.testing.assert_close(out, reference, atol=2e-6, rtol=1e-5)
    grad_out = torch.ones_like(out)
    for a, b in zip(_grads(out, (q, k, v), grad_out), _grads(reference, (q, k, v), grad_out), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def _masked_reference(q, k, v, mask, scale=None):
    """Attention in float64 with an explicit mask (True = may attend), a row that sees no key giving zeros — the
    package's convention (F.sdpa gives NaN there) — with its gradients; grouped keys repeated per query head."""
    group = q.shape[1] // k.shape[1]
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q64 @ k64.repeat_interleave(group, 1).transpose(-2, -1)) * scale
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)
    return weights @ v64.repeat_interleave(group, 1), (q64, k64, v64)


def _check_against(out, q, k, v, mask, *, atol=1e-5, rtol=1e-5, scale=None):
    reference, leaves = _masked_reference(q, k, v, mask, scale)
    torch.testing.assert_close(out.double(), reference, atol=atol, rtol=rtol)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(3)).to(out.dtype)
    mine = _grads(out, (q, k, v), grad_out)
    for a, b in zip(mine, _grads(reference, leaves, grad_out.double()), strict=True):
        torch.testing.assert_close(a.double(), b, atol=atol, rtol=rtol)


@needs_triton
@needs_interpreter
@pytest.mark.parametrize(("n_q", "n_k"), [(20, 33), (33, 20), (1, 40), (17, 17)])
def test_both_alignments_inside_the_kernels(n_q, n_k):
    """The alignment named as masks.causal_mask names it, against an explicit mask: "upper_left" is causal=True;
    "lower_right" puts the queries last (one new token sees every cached key; with n_q > n_k the first queries
    see none and give zeros, lse -inf)."""
    q, k, v = _inputs(1, 2, n_q, n_k, 16, seed=n_q + n_k)
    for alignment in ("upper_left", "lower_right"):
        out, lse = triton_attention(q, k, v, causal=alignment, block_q=16, block_k=16)
        mask = causal_mask(n_q, n_k, alignment=alignment)
        _check_against(out, q, k, v, mask)
        assert torch.equal(torch.isinf(lse[0, 0]), ~mask.any(-1))  # -inf exactly where a row sees no key
    a, _ = triton_attention(q, k, v, causal=True, block_q=16, block_k=16)
    b, _ = triton_attention(q, k, v, causal="upper_left", block_q=16, block_k=16)
    torch.testing.assert_close(a, b, atol=0, rtol=0)


@needs_triton
@needs_interpreter
@pytest.mark.parametrize(("alignment", "n_q", "n_k", "window"),
                         [("upper_left", 50, 50, 5), ("upper_left", 50, 50, 20), ("lower_right", 20, 50, 17),
                          ("upper_left", 33, 33, 64)])
def test_sliding_window(alignment, n_q, n_k, window):
    """A sliding window (keys j with i + offset − window < j ≤ i + offset), windows narrower and wider than a
    tile, against causal_mask(..., window=...)."""
    q, k, v = _inputs(1, 2, n_q, n_k, 16, seed=window)
    out, _ = triton_attention(q, k, v, causal=alignment, window=window, block_q=16, block_k=16)
    _check_against(out, q, k, v, causal_mask(n_q, n_k, alignment=alignment, window=window))


@needs_triton
@needs_interpreter
@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention(causal):
    """Four query heads reading two key-value heads (query head h reads h // 2), gradients of k and v summed
    over each group, in float32 and float16."""
    q, _, _ = _inputs(2, 4, 21, 21, 16, seed=8)
    _, k, v = _inputs(2, 2, 21, 21, 16, seed=9)
    out, _ = triton_attention(q, k, v, causal=causal, block_q=16, block_k=16)
    _check_against(out, q, k, v, causal_mask(21) if causal else torch.ones(21, 21, dtype=torch.bool))
    half = [t.detach().half().requires_grad_(True) for t in (q, k, v)]
    out16, _ = triton_attention(*half, causal=causal, block_q=16, block_k=16)
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    torch.testing.assert_close(out16.float(), reference, atol=5e-3, rtol=5e-3)
    grads = _grads(out16, half, torch.ones_like(out16))
    assert grads[1].dtype == torch.float16 and grads[1].shape == k.shape


@needs_triton
@needs_interpreter
@pytest.mark.parametrize(("alignment", "n_q", "n_k", "window", "heads", "kv_heads", "block_q", "block_k"), [
    ("lower_right", 37, 45, None, 2, 2, 32, 16),
    ("lower_right", 45, 37, 9, 2, 2, 16, 32),  # a window, and rows that see no key
    ("upper_left", 65, 65, 20, 4, 2, 64, 16),  # a window wider than a key tile, grouped heads
    ("lower_right", 17, 40, 1, 6, 2, 16, 16),
])
def test_masks_with_unequal_tiles_and_groups(alignment, n_q, n_k, window, heads, kv_heads, block_q, block_k):
    """Query and key tiles of different sizes with each mask: the loops' masked and unmasked parts then start and
    end at different tiles."""
    q, _, _ = _inputs(1, heads, n_q, n_k, 16, seed=n_q)
    _, k, v = _inputs(1, kv_heads, n_q, n_k, 16, seed=n_k)
    out, _ = triton_attention(q, k, v, causal=alignment, window=window, block_q=block_q, block_k=block_k)
    _check_against(out, q, k, v, causal_mask(n_q, n_k, alignment=alignment, window=window))


@needs_triton
@needs_interpreter
@pytest.mark.parametrize("causal", [False, True])
def test_very_negative_scores_give_finite_gradients(causal):
    """Every score of a row near -400 (lse below float32's exp range) with a ragged last key tile: a padded key's
    weight exp2(0 - lse) would overflow, so the ragged tile is masked in every kernel."""
    q = torch.full((1, 1, 16, 16), 5.0, requires_grad=True)
    k = torch.full((1, 1, 17, 16), -5.0, requires_grad=True)
    v = torch.randn(1, 1, 17, 16, generator=torch.Generator().manual_seed(0), requires_grad=True)
    out, lse = triton_attention(q, k, v, causal="lower_right" if causal else False, block_q=16, block_k=16)
    assert float(lse.max()) < -88
    _check_against(out, q, k, v, causal_mask(16, 17, alignment="lower_right") if causal
                   else torch.ones(16, 17, dtype=torch.bool))


@needs_triton
@needs_interpreter
def test_float16_gradients_are_close_to_float64():
    """16-bit inputs, causal, grouped heads: values and all three gradients within 16-bit rounding of float64."""
    q, _, _ = _inputs(1, 4, 33, 33, 16, seed=12)
    _, k, v = _inputs(1, 2, 33, 33, 16, seed=13)
    half = [t.detach().half().requires_grad_(True) for t in (q, k, v)]
    out, _ = triton_attention(*half, causal=True, block_q=16, block_k=16)
    _check_against(out, *half, causal_mask(33), atol=1e-2)


@needs_triton
@needs_interpreter
@pytest.mark.parametrize(("block_q", "block_k"), [(32, 16), (16, 32)])
def test_unequal_tiles_causal(block_q, block_k):
    """Query and key tiles of different sizes: the causal loops' first and last blocks are then not aligned."""
    q, k, v = _inputs(1, 2, 45, 45, 16, seed=block_q)
    out, _ = triton_attention(q, k, v, causal=True, block_q=block_q, block_k=block_k)
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, reference, atol=2e-6, rtol=1e-5)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    for a, b in zip(_grads(out, (q, k, v), grad_out), _grads(reference, (q, k, v), grad_out), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@needs_triton
@needs_interpreter
@pytest.mark.parametrize(("alignment", "n_q", "n_k", "window", "heads", "kv_heads"), [
    (False, 33, 45, None, 2, 2), ("upper_left", 45, 45, None, 4, 2), ("lower_right", 45, 37, 9, 2, 2),
    ("upper_left", 65, 65, 20, 2, 1),
])
def test_atomic_dq_gives_the_same_gradients(alignment, n_q, n_k, window, heads, kv_heads):
    """deterministic=False: FlashAttention-2's order, each dK, dV program adding its dS K into dQ atomically, with
    no second pass: the same gradients as the deterministic default (to rounding: the additions' order differs)
    and as float64, on every mask, ragged tiles and grouped heads included."""
    assert not torch.are_deterministic_algorithms_enabled()  # under it, deterministic=False runs the second pass
    q, _, _ = _inputs(1, heads, n_q, n_k, 16, seed=n_q + 1)
    _, k, v = _inputs(1, kv_heads, n_q, n_k, 16, seed=n_k + 2)
    mask = (causal_mask(n_q, n_k, alignment=alignment, window=window) if alignment
            else torch.ones(n_q, n_k, dtype=torch.bool))
    options = dict(causal=alignment, window=window, block_q=16, block_k=16)
    out, _ = triton_attention(q, k, v, deterministic=False, **options)
    _check_against(out, q, k, v, mask)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(5))
    atomic = _grads(triton_attention(q, k, v, deterministic=False, **options).output, (q, k, v), grad_out)
    two_pass = _grads(triton_attention(q, k, v, **options).output, (q, k, v), grad_out)
    for a, b in zip(atomic, two_pass, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    half = [t.detach().half().requires_grad_(True) for t in (q, k, v)]
    out16, _ = triton_attention(*half, deterministic=False, **options)
    assert _grads(out16, half, torch.ones_like(out16))[0].dtype == torch.float16


@needs_triton
@needs_interpreter
def test_pytorchs_deterministic_mode_overrides_the_atomic_dq(monkeypatch):
    """Under torch.use_deterministic_algorithms(True) (warn_only or not), deterministic=False runs the two-pass
    backward — the dQ kernel, no atomic adds — as PyTorch's own operations take their deterministic implementation
    in that mode; outside it, deterministic=False adds into dQ atomically."""
    launched = []
    real = flash_triton._launch

    def spy(name, rows, args, x, mask, flags, *rest, **options):  # noqa: ANN001, ANN202
        launched.append((name, flags.get("ATOMIC_DQ", False)))
        return real(name, rows, args, x, mask, flags, *rest, **options)

    monkeypatch.setattr(flash_triton, "_launch", spy)
    q, k, v = _inputs(1, 2, 20, 20, 16, seed=3)
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    two_pass = [("forward", False), ("dkdv", False), ("dq", False)]
    for mode, warn_only, expected in ((False, False, [("forward", False), ("dkdv", True)]),
                                      (True, False, two_pass), (True, True, two_pass)):
        launched.clear()
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
        try:
            triton_attention(q, k, v, deterministic=False, block_q=16, block_k=16).output.sum().backward()
        finally:
            torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        assert launched == expected, (mode, warn_only, launched)


@needs_triton
@needs_interpreter
@pytest.mark.parametrize(("scale", "spread"), [(-0.7, 6.0), (0.0, 6.0), (2.5, 3.0)])
def test_any_scale_in_the_unmasked_tiles(scale, spread):
    """The unmasked tiles take each row's maximum from the raw products and form every weight with one FMA: a
    negative scale makes the largest scaled score the smallest product (NEGATIVE), a zero scale weighs every key
    alike. Two 16 × 16 tiles seen whole, and a causal square whose tiles below the diagonal are unmasked."""
    q, k, v = _inputs(1, 2, 32, 32, 16, seed=21)
    # scaled scores spread over hundreds: exp2 of a score minus the wrong end of a row overflows float32
    q, k = (t.detach().mul(spread).requires_grad_(True) for t in (q, k))
    for causal in (False, True):
        mask = causal_mask(32) if causal else torch.ones(32, 32, dtype=torch.bool)
        out, _ = triton_attention(q, k, v, causal, scale, block_q=16, block_k=16)
        _check_against(out, q, k, v, mask, scale=scale, atol=1e-4, rtol=2e-4)  # gradients in the hundreds


@needs_triton
@needs_interpreter
def test_the_int64_offsets_give_the_same_answers(monkeypatch):
    """Past 2³¹ elements in one head (n · d), int32 offsets would wrap: the kernels then compute them in int64
    (LONG). Too large to run here, the variant is forced on a small input (the threshold lowered) and must agree
    exactly with the int32 one."""
    assert not flash_triton.needs_int64(2**25 - 1, 1, 64) and flash_triton.needs_int64(2**25, 1, 64)
    assert flash_triton.needs_int64(1, 2**24, 128)
    q, k, v = _inputs(1, 2, 33, 40, 16, seed=17)
    grad_out = torch.randn(1, 2, 33, 16, generator=torch.Generator().manual_seed(1))
    runs = []
    for threshold in (flash_triton.INT64_FROM, 1):
        monkeypatch.setattr(flash_triton, "INT64_FROM", threshold)
        for deterministic in (True, False):
            out, lse = triton_attention(q, k, v, causal="lower_right", window=12, block_q=16, block_k=16,
                                        deterministic=deterministic)
            runs.append((out, lse, *_grads(out, (q, k, v), grad_out)))
    for int32, int64 in ((runs[0], runs[2]), (runs[1], runs[3])):
        for a, b in zip(int32, int64, strict=True):
            torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_the_grid_is_one_axis_up_to_its_limit():
    """batch × heads goes on the grid's one axis with the blocks (CUDA's axes 1 and 2 stop at 65,535, which
    35,000 × 2 would pass): a launch of up to 2³¹ − 1 programs, and a clear error beyond."""
    assert flash_triton.grid(16, 64, 35_000 * 2) == (70_000,)
    assert flash_triton.grid(1000, 128, 3) == (8 * 3,)
    (programs,) = flash_triton.grid(2**20, 16, 2**15 - 1)
    assert programs == 2**16 * (2**15 - 1) <= flash_triton.MAX_PROGRAMS
    with pytest.raises(ValueError, match=r"at most 2147483647 programs.*got 65536 blocks × 32768 batch × heads"):
        flash_triton.grid(2**20, 16, 2**15)


def test_lengths_beyond_the_kernels_int32_positions_are_refused():
    """Positions are int32 in the kernels: more than 2³⁰ of them is refused before anything is allocated
    (an expanded tensor has the shape without the memory)."""
    small = torch.zeros(1, 1, 1, 16)
    huge = small.expand(1, 1, 2**30 + 1, 16)
    for q, k in ((huge, small), (small, huge)):
        with pytest.raises(ValueError, match=r"at most 1073741824 positions"):
            triton_attention(q, k, k)


@needs_triton
@needs_interpreter
def test_float16_is_close_to_float32():
    """16-bit inputs: scores and sums in float32, the weights rounded to 16 bits before P·V."""
    q, k, v = _inputs(1, 2, 33, 33, 16, seed=3)
    out, lse = triton_attention(*(t.detach().half() for t in (q, k, v)), causal=True, block_q=16, block_k=16)
    assert out.dtype == torch.float16 and lse.dtype == torch.float32
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out.float(), reference.detach(), atol=5e-3, rtol=5e-3)


@needs_triton
@needs_interpreter
def test_non_contiguous_inputs():
    """(batch, n, heads, d) tensors transposed to (batch, heads, n, d), as a multi-head layer makes them."""
    q, k, v = (t.detach().transpose(1, 2) for t in _inputs(1, 17, 2, 2, 16, seed=11))
    out, _ = triton_attention(q, k, v, block_q=16, block_k=16)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=2e-6, rtol=1e-5)


def test_tile_sizes_follow_the_kernel_the_architecture_the_head_size_and_dtype():
    """Each kernel has its own tiles per architecture, width and head size (DEFAULT_TILES); block_q and block_k
    replace the query and the key side in every kernel; BLOCK_D is the head size padded to a power of two ≥ 16."""
    half, single = torch.float16, torch.float32
    for arch in (75, 80, 86, 90):
        for d in (3, 24, 64, 100, 128, 256):
            for dtype in (half, torch.bfloat16, single):
                for name in flash_triton.KERNELS:
                    tiles, block_d = flash_triton.tile_sizes(name, d, dtype, arch)
                    assert block_d == max(16, 1 << (d - 1).bit_length())
                    family = 90 if arch >= 90 else 80
                    width = 32 if dtype == single else 16
                    assert tiles == flash_triton.DEFAULT_TILES[family, width, max(block_d, 64)][name]
                    assert tiles.warps in (4, 8) and 2 <= tiles.stages <= 5
                    assert min(tiles.block_m, tiles.block_n) >= 16
    tiles, block_d = flash_triton.tile_sizes("dkdv", 256, half, 90, 16, 32)
    assert (tiles.block_m, tiles.block_n, block_d) == (16, 32, 256)
    # wider tiles for narrower heads and 16-bit inputs, within each kernel
    for name in flash_triton.KERNELS:
        area = [(lambda t: t.block_m * t.block_n)(flash_triton.tile_sizes(name, d, dt, 90)[0])
                for dt in (half, single) for d in (64, 256)]
        assert area[0] >= area[1] and area[2] >= area[3] and area[0] >= area[2]


@needs_triton
@needs_interpreter
def test_tiles_too_large_for_the_gpu_are_halved(monkeypatch):
    """A GPU whose shared memory holds only 16 × 16 tiles (imitated: the launch raises triton's OutOfResources
    for larger ones, as a small GPU does): the launches retry with halved tiles and the result is still right."""
    kernels = flash_triton.kernels_for(True)
    tried = []

    class SmallGPU:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            def launch(*args, **options):
                tried.append((options["BLOCK_M"], options["BLOCK_N"]))
                if max(options["BLOCK_M"], options["BLOCK_N"]) > 16:
                    raise kernels.OutOfResources(99_000, 65_536, "shared memory")
                return self.kernel[grid](*args, **options)
            return launch

    for name in ("forward", "dkdv", "dq"):
        monkeypatch.setattr(kernels, name, SmallGPU(getattr(kernels, name)))
    monkeypatch.setattr(flash_triton, "_FITTED", {})
    q, k, v = _inputs(1, 1, 33, 33, 16, seed=4)
    out, _ = triton_attention(q, k, v, causal=True, block_q=64, block_k=32)
    reference = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, reference, atol=2e-6, rtol=1e-5)
    assert tried[:4] == [(64, 32), (32, 32), (32, 16), (16, 16)]
    grad_out = torch.ones_like(out)
    for a, b in zip(_grads(out, (q, k, v), grad_out), _grads(reference, (q, k, v), grad_out), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert set(flash_triton._FITTED.values()) == {(16, 16)}


@needs_triton
@needs_interpreter
def test_a_gpu_too_small_for_any_tile_gets_a_clear_error(monkeypatch):
    """A GPU whose shared memory holds not even 16 × 16 tiles of a kernel (a T4 in float32 at d = 256, imitated:
    every launch raises triton's OutOfResources): a RuntimeError that names the kernel and the ways out, not
    triton's own error from deep inside the launch."""
    kernels = flash_triton.kernels_for(True)

    class NoRoom:
        def __getitem__(self, grid):
            def launch(*args, **options):
                raise kernels.OutOfResources(66_560, 65_536, "shared memory")
            return launch

    monkeypatch.setattr(kernels, "forward", NoRoom())
    monkeypatch.setattr(flash_triton, "_FITTED", {})
    q, k, v = _inputs(1, 1, 17, 17, 16, seed=4)
    with pytest.raises(RuntimeError, match=r"forward kernel's tiles must fit .* got even 16 × 16 tiles refused at "
                                           r"head size 16 in torch.float32 .*flash_attention"):
        triton_attention(q, k, v, block_q=32, block_k=32)


@needs_triton
@needs_interpreter
def test_autotuning_the_atomic_dq_adds_into_zeros_at_every_launch(monkeypatch):
    """autotune=True launches each candidate several times (to compile it, then to time it): the dK, dV kernel of
    deterministic=False adds into dQ, so every launch must start from zeros, or dQ comes out several times too
    large. The tuning path is forced under the interpreter, its timer a stand-in that runs each candidate twice."""
    monkeypatch.setattr(flash_triton, "_tunes", lambda x: True)
    monkeypatch.setattr(flash_triton, "_TUNED", {})

    def twice(fn):
        fn()
        fn()
        return 1.0

    monkeypatch.setattr(flash_triton, "_time", twice)
    q, k, v = _inputs(1, 2, 33, 33, 16, seed=14)
    grad_out = torch.randn(1, 2, 33, 16, generator=torch.Generator().manual_seed(2))
    tuned = _grads(triton_attention(q, k, v, causal=True, autotune=True, deterministic=False).output, (q, k, v),
                   grad_out)
    assert any(key[0] == "dkdv" for key in flash_triton._TUNED)  # the tuning path ran
    plain = _grads(triton_attention(q, k, v, causal=True, block_q=16, block_k=16).output, (q, k, v), grad_out)
    for a, b in zip(tuned, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_one_rule_gives_the_float32_buffers_and_the_padded_head():
    """The launcher and the ahead-of-time compiler take both from one place: dQ is float32 when added into
    atomically, dK and dV when grouped heads are summed afterwards; the head is padded to a power of two ≥ 16."""
    assert flash_triton.wide_buffers(atomic_dq=False, grouped=False) == frozenset()
    assert flash_triton.wide_buffers(atomic_dq=True, grouped=False) == {"DQ"}
    assert flash_triton.wide_buffers(atomic_dq=False, grouped=True) == {"DK", "DV"}
    assert flash_triton.wide_buffers(atomic_dq=True, grouped=True) == {"DQ", "DK", "DV"}
    assert [flash_triton.padded_head(d) for d in (1, 16, 17, 64, 65, 200, 256)] == [16, 16, 32, 64, 128, 256, 256]


def test_autotuning_keeps_the_fastest_candidate_that_fits():
    """fastest() (autotune=True on a GPU): each candidate launched once (compiling it; one too large for shared
    memory raises and is skipped), then timed; the fastest that fits wins, and none fitting raises."""
    class TooLarge(Exception):
        pass

    speed = {(128, 128, 8, 3): 1.0, (128, 64, 4, 3): 2.0, (64, 64, 4, 3): 3.0}
    launched = []

    def run(c):
        launched.append(c)
        if c == (128, 128, 8, 3):
            raise TooLarge
        return c

    def timer(fn):
        fn()
        return speed[launched[-1]]

    candidates = ((128, 64, 4, 3), (128, 128, 8, 3), (64, 64, 4, 3))
    assert flash_triton.fastest(candidates, run, timer, TooLarge) == (128, 64, 4, 3)
    with pytest.raises(TooLarge):
        flash_triton.fastest(((128, 128, 8, 3),), run, timer, TooLarge)
    # per kernel, architecture, width and head size; the default tiles first among those timed
    assert flash_triton.CANDIDATES.keys() == flash_triton.DEFAULT_TILES.keys()
    for key, per_kernel in flash_triton.CANDIDATES.items():
        assert per_kernel.keys() == set(flash_triton.KERNELS)
        for name, candidates in per_kernel.items():
            assert candidates[0] == flash_triton.DEFAULT_TILES[key][name]
            assert len(set(candidates)) == len(candidates)
            assert all(c.block_m * c.block_n >= 16 * 16 and c.warps in (4, 8) for c in candidates)
    # tuned once per length bucket: 1,000 and 1,024 positions share one, 16,000 has its own
    assert flash_triton.length_bucket(1000) == flash_triton.length_bucket(1024) == 1024
    assert flash_triton.length_bucket(16_000) == 16_384 and flash_triton.length_bucket(1) == 1024


@needs_triton
def test_the_kernels_compile_for_an_a100_without_one():
    """Triton's compiler and ptxas run on the CPU: the forward kernel compiles for sm_80 to tensor-core code."""
    (compiled,) = compile_for_gpu(80, torch.float16, 16, causal=True, kernels=("forward",))
    assert (compiled.kernel, compiled.arch, compiled.block_d) == ("forward", 80, 16)
    assert 0 < compiled.shared_bytes <= 163 * 1024
    assert "mma.sync" in compiled.ptx and ".target sm_80" in compiled.ptx
    assert "ex2.approx" in compiled.ptx  # exp2: one instruction per weight


@pytest.fixture(scope="module")
def sm90_kernels() -> dict[bool, list]:
    """The three kernels compiled for sm_90 in float16 at d = 64, with int32 offsets (False) and int64 (True)."""
    return {long: compile_for_gpu(90, torch.float16, 64, kernels=("forward", "dkdv", "dq"), int64_offsets=long)
            for long in (False, True)}


@needs_triton
def test_the_compiled_kernels_read_one_grid_axis(sm90_kernels):
    """Compiled for sm_90, each kernel reads its program's place from the grid's first axis only (%ctaid.x), so
    no grid axis with a 65,535 limit ever holds batch × heads."""
    for compiled in sm90_kernels[False] + sm90_kernels[True]:
        assert "%ctaid.x" in compiled.ptx, compiled.kernel
        assert "%ctaid.y" not in compiled.ptx and "%ctaid.z" not in compiled.ptx, compiled.kernel


@needs_triton
def test_the_int64_variant_computes_its_offsets_in_64_bits(sm90_kernels):
    """LONG reaches every kernel's address arithmetic: every place the kernels form a block's positions passes it on,
    and compiled with it each kernel multiplies in 64 bits where the int32 variant multiplies in 32 (or widens a
    32-bit product). The test of their answers (test_the_int64_offsets_give_the_same_answers) cannot tell a kernel
    that ignores LONG: on inputs small enough to run here both variants agree anyway."""
    source = Path(flash_triton.__file__).with_name("flash_kernels.py").read_text()
    calls = [node for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_positions"]
    assert len(calls) >= 6 and all(ast.unparse(call.args[2]) == "LONG" for call in calls), \
        [ast.unparse(call) for call in calls]
    # PTX's 64- and 32-bit integer products, alone or fused with an add (mad), as LLVM may emit either
    mul64, mul32 = r"\b(?:mul|mad)\.lo\.s64\b", r"\b(?:mul|mad)\.(?:lo|wide)\.s32\b"
    for int32, int64 in zip(sm90_kernels[False], sm90_kernels[True], strict=True):
        assert len(re.findall(mul64, int64.ptx)) > len(re.findall(mul64, int32.ptx)), int32.kernel
        assert len(re.findall(mul32, int64.ptx)) < len(re.findall(mul32, int32.ptx)), int32.kernel


def test_the_forward_kernel_has_an_unmasked_and_a_masked_loop():
    """Each loop runs in parts, the tiles every row sees whole (no mask) and the few that need one: compiled for
    sm_90, the forward kernel holds the tile's body twice (three times with a window) — as many times the exp2
    instructions one tile needs (BLOCK_M · BLOCK_N weights over 32 threads a warp) — and its tensor-core products are
    Hopper's asynchronous wgmma."""
    (compiled,) = compile_for_gpu(90, torch.bfloat16, 64, causal=True, kernels=("forward",))
    per_tile = compiled.block_m * compiled.block_n // (32 * compiled.warps)  # weights per thread
    assert compiled.ptx.count("ex2.approx") >= 2 * per_tile
    assert "wgmma.mma_async" in compiled.ptx
    # with a window: the window's edge, the interior and the diagonal, three copies of the tile's body
    (windowed,) = compile_for_gpu(90, torch.bfloat16, 64, causal=True, windowed=True, kernels=("forward",))
    assert windowed.ptx.count("ex2.approx") >= 3 * per_tile


def test_the_kernels_compile_for_a_t4_and_their_tiles_shrink_to_fit_it(monkeypatch):
    """sm_75 (the T4, Colab's GPU) has 64 KiB of shared memory per program and takes the A100's default tiles: the
    16-bit forward kernel's at d = 64 need more, so tiles_for_gpu halves them, as a launch would, until they fit —
    and not further (tiles_for_gpu returns the default tiles where they fit). Each tile size is compiled once
    (about 30 s for 128 × 128 on sm_75): the test and tiles_for_gpu share the compilations."""
    compiled = {}

    def compile_once(arch, dtype, d, *, kernels, block_q, block_k, causal=False):  # noqa: ANN001, ANN202
        key = (arch, dtype, d, kernels, block_q, block_k, causal)
        if key not in compiled:
            compiled[key] = compile_for_gpu(arch, dtype, d, causal=causal, kernels=kernels, block_q=block_q,
                                            block_k=block_k)
        return compiled[key]

    monkeypatch.setattr(aot, "compile_for_gpu", compile_once)
    block_q, block_k = flash_triton.tile_sizes("forward", 64, torch.float16, 75)[0][:2]
    (default,) = compile_once(75, torch.float16, 64, kernels=("forward",), block_q=block_q, block_k=block_k)
    assert default.shared_bytes > SHARED_MEMORY[75]
    (fitted,) = tiles_for_gpu(75, torch.float16, 64, kernels=("forward",))
    assert ".target sm_75" in fitted.ptx and fitted.shared_bytes <= SHARED_MEMORY[75]
    steps = [(default.block_m, default.block_n)]
    while steps[-1] != (fitted.block_m, fitted.block_n):
        assert max(steps[-1]) > 16, steps
        steps.append(flash_triton.halve_tiles(*steps[-1]))
    (before,) = compile_once(75, torch.float16, 64, kernels=("forward",), block_q=steps[-2][0], block_k=steps[-2][1])
    assert before.shared_bytes > SHARED_MEMORY[75]  # the step before did not fit
    assert len(compiled) == len(steps)  # every size tried once, none skipped


TILES_RECORD = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "kernel_tiles.json"


def test_no_default_kernel_spills_on_an_a100_or_an_h100():
    """benchmarks/kernel_tiles.py compiled every kernel at its default tiles, as a launch specialises it, for sm_80
    and sm_90, three dtypes, head sizes 64, 128 and 256 and every variant a model launches (no mask, causal,
    window, atomic dQ, int64 offsets with the causal mask, negative scale): the record covers today's DEFAULT_TILES
    (tests/test_results_files.py holds it to today's code), no kernel spills a register to memory but one — the
    float32 forward kernel at d = 128 on sm_90 with int64 offsets (a head of 2³¹ elements or more), 8 bytes a thread,
    which chapter 6's lab names — every one fits the GPU's shared memory, and the dK, dV kernel (the transposed
    form) writes nothing into shared memory inside its loops in 16-bit on sm_90 at d ≤ 128, unless it adds into
    dQ."""
    record = json.loads(TILES_RECORD.read_text())
    rows = record["results"]["rows"]
    settings = record["settings"]
    assert set(settings["archs"]) >= {80, 90} and set(settings["heads"]) >= {64, 128, 256}
    assert set(settings["dtypes"]) >= {"float16", "bfloat16", "float32"}
    by_case = {(r["arch"], r["dtype"], r["d"], r["kernel"], r["variant"]): r for r in rows}
    for arch in (80, 90):
        for name in ("float16", "bfloat16", "float32"):
            for d in (64, 128, 256):
                for variant, (kernels, _) in aot.VARIANTS.items():
                    for kernel in kernels:
                        row = by_case[arch, name, d, kernel, variant]
                        tiles, _ = flash_triton.tile_sizes(kernel, d, getattr(torch, name), arch)
                        assert (*row["tiles"], row["warps"], row["stages"]) == tuple(tiles), row
    spilled = [(r["arch"], r["dtype"], r["d"], r["kernel"], r["variant"], r["spill_bytes"]) for r in rows
               if r["spill_bytes"]]
    assert spilled == [(90, "float32", 128, "forward", "int64 offsets, causal", 8)], spilled
    assert all(r["fits"] and r["tensor_cores"] for r in rows)
    transposed = [r for r in rows if r["kernel"] == "dkdv" and r["arch"] == 90 and r["d"] <= 128
                  and r["dtype"] != "float32"]  # Hopper's 16-bit products take a left operand from registers
    assert len(transposed) == 2 * 2 * sum("dkdv" in kernels for kernels, _ in aot.VARIANTS.values())
    assert all(r["loop_stores"] == 0 for r in transposed if "atomic" not in r["variant"])
    assert all(r["loop_stores"] > 0 for r in transposed if "atomic" in r["variant"])  # dS, into dS K


@needs_triton
def test_the_record_matches_a_compilation_here():
    """One row of the record compiled live: the dK, dV kernel for an H100 in float16 at d = 64 — registers, spills,
    shared memory and loop stores as stored (with the Triton that wrote it; another may lay tiles out otherwise),
    and in any case no spill and no store into shared memory inside its loops."""
    import triton

    record = json.loads(TILES_RECORD.read_text())
    (live,) = compile_for_gpu(90, torch.float16, 64, kernels=("dkdv",))
    assert live.spill_bytes == 0 and live.loop_stores == 0
    if triton.__version__ == record["settings"]["triton"]:
        stored = next(r for r in record["results"]["rows"] if (r["arch"], r["dtype"], r["d"], r["kernel"],
                                                                r["variant"]) == (90, "float16", 64, "dkdv", "no mask"))
        assert (live.registers, live.spill_bytes, live.shared_bytes, live.loop_stores) == (
            stored["registers"], stored["spill_bytes"], stored["shared_bytes"], stored["loop_stores"])


def test_stores_in_loops_counts_only_writes_inside_a_loop():
    """aot.stores_in_loops on a small piece of Triton's GPU IR: a tile written to shared memory before the loop is
    not counted, one written inside it is (local_alloc of a value, local_store), and one in a nested loop too."""
    ttgir = """
    %a = ttg.local_alloc %k : (tensor<128x64xf16>) -> !ttg.memdesc<128x64xf16>
    %e = ttg.local_alloc : () -> !ttg.memdesc<3x32x64xf16>
    %r:2 = scf.for %i = %c0 to %n step %c32 iter_args(%x = %z) -> (tensor<128x64xf32>) {
      %p = ttg.local_alloc %pt : (tensor<128x32xf16>) -> !ttg.memdesc<128x32xf16>
      %s = scf.for %j = %c0 to %m step %c1 iter_args(%y = %x) -> (tensor<128x64xf32>) {
        ttg.local_store %ds, %buf : tensor<128x32xf16> -> !ttg.memdesc<128x32xf16>
        scf.yield %y : tensor<128x64xf32>
      } {tt.num_stages = 3 : i32}
      scf.yield %s : tensor<128x64xf32>
    }
    %b = ttg.local_alloc %v : (tensor<128x64xf16>) -> !ttg.memdesc<128x64xf16>
    """
    assert aot.stores_in_loops(ttgir) == 2


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q = torch.randn(1, 1, 4, 16)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        triton_attention(q, q, q)


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_the_package_imports_without_triton_and_the_call_says_so():
    """``import attention_course`` never imports triton; with ``sys.modules['triton'] = None`` (``import triton``
    fails, as on a Mac) the kernels' module still imports and the call explains what is missing."""
    done = _run("import sys, torch, attention_course, attention_course.kernels\n"
                "assert 'triton' not in sys.modules, 'importing the package imported triton'\n"
                "sys.modules['triton'] = None\n"
                "q = torch.randn(1, 1, 4, 16)\n"
                "try:\n    attention_course.kernels.triton_attention(q, q, q)\n"
                "except ImportError as e:\n    print(e)\n")
    assert done.returncode == 0, done.stderr
    assert "must have triton" in done.stdout and "Linux" in done.stdout


@needs_triton
def test_bfloat16_under_the_interpreter_is_refused_not_wrong():
    """NumPy has no bfloat16: the interpreter returned values off by ~8e8 with no error (Triton 3.9); refused."""
    q, k, v = _inputs(1, 1, 17, 17, 16, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="bfloat16: the interpreter computes with NumPy"):
        triton_attention(q, k, v)


@needs_triton
def test_an_old_interpreter_is_refused_clearly(monkeypatch):
    import numpy
    import triton

    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(numpy, "__version__", "2.4.6")
    q, k, v = _inputs(1, 1, 17, 17, 16)
    with pytest.raises(RuntimeError, match=r"triton must be ≥ 3\.9 to interpret the kernels on the CPU with NumPy 2"):
        triton_attention(q, k, v)
    monkeypatch.setattr(numpy, "__version__", "2.3.5")  # an older NumPy still converts: no refusal
    flash_triton._check_interpreter(torch.float32)
