"""Bad inputs for train.py: models are modules with parameters, samplers return (inputs, targets) with integer
targets of the logits' shape, settings are numbers in range."""

import torch
from torch import nn

from attention_course.objectives import warmup_cosine
from attention_course.seq2seq import Seq2SeqTransformer
from attention_course.train import (
    Evaluation,
    History,
    SeedRun,
    accuracy,
    evaluate,
    exact_match,
    fit,
    fit_seq2seq,
    label_smoothed_cross_entropy,
    mean_std,
    run_seeds,
    train_step,
    transformer_lr,
)
from bad_inputs import case

RESULTS = (History, Evaluation, SeedRun)  # what fit, evaluate and run_seeds return

LIN = nn.Linear(4, 3)
OPT = torch.optim.SGD(LIN.parameters(), lr=0.1)
X, Y = torch.randn(5, 4), torch.randint(0, 3, (5,))


def sample(step):
    return (X,), Y


def _build():
    return nn.Linear(4, 3)


def _tiny_seq2seq():
    torch.manual_seed(0)
    return Seq2SeqTransformer(6, 6, d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                              dim_feedforward=8, dropout=0.0)


SRC, TGT = torch.randint(3, 6, (2, 4)), torch.randint(3, 6, (2, 5))

CASES = [
    case(train_step, lambda: train_step(OPT, LIN(X).sum(dim=0)), ValueError, arg="loss", says="scalar",
         id="train.train_step-vector-loss"),
    case(train_step, lambda: train_step(OPT, LIN(X).sum().detach()), ValueError, arg="loss",
         says="requires_grad", id="train.train_step-detached"),
    case(train_step, lambda: train_step(LIN, LIN(X).sum()), TypeError, arg="optimizer",
         id="train.train_step-module-as-optimizer"),
    case(train_step, lambda: train_step(OPT, 1.5), TypeError, arg="loss", id="train.train_step-float-loss"),
    case(train_step, lambda: train_step(OPT, LIN(X).sum(), clip=0.0), ValueError, arg="clip",
         id="train.train_step-clip"),
    case(fit, lambda: fit(LIN, sample, 0), ValueError, arg="steps", id="train.fit-zero-steps"),
    case(fit, lambda: fit(LIN, sample, 2.0), TypeError, arg="steps", id="train.fit-float-steps"),
    case(fit, lambda: fit(LIN, sample, 1, lr=-1e-3), ValueError, arg="lr", id="train.fit-negative-lr"),
    case(fit, lambda: fit(LIN, sample, 1, weight_decay=-0.1), ValueError, arg="weight_decay",
         id="train.fit-weight-decay"),
    case(fit, lambda: fit(LIN, sample, 1, schedule=0.5), TypeError, arg="schedule", id="train.fit-schedule"),
    case(fit, lambda: fit(LIN, sample, 1, schedule=lambda s: "fast"), TypeError, arg="schedule(step)",
         id="train.fit-schedule-value"),
    case(fit, lambda: fit(LIN, sample, 1, autocast="bf16"), TypeError, arg="autocast", id="train.fit-autocast"),
    case(fit, lambda: fit(LIN, sample, 1, autocast=torch.float64), ValueError, arg="autocast",
         id="train.fit-autocast-double"),
    case(warmup_cosine, lambda: warmup_cosine(5, 5, 1), ValueError, arg="step", id="train.warmup_cosine-step"),
    case(warmup_cosine, lambda: warmup_cosine(0, 5, 5), ValueError, arg="warmup", id="train.warmup_cosine-warmup"),
    case(warmup_cosine, lambda: warmup_cosine(0, 5, 1, floor=2), ValueError, arg="floor",
         id="train.warmup_cosine-floor"),
    case(fit, lambda: fit(LIN, [(X,), Y], 1), TypeError, arg="sample", id="train.fit-batch-as-sampler"),
    case(fit, lambda: fit(nn.ReLU(), sample, 1), ValueError, arg="model", says="parameters",
         id="train.fit-no-parameters"),
    case(fit, lambda: fit(LIN, lambda s: (X, Y), 1), TypeError, arg="sample(step)", says="(inputs, targets)",
         id="train.fit-inputs-not-tuple"),
    case(fit, lambda: fit(LIN, lambda s: ((X,), Y.float()), 1), TypeError, arg="targets", says="integer",
         id="train.fit-float-targets"),
    case(fit, lambda: fit(LIN, lambda s: ((X,), Y[:3]), 1), ValueError, arg="targets", says="shape",
         id="train.fit-target-shape"),
    case(fit, lambda: fit(LIN, sample, 1, track={"w": 3.0}), TypeError, arg="track['w']",
         id="train.fit-track-not-callable"),
    case(evaluate, lambda: evaluate(LIN, X, Y), TypeError, arg="inputs", says="tuple",
         id="train.evaluate-inputs-not-tuple"),
    case(evaluate, lambda: evaluate("model", (X,), Y), TypeError, arg="model", id="train.evaluate-not-module"),
    case(accuracy, lambda: accuracy(LIN, (X,), Y.tolist()), TypeError, arg="targets", id="train.accuracy-list"),
    case(accuracy, lambda: accuracy(LIN, (X,), Y[None]), ValueError, arg="targets", says="shape",
         id="train.accuracy-shape"),
    case(run_seeds, lambda: run_seeds(_build, lambda s: sample, ((X,), Y), seeds=[], steps=1, lr=0.1), ValueError,
         arg="seeds", id="train.run_seeds-empty"),
    case(run_seeds, lambda: run_seeds(_build, lambda s: sample, ((X,), Y), seeds=[1, 1], steps=1, lr=0.1),
         ValueError, arg="seeds", says="distinct", id="train.run_seeds-repeated"),
    case(run_seeds, lambda: run_seeds(_build, lambda s: sample, ((X,), Y), seeds=3, steps=1, lr=0.1), TypeError,
         arg="seeds", id="train.run_seeds-int"),
    case(run_seeds, lambda: run_seeds(_build(), lambda s: sample, ((X,), Y), seeds=[0], steps=1, lr=0.1),
         TypeError, arg="build", id="train.run_seeds-model-as-build"),
    case(run_seeds, lambda: run_seeds(_build, lambda s: sample, (X, Y, 1), seeds=[0], steps=1, lr=0.1), TypeError,
         arg="test", says="(inputs, targets)", id="train.run_seeds-test"),
    case(run_seeds, lambda: run_seeds(_build, lambda s: sample, ((X,), Y), seeds=[0], steps=1, lr=0.1, clip=0.0),
         ValueError, arg="clip", id="train.run_seeds-clip-zero"),
    case(run_seeds, lambda: run_seeds(_build, lambda s: sample, ((X,), Y), seeds=[0], steps=1, lr=0.1, threads=0),
         ValueError, arg="threads", id="train.run_seeds-threads"),
    case(mean_std, lambda: mean_std([]), ValueError, arg="values", id="train.mean_std-empty"),
    case(mean_std, lambda: mean_std([0.5, "x"]), TypeError, arg="values[1]", id="train.mean_std-string"),
    case(mean_std, lambda: mean_std([0.5, float("nan")]), ValueError, arg="values[1]", id="train.mean_std-nan"),
    case(mean_std, lambda: mean_std([0.5], digits=-1), ValueError, arg="digits", id="train.mean_std-digits"),
    case(transformer_lr, lambda: transformer_lr(0, 512), ValueError, arg="step", id="train.transformer_lr-step"),
    case(transformer_lr, lambda: transformer_lr(1, 512, warmup=0), ValueError, arg="warmup",
         id="train.transformer_lr-warmup"),
    case(transformer_lr, lambda: transformer_lr(1.5, 512), TypeError, arg="step", id="train.transformer_lr-float"),
    case(label_smoothed_cross_entropy, lambda: label_smoothed_cross_entropy(LIN(X), Y, 1.0), ValueError,
         arg="smoothing", id="train.label_smoothed_cross_entropy-smoothing"),
    case(label_smoothed_cross_entropy, lambda: label_smoothed_cross_entropy(LIN(X), Y + 3), ValueError,
         arg="targets", says="[0, 3)", id="train.label_smoothed_cross_entropy-out-of-range"),
    case(label_smoothed_cross_entropy, lambda: label_smoothed_cross_entropy(LIN(X), Y.float()), TypeError,
         arg="targets", id="train.label_smoothed_cross_entropy-float-targets"),
    case(label_smoothed_cross_entropy, lambda: label_smoothed_cross_entropy(LIN(X), Y, smooth_over=[0, 3]),
         ValueError, arg="smooth_over", id="train.label_smoothed_cross_entropy-smooth_over-range"),
    case(label_smoothed_cross_entropy, lambda: label_smoothed_cross_entropy(LIN(X), Y, smooth_over=[1, 1]),
         ValueError, arg="smooth_over", says="distinct", id="train.label_smoothed_cross_entropy-smooth_over-repeat"),
    case(fit_seq2seq, lambda: fit_seq2seq(_tiny_seq2seq(), lambda s: (SRC, TGT), 1, smooth_over=2), TypeError,
         arg="smooth_over", id="train.fit_seq2seq-smooth_over-int"),
    case(label_smoothed_cross_entropy, lambda: label_smoothed_cross_entropy(LIN(X), Y[:2]), ValueError,
         arg="targets", says="shape", id="train.label_smoothed_cross_entropy-shape"),
    case(fit_seq2seq, lambda: fit_seq2seq(LIN, lambda s: (SRC, TGT), 1), TypeError, arg="model", says="d_model",
         id="train.fit_seq2seq-no-d-model"),
    case(fit_seq2seq, lambda: fit_seq2seq(_tiny_seq2seq(), lambda s: (SRC, TGT), 1, label_smoothing=1.0),
         ValueError, arg="label_smoothing", id="train.fit_seq2seq-smoothing"),
    case(fit_seq2seq, lambda: fit_seq2seq(_tiny_seq2seq(), lambda s: (SRC, TGT), 1, betas=(0.9, 1.0)), ValueError,
         arg="betas[1]", id="train.fit_seq2seq-betas"),
    case(fit_seq2seq, lambda: fit_seq2seq(_tiny_seq2seq(), lambda s: (SRC.float(), TGT), 1), TypeError, arg="src",
         id="train.fit_seq2seq-float-src"),
    case(fit_seq2seq, lambda: fit_seq2seq(_tiny_seq2seq(), lambda s: (SRC, TGT), 1, eps=0), ValueError, arg="eps",
         id="train.fit_seq2seq-eps"),
    case(fit_seq2seq, lambda: fit_seq2seq(_tiny_seq2seq(), lambda s: (SRC, TGT), 1, ramp=0), TypeError, arg="ramp",
         id="train.fit_seq2seq-ramp"),
    case(transformer_lr, lambda: transformer_lr(3, 512, ramp=None), TypeError, arg="ramp",
         id="train.transformer_lr-ramp"),
    case(exact_match, lambda: exact_match(_tiny_seq2seq(), SRC[:0], TGT[:0], bos_id=1, eos_id=2), ValueError,
         arg="src", says="batch 0", id="train.exact_match-empty"),
    case(exact_match, lambda: exact_match(_tiny_seq2seq(), SRC, TGT[:1], bos_id=1, eos_id=2), ValueError,
         arg="tgt", id="train.exact_match-batches"),
    case(exact_match, lambda: exact_match(_tiny_seq2seq(), SRC, TGT, bos_id=1, eos_id=2, batch_size=0), ValueError,
         arg="batch_size", id="train.exact_match-batch-size"),
    case(exact_match, lambda: exact_match(_tiny_seq2seq(), SRC, TGT, bos_id="BOS", eos_id=2), TypeError,
         arg="bos_id", id="train.exact_match-string-id"),
]

