"""A zoo of small JAX programs in the shapes real models are made of, to be measured.

Each family is a generator `(rng) -> (callable, example_args)` that draws sizes, dtypes
and variants from `rng`; `zoo()` names every program `family.NNN` (the family is what
train/valid/test splits keep apart). Sizes are chosen so one run takes ~0.1-5 ms on
one CPU core. Users bring their own programs as a function returning a list of
`(name, callable, example_args)` entries (`load_programs("pkg.mod:fn")`); a name
`family.anything` puts the program in that family.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Program = tuple[str, Callable, tuple]
Generator = Callable[[np.random.Generator], tuple[Callable, tuple]]


def family_of(name: str) -> str:
    """The family of a program name `family.rest` (a name with no dot is its own family)."""
    return name.split(".", 1)[0]


# ------------------------------------------------------------------ shared pieces


def _jnp():
    import jax.numpy as jnp

    return jnp


def _dtype(rng: np.random.Generator, choices: Sequence[str] = ("float32", "float32", "bfloat16")):
    return _jnp().dtype(str(rng.choice(list(choices))))


def _normal(rng: np.random.Generator, shape: tuple[int, ...], dtype, scale: float = 1.0):
    x = rng.standard_normal(shape).astype(np.float32) * scale
    return _jnp().asarray(x, dtype=dtype)


def _act(rng: np.random.Generator) -> Callable:
    import jax

    return {"relu": jax.nn.relu, "gelu": jax.nn.gelu, "tanh": _jnp().tanh,
            "silu": jax.nn.silu}[str(rng.choice(["relu", "gelu", "tanh", "silu"]))]


def _layer_norm(x, g, b):
    jnp = _jnp()
    x32 = x.astype(jnp.float32)
    mu = x32.mean(-1, keepdims=True)
    var = ((x32 - mu) ** 2).mean(-1, keepdims=True)
    return ((x32 - mu) / jnp.sqrt(var + 1e-5) * g + b).astype(x.dtype)


def _conv(x, w, layout: str, stride: int = 1, groups: int = 1):
    from jax import lax

    dn = ("NHWC", "HWIO", "NHWC") if layout == "NHWC" else ("NCHW", "OIHW", "NCHW")
    return lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=dn,
                                    feature_group_count=groups)


def _conv_weight(rng, layout: str, k: int, cin: int, cout: int, dtype, groups: int = 1):
    shape = (k, k, cin // groups, cout) if layout == "NHWC" else (cout, cin // groups, k, k)
    return _normal(rng, shape, dtype, 1.0 / np.sqrt(k * k * cin / groups))


def _image(rng, layout: str, n: int, hw: int, c: int, dtype):
    shape = (n, hw, hw, c) if layout == "NHWC" else (n, c, hw, hw)
    return _normal(rng, shape, dtype)


def _channel_axis(layout: str) -> int:
    return 3 if layout == "NHWC" else 1


# ------------------------------------------------------------------ inference families


def mlp(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Dense layers with an activation: the bulk of recommendation and MLP-mixer models."""
    dt = _dtype(rng)
    batch = int(rng.choice([8, 16, 32, 64]))
    widths = [int(rng.choice([32, 64, 128, 256])) for _ in range(int(rng.integers(3, 6)))]
    act = _act(rng)
    ws = [_normal(rng, (a, b), dt, 1 / np.sqrt(a))
          for a, b in zip(widths, widths[1:], strict=False)]
    bs = [_normal(rng, (b,), dt, 0.1) for b in widths[1:]]
    x = _normal(rng, (batch, widths[0]), dt)

    def f(x, ws, bs):
        for i, (w, b) in enumerate(zip(ws, bs, strict=False)):
            x = x @ w + b
            x = act(x) if i < len(ws) - 1 else x
        return x

    return f, (x, ws, bs)


