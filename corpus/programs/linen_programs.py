"""Corpus programs written with Flax's `flax.linen`, in families that the held-out test
set (`external/external_programs.py`: ResNet, ViT, LSTM, U-Net, autoencoder, CNN step)
does not have.

Families: an MLP-Mixer, a ConvNeXt-style net (7x7 depthwise convs, LayerNorm, layer
scale), a decoder language model whose blocks are stacked by `nn.scan` (one lax.scan over
the layers), a ConvLSTM (`nn.ConvLSTMCell` under `nn.RNN`, a scan over frames), and one
training step of a BERT-style masked language model (SGD with momentum).
Variables come from `model.init`, run abstractly; values are drawn with numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from _corpus import Builder, Program, fill, integers, normal, pick, select, zeros
from flax import linen as nn

_KEY = jax.random.PRNGKey(0)


def _variables(model: nn.Module, rng: np.random.Generator, *inputs) -> dict:
    return fill(rng, jax.eval_shape(model.init, _KEY, *inputs), -1)


class _MixerBlock(nn.Module):
    tokens_hidden: int
    channels_hidden: int

    @nn.compact
    def __call__(self, x):  # x: (batch, tokens, channels)
        h = nn.LayerNorm()(x).swapaxes(1, 2)
        h = nn.Dense(x.shape[1])(nn.gelu(nn.Dense(self.tokens_hidden)(h)))
        x = x + h.swapaxes(1, 2)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(x.shape[2])(nn.gelu(nn.Dense(self.channels_hidden)(h)))


class _Mixer(nn.Module):
    patch: int
    dim: int
    depth: int
    classes: int

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(self.dim, (self.patch, self.patch), self.patch)(x)
        x = x.reshape(x.shape[0], -1, self.dim)
        for _ in range(self.depth):
            x = _MixerBlock(self.dim // 2, 4 * self.dim)(x)
        return nn.Dense(self.classes)(nn.LayerNorm()(x).mean(1))


def linen_mixer(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """MLP-Mixer: patch embedding, token-mixing and channel-mixing MLPs, LayerNorm."""
    n, (hw, patch) = pick(rng, [2, 4, 8]), pick(rng, [(32, 4), (64, 8), (64, 4)])
    dim, depth = pick(rng, [64, 128]), pick(rng, [2, 4])
    model = _Mixer(patch, dim, depth, 100)
    x = normal(rng, (n, hw, hw, 3))
    return model.apply, (_variables(model, rng, x), x)


class _ConvNeXtBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        c = x.shape[-1]
        h = nn.Conv(c, (7, 7), feature_group_count=c)(x)
        h = nn.Dense(c)(nn.gelu(nn.Dense(4 * c)(nn.LayerNorm(epsilon=1e-6)(h))))
        gamma = self.param("layer_scale", nn.initializers.constant(1e-6), (c,))
        return x + gamma * h


class _ConvNeXt(nn.Module):
    widths: Sequence[int]
    depths: Sequence[int]

    @nn.compact
    def __call__(self, x):
        x = nn.LayerNorm(epsilon=1e-6)(nn.Conv(self.widths[0], (4, 4), 4)(x))  # stem
        for i, (w, d) in enumerate(zip(self.widths, self.depths, strict=True)):
            if i:
                x = nn.Conv(w, (2, 2), 2)(nn.LayerNorm(epsilon=1e-6)(x))
            for _ in range(d):
                x = _ConvNeXtBlock()(x)
        return nn.Dense(10)(nn.LayerNorm(epsilon=1e-6)(x.mean((1, 2))))


def linen_convnext(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """ConvNeXt-style: patchify stem, 7x7 depthwise convs, inverted MLPs, layer scale."""
    n, hw = pick(rng, [1, 2, 4]), pick(rng, [64, 96])
    base = pick(rng, [16, 32, 48])
    depths = pick(rng, [(1, 1, 2), (2, 2, 2)])
    model = _ConvNeXt([base, 2 * base, 4 * base], depths)
    x = normal(rng, (n, hw, hw, 3))
    return model.apply, (_variables(model, rng, x), x)


class _DecoderBlock(nn.Module):
    heads: int

    @nn.compact
    def __call__(self, x, mask):
        h = nn.RMSNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(self.heads)(h, h, mask=mask)
        h = nn.RMSNorm()(x)
        gate, up = nn.Dense(3 * x.shape[-1])(h), nn.Dense(3 * x.shape[-1])(h)
        return x + nn.Dense(x.shape[-1])(nn.silu(gate) * up), None


class _ScanLM(nn.Module):
    vocab: int
    dim: int
    heads: int
    depth: int

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(self.vocab, self.dim)(tokens)
        mask = nn.make_causal_mask(tokens)
        blocks = nn.scan(_DecoderBlock, variable_axes={"params": 0},
                         split_rngs={"params": True}, in_axes=nn.broadcast,
                         length=self.depth)
        x, _ = blocks(self.heads)(x, mask)
        return nn.Dense(self.vocab)(nn.RMSNorm()(x))


def linen_scan_lm(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A decoder LM (RMSNorm, causal attention, SwiGLU) with its blocks stacked by nn.scan:
    one lax.scan over the layers, their parameters stacked on a leading axis."""
    b, t = pick(rng, [1, 2, 4]), pick(rng, [64, 128])
    dim, heads, depth = pick(rng, [64, 128]), pick(rng, [2, 4]), pick(rng, [2, 4, 6])
    vocab = pick(rng, [2000, 4000])
    model = _ScanLM(vocab, dim, heads, depth)
    tokens = integers(rng, (b, t), vocab)
    return model.apply, (_variables(model, rng, tokens), tokens)