CASES += [
    case(fit, lambda: fit(LIN, lambda s: ((X,), torch.tensor([0, 1, 2, 3, 0])), 1), ValueError, arg="targets",
         says="[0, 3)", id="train.fit-target-out-of-range"),
    case(evaluate, lambda: evaluate(LIN, (X,), torch.tensor([0, 1, 2, -1, 0])), ValueError, arg="targets",
         says="[0, 3)", id="train.evaluate-negative-target"),
    case(fit, lambda: fit(LIN, sample, 1, track={"w": lambda m: m.weight}), TypeError, arg="track['w']",
         says="number", id="train.fit-track-returns-tensor"),
    case(fit_seq2seq, lambda: fit_seq2seq(_tiny_seq2seq(), lambda s: (SRC, torch.cat([TGT[:, :-1], TGT[:, -1:] + 9],
                                                                                        1)), 1),
         ValueError, arg="targets", says="[0, 6)", id="train.fit_seq2seq-last-target-out-of-range"),
    case(mean_std, lambda: mean_std([1e308, 1e308]), ValueError, arg="values", id="train.mean_std-overflow"),
    case(label_smoothed_cross_entropy, lambda: label_smoothed_cross_entropy(torch.randn(4, 0), torch.zeros(4).long()),
         ValueError, arg="logits", says="at least one class", id="train.label_smoothed_cross_entropy-no-classes"),
    case(exact_match, lambda: exact_match(_tiny_seq2seq(), SRC, torch.ones(2, 600, dtype=torch.long), bos_id=1,
                                          eos_id=2), ValueError, arg="tgt", says="max_len",
         id="train.exact_match-wide"),
]
