"""An external test set for graphcost: JAX programs written with third-party layer libraries.

The programs here are built from the layers of Flax (`flax.linen` and `flax.nnx`) and
Equinox, not from graphcost's own zoo, so a cost model can be evaluated on programs from
outside the code it was trained on. They are a test set only: never train on them.

    graphcost collect OUT --programs external_programs:programs   (with this folder on PYTHONPATH)

Conventions follow `graphcost.xla.programs`: every program is `(name, fn, example_args)`
named `family.NNN` (the family, e.g. `flax_vit`, is what splits keep apart); sizes are drawn
from a seeded numpy rng so one call takes about 1-20 ms on one pinned CPU core and the
optimized HLO stays at a few hundred to a few thousand nodes; everything is float32. Each
`fn` is a pure function of its arguments: parameters travel as pytrees of arrays in
`example_args` (XLA sees them as inputs) while the module structure (a linen module, an
nnx graphdef, an equinox static part) is closed over. Parameter shapes come from each
library's own initialiser, run abstractly; their values are drawn with numpy (`_fill`), so
building all programs takes seconds. The same call always returns the same programs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from flax import nnx

Program = tuple[str, Callable, tuple]

PER_FAMILY = 3  # programs per family: this is a fixed test set


# ------------------------------------------------------------------ helpers


def _pick(rng: np.random.Generator, options: Sequence):
    """One of `options` (a plain Python value, not a numpy scalar)."""
    return options[int(rng.integers(len(options)))]


def _normal(rng: np.random.Generator, shape: Sequence[int]) -> jax.Array:
    return jnp.asarray(rng.standard_normal(shape, dtype=np.float32))


def _tokens(rng: np.random.Generator, shape: Sequence[int], vocab: int) -> jax.Array:
    return jnp.asarray(rng.integers(0, vocab, shape, dtype=np.int32))


def _leaf_name(path) -> str:
    """The parameter's own name (`kernel`, `bias`, `scale`, `weight`...) from a tree path."""
    names = [str(getattr(k, "key", getattr(k, "name", ""))) for k in path]
    names = [n for n in names if n != "value"]  # nnx: Variable.value
    return names[-1] if names else ""


def _fill(rng: np.random.Generator, abstract, out_axis: int):
    """Concrete arrays for a tree of `jax.ShapeDtypeStruct`s (a library's parameters, from
    running its initialiser abstractly), drawn with numpy: weights N(0, 1/fan_in) with the
    output features on `out_axis` (-1 for flax kernels, 0 for equinox weights), biases and
    means small, scales near 1, variances positive. A cost depends on shapes, not values;
    this keeps building every program to seconds (compiling the libraries' jax.random
    initialisers took seconds per program) and the values the same across jax versions."""

    def leaf(path, spec):
        if not jnp.issubdtype(spec.dtype, jnp.floating):
            raise TypeError(f"parameter {jax.tree_util.keystr(path)} is {spec.dtype}")
        name, shape = _leaf_name(path), spec.shape
        if name == "var":
            v = rng.uniform(0.5, 1.5, shape)
        elif name == "scale" or (name == "weight" and len(shape) == 1):
            v = 1.0 + 0.1 * rng.standard_normal(shape)
        elif len(shape) <= 1 or "bias" in name or name == "mean":
            v = 0.1 * rng.standard_normal(shape)
        else:
            fan_in = int(np.prod(shape)) // shape[out_axis]
            v = rng.standard_normal(shape) / np.sqrt(fan_in)
        return jnp.asarray(v.astype(spec.dtype))

    return jax.tree_util.tree_map_with_path(leaf, abstract)


def _linen_params(model: nn.Module, rng: np.random.Generator, *inputs) -> dict:
    """The variables of a linen module (`params`, `batch_stats`...) for these inputs."""
    return _fill(rng, jax.eval_shape(model.init, jax.random.PRNGKey(0), *inputs), -1)


def _linen_program(model: nn.Module, rng: np.random.Generator, x: jax.Array
                   ) -> tuple[Callable, tuple]:
    """A linen module as a program: `model.apply` over its variables and input `x`."""
    return model.apply, (_linen_params(model, rng, x), x)


