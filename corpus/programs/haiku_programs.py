"""Corpus programs written with DeepMind's Haiku (dm-haiku).

Families: `hk.nets.ResNet` and `hk.nets.MobileNetV1` in inference mode (batch norm from
its moving averages), a stacked `hk.LSTM` run by `hk.dynamic_unroll` (a lax.scan), a
GPT-style decoder from `hk.MultiHeadAttention`, and one training step of a small
conv net (batch norm in training mode, SGD with momentum).
Parameters and state come from `hk.transform(_with_state)(...).init`, run abstractly.
"""

from __future__ import annotations

from collections.abc import Callable

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
from _corpus import Builder, Program, fill, integers, normal, pick, select, zeros

_KEY = jax.random.PRNGKey(0)


def _init(transformed: hk.Transformed | hk.TransformedWithState, rng: np.random.Generator,
          *inputs):
    """The parameters (and state) of a transformed function, drawn with numpy."""
    return fill(rng, jax.eval_shape(transformed.init, _KEY, *inputs), -1)


def haiku_resnet(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """hk.nets.ResNet (basic blocks, v1 or v2) at inference, batch norm from its averages."""
    n, hw = pick(rng, [1, 2]), pick(rng, [64, 96])
    base, blocks = pick(rng, [16, 32]), pick(rng, [1, 2])
    v2 = bool(rng.integers(2))

    def forward(x, is_training):
        net = hk.nets.ResNet([blocks] * 4, 10, bottleneck=False, resnet_v2=v2,
                             channels_per_group=[base * 2**i for i in range(4)])
        return net(x, is_training=is_training)

    model = hk.transform_with_state(forward)
    x = normal(rng, (n, hw, hw, 3))
    params, state = fill(rng, jax.eval_shape(lambda x: model.init(_KEY, x, True), x))
    return (lambda p, s, x: model.apply(p, s, None, x, False)[0]), (params, state, x)


def haiku_mobilenet(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """hk.nets.MobileNetV1 (depthwise + pointwise convs, batch norm) at inference."""
    n, hw = pick(rng, [1, 2]), pick(rng, [48, 64])
    width = pick(rng, [0.25, 0.5])
    full = (64, 128, 128, 256, 256, 512, 512, 512, 512, 512, 512, 1024, 1024)
    channels = tuple(int(c * width) for c in full)

    def forward(x, is_training):
        return hk.nets.MobileNetV1(channels=channels, num_classes=100)(x, is_training)

    model = hk.transform_with_state(forward)
    x = normal(rng, (n, hw, hw, 3))
    params, state = fill(rng, jax.eval_shape(lambda x: model.init(_KEY, x, True), x))
    return (lambda p, s, x: model.apply(p, s, None, x, False)[0]), (params, state, x)


def haiku_lstm(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A sequence tagger: hk.DeepRNN of hk.LSTM layers under hk.dynamic_unroll (a scan)."""
    t, b, f = pick(rng, [32, 64, 96]), pick(rng, [8, 16, 32]), pick(rng, [32, 64])
    hidden, layers = pick(rng, [96, 128, 192]), pick(rng, [1, 2])

    def forward(xs):  # xs: (time, batch, features)
        core = hk.DeepRNN([hk.LSTM(hidden) for _ in range(layers)])
        out, _ = hk.dynamic_unroll(core, xs, core.initial_state(xs.shape[1]))
        return hk.BatchApply(hk.Linear(12))(out)

    model = hk.without_apply_rng(hk.transform(forward))
    xs = normal(rng, (t, b, f))
    return model.apply, (_init(model, rng, xs), xs)


def haiku_gpt(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A GPT-style decoder: hk.Embed, causal hk.MultiHeadAttention, hk.LayerNorm, MLPs."""
    b, t = pick(rng, [1, 2, 4]), pick(rng, [64, 128])
    dim, heads, depth = pick(rng, [64, 128, 192]), pick(rng, [2, 4]), pick(rng, [2, 3])
    vocab = pick(rng, [2000, 4000, 8000])

    def forward(tokens):
        init = hk.initializers.VarianceScaling(1.0)
        x = hk.Embed(vocab, dim)(tokens)
        x = x + hk.get_parameter("pos", (t, dim), init=hk.initializers.RandomNormal(0.02))
        mask = jnp.tril(jnp.ones((1, 1, t, t), bool))
        for _ in range(depth):
            h = hk.LayerNorm(-1, True, True)(x)
            x = x + hk.MultiHeadAttention(heads, dim // heads, w_init=init)(h, h, h, mask)
            h = hk.LayerNorm(-1, True, True)(x)
            x = x + hk.Linear(dim)(jax.nn.gelu(hk.Linear(4 * dim)(h)))
        return hk.Linear(vocab)(hk.LayerNorm(-1, True, True)(x))

    model = hk.without_apply_rng(hk.transform(forward))
    tokens = integers(rng, (b, t), vocab)
    return model.apply, (_init(model, rng, tokens), tokens)


def haiku_train_step(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One training step of a conv net (hk.Conv2D, hk.BatchNorm updating its averages,
    hk.Linear): value_and_grad of cross-entropy, SGD with momentum."""
    n, hw = pick(rng, [8, 16]), pick(rng, [28, 32])
    widths = [pick(rng, [16, 32]), pick(rng, [32, 64])]

    def forward(x, is_training):
        for w in widths:
            x = hk.Conv2D(w, 3, with_bias=False)(x)
            x = hk.BatchNorm(True, True, 0.9)(x, is_training)
            x = hk.max_pool(jax.nn.relu(x), 2, 2, "VALID")
        return hk.Linear(10)(hk.Flatten()(x))

    model = hk.without_apply_rng(hk.transform_with_state(forward))
    x = normal(rng, (n, hw, hw, 3))
    labels = integers(rng, (n,), 10)
    params, state = fill(rng, jax.eval_shape(lambda x: model.init(_KEY, x, True), x))
    velocity = zeros(params)
    lr, beta = 0.05, 0.9

    def loss_fn(params, state, x, labels):
        logits, state = model.apply(params, state, x, True)
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], 1)), state

    def step(params, state, velocity, x, labels):
        (loss, state), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, state, x, labels)
        velocity = jax.tree.map(lambda v, g: beta * v + g, velocity, grads)
        params = jax.tree.map(lambda p, v: p - lr * v, params, velocity)
        return params, state, velocity, loss

    return step, (params, state, velocity, x, labels)


#: family name -> builder `(rng) -> (fn, example_args)`
FAMILIES: dict[str, Builder] = {
    "haiku_resnet": haiku_resnet, "haiku_mobilenet": haiku_mobilenet,
    "haiku_lstm": haiku_lstm, "haiku_gpt": haiku_gpt, "haiku_train_step": haiku_train_step,
}


def programs(families: list[str] | None = None) -> list[Program]:
    """3 programs of every Haiku family (or of `families`)."""
    return select(FAMILIES, families)