def _cnn(rng: np.random.Generator, layout: str) -> tuple[Callable, tuple]:
    import jax

    dt = _dtype(rng, ("float32",))
    n, hw = int(rng.choice([1, 2, 4])), int(rng.choice([8, 12, 16]))
    chans = [int(rng.choice([3, 4, 8]))] + [int(rng.choice([8, 16, 24]))
                                            for _ in range(int(rng.integers(2, 4)))]
    k = int(rng.choice([1, 3, 3, 5]))
    ws = [_conv_weight(rng, layout, k, a, b, dt) for a, b in zip(chans, chans[1:], strict=False)]
    x = _image(rng, layout, n, hw, chans[0], dt)
    ax = _channel_axis(layout)

    def f(x, ws):
        for w in ws:
            x = jax.nn.relu(_conv(x, w, layout))
        spatial = tuple(i for i in range(1, 4) if i != ax)
        return x.mean(spatial)

    return f, (x, ws)


def cnn_nhwc(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A conv-relu stack with global pooling, channels last (TF style)."""
    return _cnn(rng, "NHWC")


def cnn_nchw(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """The same stack channels first (PyTorch style): a layout the compiler must handle."""
    return _cnn(rng, "NCHW")


def _resblock(rng: np.random.Generator, layout: str) -> tuple[Callable, tuple]:
    import jax

    dt = _dtype(rng, ("float32",))
    n, hw, c = int(rng.choice([1, 2, 4])), int(rng.choice([8, 12, 16])), int(rng.choice([8, 16]))
    blocks = int(rng.integers(1, 3))
    ax = _channel_axis(layout)
    params = [(_conv_weight(rng, layout, 3, c, c, dt), _conv_weight(rng, layout, 3, c, c, dt),
               _normal(rng, (c,), dt, 0.1) + 1.0) for _ in range(blocks)]
    x = _image(rng, layout, n, hw, c, dt)

    def norm(x, g):
        axes = tuple(i for i in range(4) if i != ax)
        mu = x.mean(axes, keepdims=True)
        var = x.var(axes, keepdims=True)
        shape = [1, 1, 1, 1]
        shape[ax] = -1
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g.reshape(shape)

    def f(x, params):
        for w1, w2, g in params:
            h = jax.nn.relu(norm(_conv(x, w1, layout), g))
            x = jax.nn.relu(x + _conv(h, w2, layout))
        return x

    return f, (x, params)


def resblock_nhwc(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Residual blocks (conv, batch-norm statistics, skip), channels last."""
    return _resblock(rng, "NHWC")


def resblock_nchw(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Residual blocks, channels first."""
    return _resblock(rng, "NCHW")


def depthwise(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """MobileNet-style depthwise then pointwise convolutions."""
    import jax

    layout = str(rng.choice(["NHWC", "NCHW"]))
    dt = _dtype(rng, ("float32",))
    n, hw, c = int(rng.choice([1, 2])), int(rng.choice([8, 16])), int(rng.choice([8, 16, 32]))
    cout = int(rng.choice([16, 32]))
    wd = _conv_weight(rng, layout, 3, c, c, dt, groups=c)
    wp = _conv_weight(rng, layout, 1, c, cout, dt)
    x = _image(rng, layout, n, hw, c, dt)

    def f(x, wd, wp):
        h = jax.nn.relu(_conv(x, wd, layout, groups=c))
        return jax.nn.relu(_conv(h, wp, layout))

    return f, (x, wd, wp)


def grouped_conv(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """ResNeXt-style grouped convolutions, possibly strided."""
    import jax

    layout = str(rng.choice(["NHWC", "NCHW"]))
    dt = _dtype(rng, ("float32",))
    groups = int(rng.choice([2, 4]))
    n, hw, c = int(rng.choice([1, 2])), int(rng.choice([8, 16])), groups * int(rng.choice([4, 8]))
    stride = int(rng.choice([1, 2]))
    w1 = _conv_weight(rng, layout, 3, c, c, dt, groups=groups)
    w2 = _conv_weight(rng, layout, 3, c, c, dt, groups=groups)
    x = _image(rng, layout, n, hw, c, dt)

    def f(x, w1, w2):
        return _conv(jax.nn.relu(_conv(x, w1, layout, stride, groups)), w2, layout, 1, groups)

    return f, (x, w1, w2)


def _attention_params(rng, d: int, ff: int, dt) -> dict:
    s = 1 / np.sqrt(d)
    return {"wq": _normal(rng, (d, d), dt, s), "wk": _normal(rng, (d, d), dt, s),
            "wv": _normal(rng, (d, d), dt, s), "wo": _normal(rng, (d, d), dt, s),
            "w1": _normal(rng, (d, ff), dt, s), "w2": _normal(rng, (ff, d), dt, 1 / np.sqrt(ff)),
            "g1": _normal(rng, (d,), dt, 0.1) + 1, "b1": _normal(rng, (d,), dt, 0.1),
            "g2": _normal(rng, (d,), dt, 0.1) + 1, "b2": _normal(rng, (d,), dt, 0.1)}


def _encoder(p: dict, x, heads: int, causal: bool):
    import jax

    jnp = _jnp()
    b, t, d = x.shape
    h = _layer_norm(x, p["g1"], p["b1"])

    def split(y):
        return y.reshape(b, t, heads, d // heads)

    q, k, v = split(h @ p["wq"]), split(h @ p["wk"]), split(h @ p["wv"])
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // heads)
    if causal:
        logits = jnp.where(jnp.tril(jnp.ones((t, t), bool)), logits, -1e9)
    att = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(x.dtype)
    x = x + jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, t, d) @ p["wo"]
    h = _layer_norm(x, p["g2"], p["b2"])
    return x + jax.nn.gelu(h @ p["w1"]) @ p["w2"]


def transformer(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Encoder blocks: layer norm, multi-head attention, MLP, residuals."""
    dt = _dtype(rng)
    b, t = int(rng.choice([1, 2, 4])), int(rng.choice([16, 32, 64]))
    d, heads = int(rng.choice([32, 64])), int(rng.choice([2, 4]))
    layers, causal = int(rng.integers(1, 3)), bool(rng.integers(2))
    ps = [_attention_params(rng, d, 4 * d, dt) for _ in range(layers)]
    x = _normal(rng, (b, t, d), dt)

    def f(x, ps):
        for p in ps:
            x = _encoder(p, x, heads, causal)
        return x

    return f, (x, ps)


def embedding(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Embedding lookups (gather), pooling and a dense head: recommendation models."""
    import jax

    jnp = _jnp()
    dt = _dtype(rng)
    vocab, d = int(rng.choice([1000, 4000, 16000])), int(rng.choice([16, 32, 64]))
    b, bag, tables = int(rng.choice([32, 64, 128])), int(rng.choice([4, 16, 32])), \
        int(rng.integers(1, 4))
    embs = [_normal(rng, (vocab, d), dt, 0.1) for _ in range(tables)]
    ids = [jnp.asarray(rng.integers(0, vocab, (b, bag)), jnp.int32) for _ in range(tables)]
    w = _normal(rng, (tables * d, 1), dt, 1 / np.sqrt(tables * d))

    def f(embs, ids, w):
        pooled = [jnp.take(e, i, axis=0).sum(1) for e, i in zip(embs, ids, strict=False)]
        return jax.nn.sigmoid(jnp.concatenate(pooled, -1) @ w)

    return f, (embs, ids, w)


def rnn(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A recurrent cell (Elman, GRU or LSTM) run over time with `lax.scan`."""
    import jax

    jnp = _jnp()
    dt = _dtype(rng, ("float32",))
    cell = str(rng.choice(["elman", "gru", "lstm"]))
    gates = {"elman": 1, "gru": 3, "lstm": 4}[cell]
    b, t = int(rng.choice([4, 8, 16])), int(rng.choice([8, 16, 32]))
    d, h = int(rng.choice([16, 32])), int(rng.choice([32, 64]))
    wx = _normal(rng, (d, gates * h), dt, 1 / np.sqrt(d))
    wh = _normal(rng, (h, gates * h), dt, 1 / np.sqrt(h))
    xs = _normal(rng, (t, b, d), dt)

    def f(xs, wx, wh):
        def step(carry, x):
            hs, cs = carry
            z = x @ wx + hs @ wh
            if cell == "elman":
                hs = jnp.tanh(z)
            elif cell == "gru":
                r, u, n = jnp.split(z, 3, -1)
                hs = (1 - jax.nn.sigmoid(u)) * jnp.tanh(n * jax.nn.sigmoid(r)) \
                    + jax.nn.sigmoid(u) * hs
            else:
                i, f_, o, g = jnp.split(z, 4, -1)
                cs = jax.nn.sigmoid(f_) * cs + jax.nn.sigmoid(i) * jnp.tanh(g)
                hs = jax.nn.sigmoid(o) * jnp.tanh(cs)
            return (hs, cs), hs

        zero = jnp.zeros((xs.shape[1], h), xs.dtype)
        (hs, _), ys = jax.lax.scan(step, (zero, zero), xs)
        return ys.mean(0) + hs

    return f, (xs, wx, wh)


def normalization(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Chains of layer/RMS/group norms and softmaxes: memory-bound, reduction-heavy."""
    import jax

    jnp = _jnp()
    dt = _dtype(rng)
    b, t, d = int(rng.choice([4, 16, 32])), int(rng.choice([16, 64])), int(rng.choice([64, 128]))
    kinds = [str(k) for k in rng.choice(["layer", "rms", "group", "softmax"],
                                        size=int(rng.integers(2, 5)))]
    g = _normal(rng, (d,), dt, 0.1) + 1
    x = _normal(rng, (b, t, d), dt)

    def f(x, g):
        for k in kinds:
            x32 = x.astype(jnp.float32)
            if k == "layer":
                x32 = _layer_norm(x32, g, 0.0)
            elif k == "rms":
                x32 = x32 * jax.lax.rsqrt((x32 ** 2).mean(-1, keepdims=True) + 1e-6) * g
            elif k == "group":
                y = x32.reshape(b, t, 8, d // 8)
                y = (y - y.mean((1, 3), keepdims=True)) / (y.std((1, 3), keepdims=True) + 1e-5)
                x32 = y.reshape(b, t, d)
            else:
                x32 = jax.nn.softmax(x32, -1) * d
            x = x32.astype(x.dtype)
        return x

    return f, (x, g)


def reduction(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Reductions over different axes, cumulative sums, arg-max and top-k style ops."""
    jnp = _jnp()
    dt = _dtype(rng, ("float32",))
    shape = tuple(int(rng.choice([8, 16, 32, 64])) for _ in range(int(rng.integers(2, 4))))
    x = _normal(rng, shape, dt)
    ax = int(rng.integers(len(shape)))

    def f(x):
        s = x.sum(ax)
        m = x.max(ax)
        lse = jnp.log(jnp.exp(x - x.max(ax, keepdims=True)).sum(ax))
        cs = jnp.cumsum(x, axis=ax).mean(ax)
        am = jnp.argmax(x, axis=ax).astype(x.dtype)
        return s + m + lse + cs + am, jnp.sort(x, axis=-1)[..., -4:]

    return f, (x,)


# ------------------------------------------------------------------ training steps


def _sgd_or_adam(rng: np.random.Generator, loss: Callable) -> Callable:
    """A training step for `loss(params, *batch)`: forward, backward and an update."""
    import jax

    jnp = _jnp()
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
        new = jax.tree.map(lambda p, a, b: p - lr * a / (jnp.sqrt(b) + 1e-8), params, m, v)
        return new, (m, v), value

    return step


def _zeros_like(tree):
    import jax

    return jax.tree.map(lambda p: _jnp().zeros_like(p), tree)


def train_mlp(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One SGD/Adam step of an MLP classifier with softmax cross-entropy."""
    import jax

    jnp = _jnp()
    f, (x, ws, bs) = mlp(rng)
    x = x.astype(jnp.float32)
    params = (jax.tree.map(lambda a: a.astype(jnp.float32), ws),
              jax.tree.map(lambda a: a.astype(jnp.float32), bs))
    classes = int(ws[-1].shape[1])
    y = jnp.asarray(rng.integers(0, classes, x.shape[0]), jnp.int32)

    def loss(params, x, y):
        logits = f(x, *params)
        return -jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1).mean()

    step = _sgd_or_adam(rng, loss)
    return step, (params, (_zeros_like(params), _zeros_like(params)), x, y)


def train_cnn(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One training step of a small conv net (either layout) with a regression loss."""
    layout = str(rng.choice(["NHWC", "NCHW"]))
    f, (x, ws) = _cnn(rng, layout)
    target = _normal(rng, (x.shape[0], int(ws[-1].shape[-1 if layout == "NHWC" else 0])),
                     x.dtype)

    def loss(ws, x, t):
        return ((f(x, ws) - t) ** 2).mean()

    step = _sgd_or_adam(rng, loss)
    return step, (ws, (_zeros_like(ws), _zeros_like(ws)), x, target)


def train_transformer(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One training step of a one-layer encoder with a regression loss."""
    jnp = _jnp()
    b, t, d = int(rng.choice([1, 2])), int(rng.choice([16, 32])), int(rng.choice([32, 64]))
    heads = int(rng.choice([2, 4]))
    p = _attention_params(rng, d, 2 * d, jnp.float32)
    x = _normal(rng, (b, t, d), jnp.float32)

    def loss(p, x):
        return (_encoder(p, x, heads, causal=True) ** 2).mean()

    step = _sgd_or_adam(rng, loss)
    return step, (p, (_zeros_like(p), _zeros_like(p)), x)


FAMILIES: dict[str, Generator] = {
    "mlp": mlp, "cnn_nhwc": cnn_nhwc, "cnn_nchw": cnn_nchw, "resblock_nhwc": resblock_nhwc,
    "resblock_nchw": resblock_nchw, "depthwise": depthwise, "grouped_conv": grouped_conv,
    "transformer": transformer, "embedding": embedding, "rnn": rnn,
    "normalization": normalization, "reduction": reduction, "train_mlp": train_mlp,
    "train_cnn": train_cnn, "train_transformer": train_transformer,
}


def make_program(family: str, index: int, seed: int = 0) -> Program:
    """Program `index` of `family`: the same arguments always give the same program."""
    rng = np.random.default_rng([seed, index, *map(ord, family)])
    fn, args = FAMILIES[family](rng)
    return f"{family}.{index:03d}", fn, tuple(args)


def zoo(per_family: int = 4, seed: int = 0, families: Sequence[str] | None = None
        ) -> list[Program]:
    """`per_family` programs of every family (or of the families named)."""
    names = list(families) if families else list(FAMILIES)
    unknown = sorted(set(names) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown program families {unknown}; known: {sorted(FAMILIES)}")
    return [make_program(f, i, seed) for f in names for i in range(per_family)]


def load_programs(spec: str, **kwargs: Any) -> list[Program]:
    """Programs from `module:function` (called with those `kwargs` it accepts).

    The function returns `(name, callable, example_args)` entries; names must be unique.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{spec!r}: expected MODULE:FUNCTION, e.g. 'graphcost.xla.programs:zoo'")
    factory = getattr(importlib.import_module(module_name), attr)
    params = inspect.signature(factory).parameters
    made = factory(**{k: v for k, v in kwargs.items() if k in params})
    out: list[Program] = []
    for entry in made:
        if not (isinstance(entry, tuple) and len(entry) == 3 and callable(entry[1])):
            raise ValueError(f"{spec}: entries must be (name, callable, example_args), "
                             f"got {entry!r:.80}")
        out.append((str(entry[0]), entry[1], tuple(entry[2])))
    names = [n for n, _, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"{spec}: program names must be unique")
    return out
