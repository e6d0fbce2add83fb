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

import importlib.util  # noqa: E402 -- after the environment variable, on purpose
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from attention_course.flash import flash_attention  # noqa: E402
from attention_course.kernels import (  # noqa: E402
    SHARED_MEMORY,
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


def _masked_reference(q, k, v, mask):
    """Attention in float64 with an explicit mask (True = may attend), a row that sees no key giving zeros — the
    package's convention (F.sdpa gives NaN there) — with its gradients; grouped keys repeated per query head."""
    group = q.shape[1] // k.shape[1]
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    scores = (q64 @ k64.repeat_interleave(group, 1).transpose(-2, -1)) / q.shape[-1] ** 0.5
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)
    return weights @ v64.repeat_interleave(group, 1), (q64, k64, v64)


def _check_against(out, q, k, v, mask, *, atol=1e-5):
    reference, leaves = _masked_reference(q, k, v, mask)
    torch.testing.assert_close(out.double(), reference, atol=atol, rtol=1e-5)
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(3)).to(out.dtype)
    mine = _grads(out, (q, k, v), grad_out)
    for a, b in zip(mine, _grads(reference, leaves, grad_out.double()), strict=True):
        torch.testing.assert_close(a.double(), b, atol=atol, rtol=1e-5)


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


def test_tile_sizes_follow_the_head_size_and_dtype():
    half, single = torch.float16, torch.float32
    assert flash_triton.tile_sizes(24, half, None, None) == (128, 64, 32, 4)
    assert flash_triton.tile_sizes(64, torch.bfloat16, None, None) == (128, 64, 64, 4)
    assert flash_triton.tile_sizes(64, single, None, None) == (64, 32, 64, 4)
    assert flash_triton.tile_sizes(100, half, None, None) == (64, 64, 128, 4)
    assert flash_triton.tile_sizes(256, single, None, None) == (16, 16, 256, 4)
    assert flash_triton.tile_sizes(256, half, 16, 32) == (16, 32, 256, 4)
    assert flash_triton.tile_sizes(3, half, None, None)[2] == 16  # tl.dot wants sides ≥ 16


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
    assert all(c[0] * c[1] >= 16 * 16 and c[2] in (4, 8) for cs in flash_triton.CANDIDATES.values() for c in cs)
    assert all(flash_triton.tile_sizes(d, torch.float16, None, None)[:2] == flash_triton.CANDIDATES[d][0][:2]
               for d in (64, 128, 256))  # the default tiles are among those timed, first


@needs_triton
def test_the_kernels_compile_for_an_a100_without_one():
    """Triton's compiler and ptxas run on the CPU: the forward kernel compiles for sm_80 to tensor-core code."""
    (compiled,) = compile_for_gpu(80, torch.float16, 16, causal=True, kernels=("forward",))
    assert (compiled.kernel, compiled.arch, compiled.block_d) == ("forward", 80, 16)
    assert 0 < compiled.shared_bytes <= 163 * 1024
    assert "mma.sync" in compiled.ptx and ".target sm_80" in compiled.ptx
    assert "ex2.approx" in compiled.ptx  # exp2: one instruction per weight


def test_the_forward_kernel_has_an_unmasked_and_a_masked_loop():
    """Each loop runs in parts, the tiles every row sees whole (no mask) and the few that need one: compiled for
    sm_90, the forward kernel holds the tile's body twice (three times with a window) — as many times the exp2
    instructions one tile needs (BLOCK_M · BLOCK_N weights over 128 threads) — and its tensor-core products are
    Hopper's asynchronous wgmma."""
    (compiled,) = compile_for_gpu(90, torch.bfloat16, 64, causal=True, kernels=("forward",))
    per_tile = compiled.block_m * compiled.block_n // 128
    assert compiled.ptx.count("ex2.approx") >= 2 * per_tile
    assert "wgmma.mma_async" in compiled.ptx
    # with a window: the window's edge, the interior and the diagonal, three copies of the tile's body
    (windowed,) = compile_for_gpu(90, torch.bfloat16, 64, causal=True, windowed=True, kernels=("forward",))
    assert windowed.ptx.count("ex2.approx") >= 3 * per_tile


def test_the_kernels_compile_for_a_t4_and_their_tiles_shrink_to_fit_it():
    """sm_75 (the T4, Colab's GPU) has 64 KiB of shared memory per program: the dK, dV kernel's default 16-bit tiles
    at d = 64 need more (tiles_for_gpu returns the default tiles when they fit), so they are halved, as a launch
    would halve them, until they fit."""
    (fitted,) = tiles_for_gpu(75, torch.float16, 64, kernels=("dkdv",))
    assert ".target sm_75" in fitted.ptx and fitted.shared_bytes <= SHARED_MEMORY[75]
    block_m, block_n, _, _ = flash_triton.tile_sizes(64, torch.float16, None, None)
    assert (fitted.block_m, fitted.block_n) == flash_triton.halve_tiles(block_m, block_n)  # one halving


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
