"""Corpus programs written with Equinox, in families that the held-out test set
(`external/external_programs.py`: MLP, GRU, CNN, transformer encoder) does not have.
Family names start with `eqx_`, as there.

Families: one training step of an `eqx.nn.LSTMCell` regressor (a lax.scan, gradients by
`eqx.filter_value_and_grad`, SGD), a ResNet with `eqx.nn.BatchNorm` in inference mode
(its running statistics in an `eqx.nn.State`), a decoder language model with rotary
position embeddings (`eqx.nn.RotaryPositionalEmbedding` inside `eqx.nn.MultiheadAttention`
heads), and a WaveNet-style stack of dilated causal `eqx.nn.Conv1d` with gated units.
Parameters come from `eqx.filter_eval_shape`; their values are drawn with numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from _corpus import Builder, Program, fill, integers, normal, pick, select, uniform

_KEY = jax.random.PRNGKey(0)


def _is_array(x) -> bool:
    return isinstance(x, jax.ShapeDtypeStruct)


def _split(make: Callable[[jax.Array], eqx.Module], rng: np.random.Generator
           ) -> tuple[Callable[[eqx.Module], eqx.Module], eqx.Module]:
    """(rebuild, params) of the module `make(key)` builds: its arrays as an argument."""
    params, static = eqx.partition(eqx.filter_eval_shape(make, _KEY), _is_array)
    return (lambda p: eqx.combine(p, static)), fill(rng, params, 0)


class _LSTMRegressor(eqx.Module):
    cell: eqx.nn.LSTMCell
    head: eqx.nn.Linear

    def __init__(self, features: int, hidden: int, key: jax.Array):
        k1, k2 = jax.random.split(key)
        self.cell = eqx.nn.LSTMCell(features, hidden, key=k1)
        self.head = eqx.nn.Linear(hidden, 1, key=k2)

    def __call__(self, xs):  # xs: (time, features) -> one prediction per step
        def step(carry, x):
            carry = self.cell(x, carry)
            return carry, self.head(carry[0])

        zeros = jnp.zeros(self.cell.hidden_size)
        _, ys = jax.lax.scan(step, (zeros, zeros), xs)
        return ys[:, 0]


def eqx_lstm_train(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One training step of an eqx.nn.LSTMCell sequence regressor (scanned over time,
    vmapped over the batch): mean squared error, eqx.filter_value_and_grad, SGD."""
    b, t, f = pick(rng, [16, 32, 64]), pick(rng, [32, 64]), pick(rng, [8, 16])
    hidden = pick(rng, [64, 128])
    rebuild, params = _split(lambda key: _LSTMRegressor(f, hidden, key), rng)
    x, y = normal(rng, (b, t, f)), normal(rng, (b, t))

    @eqx.filter_value_and_grad
    def loss_fn(model, x, y):
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    def step(params, x, y):
        loss, grads = loss_fn(rebuild(params), x, y)
        grads = eqx.filter(grads, eqx.is_array)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss

    return step, (params, x, y)


class _ResBlock(eqx.Module):
    conv1: eqx.nn.Conv2d
    conv2: eqx.nn.Conv2d
    bn1: eqx.nn.BatchNorm
    bn2: eqx.nn.BatchNorm
    proj: eqx.nn.Conv2d | None

    def __init__(self, c_in: int, c_out: int, stride: int, key: jax.Array):
        k1, k2, k3 = jax.random.split(key, 3)
        self.conv1 = eqx.nn.Conv2d(c_in, c_out, 3, stride, 1, use_bias=False, key=k1)
        self.conv2 = eqx.nn.Conv2d(c_out, c_out, 3, 1, 1, use_bias=False, key=k2)
        self.bn1 = eqx.nn.BatchNorm(c_out, "batch", inference=True)
        self.bn2 = eqx.nn.BatchNorm(c_out, "batch", inference=True)
        self.proj = (eqx.nn.Conv2d(c_in, c_out, 1, stride, key=k3)
                     if stride != 1 or c_in != c_out else None)

    def __call__(self, x, state):
        h, state = self.bn1(self.conv1(x), state)
        h, state = self.bn2(self.conv2(jax.nn.relu(h)), state)
        return jax.nn.relu(h + (self.proj(x) if self.proj is not None else x)), state


