"""Solutions to chapter 7's exercises (not part of the installed package; the website shows each one on a click)."""

import math

import torch
import torch.nn.functional as F

from attention_course.gpt import GPT, GPTConfig


def top_p_filter(logits, p):
    probs = torch.softmax(logits, dim=-1)
    sorted_probs, order = probs.sort(descending=True)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs  # the mass ranked ahead of each token
    keep = torch.zeros_like(logits, dtype=torch.bool)
    keep[order] = before < p  # a token stays while the tokens ahead of it hold less than p
    return logits.masked_fill(~keep, -math.inf)


def bits_per_character(logits, targets, n_chars):
    nats = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")
    return nats / math.log(2) / n_chars


def merge_pair(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def next_token_loss(logits, tokens):
    # position t predicts token t + 1: drop the last position's logits and the first token
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())


def train_char_gpt(train_ids, vocab_size, steps, seed):
    length, batch, peak = 64, 16, 6e-3  # windows of 64 characters, 16 a step; the highest learning rate
    # the chapter's GPT with one layer: at a budget of a few hundred steps, steps buy more than depth
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size, d_model=64, n_layers=1, n_heads=4, max_len=length))
    optimizer = torch.optim.AdamW(model.parameters(), lr=peak)

    def rate(step):
        # a linear warm-up over 20 steps, then half a cosine down to a tenth of the peak
        warm_up = min(1.0, (step + 1) / 20)
        return peak * warm_up * (0.55 + 0.45 * math.cos(math.pi * step / steps))

    batches = torch.Generator().manual_seed(seed)  # the windows each step reads
    offsets = torch.arange(length + 1)
    model.train()
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = rate(step)
        # windows of length + 1 characters at random places: characters 0..63 predict 1..64
        starts = torch.randint(0, len(train_ids) - length, (batch, 1), generator=batches)
        window = train_ids[starts + offsets]
        logits = model(window[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab_size), window[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return model.eval()
