"""Corpus programs written with Flax's `flax.nnx`, in families that the held-out test set
(`external/external_programs.py`: a causal transformer, a MobileNet) does not have.

Families: a stacked-LSTM sequence classifier (`nnx.RNN` over `nnx.LSTMCell`, a scan), a
temporal convolution network (dilated causal `nnx.Conv`), a convolutional VAE whose ELBO
draws its noise from a passed key, and one training step of a small ResNet (batch norm
in training mode updating its statistics, SGD with momentum).
Each module is built under `nnx.eval_shape` and split into a graphdef (closed over) and
its state (an argument), whose values are drawn with numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from _corpus import Builder, Program, fill, integers, normal, pick, prng_key, select, zeros
from flax import nnx


def _split(make: Callable[[nnx.Rngs], nnx.Module], rng: np.random.Generator, *filters
           ) -> tuple:
    """(graphdef, *states) of the module `make(rngs)` builds, states drawn with numpy."""
    graphdef, *states = nnx.split(nnx.eval_shape(lambda: make(nnx.Rngs(0))), *filters)
    return (graphdef, *[fill(rng, s, -1) for s in states])


class _LSTMClassifier(nnx.Module):
    def __init__(self, features: int, hidden: int, layers: int, classes: int,
                 rngs: nnx.Rngs):
        sizes = [features] + [hidden] * layers
        self.layers = nnx.List([nnx.RNN(nnx.LSTMCell(a, b, rngs=rngs), rngs=False)
                                for a, b in zip(sizes, sizes[1:], strict=False)])
        self.head = nnx.Linear(hidden, classes, rngs=rngs)

    def __call__(self, x):  # x: (batch, time, features)
        for layer in self.layers:
            zeros = jnp.zeros((x.shape[0], layer.cell.hidden_features), x.dtype)
            x = layer(x, initial_carry=(zeros, zeros))  # an LSTM carry is (c, h)
        return self.head(x[:, -1])


def nnx_lstm(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A sequence classifier: stacked nnx.RNN(nnx.LSTMCell) layers, a Linear head."""
    b, t, f = pick(rng, [8, 16, 32]), pick(rng, [32, 64]), pick(rng, [16, 32])
    hidden, layers = pick(rng, [64, 128, 192]), pick(rng, [1, 2])
    graphdef, state = _split(lambda rngs: _LSTMClassifier(f, hidden, layers, 5, rngs), rng)
    x = normal(rng, (b, t, f))
    return (lambda state, x: nnx.merge(graphdef, state)(x)), (state, x)


class _TCN(nnx.Module):
    """Residual blocks of two dilated causal convolutions, dilation doubling per block."""

    def __init__(self, channels: int, width: int, blocks: int, rngs: nnx.Rngs):
        self.inp = nnx.Linear(channels, width, rngs=rngs)
        self.convs = nnx.List([
            nnx.List([nnx.Conv(width, width, (3,), padding="CAUSAL", kernel_dilation=2**i,
                               rngs=rngs) for _ in range(2)]) for i in range(blocks)])
        self.norms = nnx.List([nnx.LayerNorm(width, rngs=rngs) for _ in range(blocks)])
        self.out = nnx.Linear(width, channels, rngs=rngs)

    def __call__(self, x):  # x: (batch, time, channels) -> the next step of every channel
        x = self.inp(x)
        for (c1, c2), norm in zip(self.convs, self.norms, strict=True):
            x = x + c2(nnx.relu(c1(norm(x))))
        return self.out(x)


