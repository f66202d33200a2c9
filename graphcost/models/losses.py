"""Ranking losses over the sampled configs of each graph.

Every loss takes `scores` (B, C), where LOWER means FASTER (a predicted runtime),
measured `runtime` (B, C) and a `mask` (B, C) of real (not padded) configs, and
returns a scalar. Only the order of runtimes within a graph matters to the ranking
losses, so graphs of very different runtimes weigh the same.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def pairwise_hinge(scores: Tensor, runtime: Tensor, mask: Tensor | None = None,
                   margin: float = 0.1) -> Tensor:
    """Mean over pairs (i faster than j, same graph) of max(0, margin − (s_j − s_i)).

    Pairs of equal runtime carry no order and are left out.
    """
    mask = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask
    faster = runtime.unsqueeze(2) < runtime.unsqueeze(1)  # [b, i, j]: i runs faster than j
    valid = faster & mask.unsqueeze(2) & mask.unsqueeze(1)
    gap = scores.unsqueeze(1) - scores.unsqueeze(2)  # [b, i, j] = s_j − s_i
    losses = torch.relu(margin - gap)
    return (losses * valid).sum() / valid.sum().clamp(min=1)


def listmle(scores: Tensor, runtime: Tensor, mask: Tensor | None = None) -> Tensor:
    """Negative Plackett–Luce log-likelihood of the true order (fastest first).

    With utilities u = −s sorted fastest first, the loss of a graph is
    Σ_i [log Σ_{j ≥ i} exp(u_j) − u_i], divided by its number of configs, averaged over
    graphs. The inner sums use `logcumsumexp`, which stays finite for scores of any size.
    """
    mask = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask
    order = torch.argsort(runtime.masked_fill(~mask, float("inf")), dim=1, stable=True)
    u = torch.gather(-scores, 1, order)
    valid = torch.gather(mask, 1, order)
    u = u.masked_fill(~valid, torch.finfo(u.dtype).min / 4)  # finite: keeps gradients NaN-free
    tail = torch.logcumsumexp(u.flip(1), dim=1).flip(1)  # log Σ_{j ≥ i} exp(u_j)
    terms = torch.where(valid, tail - u, torch.zeros_like(u))
    per_graph = terms.sum(1) / valid.sum(1).clamp(min=1)
    return per_graph[valid.any(1)].mean()


def mse(scores: Tensor, runtime: Tensor, mask: Tensor | None = None) -> Tensor:
    """Mean squared error to each graph's standardised log-runtime (z-scores per graph)."""
    mask = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask
    m = mask.to(scores.dtype)
    n = m.sum(1, keepdim=True).clamp(min=1)
    y = torch.log(runtime.clamp(min=1e-12)) * m
    mean = y.sum(1, keepdim=True) / n
    std = ((((y - mean) * m) ** 2).sum(1, keepdim=True) / n).sqrt().clamp(min=1e-6)
    z = (y - mean) / std
    return (((scores - z) ** 2) * m).sum() / m.sum().clamp(min=1)


def tf_listmle(scores: Tensor, runtime: Tensor, mask: Tensor | None = None,
               temperature: float = 1.0) -> Tensor:
    """ListMLE as the official baselines compute it (TF-Ranking's `ListMLELoss` with the
    runtimes as labels): the Plackett–Luce likelihood of the SLOWEST-first order under
    utilities s / temperature, summed over a graph's configs (not divided by their
    number), averaged over graphs; ties in runtime are put in random order (torch's RNG).

    It ranks the same way as `listmle` but is a different function of the scores, and
    its scale matters under per-tensor gradient clipping, so the baselines use this one.
    """
    mask = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask
    shuffle = torch.rand(runtime.shape, device=runtime.device)  # breaks ties at random
    key = torch.where(mask, runtime.double(), float("-inf"))
    order = torch.argsort(shuffle, dim=1)
    order = torch.gather(order, 1, torch.argsort(torch.gather(key, 1, order), dim=1,
                                                  descending=True, stable=True))
    u = torch.gather(scores / temperature, 1, order)
    valid = torch.gather(mask, 1, order)
    u = u.masked_fill(~valid, torch.finfo(u.dtype).min / 4)
    tail = torch.logcumsumexp(u.flip(1), dim=1).flip(1)
    per_graph = torch.where(valid, tail - u, torch.zeros_like(u)).sum(1)
    return per_graph[valid.any(1)].mean()


def tf_mse(scores: Tensor, runtime: Tensor, mask: Tensor | None = None) -> Tensor:
    """Plain mean squared error of scores to the runtime itself (Keras'
    MeanSquaredError, as the official tile baselines add it with weight 0.02): the mean
    over a graph's configs, averaged over graphs."""
    mask = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask
    m = mask.to(scores.dtype)
    per_graph = (((scores - runtime) ** 2) * m).sum(1) / m.sum(1).clamp(min=1)
    return per_graph[mask.any(1)].mean()


LOSSES = {"hinge": pairwise_hinge, "listmle": listmle, "mse": mse, "tf-listmle": tf_listmle,
          "tf-mse": tf_mse}


def parse_loss(spec: str) -> dict[str, float]:
    """'hinge' or a weighted mix 'hinge:1,listmle:0.5' → {name: weight}.

    A weight must be a finite number ≥ 0 and at least one > 0: a negative weight
    would train the model to rank backwards, all zeros to learn nothing."""
    weights: dict[str, float] = {}
    for part in spec.replace(" ", "").split(","):
        name, _, w = part.partition(":")
        if name not in LOSSES:
            raise ValueError(f"unknown loss '{name}' in '{spec}'; known: {sorted(LOSSES)}")
        if name in weights:
            raise ValueError(f"loss '{name}' appears twice in '{spec}'")
        try:
            weights[name] = float(w) if w else 1.0
        except ValueError:
            raise ValueError(f"the weight of '{name}' in '{spec}' must be a number, "
                             f"got '{w}'") from None
        if not (math.isfinite(weights[name]) and weights[name] >= 0):
            raise ValueError(f"the weight of '{name}' in '{spec}' must be a finite number "
                             f"≥ 0 (a negative one ranks backwards), got {w}")
    if not any(weights.values()):
        raise ValueError(f"the weights in '{spec}' are all 0: nothing would be learned")
    return weights


class RankingLoss:
    """A weighted sum of the losses above, built from a spec like 'hinge:1,listmle:0.5'."""

    def __init__(self, spec: str = "hinge", margin: float = 0.1, temperature: float = 1.0):
        self.spec = spec
        self.weights = parse_loss(spec)
        self.margin = margin
        self.temperature = temperature

    def __call__(self, scores: Tensor, runtime: Tensor, mask: Tensor | None = None) -> Tensor:
        total = scores.new_zeros(())
        for name, w in self.weights.items():
            if name == "hinge":
                value = pairwise_hinge(scores, runtime, mask, self.margin)
            elif name == "tf-listmle":
                value = tf_listmle(scores, runtime, mask, self.temperature)
            else:
                value = LOSSES[name](scores, runtime, mask)
            total = total + w * value
        return total
