"""Training-step program families: forward, backward and an SGD or Adam update.

Each family is `(rng) -> (callable, example_args)`; sizes are drawn so one step takes
about 1-20 ms on one CPU core (registry and sizing notes: graphcost.xla.programs).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from graphcost.xla.zoo_layers import (
    conv,
    conv_weight,
    dense,
    image,
    jnp,
    layer_norm,
    normal,
    pick,
    pool,
    sgd_or_adam,
    spatial_axes,
    zeros_like,
)


def train_mlp(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One SGD/Adam step of a bias-free MLP classifier with softmax cross-entropy."""
    import jax

    j = jnp()
    f32 = j.float32
    batch = pick(rng, [128, 256, 512])
    widths = [pick(rng, [256, 384, 512]) for _ in range(int(rng.integers(2, 4)))] + [10]
    params = [dense(rng, a, b, f32) for a, b in zip(widths, widths[1:], strict=False)]
    x = normal(rng, (batch, widths[0]), f32)
    y = j.asarray(rng.integers(0, widths[-1], batch), j.int32)

    def loss(params, x, y):
        for i, w in enumerate(params):
            x = x @ w
            x = jax.nn.relu(x) if i < len(params) - 1 else x
        return -j.take_along_axis(jax.nn.log_softmax(x), y[:, None], 1).mean()

    step = sgd_or_adam(rng, loss)
    return step, (params, (zeros_like(params), zeros_like(params)), x, y)


def train_cnn(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One training step of a small conv net (either layout) with a regression loss."""
    import jax

    j = jnp()
    layout = pick(rng, ["NHWC", "NCHW"])
    n, hw = pick(rng, [4, 8]), pick(rng, [24, 32])
    chans = [3] + [pick(rng, [16, 24, 32]) for _ in range(2)]
    ws = [conv_weight(rng, layout, 3, a, b, j.float32)
          for a, b in zip(chans, chans[1:], strict=False)]
    x = image(rng, layout, n, hw, 3, j.float32)
    target = normal(rng, (n, chans[-1]), j.float32)

    def loss(ws, x, t):
        for i, w in enumerate(ws):
            x = jax.nn.relu(conv(x, w, layout))
            x = pool(x, layout) if i == 0 else x
        return ((x.mean(spatial_axes(layout)) - t) ** 2).mean()

    step = sgd_or_adam(rng, loss)
    return step, (ws, (zeros_like(ws), zeros_like(ws)), x, target)


def train_transformer(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One training step of a causal attention block (fused QKV projection, no biases or
    norm gains, so the optimizer update stays small next to forward and backward)."""
    import jax

    j = jnp()
    f32 = j.float32
    b, t, d = pick(rng, [2, 4]), pick(rng, [64, 128]), pick(rng, [64, 128])
    heads = pick(rng, [2, 4])
    p = {"wqkv": dense(rng, d, 3 * d, f32), "wo": dense(rng, d, d, f32),
         "w1": dense(rng, d, 2 * d, f32), "w2": dense(rng, 2 * d, d, f32)}
    x = normal(rng, (b, t, d), f32)
    mask = j.tril(j.ones((t, t), bool))

    def loss(p, x):
        q, k, v = (y.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)
                   for y in j.split(layer_norm(x, 1.0, 0.0) @ p["wqkv"], 3, -1))
        logits = j.where(mask, j.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(d // heads), -1e9)
        att = j.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(logits, -1), v)
        x = x + att.transpose(0, 2, 1, 3).reshape(b, t, d) @ p["wo"]
        x = x + jax.nn.gelu(layer_norm(x, 1.0, 0.0) @ p["w1"]) @ p["w2"]
        return (x ** 2).mean()

    step = sgd_or_adam(rng, loss)
    return step, (p, (zeros_like(p), zeros_like(p)), x)
