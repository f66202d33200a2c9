"""A zoo of JAX programs in the shapes real models are made of, to be measured.

Each family is a generator `(rng) -> (callable, example_args)` that draws sizes, dtypes
and variants from `rng`; `zoo()` names every program `family.NNN` (the family is what
train/valid/test splits keep apart). The families live in `zoo_vision` (convolutions,
pooling, patches), `zoo_sequence` (dense, attention, gathers, scatters, scans) and
`zoo_training` (training steps); this module is their registry.

Sizes are chosen for trustworthy measurement on XLA:CPU: one call takes about 1-20 ms
on one pinned core (median a few ms), so timer noise is small next to the effect of a
layout or compiler option, while the optimized modules stay at roughly 100 to a few
thousand HLO nodes, so one compile stays well under a second: runtime comes from
tensor sizes, not from many nodes. bf16 is drawn rarely (XLA:CPU runs it slowly).

Users bring their own programs as a function returning a list of
`(name, callable, example_args)` entries (`load_programs("pkg.mod:fn")`); a name
`family.anything` puts the program in that family.
"""

from __future__ import annotations

import importlib
import inspect
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphcost.data.families import family_of
from graphcost.errors import UserError
from graphcost.xla import zoo_sequence, zoo_training, zoo_vision

Program = tuple[str, Callable, tuple]
Generator = Callable[[np.random.Generator], tuple[Callable, tuple]]


#: family name -> generator; names are `[a-z0-9_]+` (no dot: a program is `family.NNN`)
FAMILIES: dict[str, Generator] = {
    # dense, sequence and graph models
    "mlp": zoo_sequence.mlp, "mixer": zoo_sequence.mixer,
    "transformer": zoo_sequence.transformer, "decoder_kv": zoo_sequence.decoder_kv,
    "embedding": zoo_sequence.embedding, "moe": zoo_sequence.moe, "gnn": zoo_sequence.gnn,
    "einsum_chain": zoo_sequence.einsum_chain, "rnn": zoo_sequence.rnn,
    "normalization": zoo_sequence.normalization, "reduction": zoo_sequence.reduction,
    # convolutional models
    "cnn_nhwc": zoo_vision.cnn_nhwc, "cnn_nchw": zoo_vision.cnn_nchw,
    "resblock_nhwc": zoo_vision.resblock_nhwc, "resblock_nchw": zoo_vision.resblock_nchw,
    "depthwise": zoo_vision.depthwise, "grouped_conv": zoo_vision.grouped_conv,
    "unet": zoo_vision.unet, "conv1d": zoo_vision.conv1d, "vit": zoo_vision.vit,
    "pyramid": zoo_vision.pyramid,
    # training steps
    "train_mlp": zoo_training.train_mlp, "train_cnn": zoo_training.train_cnn,
    "train_transformer": zoo_training.train_transformer,
}


def make_program(family: str, index: int, seed: int = 0) -> Program:
    """Program `index` of `family`: the same arguments always give the same program."""
    rng = np.random.default_rng([seed, index, *map(ord, family)])
    fn, args = FAMILIES[family](rng)
    return program_name(family, index), fn, tuple(args)


def program_name(family: str, index: int) -> str:
    """The name of program `index` of `family` (`family.NNN`)."""
    return f"{family}.{index:03d}"


def zoo_names(per_family: int = 4, seed: int = 0, families: Sequence[str] | None = None
              ) -> list[str]:
    """The names `zoo` gives, without building any program (`seed` changes none)."""
    names = list(families) if families else list(FAMILIES)
    unknown = sorted(set(names) - set(FAMILIES))
    if unknown:
        raise UserError(f"unknown program families {unknown}; known: {sorted(FAMILIES)}")
    return [program_name(f, i) for f in names for i in range(per_family)]


def zoo(per_family: int = 4, seed: int = 0, families: Sequence[str] | None = None
        ) -> list[Program]:
    """`per_family` programs of every family (or of the families named)."""
    return [make_program(family_of(n), int(n.split(".", 1)[1]), seed)
            for n in zoo_names(per_family, seed, families)]


def call_spec(spec: str, expected: str, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    """Import and call the user's `module:function` (with those `kwargs` it accepts);
    returns what it returned and the kwargs it was given.

    It is the user's code: a module that does not import, a function that is missing,
    not callable or raises is a `UserError` naming `spec` and what was `expected` of it,
    not a traceback from inside graphcost.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"{spec!r}: expected MODULE:FUNCTION, e.g. 'graphcost.xla.programs:zoo'")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # ImportError, or anything the module raises as it loads
        raise UserError(f"{spec}: cannot import {module_name} "
                        f"({type(e).__name__}: {e}); expected an importable module") from e
    factory = getattr(module, attr, None)
    if factory is None:
        raise UserError(f"{spec}: module {module_name} has no function {attr!r}")
    if not callable(factory):
        raise UserError(f"{spec}: expected a function returning {expected}, found "
                        f"{type(factory).__name__} {factory!r:.60}")
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a callable with no signature (a builtin): no kwargs
        params = {}
    given = {k: v for k, v in kwargs.items() if k in params}
    try:
        return factory(**given), given
    except Exception as e:
        raise UserError(f"{spec} raised {type(e).__name__}: {e}") from e


def load_programs(spec: str, **kwargs: Any) -> list[Program]:
    """Programs from `module:function` (`call_spec`), which returns a list of
    `(name, callable, example_args)` entries with unique names; anything else is a
    `UserError` naming `spec` and what was expected."""
    made, given = call_spec(spec, "a list of (name, callable, example_args)", **kwargs)
    if not isinstance(made, (list, tuple)):
        raise UserError(f"{spec}: expected a list of (name, callable, example_args), "
                        f"found {type(made).__name__} {made!r:.60}")
    out: list[Program] = []
    for i, entry in enumerate(made):
        if not (isinstance(entry, (tuple, list)) and len(entry) == 3
                and isinstance(entry[0], str) and callable(entry[1])
                and isinstance(entry[2], (tuple, list))):
            raise UserError(f"{spec}: entry {i} should be (name, callable, example_args), "
                            f"found {entry!r:.80}")
        out.append((entry[0], entry[1], tuple(entry[2])))
    if not out:
        raise UserError(f"{spec} returned no programs (called with {given})")
    twice = sorted(n for n, count in Counter(n for n, _, _ in out).items() if count > 1)
    if twice:
        raise UserError(f"{spec}: program names must be unique, found {twice} more than once")
    return out
