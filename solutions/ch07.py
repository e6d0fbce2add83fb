"""Solutions to chapter 7's exercises (not part of the installed package; the website shows each one on a click)."""

import math

import torch
import torch.nn.functional as F


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
