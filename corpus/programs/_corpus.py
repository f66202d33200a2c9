"""Helpers shared by the corpus modules: size draws, parameter filling, program naming.

The conventions are those of `external/external_programs.py`: a program is
`(name, fn, example_args)` named `family.NNN`; a family's builder `(rng) -> (fn, args)`
draws its sizes from a seeded numpy rng; parameters are pytrees of arrays in `args`
(XLA sees them as inputs) whose shapes come from the library's own initialiser run
abstractly and whose values are drawn with numpy (`fill`), so building is fast.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

Program = tuple[str, Callable, tuple]
Builder = Callable[[np.random.Generator], tuple[Callable, tuple]]

PER_FAMILY = 3  # programs per family


def pick(rng: np.random.Generator, options: Sequence):
    """One of `options` (a plain Python value, not a numpy scalar)."""
    return options[int(rng.integers(len(options)))]


def normal(rng: np.random.Generator, shape: Sequence[int], scale: float = 1.0) -> jax.Array:
    return jnp.asarray((scale * rng.standard_normal(shape)).astype(np.float32))


def uniform(rng: np.random.Generator, shape: Sequence[int], low: float = 0.0,
            high: float = 1.0) -> jax.Array:
    return jnp.asarray(rng.uniform(low, high, shape).astype(np.float32))


def integers(rng: np.random.Generator, shape: Sequence[int], high: int) -> jax.Array:
    return jnp.asarray(rng.integers(0, high, shape, dtype=np.int32))


def prng_key(rng: np.random.Generator) -> jax.Array:
    """A raw uint32 PRNG key (a plain array the collector can copy to the host)."""
    return jnp.asarray(np.array([0, rng.integers(2**31)], dtype=np.uint32))


def _names(path) -> list[str]:
    names = [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", "")))) for k in path]
    return [n for n in names if n not in ("value", "")]


def draw(rng: np.random.Generator, names: Sequence[str], shape: Sequence[int], dtype,
         out_axis: int = -1) -> jax.Array:
    """Values for one parameter or state array named by the path `names` (module and
    leaf names), drawn with numpy: weights N(0, 1/fan_in) with the output features on
    `out_axis`, biases and means small, scales near 1, variances positive, integer leaves
    (counters) zero."""
    shape, dtype = tuple(shape), np.dtype(dtype)
    if not np.issubdtype(dtype, np.floating):
        return jnp.asarray(np.zeros(shape, dtype))
    names = [n.lower() for n in names]
    name = names[-1] if names else ""
    if any("var" in n for n in names):
        v = rng.uniform(0.5, 1.5, shape)
    elif name in ("scale", "gamma") or (name == "weight" and len(shape) == 1):
        v = 1.0 + 0.1 * rng.standard_normal(shape)
    elif len(shape) <= 1 or name in ("b", "beta", "offset", "mean", "average", "hidden") \
            or "bias" in name:
        v = 0.1 * rng.standard_normal(shape)
    else:
        fan_in = int(np.prod(shape)) // shape[out_axis]
        v = rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))
    return jnp.asarray(v.astype(dtype))


def fill(rng: np.random.Generator, abstract, out_axis: int = -1):
    """Concrete arrays (`draw`) for a tree of `jax.ShapeDtypeStruct`s: a library's
    parameters or state, from running its initialiser abstractly."""
    return jax.tree_util.tree_map_with_path(
        lambda path, s: draw(rng, _names(path), s.shape, s.dtype, out_axis), abstract)


def zeros(abstract):
    """Zeros for a tree of `jax.ShapeDtypeStruct`s: a fresh optimizer state."""
    return jax.tree.map(lambda s: jnp.asarray(np.zeros(s.shape, s.dtype)), abstract)


def _shapes(args: tuple) -> str:
    return str([(jnp.shape(a), str(jnp.result_type(a))) for a in jax.tree.leaves(args)])


def family_programs(family: str, builder: Builder, count: int = PER_FAMILY, seed: int = 0
                    ) -> list[Program]:
    """`count` programs of `family`, named `family.000`...; each draws its sizes from a
    numpy rng seeded by (seed, index, attempt, family), taking the next attempt while its
    argument shapes repeat an earlier program's, so a family's programs all differ."""
    out, seen = [], set()
    for index in range(count):
        for attempt in range(100):
            rng = np.random.default_rng([seed, index, attempt, *map(ord, family)])
            fn, args = builder(rng)
            if _shapes(args) not in seen:
                break
        seen.add(_shapes(args))
        out.append((f"{family}.{index:03d}", fn, tuple(args)))
    return out


def select(families: Mapping[str, Builder], names: Sequence[str] | None = None,
           count: int = PER_FAMILY) -> list[Program]:
    """`count` programs of every family in `families` (or of those `names`)."""
    chosen = list(names) if names else list(families)
    unknown = sorted(set(chosen) - set(families))
    if unknown:
        raise ValueError(f"unknown families {unknown}; known: {sorted(families)}")
    return [p for family in chosen for p in family_programs(family, families[family], count)]
