"""Inference program families over images and signals (convolutions, pooling, patches).

Each family is `(rng) -> (callable, example_args)`; sizes are drawn so one call takes
about 1-20 ms on one CPU core (registry and sizing notes: graphcost.xla.programs).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from graphcost.xla.zoo_layers import (
    attention_params,
    channel_axis,
    conv,
    conv_weight,
    dense,
    dtype,
    encoder,
    image,
    jnp,
    normal,
    pick,
    pool,
    spatial_axes,
    upsample,
)

F32 = ("float32",)


def cnn(rng: np.random.Generator, layout: str) -> tuple[Callable, tuple]:
    """A conv-relu stack, sometimes pooled between layers, with global pooling."""
    import jax

    dt = dtype(rng, F32)
    n, hw = pick(rng, [2, 4]), pick(rng, [32, 48])
    chans = [pick(rng, [3, 8, 16])] + [pick(rng, [16, 24, 32, 48])
                                       for _ in range(pick(rng, [2, 2, 3]))]
    k = pick(rng, [3, 3, 5])
    pools = [bool(rng.random() < 0.35) for _ in chans[1:]]
    ws = [conv_weight(rng, layout, k, a, b, dt) for a, b in zip(chans, chans[1:], strict=False)]
    x = image(rng, layout, n, hw, chans[0], dt)

    def f(x, ws):
        for w, p in zip(ws, pools, strict=True):
            x = jax.nn.relu(conv(x, w, layout))
            x = pool(x, layout, "max") if p else x
        return x.mean(spatial_axes(layout))

    return f, (x, ws)


def cnn_nhwc(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A conv-relu stack with global pooling, channels last (TF style)."""
    return cnn(rng, "NHWC")