class _ConvLSTM(nn.Module):
    features: int

    @nn.compact
    def __call__(self, frames):  # frames: (batch, time, height, width, channels)
        h = nn.RNN(nn.ConvLSTMCell(self.features, (3, 3)))(frames)
        return nn.Conv(1, (1, 1))(h[:, -1])  # next-frame prediction from the last state


def linen_convlstm(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Next-frame prediction with nn.ConvLSTMCell scanned over frames by nn.RNN."""
    b, t, hw = pick(rng, [1, 2, 4]), pick(rng, [8, 16]), pick(rng, [16, 32])
    features = pick(rng, [8, 16, 32])
    model = _ConvLSTM(features)
    frames = normal(rng, (b, t, hw, hw, 1))
    return model.apply, (_variables(model, rng, frames), frames)


class _BertMLM(nn.Module):
    vocab: int
    dim: int
    heads: int
    depth: int

    @nn.compact
    def __call__(self, tokens, pad_mask):
        t = tokens.shape[1]
        x = nn.Embed(self.vocab, self.dim)(tokens)
        x = x + self.param("pos", nn.initializers.normal(0.02), (t, self.dim))
        x = nn.LayerNorm()(x)
        mask = nn.make_attention_mask(pad_mask, pad_mask)
        for _ in range(self.depth):  # post-norm, as in BERT
            x = nn.LayerNorm()(x + nn.MultiHeadDotProductAttention(self.heads)(x, x, mask=mask))
            x = nn.LayerNorm()(x + nn.Dense(self.dim)(nn.gelu(nn.Dense(4 * self.dim)(x))))
        return nn.Dense(self.vocab)(nn.gelu(nn.Dense(self.dim)(x)))


def linen_bert_train(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One training step of a BERT-style masked LM: padding mask, cross-entropy on the
    masked positions only, value_and_grad, SGD with momentum."""
    b, t = pick(rng, [2, 4]), pick(rng, [32, 64])
    dim, heads, depth = pick(rng, [64, 128]), pick(rng, [2, 4]), pick(rng, [1, 2])
    vocab = pick(rng, [1000, 2000])
    model = _BertMLM(vocab, dim, heads, depth)
    tokens = integers(rng, (b, t), vocab)
    lengths = rng.integers(t // 2, t + 1, b)
    pad = jnp.asarray(np.arange(t)[None, :] < lengths[:, None])
    chosen = jnp.asarray(rng.random((b, t)) < 0.15) & pad  # positions to predict
    params = _variables(model, rng, tokens, pad)["params"]
    velocity = zeros(jax.eval_shape(lambda: params))

    def loss_fn(params, tokens, pad, chosen):
        masked = jnp.where(chosen, 0, tokens)  # token 0 stands for [MASK]
        logp = jax.nn.log_softmax(model.apply({"params": params}, masked, pad))
        nll = -jnp.take_along_axis(logp, tokens[..., None], -1)[..., 0]
        return jnp.sum(nll * chosen) / jnp.maximum(jnp.sum(chosen), 1)

    def step(params, velocity, tokens, pad, chosen):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, pad, chosen)
        velocity = jax.tree.map(lambda v, g: 0.9 * v + g, velocity, grads)
        return jax.tree.map(lambda p, v: p - 0.01 * v, params, velocity), velocity, loss

    return step, (params, velocity, tokens, pad, chosen)


#: family name -> builder `(rng) -> (fn, example_args)`
FAMILIES: dict[str, Builder] = {
    "linen_mixer": linen_mixer, "linen_convnext": linen_convnext,
    "linen_scan_lm": linen_scan_lm, "linen_convlstm": linen_convlstm,
    "linen_bert_train": linen_bert_train,
}


def programs(families: list[str] | None = None) -> list[Program]:
    """3 programs of every linen family (or of `families`)."""
    return select(FAMILIES, families)