def nnx_tcn(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A temporal convolution network: dilated causal nnx.Conv, LayerNorm, residuals."""
    b, t, channels = pick(rng, [4, 8, 16]), pick(rng, [128, 256]), pick(rng, [4, 8])
    width, blocks = pick(rng, [32, 64]), pick(rng, [4, 6])
    graphdef, state = _split(lambda rngs: _TCN(channels, width, blocks, rngs), rng)
    x = normal(rng, (b, t, channels))
    return (lambda state, x: nnx.merge(graphdef, state)(x)), (state, x)


class _ConvVAE(nnx.Module):
    def __init__(self, widths: Sequence[int], latent: int, hw: int, rngs: nnx.Rngs):
        chans = [1, *widths]
        self.enc = nnx.List([nnx.Conv(a, b, (3, 3), strides=2, rngs=rngs)
                             for a, b in zip(chans, chans[1:], strict=False)])
        self.side = hw // 2 ** len(widths)
        flat = widths[-1] * self.side**2
        self.stats = nnx.Linear(flat, 2 * latent, rngs=rngs)
        self.expand = nnx.Linear(latent, flat, rngs=rngs)
        back = chans[::-1]
        self.dec = nnx.List([nnx.ConvTranspose(a, b, (3, 3), strides=(2, 2), rngs=rngs)
                             for a, b in zip(back, back[1:], strict=False)])

    def __call__(self, x, key):
        h = x
        for conv in self.enc:
            h = nnx.gelu(conv(h))
        mean, logvar = jnp.split(self.stats(h.reshape(h.shape[0], -1)), 2, -1)
        z = mean + jnp.exp(0.5 * logvar) * jax.random.normal(key, mean.shape)
        h = self.expand(z).reshape(x.shape[0], self.side, self.side, -1)
        for i, deconv in enumerate(self.dec):
            h = deconv(h)
            h = nnx.gelu(h) if i < len(self.dec) - 1 else h
        bce = jnp.sum(jnp.maximum(h, 0) - h * x + jnp.log1p(jnp.exp(-jnp.abs(h))), (1, 2, 3))
        kl = 0.5 * jnp.sum(jnp.exp(logvar) + mean**2 - 1.0 - logvar, -1)
        return jnp.mean(bce + kl)


def nnx_conv_vae(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A convolutional VAE's ELBO: strided nnx.Conv encoder, reparameterised sample from a
    passed key, nnx.ConvTranspose decoder, Bernoulli likelihood and KL."""
    n, hw = pick(rng, [8, 16, 32]), pick(rng, [32, 48])  # 3 stride-2 stages: 8 | hw
    widths, latent = pick(rng, [(16, 32, 64), (32, 64, 64)]), pick(rng, [16, 32])
    graphdef, state = _split(lambda rngs: _ConvVAE(widths, latent, hw, rngs), rng)
    x = jnp.asarray((rng.random((n, hw, hw, 1)) < 0.3).astype(np.float32))
    return (lambda state, x, key: nnx.merge(graphdef, state)(x, key)), (
        state, x, prng_key(rng))


class _Block(nnx.Module):
    def __init__(self, c_in: int, c_out: int, stride: int, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(c_in, c_out, (3, 3), strides=stride, use_bias=False, rngs=rngs)
        self.conv2 = nnx.Conv(c_out, c_out, (3, 3), use_bias=False, rngs=rngs)
        self.bn1, self.bn2 = nnx.BatchNorm(c_out, rngs=rngs), nnx.BatchNorm(c_out, rngs=rngs)
        self.proj = (nnx.Conv(c_in, c_out, (1, 1), strides=stride, rngs=rngs)
                     if stride != 1 or c_in != c_out else None)

    def __call__(self, x):
        h = self.bn2(self.conv2(nnx.relu(self.bn1(self.conv1(x)))))
        return nnx.relu(h + (self.proj(x) if self.proj is not None else x))


class _ResNet(nnx.Module):
    def __init__(self, widths: Sequence[int], classes: int, rngs: nnx.Rngs):
        self.stem = nnx.Conv(3, widths[0], (3, 3), rngs=rngs)
        chans = [widths[0], *widths]
        self.blocks = nnx.List([_Block(a, b, 1 if i == 0 else 2, rngs)
                                for i, (a, b) in enumerate(zip(chans, chans[1:],
                                                               strict=False))])
        self.head = nnx.Linear(widths[-1], classes, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.stem(x))
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean((1, 2)))


def nnx_resnet_train(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One training step of a small ResNet in nnx: batch norm in training mode (its new
    statistics come back), cross-entropy, value_and_grad, SGD with momentum."""
    n, hw = pick(rng, [4, 8]), pick(rng, [24, 32])
    widths = [pick(rng, [16, 24]) * 2**i for i in range(pick(rng, [2, 3]))]
    graphdef, params, stats = _split(lambda rngs: _ResNet(widths, 10, rngs), rng,
                                     nnx.Param, ...)
    velocity = zeros(jax.eval_shape(lambda: params))
    x, labels = normal(rng, (n, hw, hw, 3)), integers(rng, (n,), 10)

    def loss_fn(model, x, labels):
        logp = jax.nn.log_softmax(model(x))
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], 1))

    def step(params, stats, velocity, x, labels):
        model = nnx.merge(graphdef, params, stats)
        model.train()
        loss, grads = nnx.value_and_grad(loss_fn)(model, x, labels)  # grads of nnx.Param
        velocity = jax.tree.map(lambda v, g: 0.9 * v + g, velocity, grads)
        params = jax.tree.map(lambda p, v: p - 0.05 * v, params, velocity)
        return params, nnx.state(model, nnx.BatchStat), velocity, loss

    return step, (params, stats, velocity, x, labels)


#: family name -> builder `(rng) -> (fn, example_args)`
FAMILIES: dict[str, Builder] = {
    "nnx_lstm": nnx_lstm, "nnx_tcn": nnx_tcn, "nnx_conv_vae": nnx_conv_vae,
    "nnx_resnet_train": nnx_resnet_train,
}


def programs(families: list[str] | None = None) -> list[Program]:
    """3 programs of every nnx family (or of `families`)."""
    return select(FAMILIES, families)
