"""Inference program families over vectors, tokens and graphs (dense, attention, gathers).

Each family is `(rng) -> (callable, example_args)`; sizes are drawn so one call takes
about 1-20 ms on one CPU core (registry and sizing notes: graphcost.xla.programs).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from graphcost.xla.zoo_layers import (
    act,
    attention_params,
    dense,
    dtype,
    encoder,
    jnp,
    layer_norm,
    normal,
    pick,
)

F32 = ("float32",)


def mlp(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Dense layers with an activation: the bulk of recommendation and MLP models."""
    dt = dtype(rng)
    batch = pick(rng, [64, 128, 256])
    widths = [pick(rng, [256, 384, 512, 768]) for _ in range(int(rng.integers(3, 6)))]
    a = act(rng)
    ws = [dense(rng, i, o, dt) for i, o in zip(widths, widths[1:], strict=False)]
    bs = [normal(rng, (o,), dt, 0.1) for o in widths[1:]]
    x = normal(rng, (batch, widths[0]), dt)

    def f(x, ws, bs):
        for i, (w, b) in enumerate(zip(ws, bs, strict=False)):
            x = x @ w + b
            x = a(x) if i < len(ws) - 1 else x
        return x

    return f, (x, ws, bs)


def mixer(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """MLP-Mixer blocks: token mixing across a transposed axis, then channel mixing."""
    import jax

    dt = dtype(rng)
    b, t, c = pick(rng, [2, 4]), pick(rng, [64, 128, 196]), pick(rng, [128, 256])
    th, ch = t * pick(rng, [1, 2]), c * pick(rng, [2, 4])
    blocks = 1
    ps = [(dense(rng, t, th, dt), dense(rng, th, t, dt), dense(rng, c, ch, dt),
           dense(rng, ch, c, dt)) for _ in range(blocks)]
    x = normal(rng, (b, t, c), dt)

    def f(x, ps):
        for w1, w2, w3, w4 in ps:
            h = layer_norm(x, 1.0, 0.0).transpose(0, 2, 1)  # (b, c, t)
            x = x + (jax.nn.gelu(h @ w1) @ w2).transpose(0, 2, 1)
            x = x + jax.nn.gelu(layer_norm(x, 1.0, 0.0) @ w3) @ w4
        return x

    return f, (x, ps)


def transformer(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Encoder blocks: layer norm, multi-head attention, MLP, residuals."""
    dt = dtype(rng)
    b, t = pick(rng, [4, 8]), pick(rng, [64, 128])
    d, heads = pick(rng, [64, 128]), pick(rng, [2, 4])
    layers, causal = 1, bool(rng.integers(2))  # more layers: more nodes, same kernels
    ps = [attention_params(rng, d, 4 * d, dt) for _ in range(layers)]
    x = normal(rng, (b, t, d), dt)

    def f(x, ps):
        for p in ps:
            x = encoder(p, x, heads, causal)
        return x

    return f, (x, ps)


def decoder_kv(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One decoding step with a KV cache: write the new key/value, attend to the cache."""
    import jax
    from jax import lax

    j = jnp()
    dt = dtype(rng)
    b, cache, heads = pick(rng, [4, 8]), pick(rng, [512, 1024, 2048]), pick(rng, [4, 8])
    dh = pick(rng, [32, 64])
    d = heads * dh
    layers = 1
    pos = int(rng.integers(cache // 2, cache))
    ps = [attention_params(rng, d, 4 * d, dt) for _ in range(layers)]
    kv = [(normal(rng, (b, heads, cache, dh), dt), normal(rng, (b, heads, cache, dh), dt))
          for _ in range(layers)]
    x = normal(rng, (b, d), dt)

    def f(x, ps, kv, pos):
        caches = []
        for p, (kc, vc) in zip(ps, kv, strict=True):
            h = layer_norm(x, p["g1"], p["b1"])
            q, k, v = ((h @ p[w]).reshape(b, heads, 1, dh) for w in ("wq", "wk", "wv"))
            kc = lax.dynamic_update_slice(kc, k, (0, 0, pos, 0))
            vc = lax.dynamic_update_slice(vc, v, (0, 0, pos, 0))
            logits = j.einsum("bhqd,bhkd->bhqk", q, kc) / np.sqrt(dh)
            logits = j.where(j.arange(cache) <= pos, logits, -1e9)
            att = jax.nn.softmax(logits.astype(j.float32), -1).astype(x.dtype)
            x = x + j.einsum("bhqk,bhkd->bhqd", att, vc).reshape(b, d) @ p["wo"]
            x = x + jax.nn.gelu(layer_norm(x, p["g2"], p["b2"]) @ p["w1"]) @ p["w2"]
            caches.append((kc, vc))
        return x, caches

    return f, (x, ps, kv, j.asarray(pos, j.int32))


def embedding(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Embedding-bag lookups (gather), pooling and a dense head: recommendation models."""
    import jax

    j = jnp()
    dt = dtype(rng)
    vocab, d = pick(rng, [10000, 30000, 50000]), pick(rng, [32, 64])
    b, bag, tables = pick(rng, [1024, 2048, 4096]), pick(rng, [16, 32]), int(rng.integers(1, 4))
    while b * bag * d * tables > 1 << 21:  # gathers run at a few ns per element
        b //= 2
    embs = [normal(rng, (vocab, d), dt, 0.1) for _ in range(tables)]
    ids = [j.asarray(rng.integers(0, vocab, (b, bag)), j.int32) for _ in range(tables)]
    w1, w2 = dense(rng, tables * d, 256, dt), dense(rng, 256, 1, dt)

    def f(embs, ids, w1, w2):
        pooled = [j.take(e, i, axis=0).sum(1) for e, i in zip(embs, ids, strict=False)]
        return jax.nn.sigmoid(jax.nn.relu(j.concatenate(pooled, -1) @ w1) @ w2)

    return f, (embs, ids, w1, w2)


def moe(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Mixture-of-experts: top-1 routing, gather into expert slots, batched expert MLPs,
    scatter-add back (Switch-Transformer style, with a capacity)."""
    import jax

    j = jnp()
    dt = dtype(rng, F32)
    n, d, e = pick(rng, [512, 1024, 2048]), pick(rng, [128, 256]), pick(rng, [4, 8])
    ff = d * pick(rng, [2, 4])
    cap = int(1.25 * n / e)
    wr = dense(rng, d, e, dt)
    w1 = normal(rng, (e, d, ff), dt, 1 / np.sqrt(d))
    w2 = normal(rng, (e, ff, d), dt, 1 / np.sqrt(ff))
    x = normal(rng, (n, d), dt)

    def f(x, wr, w1, w2):
        probs = jax.nn.softmax(x @ wr, -1)
        expert = j.argmax(probs, -1)
        gate = j.max(probs, -1)
        onehot = jax.nn.one_hot(expert, e, dtype=j.int32)
        slot = (j.cumsum(onehot, 0) * onehot).sum(-1) - 1
        keep = slot < cap
        dest = j.where(keep, expert * cap + slot, e * cap)  # overflow -> dropped row
        token = j.full((e * cap + 1,), n, j.int32).at[dest].set(j.arange(n, dtype=j.int32))
        xs = j.concatenate([x, j.zeros((1, d), x.dtype)])[token[:-1]].reshape(e, cap, d)
        h = jax.nn.gelu(j.einsum("ecd,edf->ecf", xs, w1))
        y = j.einsum("ecf,efd->ecd", h, w2).reshape(e * cap, d)
        out = j.zeros((n + 1, d), x.dtype).at[token[:-1]].add(y)[:n]
        return x + out * (gate * keep)[:, None]

    return f, (x, wr, w1, w2)


def gnn(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Message passing on a random graph: gather at edge sources, segment_sum at targets."""
    import jax

    j = jnp()
    dt = dtype(rng, F32)
    nodes, deg, d = pick(rng, [1000, 2000, 4000]), pick(rng, [4, 8]), pick(rng, [16, 32])
    edges = nodes * deg
    layers = pick(rng, [2, 2, 3])
    src = j.asarray(rng.integers(0, nodes, edges), j.int32)
    dst = j.asarray(np.sort(rng.integers(0, nodes, edges)), j.int32)
    ws = [(dense(rng, d, d, dt), dense(rng, d, d, dt)) for _ in range(layers)]
    h = normal(rng, (nodes, d), dt)

    def f(h, src, dst, ws):
        count = jax.ops.segment_sum(j.ones_like(dst, h.dtype), dst, nodes)[:, None]
        for w_msg, w_self in ws:
            msg = jax.ops.segment_sum(h[src] @ w_msg, dst, nodes, indices_are_sorted=True)
            h = jax.nn.relu(msg / j.maximum(count, 1) + h @ w_self)
        return h

    return f, (h, src, dst, ws)


def einsum_chain(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Chains of batched contractions whose operands need transposes between steps."""
    j = jnp()
    dt = dtype(rng)
    b, m, k = pick(rng, [16, 32, 64]), pick(rng, [64, 128, 192]), pick(rng, [64, 128])
    steps = int(rng.integers(2, 5))
    specs = [pick(rng, ["bmk,bkn->bmn", "bmk,bnk->bmn", "bkm,bkn->bmn", "bmk,kn->bmn"])
             for _ in range(steps)]
    x = normal(rng, (b, m, k), dt)
    ws = []
    for s in specs:
        rhs = s.split(",")[1].split("->")[0]
        shape = {"b": b, "k": k, "n": k}
        ws.append(normal(rng, tuple(shape[c] for c in rhs), dt, 1 / np.sqrt(k)))

    def f(x, ws):
        for s, w in zip(specs, ws, strict=True):
            lhs = x.transpose(0, 2, 1) if s.startswith("bkm") else x
            x = j.tanh(j.einsum(s, lhs, w))
        return x

    return f, (x, ws)


def rnn(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A recurrent cell (Elman, GRU or LSTM) run over time with `lax.scan`; the input
    projection of every step is one dot before the loop."""
    import jax

    j = jnp()
    dt = dtype(rng, F32)
    cell = pick(rng, ["elman", "gru", "lstm"])
    gates = {"elman": 1, "gru": 3, "lstm": 4}[cell]
    b, t = pick(rng, [32, 64]), pick(rng, [24, 32])
    d, h = pick(rng, [64, 128]), pick(rng, [128, 192])
    wx, wh = dense(rng, d, gates * h, dt), dense(rng, h, gates * h, dt)
    xs = normal(rng, (t, b, d), dt)

    def f(xs, wx, wh):
        def step(carry, zx):
            hs, cs = carry
            z = zx + hs @ wh
            if cell == "elman":
                hs = j.tanh(z)
            elif cell == "gru":
                r, u, n = j.split(z, 3, -1)
                hs = (1 - jax.nn.sigmoid(u)) * j.tanh(n * jax.nn.sigmoid(r)) \
                    + jax.nn.sigmoid(u) * hs
            else:
                i, f_, o, g = j.split(z, 4, -1)
                cs = jax.nn.sigmoid(f_) * cs + jax.nn.sigmoid(i) * j.tanh(g)
                hs = jax.nn.sigmoid(o) * j.tanh(cs)
            return (hs, cs), hs

        zero = j.zeros((xs.shape[1], h), xs.dtype)
        (hs, _), ys = jax.lax.scan(step, (zero, zero), xs @ wx)
        return ys.mean(0) + hs

    return f, (xs, wx, wh)


def normalization(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Chains of layer/RMS/group norms and softmaxes: memory-bound, reduction-heavy."""
    import jax

    j = jnp()
    dt = dtype(rng)
    b, t, d = pick(rng, [16, 32]), pick(rng, [128, 256]), pick(rng, [256, 512])
    kinds = [str(k) for k in rng.choice(["layer", "rms", "group", "softmax"],
                                        size=int(rng.integers(2, 5)))]
    g = normal(rng, (d,), dt, 0.1) + 1
    x = normal(rng, (b, t, d), dt)

    def f(x, g):
        for k in kinds:
            x32 = x.astype(j.float32)
            if k == "layer":
                x32 = layer_norm(x32, g, 0.0)
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
    """Reductions over different axes, variance, log-sum-exp, arg-max and top-k."""
    from jax import lax

    j = jnp()
    dt = dtype(rng, F32)
    rank = int(rng.integers(2, 4))
    dims = [pick(rng, [64, 128, 256, 512, 1024]) for _ in range(rank)]
    while np.prod(dims) < 1 << 17:
        dims[int(np.argmin(dims))] *= 2
    while np.prod(dims) > 1 << 19:
        dims[int(np.argmax(dims))] //= 2
    x = normal(rng, tuple(dims), dt)
    ax = int(rng.integers(rank))

    def f(x):
        s = x.sum(ax)
        m = x.max(ax)
        lse = j.log(j.exp(x - x.max(ax, keepdims=True)).sum(ax))
        var = x.var(ax)
        am = j.argmax(x, axis=ax).astype(x.dtype)
        return s + m + lse + var + am, lax.top_k(x, 4)[0]

    return f, (x,)
