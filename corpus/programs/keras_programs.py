"""Corpus programs written with Keras 3 on its JAX backend (KERAS_BACKEND=jax).

Families: `keras.applications` EfficientNetB0 and MobileNetV3Small (random weights,
never downloaded) and a functional ResNet of `Conv2D`/`BatchNormalization` blocks at
inference, a BERT-style text encoder from `keras.layers.MultiHeadAttention`, and one
training step of a `keras.layers.LSTM`/`GRU` classifier (a lax.scan) with a Keras
optimizer's `stateless_apply`.
Models are built inside `keras.StatelessScope(initialize_variables=False)`, so their
variables have shapes but no values (no initialiser runs); values are drawn with numpy
and passed to `model.stateless_call` as arguments.
"""

from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

from collections.abc import Callable, Sequence  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from _corpus import Builder, Program, draw, integers, normal, pick, select  # noqa: E402

if keras.backend.backend() != "jax":
    raise ImportError(f"keras_programs needs KERAS_BACKEND=jax, not {keras.backend.backend()}")


def _build(make: Callable[[], keras.Model]) -> keras.Model:
    """The model `make()` builds, its variables shaped but never initialised."""
    with keras.StatelessScope(initialize_variables=False):
        return make()


def _uninitialised(fn: Callable) -> Callable:
    """`fn` run inside a stateless scope that initialises nothing: leaving the outermost
    scope would otherwise run every pending initialiser (with tracers, inside jit)."""

    def wrapped(*args):
        with keras.StatelessScope(initialize_variables=False):
            return fn(*args)

    return wrapped


def _values(rng: np.random.Generator, variables: Sequence) -> list[jax.Array]:
    """Numpy-drawn values for Keras variables (kernels have their outputs last)."""
    return [draw(rng, v.path.split("/"), v.shape, v.dtype, -1) for v in variables]


def _inference(model: keras.Model, rng: np.random.Generator, x: jax.Array
               ) -> tuple[Callable, tuple]:
    """`model(x)` in inference mode over its variables passed as arguments."""
    trainable = _values(rng, model.trainable_variables)
    frozen = _values(rng, model.non_trainable_variables)

    def forward(trainable, frozen, x):
        return model.stateless_call(trainable, frozen, x, training=False)[0]

    return _uninitialised(forward), (trainable, frozen, x)


