"""Chapter 7's project (7.5, a character GPT trained to a target): plausible wrong answers, which its check must
reject, and correct answers written differently from solutions/ch07.py, which it must accept
(tests/test_exercises.py picks both up). Each wrong answer is one mistake in an otherwise working training."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attention_course.gpt import GPT, GPTConfig

LENGTH = 64  # characters per training window


def _rotate(x: torch.Tensor) -> torch.Tensor:
    """Rotary positions in the half-split form (GPT-NeoX's; the package rotates interleaved pairs): the first half
    of each vector's coordinates paired with the second half, rotated by position × frequency."""
    n, d = x.shape[-2], x.shape[-1]
    angle = torch.arange(n)[:, None] * 10000.0 ** (-torch.arange(0, d, 2) / d)
    cos, sin, a, b = angle.cos(), angle.sin(), x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class _TinyGPT(nn.Module):
    """One pre-LN block written out in plain tensor operations: four heads, rotary positions (or ``"learned"`` ones
    added to the embeddings), a causal mask (unless ``causal=False``), a feed-forward network of width 4·d, an
    output layer of its own (not tied); weights drawn with standard deviation 0.02."""

    def __init__(self, vocab: int, d: int = 64, heads: int = 4, causal: bool = True,
                 positions: str = "rotary") -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.embed = nn.Embedding(vocab, d)
        self.positions = nn.Parameter(torch.zeros(LENGTH, d)) if positions == "learned" else None
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.head = nn.Linear(d, vocab)
        for p in self.parameters():
            if p.ndim == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, n = ids.shape
        x = self.embed(ids) if self.positions is None else self.embed(ids) + self.positions[:n]
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        if self.positions is None:
            q, k = _rotate(q), _rotate(k)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if self.causal:  # query i may see keys 0..i
            scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
        x = x + self.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, -1))
        x = x + self.ff(self.norm2(x))
        return self.head(self.norm3(x))


def _loop(train_ids, vocab_size, steps, seed, *, model=None, lr=6e-3, batch=16, warm_up=20, shift=1, cosine=True,
          one_batch=False, step_factor=1, optimizer="adamw", clip=1.0):
    """The solution's loop with one knob turned: ``shift=0`` (targets not shifted), a tiny ``lr``, ``one_batch``
    (the same windows every step), ``step_factor`` (more steps than the budget), another model, optimiser or
    schedule."""
    torch.manual_seed(seed)
    model = model or GPT(GPTConfig(vocab_size, d_model=64, n_layers=1, n_heads=4, max_len=LENGTH))
    opt = (torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam)(model.parameters(), lr=lr)
    batches = torch.Generator().manual_seed(seed)
    offsets = torch.arange(LENGTH + 1)
    model.train()
    for step in range(steps * step_factor):
        rate = min(1.0, (step + 1) / warm_up) if warm_up else 1.0
        if cosine:
            rate *= 0.55 + 0.45 * math.cos(math.pi * step / steps)
        for group in opt.param_groups:
            group["lr"] = lr * rate
        if one_batch:
            batches.manual_seed(seed)
        starts = torch.randint(0, len(train_ids) - LENGTH, (batch, 1), generator=batches)
        window = train_ids[starts + offsets]
        logits = model(window[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), window[:, shift : shift + LENGTH].reshape(-1))
        opt.zero_grad()
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
    return model.eval()


def _targets_not_shifted(train_ids, vocab_size, steps, seed):
    return _loop(train_ids, vocab_size, steps, seed, shift=0)


def _no_causal_mask(train_ids, vocab_size, steps, seed):
    torch.manual_seed(seed)
    return _loop(train_ids, vocab_size, steps, seed, model=_TinyGPT(vocab_size, causal=False))


def _learning_rate_far_too_small(train_ids, vocab_size, steps, seed):
    return _loop(train_ids, vocab_size, steps, seed, lr=1e-5)


def _one_fixed_batch(train_ids, vocab_size, steps, seed):
    return _loop(train_ids, vocab_size, steps, seed, one_batch=True)


def _vocabulary_hard_coded(train_ids, vocab_size, steps, seed):
    return _loop(train_ids, 63, steps, seed)  # the corpus's 63 characters, whatever vocab_size says


def _twice_the_steps(train_ids, vocab_size, steps, seed):
    return _loop(train_ids, vocab_size, steps, seed, step_factor=2)


def _hand_written_model(train_ids, vocab_size, steps, seed):
    torch.manual_seed(seed)
    return _loop(train_ids, vocab_size, steps, seed, model=_TinyGPT(vocab_size), lr=3e-3, warm_up=0, cosine=False)


def _multi_query_adam(train_ids, vocab_size, steps, seed):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size, d_model=64, n_layers=1, n_heads=4, num_kv_heads=1, max_len=LENGTH))
    return _loop(train_ids, vocab_size, steps, seed, model=model, lr=4e-3, batch=20, warm_up=0, cosine=False,
                 optimizer="adam", clip=None)


MUTANTS = {"7.5": {
    "targets not shifted: each position learns to copy its own character": _targets_not_shifted,
    "no causal mask: a hand-written model whose attention sees the whole window": _no_causal_mask,
    "a learning rate far too small (1e-5)": _learning_rate_far_too_small,
    "one fixed batch for every step: it overfits": _one_fixed_batch,
    "the vocabulary hard-coded to the corpus's 63 characters": _vocabulary_hard_coded,
    "twice the step budget": _twice_the_steps,
}}

ALTERNATIVES = {"7.5": {
    "a hand-written model: plain tensor operations, half-split rotary positions, constant-rate AdamW":
        _hand_written_model,
    "the package's GPT with one key-value head, Adam at a constant rate, no clipping, 20 windows a step":
        _multi_query_adam,
}}