def _nnx_split(make: Callable[[nnx.Rngs], nnx.Module], rng: np.random.Generator
               ) -> tuple[Callable[[nnx.State], nnx.Module], nnx.State]:
    """(rebuild, state) of the module `make(rngs)` builds: its variables as an argument,
    its graphdef closed over."""
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: make(nnx.Rngs(0))))
    state = _fill(rng, abstract, -1)
    return (lambda s: nnx.merge(graphdef, s)), state


def _eqx_split(make: Callable[[jax.Array], eqx.Module], rng: np.random.Generator
               ) -> tuple[Callable[[eqx.Module], eqx.Module], eqx.Module]:
    """(rebuild, params) of the module `make(key)` builds: its arrays as an argument, the
    rest (structure, activation functions) closed over."""
    abstract = eqx.filter_eval_shape(make, jax.random.PRNGKey(0))
    params, static = eqx.partition(abstract, lambda x: isinstance(x, jax.ShapeDtypeStruct))
    params = _fill(rng, params, 0)
    return (lambda p: eqx.combine(p, static)), params


# ------------------------------------------------------------------ flax.linen


class _ResBlock(nn.Module):
    features: int
    stride: int

    @nn.compact
    def __call__(self, x):
        bn = lambda: nn.BatchNorm(use_running_average=True)  # noqa: E731  (inference)
        h = nn.relu(bn()(nn.Conv(self.features, (3, 3), self.stride, use_bias=False)(x)))
        h = bn()(nn.Conv(self.features, (3, 3), use_bias=False)(h))
        if self.stride != 1 or x.shape[-1] != self.features:
            x = bn()(nn.Conv(self.features, (1, 1), self.stride, use_bias=False)(x))
        return nn.relu(x + h)


class _ResNet(nn.Module):
    widths: Sequence[int]
    classes: int

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(self.widths[0], (3, 3), use_bias=False)(x)
        x = nn.relu(nn.BatchNorm(use_running_average=True)(x))
        for i, w in enumerate(self.widths):
            x = _ResBlock(w, 1 if i == 0 else 2)(x)
        return nn.Dense(self.classes)(x.mean((1, 2)))