def cnn_nchw(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """The same stack channels first (PyTorch style): a layout the compiler must handle."""
    return cnn(rng, "NCHW")


def _batch_norm(x, g, layout: str):
    import jax

    ax = channel_axis(layout)
    axes = tuple(i for i in range(4) if i != ax)
    mu = x.mean(axes, keepdims=True)
    var = x.var(axes, keepdims=True)
    shape = [1, 1, 1, 1]
    shape[ax] = -1
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g.reshape(shape)


def _resblock(rng: np.random.Generator, layout: str) -> tuple[Callable, tuple]:
    import jax

    dt = dtype(rng, F32)
    n, hw, c = pick(rng, [2, 4]), pick(rng, [16, 24, 32]), pick(rng, [32, 48, 64])
    blocks = int(rng.integers(1, 3))
    params = [(conv_weight(rng, layout, 3, c, c, dt), conv_weight(rng, layout, 3, c, c, dt),
               normal(rng, (c,), dt, 0.1) + 1.0) for _ in range(blocks)]
    x = image(rng, layout, n, hw, c, dt)

    def f(x, params):
        for w1, w2, g in params:
            h = jax.nn.relu(_batch_norm(conv(x, w1, layout), g, layout))
            x = jax.nn.relu(x + conv(h, w2, layout))
        return x

    return f, (x, params)


def resblock_nhwc(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Residual blocks (conv, batch-norm statistics, skip), channels last."""
    return _resblock(rng, "NHWC")


def resblock_nchw(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Residual blocks, channels first."""
    return _resblock(rng, "NCHW")


def depthwise(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """MobileNet-v2 inverted residuals: 1x1 expand, depthwise 3x3, 1x1 project."""
    import jax

    layout = pick(rng, ["NHWC", "NCHW"])
    dt = dtype(rng, F32)
    n, hw, c = pick(rng, [1, 2]), pick(rng, [24, 32]), pick(rng, [16, 24])
    e = c * pick(rng, [3, 4])
    blocks = pick(rng, [1, 1, 2])
    params = [(conv_weight(rng, layout, 1, c, e, dt), conv_weight(rng, layout, 3, e, e, dt, e),
               conv_weight(rng, layout, 1, e, c, dt)) for _ in range(blocks)]
    x = image(rng, layout, n, hw, c, dt)

    def f(x, params):
        for we, wd, wp in params:
            h = jax.nn.relu6(conv(x, we, layout))
            h = jax.nn.relu6(conv(h, wd, layout, groups=e))
            x = x + conv(h, wp, layout)
        return x

    return f, (x, params)


def grouped_conv(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """ResNeXt-style grouped convolutions, possibly strided."""
    import jax

    layout = pick(rng, ["NHWC", "NCHW"])
    dt = dtype(rng, F32)
    groups = pick(rng, [2, 4, 8])
    n, hw, c = pick(rng, [2, 4]), pick(rng, [24, 32, 48]), groups * pick(rng, [8, 16])
    stride = pick(rng, [1, 2])
    ws = [conv_weight(rng, layout, 3, c, c, dt, groups=groups)
          for _ in range(pick(rng, [2, 2, 3]))]
    x = image(rng, layout, n, hw, c, dt)

    def f(x, ws):
        for i, w in enumerate(ws):
            x = jax.nn.relu(conv(x, w, layout, stride if i == 0 else 1, groups))
        return x

    return f, (x, ws)


def unet(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A small U-Net: strided convs down, transposed convs up, skip concatenations."""
    import jax
    from jax import lax

    layout = pick(rng, ["NHWC", "NCHW"])
    dn = ("NHWC", "HWIO", "NHWC") if layout == "NHWC" else ("NCHW", "OIHW", "NCHW")
    ax = channel_axis(layout)
    dt = dtype(rng, F32)
    n, hw, c = pick(rng, [1, 2]), pick(rng, [32, 48, 64]), pick(rng, [8, 16, 24])
    depth = pick(rng, [2, 2, 3])
    chans = [c * 2 ** i for i in range(depth + 1)]
    down = [conv_weight(rng, layout, 3, a, b, dt) for a, b in zip(chans, chans[1:], strict=False)]
    up = [conv_weight(rng, layout, 2, b, a, dt) for a, b in zip(chans, chans[1:], strict=False)]
    fuse = [conv_weight(rng, layout, 3, 2 * a, a, dt) for a in chans[:-1]]
    x = image(rng, layout, n, hw, c, dt)

    def f(x, down, up, fuse):
        skips = []
        for w in down:
            skips.append(x)
            x = jax.nn.relu(conv(x, w, layout, stride=2))
        for w_up, w_fuse, skip in zip(up[::-1], fuse[::-1], skips[::-1], strict=True):
            x = lax.conv_transpose(x, w_up, (2, 2), "SAME", dimension_numbers=dn)
            x = jax.nn.relu(conv(jnp().concatenate([x, skip], axis=ax), w_fuse, layout))
        return x

    return f, (x, down, up, fuse)


def conv1d(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """WaveNet-style 1-D audio convolutions: dilated, gated, with residuals."""
    import jax
    from jax import lax

    j = jnp()
    layout = pick(rng, ["NWC", "NCW"])
    dt = dtype(rng, F32)
    n, length, c = pick(rng, [1, 2, 4]), pick(rng, [4096, 8192, 16384]), pick(rng, [16, 32, 48])
    k = pick(rng, [2, 3, 5])
    dilations = [2 ** i for i in range(int(rng.integers(2, 4)))]
    wshape = (k, c, 2 * c) if layout == "NWC" else (2 * c, c, k)
    ws = [normal(rng, wshape, dt, 1 / np.sqrt(k * c)) for _ in dilations]
    x = normal(rng, (n, length, c) if layout == "NWC" else (n, c, length), dt)
    dn = (layout, "WIO" if layout == "NWC" else "OIW", layout)
    ax = 2 if layout == "NWC" else 1

    def f(x, ws):
        for w, d in zip(ws, dilations, strict=True):
            h = lax.conv_general_dilated(x, w, (1,), "SAME", rhs_dilation=(d,),
                                         dimension_numbers=dn)
            a, b = j.split(h, 2, axis=ax)
            x = x + j.tanh(a) * jax.nn.sigmoid(b)
        return x

    return f, (x, ws)


def vit(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """ViT: patch embedding (reshape + transpose + dense), encoder blocks, pooled head."""
    dt = dtype(rng)
    n, side, p = pick(rng, [4, 8]), pick(rng, [96, 128]), pick(rng, [8, 16])
    d, heads = pick(rng, [96, 128, 192]), pick(rng, [4, 8])
    g = side // p
    layers = 1
    w_patch = dense(rng, p * p * 3, d, dt)
    pos = normal(rng, (g * g, d), dt, 0.02)
    ps = [attention_params(rng, d, 2 * d, dt) for _ in range(layers)]
    head = dense(rng, d, 10, dt)
    x = normal(rng, (n, side, side, 3), dt)

    def f(x, w_patch, pos, ps, head):
        patches = x.reshape(n, g, p, g, p, 3).transpose(0, 1, 3, 2, 4, 5)
        h = patches.reshape(n, g * g, p * p * 3) @ w_patch + pos
        for prm in ps:
            h = encoder(prm, h, heads, causal=False)
        return h.mean(1) @ head

    return f, (x, w_patch, pos, ps, head)


def pyramid(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A feature pyramid: a pooled backbone, lateral 1x1 convs, up-sample and add."""
    import jax

    layout = pick(rng, ["NHWC", "NCHW"])
    dt = dtype(rng, F32)
    n, hw, c = pick(rng, [2, 4]), pick(rng, [64, 96]), pick(rng, [32, 48])
    levels = pick(rng, [2, 2, 3])
    kind = pick(rng, ["avg", "max"])
    back = [conv_weight(rng, layout, 3, 3 if i == 0 else c, c, dt) for i in range(levels)]
    lateral = [conv_weight(rng, layout, 1, c, c, dt) for _ in range(levels)]
    x = image(rng, layout, n, hw, 3, dt)

    def f(x, back, lateral):
        feats = []
        for w in back:
            x = pool(jax.nn.relu(conv(x, w, layout)), layout, kind)
            feats.append(x)
        y = conv(feats[-1], lateral[-1], layout)
        for feat, w in zip(feats[-2::-1], lateral[-2::-1], strict=True):
            y = upsample(y, layout) + conv(feat, w, layout)
        return y

    return f, (x, back, lateral)
