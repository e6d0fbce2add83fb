"""The training loop learns a task it should, deterministically, and its helpers compute what they say."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_course.measure import cpu_threads
from attention_course.train import accuracy, evaluate, fit, mean_std, run_seeds, train_step


def _linear_task(seed: int):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(4, 3, generator=g)

    def sample(step):
        x = torch.randn(64, 4, generator=g)
        return (x,), (x @ w).argmax(-1)

    return sample


def test_fit_learns_and_is_deterministic():
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = nn.Linear(4, 3)
        hist = fit(model, _linear_task(0), steps=150, lr=0.05, track={"w_norm": lambda m: m.weight.norm()})
        runs.append(hist)
    assert runs[0].loss == runs[1].loss  # same seeds, same curve
    assert runs[0].loss[-1] < 0.5 * runs[0].loss[0]
    assert len(runs[0].extra["w_norm"]) == 150


def test_fit_follows_its_schedule_step_by_step():
    """The rate multiplies lr at each step: a schedule that is 0 on odd steps leaves the weights alone there, and a
    constant schedule of 1 is the run without one, bit for bit."""
    weights = []

    def zero_on_odd(step):
        weights.append(model.weight.detach().clone())
        return float(step % 2 == 0)

    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    fit(model, _linear_task(0), steps=6, lr=0.05, schedule=zero_on_odd)
    weights.append(model.weight.detach().clone())
    for step in range(6):  # the update of step s is weights[s + 1] - weights[s]
        moved = not torch.equal(weights[step], weights[step + 1])
        assert moved == (step % 2 == 0), step
    runs = []
    for schedule in (None, lambda step: 1.0):
        torch.manual_seed(0)
        runs.append(fit(nn.Linear(4, 3), _linear_task(0), steps=20, lr=0.05, schedule=schedule).loss)
    assert runs[0] == runs[1]


def test_fit_under_autocast_runs_the_forward_pass_in_that_dtype():
    seen = []
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    model.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    hist = fit(model, _linear_task(0), steps=40, lr=0.05, autocast=torch.bfloat16)
    assert seen[0] == torch.bfloat16 and model.weight.dtype == torch.float32  # mixed precision
    assert hist.loss[-1] < 0.7 * hist.loss[0]
    with pytest.raises(ValueError, match="autocast must be torch.bfloat16 or torch.float16, got torch.float64"):
        fit(model, _linear_task(0), steps=1, autocast=torch.float64)


def test_warmup_cosine_is_the_gpt_schedule():
    import math

    from attention_course.objectives import warmup_cosine

    steps, warmup = 100, 10
    assert [warmup_cosine(s, steps, warmup) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]  # linear ramp to the peak
    assert warmup_cosine(10, steps, warmup) == 1.0 and math.isclose(warmup_cosine(99, steps, warmup), 0.1)
    half = warmup + (steps - 1 - warmup) / 2  # half way down the cosine: half way between 1 and the floor
    assert math.isclose(warmup_cosine(int(half), steps, warmup), 0.55, abs_tol=0.02)
    rates = [warmup_cosine(s, steps, warmup) for s in range(warmup, steps)]
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))  # never rises after the peak
    assert warmup_cosine(0, steps, 0) == 1.0 and warmup_cosine(50, steps, 10, floor=1.0) == 1.0
    with pytest.raises(ValueError, match="step"):
        warmup_cosine(100, steps, warmup)


def test_fit_rejects_no_steps():
    with pytest.raises(ValueError, match="steps must be a positive integer, got 0"):
        fit(nn.Linear(4, 3), _linear_task(0), steps=0)


def test_train_step_is_one_clipped_adam_step():
    torch.manual_seed(0)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    model, ref = nn.Linear(4, 3), nn.Linear(4, 3)
    ref.load_state_dict(model.state_dict())
    opt, ref_opt = torch.optim.Adam(model.parameters(), lr=0.1), torch.optim.Adam(ref.parameters(), lr=0.1)
    for _ in range(3):
        value = train_step(opt, 100 * F.cross_entropy(model(x), y), clip=0.5)
        ref_loss = 100 * F.cross_entropy(ref(x), y)
        ref_opt.zero_grad()
        ref_loss.backward()
        norm = torch.cat([p.grad.flatten() for p in ref.parameters()]).norm()
        assert norm > 0.5  # so the clipping below does something
        for p in ref.parameters():
            p.grad *= 0.5 / (norm + 1e-6)
        ref_opt.step()
        # clip_grad_norm_ sums the squares in another order than torch.cat(...).norm(), so the parameters (and the
        # next step's loss) agree to float32 rounding, not bit for bit
        assert value == pytest.approx(ref_loss.item(), rel=1e-6)
        assert all(p.grad.norm() > 0 for p in model.parameters())
        for a, b in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match=r"scalar tensor, got shape \(8,\)"):
        train_step(opt, F.cross_entropy(model(x), y, reduction="none"))


def test_evaluate_is_accuracy_and_cross_entropy():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    x, y = torch.randn(2, 5, 4), torch.randint(0, 3, (2, 5))
    y[0, :2] = -100
    result = evaluate(model, (x,), y)
    keep = y != -100
    with torch.no_grad():
        logits = model(x)
        assert result.accuracy == float((logits.argmax(-1)[keep] == y[keep]).float().mean())
        nll = -logits.log_softmax(-1).gather(-1, y.clamp_min(0)[..., None])[..., 0]
        assert result.loss == pytest.approx(float(nll[keep].mean()), rel=1e-6)
    assert result.accuracy == accuracy(model, (x,), y)


def test_run_seeds_seeds_builds_and_batches_and_restores_what_it_changes():
    test = _linear_task(99)(0)
    torch.manual_seed(123)
    expected_next = torch.rand(2)
    torch.manual_seed(123)
    threads = torch.get_num_threads()
    seen_threads = []

    def build():
        seen_threads.append(torch.get_num_threads())
        return nn.Linear(4, 3)

    runs = run_seeds(build, _linear_task, test, seeds=[5, 6], steps=60, lr=0.05)
    assert torch.equal(torch.rand(2), expected_next)  # the caller's random stream is untouched
    assert seen_threads == [1, 1] and torch.get_num_threads() == threads
    assert [r.seed for r in runs] == [5, 6] and all(len(r.history.loss) == 60 for r in runs)
    # seed 5's run, by hand: the model built under manual_seed(5), trained on _linear_task(5), on one thread as
    # run_seeds runs it: the same kernels summing in the same order, so the numbers agree bit for bit (on the
    # default thread count a reduction may be split differently, and the exact comparisons below would then hold
    # on one machine and not on another)
    torch.manual_seed(5)
    model = nn.Linear(4, 3)
    with cpu_threads(1):
        hist = fit(model, _linear_task(5), 60, 0.05)
        assert runs[0].history.loss == hist.loss
        assert (runs[0].accuracy, runs[0].test_loss) == evaluate(model, *test)
    assert runs[1].history.loss != runs[0].history.loss
    with pytest.raises(ValueError, match="at least one seed"):
        run_seeds(build, _linear_task, test, seeds=[], steps=1, lr=0.1)
    with pytest.raises(ValueError, match="distinct"):
        run_seeds(build, _linear_task, test, seeds=[1, 1], steps=1, lr=0.1)
    with pytest.raises(TypeError, match=r"seeds\[0\] must be an integer"):
        run_seeds(build, _linear_task, test, seeds=[1.5], steps=1, lr=0.1)


def test_accuracy_ignores_minus_100():
    class Fixed(nn.Module):
        def forward(self, x):
            return torch.tensor([[[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]])

    assert accuracy(Fixed(), (torch.zeros(1),), torch.tensor([[1, 0, -100]])) == 1.0
    assert accuracy(Fixed(), (torch.zeros(1),), torch.tensor([[0, 0, -100]])) == 0.5


def test_mean_std():
    assert mean_std([1.0, 2.0, 3.0], digits=2) == "2.00 ± 1.00"
    assert mean_std([0.5]) == "0.500 ± 0.000"


# ------------------------------------------------------------------------------------------- chapter 5
def test_transformer_lr_is_the_papers_schedule():
    import math

    import pytest

    from attention_course.train import transformer_lr

    d, w = 512, 4000
    assert math.isclose(transformer_lr(1, d, w), d**-0.5 * w**-1.5)  # warm-up branch
    assert math.isclose(transformer_lr(100, d, w), 100 * d**-0.5 * w**-1.5)  # linear in the step
    assert math.isclose(transformer_lr(16000, d, w), d**-0.5 / 16000**0.5)  # decay branch
    peak = transformer_lr(w, d, w)
    assert math.isclose(peak, 1 / math.sqrt(d * w))
    assert all(transformer_lr(s, d, w) <= peak for s in range(1, 3 * w, 97))
    assert math.isclose(transformer_lr(10, d, w, factor=2.0), 2 * transformer_lr(10, d, w))
    with pytest.raises(ValueError, match="step must be a positive integer"):
        transformer_lr(0, d, w)


def test_transformer_lr_without_its_ramp_keeps_the_peak_and_the_decay():
    import math

    import pytest

    from attention_course.train import transformer_lr

    d, w = 64, 300
    peak = transformer_lr(w, d, w)
    flat = [transformer_lr(s, d, w, ramp=False) for s in range(1, w + 1)]
    assert all(math.isclose(x, peak) for x in flat)  # at the peak from step 1, not above it
    assert transformer_lr(1, d, 1) > 17 * peak  # what warmup=1 does instead: sqrt(300) ≈ 17.3 times higher
    for s in (w, w + 1, 2 * w, 10 * w):  # the same decay after the warm-up
        assert math.isclose(transformer_lr(s, d, w, ramp=False), transformer_lr(s, d, w))
    with pytest.raises(TypeError, match="ramp"):
        transformer_lr(5, d, w, ramp="no")


def test_label_smoothing_equals_pytorch_and_is_smoothed():
    import pytest
    import torch.nn.functional as F

    from attention_course.train import label_smoothed_cross_entropy

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 5, 7, generator=g, dtype=torch.float64)
    targets = torch.randint(0, 7, (6, 5), generator=g)
    targets[0, :2] = -100
    for eps in (0.0, 0.1, 0.3):
        ours = label_smoothed_cross_entropy(logits, targets, eps)
        ref = F.cross_entropy(logits.reshape(-1, 7), targets.reshape(-1), label_smoothing=eps)
        assert ours.dtype == torch.float64  # float64 in, float64 out, as F.cross_entropy
        torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
    # a perfect, confident prediction still costs something with smoothing
    sure = torch.full((1, 7), -30.0)
    sure[0, 3] = 30.0
    assert label_smoothed_cross_entropy(sure, torch.tensor([3]), 0.0) < 1e-6
    assert label_smoothed_cross_entropy(sure, torch.tensor([3]), 0.1) > 1.0
    with pytest.raises(ValueError, match="smoothing"):
        label_smoothed_cross_entropy(logits, targets, 1.0)
    with pytest.raises(ValueError, match="shape"):
        label_smoothed_cross_entropy(logits, targets[:, :3])


def test_label_smoothing_over_chosen_ids():
    """smooth_over=S: q = (1 - eps) onehot + eps 1_S/|S|, by hand; over every id it is the default; the minimum over
    the logits is the entropy of q, reached at log p = log q (so the ids outside S get no probability)."""
    from attention_course.train import label_smoothed_cross_entropy

    g = torch.Generator().manual_seed(1)
    logits = torch.randn(8, 6, generator=g, dtype=torch.float64)
    targets = torch.randint(2, 6, (8,), generator=g)
    over, eps = [2, 3, 4, 5], 0.2
    q = torch.zeros(8, 6, dtype=torch.float64)
    q[:, over] = eps / len(over)
    q[torch.arange(8), targets] += 1 - eps
    by_hand = -(q * logits.log_softmax(-1)).sum(-1).mean()
    torch.testing.assert_close(label_smoothed_cross_entropy(logits, targets, eps, smooth_over=over), by_hand,
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(label_smoothed_cross_entropy(logits, targets, eps, smooth_over=range(6)),
                               label_smoothed_cross_entropy(logits, targets, eps), rtol=1e-12, atol=1e-12)
    best = q.clamp_min(1e-300).log()  # logits equal to log q: the loss is the entropy of q
    entropy = -(q * best).nan_to_num().sum(-1).mean()
    at_best = label_smoothed_cross_entropy(best, targets, eps, smooth_over=over)
    torch.testing.assert_close(at_best, entropy, rtol=1e-9, atol=1e-9)
    assert label_smoothed_cross_entropy(logits, targets, eps, smooth_over=over) > at_best


def test_label_smoothing_at_the_edges_as_pytorch():
    """Low precision comes back in its dtype; nothing to score gives NaN, as F.cross_entropy."""
    import torch.nn.functional as F

    from attention_course.train import label_smoothed_cross_entropy

    g = torch.Generator().manual_seed(1)
    logits, targets = torch.randn(8, 5, generator=g), torch.randint(0, 5, (8,), generator=g)
    for dtype in (torch.float16, torch.bfloat16):
        ours = label_smoothed_cross_entropy(logits.to(dtype), targets, 0.1)
        ref = F.cross_entropy(logits.to(dtype), targets, label_smoothing=0.1)
        assert ours.dtype == ref.dtype == dtype
        torch.testing.assert_close(ours.float(), ref.float(), atol=1e-2, rtol=1e-2)
    for t in (torch.full((8,), -100), torch.zeros(0, dtype=torch.long)):
        x = logits[: len(t)]
        assert torch.isnan(label_smoothed_cross_entropy(x, t, 0.1))
        assert torch.isnan(F.cross_entropy(x, t, label_smoothing=0.1))


def _tiny_reversal():
    from attention_course.data import reverse_digits
    from attention_course.seq2seq import Seq2SeqTransformer

    torch.manual_seed(0)
    model = Seq2SeqTransformer(13, d_model=32, nhead=4, num_encoder_layers=1, num_decoder_layers=1,
                               dim_feedforward=64, dropout=0.0, max_len=16)
    g = torch.Generator().manual_seed(1)

    def sample(step):
        b = reverse_digits(32, 1, 4, g)
        return b.src, b.tgt

    return model, sample


def test_fit_seq2seq_learns_deterministically_and_follows_the_schedule():
    from attention_course.train import fit_seq2seq, transformer_lr

    runs = []
    for _ in range(2):
        model, sample = _tiny_reversal()
        runs.append(fit_seq2seq(model, sample, 150, warmup=50, factor=1.0))
    assert runs[0].loss == runs[1].loss
    assert sum(runs[0].loss[-10:]) / 10 < 0.6 * sum(runs[0].loss[:10]) / 10
    assert runs[0].extra["lr"][49] == transformer_lr(50, 32, 50) == max(runs[0].extra["lr"])
    assert not model.training


def test_exact_match_counts_whole_sequences():
    from attention_course.data import BOS_ID, EOS_ID, reverse_digits
    from attention_course.train import exact_match, fit_seq2seq

    model, sample = _tiny_reversal()
    held = reverse_digits(100, 1, 4, torch.Generator().manual_seed(2), split="test")
    before = exact_match(model, held.src, held.tgt, bos_id=BOS_ID, eos_id=EOS_ID)
    fit_seq2seq(model, sample, 400, warmup=100, factor=1.0)
    after = exact_match(model, held.src, held.tgt, bos_id=BOS_ID, eos_id=EOS_ID)
    assert before < 0.1 < 0.5 < after
    # a wrong target anywhere makes the sequence count as wrong
    corrupted = held.tgt.clone()
    corrupted[:, 1] = (corrupted[:, 1] - 3 + 1) % 10 + 3
    assert exact_match(model, held.src, corrupted, bos_id=BOS_ID, eos_id=EOS_ID) < 0.05
    assert exact_match(model, held.src, held.tgt, bos_id=BOS_ID, eos_id=EOS_ID, use_cache=False,
                       batch_size=7) == after


def test_evaluate_with_nothing_to_score_is_nan_as_pytorch():
    import math

    model = nn.Linear(4, 3)
    x = torch.randn(5, 4)
    result = evaluate(model, (x,), torch.full((5,), -100))
    assert math.isnan(result.accuracy) and math.isnan(result.loss)
    empty = evaluate(model, (x[:0],), torch.zeros(0, dtype=torch.long))
    assert math.isnan(empty.accuracy) and math.isnan(empty.loss)


def test_evaluate_accepts_any_integer_targets_and_restores_the_mode():
    model = nn.Linear(4, 3).train()
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 1, 0, 2])
    expected = evaluate(model, (x,), y)
    assert model.training  # the caller's mode is restored
    assert evaluate(model, (x,), y.to(torch.int32)) == expected
    assert evaluate(model, (x,), y.to(torch.uint8)) == expected
