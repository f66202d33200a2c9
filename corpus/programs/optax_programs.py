"""Corpus programs written with Optax (gradient transformations), models in flax.linen.

Each program is one optimisation step: the loss's value_and_grad, then an Optax update and
`optax.apply_updates`. Families: AdamW with clipping and a warmup-cosine schedule on an
MLP, LAMB (per-layer trust ratios) on a CNN, Adafactor (factored second moments) on a
transformer language model, L-BFGS with its zoom line search (while loops) on a softmax
regression, and gradient accumulation with `optax.MultiSteps` over micro-batches in a
lax.scan (SGD with Nesterov momentum and weight decay) on a 1-D conv net.
Optimizer states are fresh ones (zeros, or `init` itself for L-BFGS).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _corpus import Builder, Program, fill, integers, normal, pick, select, zeros
from flax import linen as nn

_KEY = jax.random.PRNGKey(0)


def _params(model: nn.Module, rng: np.random.Generator, x: jax.Array) -> dict:
    return fill(rng, jax.eval_shape(model.init, _KEY, x)["params"], -1)


def _xent(logits: jax.Array, labels: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def _train_step(model: nn.Module, tx: optax.GradientTransformation) -> Callable:
    """`(params, opt_state, x, labels) -> (params, opt_state, loss)`."""

    def step(params, opt_state, x, labels):
        loss, grads = jax.value_and_grad(
            lambda p: _xent(model.apply({"params": p}, x), labels))(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


class _MLP(nn.Module):
    widths: Sequence[int]

    @nn.compact
    def __call__(self, x):
        for w in self.widths[:-1]:
            x = nn.gelu(nn.Dense(w)(x))
        return nn.Dense(self.widths[-1])(x)


def optax_adamw_step(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """clip_by_global_norm + AdamW with a warmup-cosine schedule, on an MLP classifier."""
    batch, d_in = pick(rng, [64, 128, 256]), pick(rng, [256, 784])
    widths = [pick(rng, [256, 512]), pick(rng, [128, 256]), 10]
    model = _MLP(widths)
    x, labels = normal(rng, (batch, d_in)), integers(rng, (batch,), 10)
    params = _params(model, rng, x)
    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-3, 100, 10_000)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=1e-4))
    state = zeros(jax.eval_shape(tx.init, params))
    return _train_step(model, tx), (params, state, x, labels)


class _CNN(nn.Module):
    widths: Sequence[int]

    @nn.compact
    def __call__(self, x):
        for w in self.widths:
            x = nn.relu(nn.Conv(w, (3, 3))(x))
            x = nn.relu(nn.Conv(w, (3, 3))(x))
            x = nn.max_pool(x, (2, 2), (2, 2))
        return nn.Dense(10)(x.mean((1, 2)))


def optax_lamb_step(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """LAMB (Adam moments, per-layer trust ratio) on a VGG-style CNN."""
    n, hw = pick(rng, [2, 4, 8]), pick(rng, [24, 32])
    widths = [pick(rng, [8, 16]), pick(rng, [16, 32])]
    model = _CNN(widths)
    x, labels = normal(rng, (n, hw, hw, 3)), integers(rng, (n,), 10)
    params = _params(model, rng, x)
    tx = optax.lamb(1e-3, weight_decay=1e-2)
    state = zeros(jax.eval_shape(tx.init, params))
    return _train_step(model, tx), (params, state, x, labels)


class _LM(nn.Module):
    vocab: int
    dim: int
    heads: int
    depth: int

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(self.vocab, self.dim)(tokens)
        mask = nn.make_causal_mask(tokens)
        for _ in range(self.depth):
            x = x + nn.SelfAttention(self.heads)(nn.RMSNorm()(x), mask=mask)
            x = x + nn.Dense(self.dim)(nn.silu(nn.Dense(4 * self.dim)(nn.RMSNorm()(x))))
        return nn.Dense(self.vocab)(nn.RMSNorm()(x))


def optax_adafactor_step(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Adafactor (factored second-moment rows and columns, update clipping) on a causal
    transformer language model (next-token cross-entropy)."""
    b, t = pick(rng, [1, 2]), pick(rng, [32, 64])
    dim, heads, depth = pick(rng, [64, 96]), pick(rng, [2, 4]), pick(rng, [1, 2])
    vocab = pick(rng, [1000, 2000])
    model = _LM(vocab, dim, heads, depth)
    tokens = integers(rng, (b, t + 1), vocab)
    params = _params(model, rng, tokens[:, :-1])
    tx = optax.adafactor(1e-2, min_dim_size_to_factor=32)
    state = zeros(jax.eval_shape(tx.init, params))
    step = _train_step(model, tx)
    return (lambda p, s, tokens: step(p, s, tokens[:, :-1], tokens[:, 1:])), (
        params, state, tokens)