def keras_efficientnet(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """keras.applications.EfficientNetB0 (MBConv blocks, squeeze-excite, swish)."""
    n, hw = pick(rng, [(1, 32), (1, 48), (2, 32)])
    model = _build(lambda: keras.applications.EfficientNetB0(
        weights=None, input_shape=(hw, hw, 3), classes=10))
    return _inference(model, rng, normal(rng, (n, hw, hw, 3)))


def keras_mobilenet(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """keras.applications.MobileNetV3Small (hard-swish, squeeze-excite), maybe minimalistic."""
    n, hw = pick(rng, [1, 2, 4]), pick(rng, [64, 96])
    alpha, minimal = pick(rng, [0.75, 1.0]), bool(rng.integers(2))
    model = _build(lambda: keras.applications.MobileNetV3Small(
        weights=None, input_shape=(hw, hw, 3), alpha=alpha, minimalistic=minimal,
        classes=10))
    return _inference(model, rng, normal(rng, (n, hw, hw, 3)))


def _residual(x, width: int, stride: int):
    """A basic residual block from keras layers: two 3x3 Conv2D + BatchNormalization."""
    h = keras.layers.Conv2D(width, 3, stride, padding="same", use_bias=False)(x)
    h = keras.layers.ReLU()(keras.layers.BatchNormalization()(h))
    h = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(h)
    h = keras.layers.BatchNormalization()(h)
    if stride != 1 or x.shape[-1] != width:
        x = keras.layers.Conv2D(width, 1, stride, use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
    return keras.layers.ReLU()(keras.layers.Add()([x, h]))


def keras_resnet(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A functional ResNet of basic blocks (Conv2D, BatchNormalization, Add) at inference."""
    n, hw = pick(rng, [1, 2, 4]), pick(rng, [32, 48])
    base, blocks = pick(rng, [16, 24, 32]), pick(rng, [1, 2])

    def make():
        image = keras.Input((hw, hw, 3))
        x = keras.layers.Conv2D(base, 3, padding="same", use_bias=False)(image)
        x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
        for stage in range(3):
            for block in range(blocks):
                stride = 2 if stage and not block else 1
                x = _residual(x, base * 2**stage, stride)
        x = keras.layers.GlobalAveragePooling2D()(x)
        return keras.Model(image, keras.layers.Dense(10)(x))

    return _inference(_build(make), rng, normal(rng, (n, hw, hw, 3)))


class _AddPosition(keras.layers.Layer):
    """Adds a learned position embedding."""

    def build(self, input_shape):
        self.pos = self.add_weight(shape=tuple(input_shape[1:]), initializer="random_normal",
                                   name="pos")

    def call(self, x):
        return x + self.pos


class _EncoderBlock(keras.layers.Layer):
    """Pre-norm transformer block: MultiHeadAttention and a GELU MLP."""

    def __init__(self, dim: int, heads: int, **kwargs):
        super().__init__(**kwargs)
        self.ln1 = keras.layers.LayerNormalization()
        self.ln2 = keras.layers.LayerNormalization()
        self.attn = keras.layers.MultiHeadAttention(heads, dim // heads)
        self.up = keras.layers.Dense(4 * dim, activation="gelu")
        self.down = keras.layers.Dense(dim)

    def call(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h)
        return x + self.down(self.up(self.ln2(x)))


def keras_transformer(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A BERT-style text classifier: Embedding, MultiHeadAttention blocks, pooled head."""
    b, t = pick(rng, [2, 4, 8]), pick(rng, [64, 128])
    dim, heads, depth = pick(rng, [64, 128]), pick(rng, [2, 4]), pick(rng, [2, 3])
    vocab = pick(rng, [5000, 10000])

    def make():
        tokens = keras.Input((t,), dtype="int32")
        x = _AddPosition()(keras.layers.Embedding(vocab, dim)(tokens))
        for _ in range(depth):
            x = _EncoderBlock(dim, heads)(x)
        x = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(x))
        return keras.Model(tokens, keras.layers.Dense(2)(x))

    return _inference(_build(make), rng, integers(rng, (b, t), vocab))


def keras_rnn_train(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One training step of a keras.layers.LSTM or GRU classifier (the recurrence is a
    lax.scan): cross-entropy, value_and_grad, Adam or RMSprop `stateless_apply`."""
    b, t, f = pick(rng, [16, 32]), pick(rng, [32, 64]), pick(rng, [16, 32])
    hidden = pick(rng, [64, 128])
    cell = pick(rng, [keras.layers.LSTM, keras.layers.GRU])
    optimizer = pick(rng, [keras.optimizers.Adam, keras.optimizers.RMSprop])(1e-3)
    model = _build(lambda: keras.Sequential(
        [keras.Input((t, f)), cell(hidden), keras.layers.Dense(10)]))
    with keras.StatelessScope(initialize_variables=False):
        optimizer.build(model.trainable_variables)
    trainable = _values(rng, model.trainable_variables)
    frozen = _values(rng, model.non_trainable_variables)
    slots = [np.float32(1e-3) if v.path.endswith("learning_rate") else
             np.zeros(v.shape, v.dtype) for v in optimizer.variables]
    slots = [jnp.asarray(s) for s in slots]
    x, labels = normal(rng, (b, t, f)), integers(rng, (b,), 10)
    loss_of = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def loss_fn(trainable, frozen, x, labels):
        logits, frozen = model.stateless_call(trainable, frozen, x, training=True)
        return loss_of(labels, logits), frozen

    def step(trainable, frozen, slots, x, labels):
        (loss, frozen), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            trainable, frozen, x, labels)
        trainable, slots = optimizer.stateless_apply(slots, grads, trainable)
        return trainable, frozen, slots, loss

    return _uninitialised(step), (trainable, frozen, slots, x, labels)


#: family name -> builder `(rng) -> (fn, example_args)`
FAMILIES: dict[str, Builder] = {
    "keras_efficientnet": keras_efficientnet, "keras_mobilenet": keras_mobilenet,
    "keras_resnet": keras_resnet, "keras_transformer": keras_transformer,
    "keras_rnn_train": keras_rnn_train,
}


def programs(families: list[str] | None = None) -> list[Program]:
    """3 programs of every Keras family (or of `families`)."""
    return select(FAMILIES, families)
