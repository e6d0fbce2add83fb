"""Bad inputs for experiments/links.py."""

import torch

from attention_course.experiments.links import train_links
from bad_inputs import case

X = torch.randn(4, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
T = torch.tensor([1, 2, 3, 0])

CASES = [
    case(train_links, lambda: train_links(X.numpy(), T), TypeError, arg="x", id="links.train_links-numpy"),
    case(train_links, lambda: train_links(X, T[:2]), ValueError, arg="target", says="one index per token",
         id="links.train_links-short-target"),
    case(train_links, lambda: train_links(X, T + 4), ValueError, arg="target", says="[0, 4)",
         id="links.train_links-out-of-range"),
    case(train_links, lambda: train_links(X, T, lr=-1.0), ValueError, arg="lr", id="links.train_links-lr"),
]