def flax_resnet(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A small ResNet in linen: conv, batch norm (inference), residual stages, dense head."""
    n, hw = _pick(rng, [2, 4]), _pick(rng, [32, 48])
    base = _pick(rng, [16, 24, 32])
    widths = [base * 2**i for i in range(_pick(rng, [2, 3]))]
    model = _ResNet(widths, classes=10)
    x = _normal(rng, (n, hw, hw, 3))
    return _linen_program(model, rng, x)


class _ViT(nn.Module):
    patch: int
    dim: int
    heads: int
    depth: int
    classes: int

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(self.dim, (self.patch, self.patch), self.patch)(x)  # patch embedding
        x = x.reshape(x.shape[0], -1, self.dim)
        x = x + self.param("pos", nn.initializers.normal(0.02), x.shape[1:])
        for _ in range(self.depth):
            x = x + nn.MultiHeadDotProductAttention(self.heads)(nn.LayerNorm()(x))
            h = nn.gelu(nn.Dense(4 * self.dim)(nn.LayerNorm()(x)))
            x = x + nn.Dense(self.dim)(h)
        return nn.Dense(self.classes)(nn.LayerNorm()(x).mean(1))


def flax_vit(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A vision transformer in linen: patch conv, MultiHeadDotProductAttention, MLP blocks."""
    n, (hw, patch) = _pick(rng, [1, 2]), _pick(rng, [(48, 4), (64, 4)])  # 144, 256 patches
    dim, heads, depth = _pick(rng, [64, 96, 128]), _pick(rng, [2, 4]), 2
    model = _ViT(patch, dim, heads, depth, classes=100)
    x = _normal(rng, (n, hw, hw, 3))
    return _linen_program(model, rng, x)


class _LSTMTagger(nn.Module):
    hidden: int
    bidirectional: bool
    classes: int

    @nn.compact
    def __call__(self, x):
        if self.bidirectional:
            h = nn.Bidirectional(nn.RNN(nn.OptimizedLSTMCell(self.hidden)),
                                 nn.RNN(nn.OptimizedLSTMCell(self.hidden)))(x)
        else:
            h = nn.RNN(nn.LSTMCell(self.hidden))(x)
        return nn.Dense(self.classes)(h)  # one label per step


def flax_lstm(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A sequence tagger in linen: nn.RNN over (Optimized)LSTMCell, maybe bidirectional."""
    b, t, f = _pick(rng, [16, 24]), _pick(rng, [32, 64]), _pick(rng, [32, 64])
    hidden, bidir = _pick(rng, [128, 192]), bool(rng.integers(2))
    model = _LSTMTagger(hidden, bidir, classes=16)
    x = _normal(rng, (b, t, f))
    return _linen_program(model, rng, x)


class _UNet(nn.Module):
    base: int
    depth: int

    @nn.compact
    def __call__(self, x):
        def block(h, c):
            for _ in range(2):
                h = nn.Conv(c, (3, 3))(h)
                h = nn.swish(nn.GroupNorm(num_groups=min(8, c // 4))(h))
            return h

        skips = []
        for i in range(self.depth):
            x = block(x, self.base * 2**i)
            skips.append(x)
            x = nn.max_pool(x, (2, 2), (2, 2))
        x = block(x, self.base * 2**self.depth)
        for i in reversed(range(self.depth)):
            x = nn.ConvTranspose(self.base * 2**i, (2, 2), (2, 2))(x)
            x = block(jnp.concatenate([x, skips[i]], -1), self.base * 2**i)
        return nn.Conv(1, (1, 1))(x)


def flax_unet(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A U-Net in linen: conv + group norm blocks, max pooling, ConvTranspose, skip concat."""
    n, hw = _pick(rng, [1, 2]), _pick(rng, [48, 64])
    base, depth = _pick(rng, [8, 16]), _pick(rng, [2, 3])
    model = _UNet(base, depth)
    x = _normal(rng, (n, hw, hw, 3))
    return _linen_program(model, rng, x)


class _AutoEncoder(nn.Module):
    widths: Sequence[int]
    latent: int
    out: int

    @nn.compact
    def __call__(self, x):
        h = x
        for w in self.widths:
            h = nn.gelu(nn.LayerNorm()(nn.Dense(w)(h)))
        stats = nn.Dense(2 * self.latent)(h)
        mean, logvar = jnp.split(stats, 2, -1)
        h = mean  # the posterior mean: deterministic, no sampling
        for w in reversed(self.widths):
            h = nn.gelu(nn.Dense(w)(h))
        recon = nn.sigmoid(nn.Dense(self.out)(h))
        kl = 0.5 * jnp.sum(jnp.exp(logvar) + mean**2 - 1.0 - logvar, -1)
        bce = -jnp.sum(x * jnp.log(recon + 1e-6) + (1 - x) * jnp.log(1 - recon + 1e-6), -1)
        return recon, jnp.mean(bce + kl)


def flax_autoencoder(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A VAE-style dense autoencoder in linen (Dense, LayerNorm): reconstruction and ELBO."""
    batch, d_in = _pick(rng, [32, 64, 128]), _pick(rng, [784, 1024])
    widths = [_pick(rng, [512, 768]), _pick(rng, [256, 384])]
    model = _AutoEncoder(widths, latent=_pick(rng, [32, 64]), out=d_in)
    x = jnp.asarray(rng.random((batch, d_in), dtype=np.float32))
    return _linen_program(model, rng, x)


class _SmallCNN(nn.Module):
    widths: Sequence[int]
    classes: int

    @nn.compact
    def __call__(self, x):
        for w in self.widths:
            x = nn.relu(nn.Conv(w, (3, 3))(x))
            x = nn.avg_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Dense(128)(x.reshape(x.shape[0], -1)))
        return nn.Dense(self.classes)(x)


def flax_train_step(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One SGD training step of a linen CNN: value_and_grad of cross-entropy, then update."""
    n, hw = _pick(rng, [8, 16]), _pick(rng, [28, 32])
    widths = [_pick(rng, [16, 32]), _pick(rng, [32, 64])]
    model = _SmallCNN(widths, classes=10)
    x = _normal(rng, (n, hw, hw, 3))
    labels = jnp.asarray(rng.integers(0, 10, n, dtype=np.int32))
    params = _linen_params(model, rng, x)["params"]
    lr = 0.05

    def loss_fn(params, x, labels):
        logits = model.apply({"params": params}, x)
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], 1))

    def step(params, x, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, labels)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), loss

    return step, (params, x, labels)