def optax_lbfgs(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """`iters` L-BFGS iterations (zoom line search, a while loop in each) in a
    lax.fori_loop, minimising an L2-regularised softmax regression."""
    n, d, classes = pick(rng, [1000, 2000, 4000]), pick(rng, [32, 64]), pick(rng, [5, 10])
    iters = pick(rng, [2, 4])
    x, labels = normal(rng, (n, d)), integers(rng, (n,), classes)
    params = {"w": normal(rng, (d, classes), 0.01), "b": normal(rng, (classes,), 0.01)}
    opt = optax.lbfgs(memory_size=pick(rng, [5, 10]))

    def loss(params, x, labels):
        logits = x @ params["w"] + params["b"]
        return _xent(logits, labels) + 1e-3 * jnp.sum(params["w"] ** 2)

    def run(params, x, labels):
        objective = lambda p: loss(p, x, labels)  # noqa: E731
        value_and_grad = optax.value_and_grad_from_state(objective)

        def body(_, carry):
            params, state = carry
            value, grad = value_and_grad(params, state=state)
            updates, state = opt.update(grad, state, params, value=value, grad=grad,
                                        value_fn=objective)
            return optax.apply_updates(params, updates), state

        params, _ = jax.lax.fori_loop(0, iters, body, (params, opt.init(params)))
        return params, objective(params)

    return run, (params, x, labels)


class _Conv1D(nn.Module):
    widths: Sequence[int]

    @nn.compact
    def __call__(self, x):  # x: (batch, time, channels)
        for w in self.widths:
            x = nn.gelu(nn.LayerNorm()(nn.Conv(w, (5,))(x)))
        return nn.Dense(4)(x.mean(1))


def optax_accumulate(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Gradient accumulation: `optax.MultiSteps` over `k` micro-batches in a lax.scan (the
    inner SGD with Nesterov momentum and weight decay applies on the k-th), 1-D conv net."""
    k, micro, t = pick(rng, [2, 3]), pick(rng, [4, 8]), pick(rng, [32, 64])
    widths = [pick(rng, [16, 32]) for _ in range(pick(rng, [2, 3]))]
    model = _Conv1D(widths)
    x, labels = normal(rng, (k, micro, t, 8)), integers(rng, (k, micro), 4)
    params = _params(model, rng, x[0])
    inner = optax.chain(optax.add_decayed_weights(1e-4),
                        optax.sgd(0.05, momentum=0.9, nesterov=True))
    tx = optax.MultiSteps(inner, every_k_schedule=k)
    state = zeros(jax.eval_shape(tx.init, params))
    step = _train_step(model, tx)

    def accumulate(params, state, x, labels):
        def micro_step(carry, batch):
            params, state, loss = step(*carry, *batch)
            return (params, state), loss

        (params, state), losses = jax.lax.scan(micro_step, (params, state), (x, labels))
        return params, state, losses

    return accumulate, (params, state, x, labels)


#: family name -> builder `(rng) -> (fn, example_args)`
FAMILIES: dict[str, Builder] = {
    "optax_adamw_step": optax_adamw_step, "optax_lamb_step": optax_lamb_step,
    "optax_adafactor_step": optax_adafactor_step, "optax_lbfgs": optax_lbfgs,
    "optax_accumulate": optax_accumulate,
}


def programs(families: list[str] | None = None) -> list[Program]:
    """3 programs of every Optax family (or of `families`)."""
    return select(FAMILIES, families)
