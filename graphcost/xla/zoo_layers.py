"""Shared pieces of the program zoo (graphcost.xla.programs): random tensors, layers.

Every helper takes the generator's `rng` explicitly so a program is a pure function of
`(family, index, seed)`. JAX is imported lazily: importing the zoo costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: dtype draws: bf16 is rare on purpose (XLA:CPU runs it slowly and oddly)
MOSTLY_F32 = ("float32",) * 7 + ("bfloat16",)


def jnp():
    """`jax.numpy`, imported on first use."""
    import jax.numpy

    return jax.numpy


def pick(rng: np.random.Generator, choices: Sequence[Any]) -> Any:
    """One of `choices`, as a plain Python value."""
    return choices[int(rng.integers(len(choices)))]


def dtype(rng: np.random.Generator, choices: Sequence[str] = MOSTLY_F32):
    """A JAX dtype drawn from `choices` (float32 unless told)."""
    return jnp().dtype(pick(rng, choices))


def normal(rng: np.random.Generator, shape: tuple[int, ...], dt, scale: float = 1.0):
    """A standard-normal array of `shape`, times `scale`, as `dt`."""
    x = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
    return jnp().asarray(x, dtype=dt)


def dense(rng: np.random.Generator, a: int, b: int, dt):
    """An (a, b) weight scaled for unit-variance outputs."""
    return normal(rng, (a, b), dt, 1.0 / np.sqrt(a))


def act(rng: np.random.Generator) -> Callable:
    """A random activation function."""
    import jax

    return {"relu": jax.nn.relu, "gelu": jax.nn.gelu, "tanh": jnp().tanh,
            "silu": jax.nn.silu}[pick(rng, ["relu", "gelu", "tanh", "silu"])]


def layer_norm(x, g, b):
    """Layer norm over the last axis, computed in float32."""
    j = jnp()
    x32 = x.astype(j.float32)
    mu = x32.mean(-1, keepdims=True)
    var = ((x32 - mu) ** 2).mean(-1, keepdims=True)
    return ((x32 - mu) / j.sqrt(var + 1e-5) * g + b).astype(x.dtype)


# ------------------------------------------------------------------ images


def conv(x, w, layout: str, stride: int = 1, groups: int = 1, padding: str = "SAME"):
    """A 2-D convolution in `layout` ("NHWC" with HWIO weights, or "NCHW" with OIHW)."""
    from jax import lax

    dn = ("NHWC", "HWIO", "NHWC") if layout == "NHWC" else ("NCHW", "OIHW", "NCHW")
    return lax.conv_general_dilated(x, w, (stride, stride), padding, dimension_numbers=dn,
                                    feature_group_count=groups)


def conv_weight(rng: np.random.Generator, layout: str, k: int, cin: int, cout: int, dt,
                groups: int = 1):
    """Weights of a k x k convolution from `cin` to `cout` channels, in `layout`."""
    shape = (k, k, cin // groups, cout) if layout == "NHWC" else (cout, cin // groups, k, k)
    return normal(rng, shape, dt, 1.0 / np.sqrt(k * k * cin / groups))


def image(rng: np.random.Generator, layout: str, n: int, hw: int, c: int, dt):
    """A batch of `n` square images with `c` channels, in `layout`."""
    shape = (n, hw, hw, c) if layout == "NHWC" else (n, c, hw, hw)
    return normal(rng, shape, dt)


def channel_axis(layout: str) -> int:
    """The channel axis of a 4-D image in `layout`."""
    return 3 if layout == "NHWC" else 1


def spatial_axes(layout: str) -> tuple[int, int]:
    """The two spatial axes of a 4-D image in `layout`."""
    return (1, 2) if layout == "NHWC" else (2, 3)


def pool(x, layout: str, kind: str = "avg", size: int = 2):
    """Non-overlapping `size` x `size` average or max pooling."""
    from jax import lax

    window = [1, 1, 1, 1]
    for a in spatial_axes(layout):
        window[a] = size
    if kind == "max":
        return lax.reduce_window(x, -jnp().inf, lax.max, window, window, "VALID")
    return lax.reduce_window(x, 0.0, lax.add, window, window, "VALID") / (size * size)


def upsample(x, layout: str, size: int = 2):
    """Nearest-neighbour up-sampling by `size` along both spatial axes."""
    j = jnp()
    for a in spatial_axes(layout):
        x = j.repeat(x, size, axis=a)
    return x


# ------------------------------------------------------------------ sequences


def attention_params(rng: np.random.Generator, d: int, ff: int, dt) -> dict:
    """Weights of one pre-norm encoder block (attention + MLP)."""
    return {"wq": dense(rng, d, d, dt), "wk": dense(rng, d, d, dt),
            "wv": dense(rng, d, d, dt), "wo": dense(rng, d, d, dt),
            "w1": dense(rng, d, ff, dt), "w2": dense(rng, ff, d, dt),
            "g1": normal(rng, (d,), dt, 0.1) + 1, "b1": normal(rng, (d,), dt, 0.1),
            "g2": normal(rng, (d,), dt, 0.1) + 1, "b2": normal(rng, (d,), dt, 0.1)}


def encoder(p: dict, x, heads: int, causal: bool):
    """A pre-norm transformer encoder block over x (batch, time, d)."""
    import jax

    j = jnp()
    b, t, d = x.shape
    h = layer_norm(x, p["g1"], p["b1"])

    def split(y):  # (b, t, d) -> (b, heads, t, d / heads), as attention kernels want it
        return y.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)

    q, k, v = split(h @ p["wq"]), split(h @ p["wk"]), split(h @ p["wv"])
    logits = j.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(d // heads)
    if causal:
        logits = j.where(j.tril(j.ones((t, t), bool)), logits, -1e9)
    att = jax.nn.softmax(logits.astype(j.float32), axis=-1).astype(x.dtype)
    y = j.einsum("bhqk,bhkd->bhqd", att, v).transpose(0, 2, 1, 3)
    x = x + y.reshape(b, t, d) @ p["wo"]
    h = layer_norm(x, p["g2"], p["b2"])
    return x + jax.nn.gelu(h @ p["w1"]) @ p["w2"]


# ------------------------------------------------------------------ training


def sgd_or_adam(rng: np.random.Generator, loss: Callable) -> Callable:
    """A training step for `loss(params, *batch)`: forward, backward and an update."""
    import jax

    j = jnp()
    adam = bool(rng.integers(2))
    lr = 1e-3

    def step(params, opt, *batch):
        value, grads = jax.value_and_grad(loss)(params, *batch)
        if not adam:
            new = jax.tree.map(lambda p, g: p - lr * g, params, grads)
            return new, opt, value
        m, v = opt
        m = jax.tree.map(lambda a, g: 0.9 * a + 0.1 * g, m, grads)
        v = jax.tree.map(lambda a, g: 0.999 * a + 0.001 * g * g, v, grads)
        new = jax.tree.map(lambda p, a, b: p - lr * a / (j.sqrt(b) + 1e-8), params, m, v)
        return new, (m, v), value

    return step


def zeros_like(tree):
    """A tree of zeros shaped like `tree` (optimizer state)."""
    import jax

    return jax.tree.map(lambda p: jnp().zeros_like(p), tree)