class _ResNet(eqx.Module):
    stem: eqx.nn.Conv2d
    blocks: list
    head: eqx.nn.Linear

    def __init__(self, widths: Sequence[int], classes: int, key: jax.Array):
        keys = jax.random.split(key, len(widths) + 2)
        self.stem = eqx.nn.Conv2d(3, widths[0], 3, 1, 1, key=keys[0])
        chans = [widths[0], *widths]
        self.blocks = [_ResBlock(a, b, 1 if i == 0 else 2, k) for i, (a, b, k) in
                       enumerate(zip(chans[:-1], chans[1:], keys[2:], strict=True))]
        self.head = eqx.nn.Linear(widths[-1], classes, key=keys[1])

    def __call__(self, x, state):  # x: (channels, height, width)
        x = jax.nn.relu(self.stem(x))
        for block in self.blocks:
            x, state = block(x, state)
        return self.head(jnp.mean(x, (1, 2))), state


def eqx_resnet(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A ResNet of eqx.nn.Conv2d and eqx.nn.BatchNorm (inference: running statistics from
    an eqx.nn.State), vmapped over the batch (channels first)."""
    n, hw = pick(rng, [2, 4, 8]), pick(rng, [32, 48])
    widths = [pick(rng, [16, 32]) * 2**i for i in range(pick(rng, [2, 3]))]
    model, state = eqx.filter_eval_shape(
        lambda key: eqx.nn.make_with_state(_ResNet)(widths, 10, key), _KEY)
    params, static = eqx.partition(model, _is_array)
    params = fill(rng, params, 0)
    state = jax.tree.map(  # running means and variances (and batch norm's first-call flag)
        lambda s: uniform(rng, s.shape, 0.5, 1.5) if jnp.issubdtype(s.dtype, jnp.floating)
        else jnp.asarray(np.zeros(s.shape, s.dtype)), state)
    x = normal(rng, (n, 3, hw, hw))

    def forward(params, state, x):
        model = eqx.combine(params, static)
        logits, _ = jax.vmap(model, in_axes=(0, None), out_axes=(0, None),
                             axis_name="batch")(x, state)
        return logits

    return forward, (params, state, x)


class _RopeBlock(eqx.Module):
    ln1: eqx.nn.RMSNorm
    ln2: eqx.nn.RMSNorm
    attn: eqx.nn.MultiheadAttention
    rope: eqx.nn.RotaryPositionalEmbedding
    mlp: eqx.nn.MLP

    def __init__(self, dim: int, heads: int, key: jax.Array):
        k1, k2 = jax.random.split(key)
        self.ln1, self.ln2 = eqx.nn.RMSNorm(dim), eqx.nn.RMSNorm(dim)
        self.attn = eqx.nn.MultiheadAttention(heads, dim, key=k1)
        self.rope = eqx.nn.RotaryPositionalEmbedding(dim // heads)
        self.mlp = eqx.nn.MLP(dim, dim, 4 * dim, 1, activation=jax.nn.silu, key=k2)

    def __call__(self, x, mask):  # x: (seq, dim)
        def rotate(q, k, v):
            turn = jax.vmap(self.rope, in_axes=1, out_axes=1)
            return turn(q), turn(k), v

        h = jax.vmap(self.ln1)(x)
        x = x + self.attn(h, h, h, mask=mask, process_heads=rotate)
        return x + jax.vmap(self.mlp)(jax.vmap(self.ln2)(x))


class _RopeLM(eqx.Module):
    embed: eqx.nn.Embedding
    blocks: list
    norm: eqx.nn.RMSNorm
    head: eqx.nn.Linear

    def __init__(self, vocab: int, dim: int, heads: int, depth: int, key: jax.Array):
        keys = jax.random.split(key, depth + 2)
        self.embed = eqx.nn.Embedding(vocab, dim, key=keys[0])
        self.blocks = [_RopeBlock(dim, heads, k) for k in keys[2:]]
        self.norm = eqx.nn.RMSNorm(dim)
        self.head = eqx.nn.Linear(dim, vocab, use_bias=False, key=keys[1])

    def __call__(self, tokens):  # tokens: (seq,) -> next-token logits
        x = jax.vmap(self.embed)(tokens)
        mask = jnp.tril(jnp.ones((tokens.shape[0],) * 2, bool))
        for block in self.blocks:
            x = block(x, mask)
        return jax.vmap(lambda h: self.head(self.norm(h)))(x)


def eqx_rope_lm(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A decoder LM in equinox: Embedding, RMSNorm, causal MultiheadAttention with rotary
    embeddings applied to the heads (process_heads), SiLU MLP, vmapped over the batch."""
    b, t = pick(rng, [1, 2, 4]), pick(rng, [64, 128])
    dim, heads, depth = pick(rng, [64, 128]), pick(rng, [2, 4]), pick(rng, [1, 2])
    vocab = pick(rng, [1000, 4000])
    rebuild, params = _split(lambda key: _RopeLM(vocab, dim, heads, depth, key), rng)
    tokens = integers(rng, (b, t), vocab)
    return (lambda params, tokens: jax.vmap(rebuild(params))(tokens)), (params, tokens)


class _WaveNet(eqx.Module):
    inp: eqx.nn.Conv1d
    filters: list
    gates: list
    residuals: list
    skips: list
    out: eqx.nn.Conv1d

    def __init__(self, channels: int, width: int, layers: int, key: jax.Array):
        keys = jax.random.split(key, 4 * layers + 2)

        def dilated(i, k):
            d = 2 ** (i % 8)
            return eqx.nn.Conv1d(width, width, 2, dilation=d, padding=((d, 0),), key=k)

        self.inp = eqx.nn.Conv1d(channels, width, 1, key=keys[0])
        self.filters = [dilated(i, keys[2 + 4 * i]) for i in range(layers)]
        self.gates = [dilated(i, keys[3 + 4 * i]) for i in range(layers)]
        self.residuals = [eqx.nn.Conv1d(width, width, 1, key=keys[4 + 4 * i])
                          for i in range(layers)]
        self.skips = [eqx.nn.Conv1d(width, width, 1, key=keys[5 + 4 * i])
                      for i in range(layers)]
        self.out = eqx.nn.Conv1d(width, channels, 1, key=keys[1])

    def __call__(self, x):  # x: (channels, time)
        x, skip = self.inp(x), 0.0
        for f, g, r, s in zip(self.filters, self.gates, self.residuals, self.skips,
                              strict=True):
            h = jnp.tanh(f(x)) * jax.nn.sigmoid(g(x))
            x, skip = x + r(h), skip + s(h)
        return self.out(jax.nn.relu(skip))


def eqx_wavenet(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A WaveNet-style stack: dilated causal eqx.nn.Conv1d, gated tanh-sigmoid units,
    residual and skip 1x1 convolutions, vmapped over the batch."""
    b, t, channels = pick(rng, [2, 4, 8]), pick(rng, [256, 512]), pick(rng, [1, 4])
    width, layers = pick(rng, [16, 32]), pick(rng, [6, 8, 10])
    rebuild, params = _split(lambda key: _WaveNet(channels, width, layers, key), rng)
    x = normal(rng, (b, channels, t))
    return (lambda params, x: jax.vmap(rebuild(params))(x)), (params, x)


#: family name -> builder `(rng) -> (fn, example_args)`
FAMILIES: dict[str, Builder] = {
    "eqx_lstm_train": eqx_lstm_train, "eqx_resnet": eqx_resnet,
    "eqx_rope_lm": eqx_rope_lm, "eqx_wavenet": eqx_wavenet,
}


def programs(families: list[str] | None = None) -> list[Program]:
    """3 programs of every Equinox family (or of `families`)."""
    return select(FAMILIES, families)