# ------------------------------------------------------------------ flax.nnx


class _NnxBlock(nnx.Module):
    def __init__(self, dim: int, heads: int, rngs: nnx.Rngs):
        self.ln1, self.ln2 = nnx.LayerNorm(dim, rngs=rngs), nnx.LayerNorm(dim, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(heads, dim, decode=False, keep_rngs=False,
                                           rngs=rngs)
        self.up, self.down = nnx.Linear(dim, 4 * dim, rngs=rngs), nnx.Linear(4 * dim, dim,
                                                                             rngs=rngs)

    def __call__(self, x, mask):
        x = x + self.attn(self.ln1(x), mask=mask)
        return x + self.down(nnx.gelu(self.up(self.ln2(x))))


class _NnxLM(nnx.Module):
    def __init__(self, vocab: int, seq: int, dim: int, heads: int, depth: int,
                 rngs: nnx.Rngs):
        self.tok, self.pos = nnx.Embed(vocab, dim, rngs=rngs), nnx.Embed(seq, dim, rngs=rngs)
        self.blocks = nnx.List([_NnxBlock(dim, heads, rngs) for _ in range(depth)])
        self.ln = nnx.LayerNorm(dim, rngs=rngs)
        self.head = nnx.Linear(dim, vocab, rngs=rngs)

    def __call__(self, tokens):
        t = tokens.shape[1]
        x = self.tok(tokens) + self.pos(jnp.arange(t))
        mask = nnx.make_causal_mask(tokens)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln(x))


def nnx_transformer(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A causal language model in flax.nnx: Embed, MultiHeadAttention, LayerNorm, Linear."""
    b, t = _pick(rng, [2, 4]), _pick(rng, [64, 128])
    dim, heads, depth = _pick(rng, [64, 128]), _pick(rng, [2, 4]), _pick(rng, [1, 2])
    vocab = _pick(rng, [1000, 2000, 4000])
    rebuild, state = _nnx_split(lambda rngs: _NnxLM(vocab, t, dim, heads, depth, rngs), rng)
    tokens = _tokens(rng, (b, t), vocab)
    return (lambda state, tokens: rebuild(state)(tokens)), (state, tokens)


class _NnxInvertedResidual(nnx.Module):
    """A MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 project, batch norms."""

    def __init__(self, c_in: int, c_out: int, expand: int, stride: int, rngs: nnx.Rngs):
        mid = c_in * expand
        self.expand = nnx.Conv(c_in, mid, (1, 1), use_bias=False, rngs=rngs)
        self.dw = nnx.Conv(mid, mid, (3, 3), strides=stride, feature_group_count=mid,
                           use_bias=False, rngs=rngs)
        self.project = nnx.Conv(mid, c_out, (1, 1), use_bias=False, rngs=rngs)
        self.bn1, self.bn2 = nnx.BatchNorm(mid, rngs=rngs), nnx.BatchNorm(mid, rngs=rngs)
        self.bn3 = nnx.BatchNorm(c_out, rngs=rngs)
        self.residual = stride == 1 and c_in == c_out

    def __call__(self, x):
        h = jax.nn.relu6(self.bn1(self.expand(x)))
        h = jax.nn.relu6(self.bn2(self.dw(h)))
        h = self.bn3(self.project(h))
        return x + h if self.residual else h


class _NnxMobileNet(nnx.Module):
    def __init__(self, widths: Sequence[int], expand: int, classes: int, rngs: nnx.Rngs):
        self.stem = nnx.Conv(3, widths[0], (3, 3), strides=2, rngs=rngs)
        self.blocks = nnx.List(
            [_NnxInvertedResidual(a, b, expand, 2 if i % 2 else 1, rngs)
             for i, (a, b) in enumerate(zip(widths, widths[1:], strict=False))])
        self.head = nnx.Linear(widths[-1], classes, rngs=rngs)

    def __call__(self, x):
        x = jax.nn.relu6(self.stem(x))
        for block in self.blocks:
            x = block(x)
        return self.head(nnx.avg_pool(x, x.shape[1:3]).reshape(x.shape[0], -1))


def nnx_mobilenet(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A MobileNetV2-like net in flax.nnx: depthwise Conv, BatchNorm (eval mode), avg_pool."""
    n, hw = _pick(rng, [1, 2]), _pick(rng, [32, 48])
    base, expand = _pick(rng, [8, 16]), _pick(rng, [3, 4])
    widths = [base, base, 2 * base, 2 * base, 4 * base][: _pick(rng, [4, 5])]
    def make(rngs):
        model = _NnxMobileNet(widths, expand, 100, rngs)
        model.eval()  # batch norm uses its running statistics
        return model

    rebuild, state = _nnx_split(make, rng)
    x = _normal(rng, (n, hw, hw, 3))
    return (lambda state, x: rebuild(state)(x)), (state, x)


# ------------------------------------------------------------------ equinox


def eqx_mlp(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """equinox.nn.MLP, vmapped over a batch."""
    batch, d_in = _pick(rng, [128, 256]), _pick(rng, [256, 512])
    width, depth = _pick(rng, [384, 512, 768]), _pick(rng, [2, 3, 4])
    act = _pick(rng, [jax.nn.relu, jax.nn.gelu, jax.nn.silu])
    rebuild, params = _eqx_split(
        lambda key: eqx.nn.MLP(d_in, 10, width, depth, activation=act, key=key), rng)
    x = _normal(rng, (batch, d_in))
    return (lambda params, x: jax.vmap(rebuild(params))(x)), (params, x)


class _GRUClassifier(eqx.Module):
    cell: eqx.nn.GRUCell
    head: eqx.nn.Linear

    def __init__(self, features: int, hidden: int, classes: int, key: jax.Array):
        k1, k2 = jax.random.split(key)
        self.cell = eqx.nn.GRUCell(features, hidden, key=k1)
        self.head = eqx.nn.Linear(hidden, classes, key=k2)

    def __call__(self, xs):  # xs: (time, features) -> logits of the last state
        def step(h, x):
            return self.cell(x, h), None

        h, _ = jax.lax.scan(step, jnp.zeros(self.cell.hidden_size), xs)
        return self.head(h)


def eqx_gru(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """equinox.nn.GRUCell scanned over time, vmapped over a batch, Linear head."""
    b, t, f = _pick(rng, [8, 16, 32, 64]), _pick(rng, [32, 64]), _pick(rng, [16, 32, 64])
    hidden = _pick(rng, [128, 192, 256])
    rebuild, params = _eqx_split(lambda key: _GRUClassifier(f, hidden, 10, key), rng)
    x = _normal(rng, (b, t, f))
    return (lambda params, x: jax.vmap(rebuild(params))(x)), (params, x)


class _EqxCNN(eqx.Module):
    convs: list
    pool: eqx.nn.MaxPool2d
    head: eqx.nn.Linear

    def __init__(self, chans: Sequence[int], k: int, classes: int, key: jax.Array):
        keys = jax.random.split(key, len(chans))
        self.convs = [eqx.nn.Conv2d(a, b, k, padding=k // 2, key=kk)
                      for a, b, kk in zip(chans, chans[1:], keys, strict=False)]
        self.pool = eqx.nn.MaxPool2d(2, 2)
        self.head = eqx.nn.Linear(chans[-1], classes, key=keys[-1])

    def __call__(self, x):  # x: (channels, height, width)
        for conv in self.convs:
            x = self.pool(jax.nn.relu(conv(x)))
        return self.head(jnp.mean(x, (1, 2)))


def eqx_cnn(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A VGG-like CNN in equinox (channels first): Conv2d, MaxPool2d, Linear, vmapped."""
    n, hw = _pick(rng, [4, 8]), _pick(rng, [48, 64])
    chans = [3] + [_pick(rng, [16, 32, 48]) for _ in range(_pick(rng, [2, 3]))]
    k = _pick(rng, [3, 5])
    rebuild, params = _eqx_split(lambda key: _EqxCNN(chans, k, 10, key), rng)
    x = _normal(rng, (n, 3, hw, hw))
    return (lambda params, x: jax.vmap(rebuild(params))(x)), (params, x)


class _EqxEncoderLayer(eqx.Module):
    ln1: eqx.nn.LayerNorm
    ln2: eqx.nn.LayerNorm
    attn: eqx.nn.MultiheadAttention
    mlp: eqx.nn.MLP

    def __init__(self, dim: int, heads: int, key: jax.Array):
        k1, k2 = jax.random.split(key)
        self.ln1, self.ln2 = eqx.nn.LayerNorm(dim), eqx.nn.LayerNorm(dim)
        self.attn = eqx.nn.MultiheadAttention(heads, dim, use_query_bias=True,
                                              use_output_bias=True, key=k1)
        self.mlp = eqx.nn.MLP(dim, dim, 4 * dim, 1, activation=jax.nn.gelu, key=k2)

    def __call__(self, x):  # x: (seq, dim)
        h = jax.vmap(self.ln1)(x)
        x = x + self.attn(h, h, h)
        return x + jax.vmap(self.mlp)(jax.vmap(self.ln2)(x))


class _EqxEncoder(eqx.Module):
    embed: eqx.nn.Embedding
    pos: jax.Array
    layers: list
    head: eqx.nn.Linear

    def __init__(self, vocab: int, seq: int, dim: int, heads: int, depth: int,
                 classes: int, key: jax.Array):
        keys = jax.random.split(key, depth + 3)
        self.embed = eqx.nn.Embedding(vocab, dim, key=keys[0])
        self.pos = 0.02 * jax.random.normal(keys[1], (seq, dim))
        self.layers = [_EqxEncoderLayer(dim, heads, k) for k in keys[3:]]
        self.head = eqx.nn.Linear(dim, classes, key=keys[2])

    def __call__(self, tokens):  # tokens: (seq,) -> class logits
        x = jax.vmap(self.embed)(tokens) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(jnp.mean(x, 0))


def eqx_transformer(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A text classifier in equinox: Embedding, MultiheadAttention, LayerNorm, MLP, vmapped."""
    b, t = _pick(rng, [8, 16]), _pick(rng, [64, 128])
    dim, heads, depth = _pick(rng, [64, 128]), _pick(rng, [2, 4]), _pick(rng, [1, 2])
    vocab = _pick(rng, [1000, 5000])
    rebuild, params = _eqx_split(
        lambda key: _EqxEncoder(vocab, t, dim, heads, depth, 2, key), rng)
    tokens = _tokens(rng, (b, t), vocab)
    return (lambda params, tokens: jax.vmap(rebuild(params))(tokens)), (params, tokens)


# ------------------------------------------------------------------ registry


#: family name -> generator `(rng) -> (fn, example_args)`
FAMILIES: dict[str, Callable[[np.random.Generator], tuple[Callable, tuple]]] = {
    "flax_resnet": flax_resnet, "flax_vit": flax_vit, "flax_lstm": flax_lstm,
    "flax_unet": flax_unet, "flax_autoencoder": flax_autoencoder,
    "flax_train_step": flax_train_step,
    "nnx_transformer": nnx_transformer, "nnx_mobilenet": nnx_mobilenet,
    "eqx_mlp": eqx_mlp, "eqx_gru": eqx_gru, "eqx_cnn": eqx_cnn,
    "eqx_transformer": eqx_transformer,
}


def _shapes(args: tuple) -> str:
    return str(jax.tree.map(lambda a: (a.shape, str(a.dtype)), args))


def family_programs(family: str, count: int = PER_FAMILY, seed: int = 0) -> list[Program]:
    """`count` programs of `family`, named `family.000`...; each draws its sizes from a
    numpy rng seeded by (seed, index, attempt, family), taking the next attempt while its
    argument shapes repeat an earlier program's, so a family's programs all differ."""
    out, seen = [], set()
    for index in range(count):
        for attempt in range(100):
            rng = np.random.default_rng([seed, index, attempt, *map(ord, family)])
            fn, args = FAMILIES[family](rng)
            if _shapes(args) not in seen:
                break
        seen.add(_shapes(args))
        out.append((f"{family}.{index:03d}", fn, tuple(args)))
    return out


def programs(families: Sequence[str] | None = None) -> list[Program]:
    """The external test set: `PER_FAMILY` programs of every family (or of `families`)."""
    names = list(families) if families else list(FAMILIES)
    unknown = sorted(set(names) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown families {unknown}; known: {sorted(FAMILIES)}")
    return [p for family in names for p in family_programs(family)]
