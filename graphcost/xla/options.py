"""The compiler-options space of XLA:CPU (graph-level configs, ranked as tile): its
knobs, and `OptionConfig`, the one type of a config of them.

A config gives each knob of `OPTION_KNOBS` one of its choices, by index; choice 0 leaves
the option to XLA, so all zeros is the default config. What else a config is derives from
its choices here, and nowhere else:
- its features (`OptionConfig.features`, read back by `from_features`): 24 floats, a
  tile graph's `config_feat` row and what models read. Feature i (i < len(knobs)) is knob
  i's code for its choice; features up to 22 are 0; feature 23 counts the knobs set. A
  code is the option's own number where it has one, so the default's row is not all
  zeros (e.g. 3 for an unset `backend_optimization_level`).
- its compiler options (`OptionConfig.compiler_options`): the `compile(compiler_options=
  ...)` dict, empty for the default: what chosen.json stores and `apply` passes to XLA.
- its executable: `LayoutSpace.lower(plan).compile(compiler_options)`, the one compile
  path of collection, autotuning and `apply`; configs that compile to the same executable
  share a fingerprint (`xla.fingerprint`) and are timed once.

Search moves through the bare choice tuples (`Choices`): a strategy needs only how many
values each knob has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphcost.formats.records import NUM_TILE_CONFIG_FEATURES

Choices = tuple[int, ...]  # one choice index per knob, as search moves through configs


@dataclass(frozen=True)
class Knob:
    """One compiler option: choices (None = unset) and their feature codes."""

    name: str
    option: str  # the XLA option, or "disable:<pass>" for xla_disable_hlo_passes
    choices: tuple
    codes: tuple[float, ...]


#: feature i of an options config is OPTION_KNOBS[i]'s code; every name below was
#: accepted by jax 0.10.2's XLA:CPU (see `check_knobs`). Each knob alone moved the
#: runtime of at least one of 10 zoo programs by more than 10% except `fast_math` (at
#: most 8%, kept: tests use it as the codegen-only option); dropped because they never
#: did (at most 7%, within noise): `xla_llvm_disable_expensive_passes`,
#: `xla_cpu_strict_dot_conv_math`. `ynn_fusion`'s fusion types and `no_platform_math`
#: came from `bench knobs` (each ≥ 5% faster beyond noise on some zoo programs: train_cnn
#: with INDIVIDUAL_CONVOLUTION, pyramid and cnn_nchw with portable math). Codes only grow:
#: a config stored before a knob or value was added keeps its features.
_YNN = "LIBRARY_FUSION_TYPE_"
OPTION_KNOBS: tuple[Knob, ...] = (
    Knob("no_fusion", "disable:fusion", (None, True), (0, 1)),
    Knob("no_dot_library_rewriter", "disable:dot-library-rewriter", (None, True), (0, 1)),
    Knob("no_parallel_task_assigner", "disable:cpu-parallel-task-assigner", (None, True), (0, 1)),
    Knob("backend_optimization_level", "xla_backend_optimization_level",
         (None, 0, 1, 2), (3, 0, 1, 2)),
    Knob("prefer_vector_width", "xla_cpu_prefer_vector_width", (None, 128, 512), (1, 0.5, 2)),
    # what YNNPACK fuses: unset (DOT,ELTWISE,REDUCE), nothing, or one fusion type
    Knob("ynn_fusion", "xla_cpu_experimental_ynn_fusion_type",
         (None, "", _YNN + "DOT", _YNN + "REDUCE", _YNN + "INDIVIDUAL_DOT",
          _YNN + "INDIVIDUAL_CONVOLUTION"), (0, 1, 2, 3, 4, 5)),
    Knob("no_xnn_fusion", "xla_cpu_experimental_xnn_fusion_type", (None, ""), (0, 1)),
    Knob("fast_math", "xla_cpu_enable_fast_math", (None, True), (0, 1)),
    Knob("no_fusion_emitters", "xla_cpu_use_fusion_emitters", (None, False), (0, 1)),
    Knob("max_isa", "xla_cpu_max_isa", (None, "SSE4_2", "AVX", "AVX2"), (0, 1, 2, 3)),
    # portable math codegen: same HLO, 1.3-1.6x faster on cnn_nchw, pyramid, train_cnn,
    # 0.7-0.9x on depthwise, grouped_conv, unet
    Knob("no_platform_math", "xla_cpu_enable_platform_dependent_math", (None, False), (0, 1)),
)


#: XLA:CPU options beyond OPTION_KNOBS that might make a program faster, for `graphcost
#: bench knobs` (not features: an `OptionConfig` encodes OPTION_KNOBS only). Kept from ~30
#: options of jax 0.10.2 tried alone (optimized HLO compared on 47 zoo programs, speed on
#: one of each of the 24 families, 6 rounds, "faster" = 95% interval above 1): each value
#: compiles and changed the HLO or the speed of some program. Values are typed as the
#: DebugOptions field: enums by name, a list of enums as comma-separated names.
CANDIDATE_KNOBS: tuple[Knob, ...] = (
    # jax sets it False (NaN-propagating min/max); True: plain vector min/max (relu, max
    # pooling, softmax's max). New HLO on 12 of 47 programs; no speed change seen yet.
    Knob("fast_min_max", "xla_cpu_enable_fast_min_max", (None, True), (0, 1)),
    # a memory-optimized schedule (buffers reused sooner): new order on 23 of 24 programs
    Knob("scheduler", "xla_cpu_scheduler_type", (None, "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"),
         (0, 1)),
    # copy insertion drops copies of loop state: new HLO for scans and loops (rnn, gnn)
    Knob("region_copy_insertion", "xla_cpu_copy_insertion_use_region_analysis",
         (None, True), (0, 1)),
    # experimental codegen tiling: same HLO, 9 of 24 programs slower (none faster yet)
    Knob("tiling_propagation", "xla_cpu_experimental_enable_tiling_propagation",
         (None, True), (0, 1)),
)
#: Rejected. "No such compile option": xla_cpu_ + use_multi_output_fusion, flatten_after_
#: fusion, fold_all_constants, small_while_loop_byte_threshold, disable_slp_vectorizer,
#: disable_loop_unrolling, optimize_for_size, disable_platform_dependent_math. Same HLO on
#: all 47 and never 5% faster: xla_cpu_experimental_ + xnn_fusion_type (YNN takes those
#: fusions), xnn_graph_fusion_mode, onednn_fusion_type, onednn_custom_call; xla_cpu_ +
#: use_onednn, use_xnnpack=False, multi_thread_eigen=False, opt_preset=FAST_RUNTIME,
#: scheduler CONCURRENCY_OPTIMIZED, parallel_codegen_split_count=1, ftz=False (on by
#: default), enable_concurrency_optimized_scheduler (deprecated), use_acl (ARM);
#: exec_time_optimization_effort, optimization_level. Only switch optimisations off:
#: opt_preset=FAST_COMPILE (4 slower, none 5% faster), xla_llvm_enable_*_metadata=False.
#: Need fast_math set too: xla_cpu_fast_math_honor_*. Outlive one compile (LLVM's global
#: flags): xla_backend_extra_options.


@dataclass(frozen=True)
class OptionConfig:
    """One config of the compiler options: a choice index per knob of `knobs`."""

    choices: Choices
    knobs: tuple[Knob, ...] = field(default=OPTION_KNOBS, compare=False, repr=False)

    def __post_init__(self) -> None:
        choices = tuple(int(c) for c in self.choices)
        if len(choices) != len(self.knobs) or any(
                not 0 <= c < len(k.choices) for c, k in zip(choices, self.knobs, strict=False)):
            raise ValueError(f"options config {list(choices)}: expected one choice per knob "
                             f"of {[k.name for k in self.knobs]}, each below "
                             f"{[len(k.choices) for k in self.knobs]}")
        object.__setattr__(self, "choices", choices)
        object.__setattr__(self, "knobs", tuple(self.knobs))

    @classmethod
    def default(cls, knobs: Sequence[Knob] = OPTION_KNOBS) -> OptionConfig:
        """Every option left to XLA."""
        return cls((0,) * len(knobs), tuple(knobs))

    @classmethod
    def from_features(cls, features: np.ndarray,
                      knobs: Sequence[Knob] = OPTION_KNOBS) -> OptionConfig:
        """The config whose `features` these are; a ValueError names the feature whose
        value is no code of its knob."""
        out = []
        for i, (knob, code) in enumerate(zip(knobs, np.asarray(features), strict=False)):
            if float(code) not in knob.codes:
                raise ValueError(f"feature {i} is {code}, not a code of knob {knob.name} "
                                 f"{list(knob.codes)}")
            out.append(knob.codes.index(float(code)))
        return cls(tuple(out), tuple(knobs))

    def features(self) -> np.ndarray:
        """24 floats: the knobs' codes, zeros, and the number of knobs set."""
        out = np.zeros(NUM_TILE_CONFIG_FEATURES, dtype=np.float32)
        for i, (knob, choice) in enumerate(zip(self.knobs, self.choices, strict=True)):
            out[i] = knob.codes[choice]
        out[-1] = sum(c != 0 for c in self.choices)
        return out

    def compiler_options(self) -> dict[str, Any]:
        """The `compile(compiler_options=...)` dict (empty for the default)."""
        opts: dict[str, Any] = {}
        disabled: list[str] = []
        for knob, value in self.values().items():
            if knob.option.startswith("disable:"):
                disabled.append(knob.option.split(":", 1)[1])
            else:
                opts[knob.option] = value
        if disabled:
            opts["xla_disable_hlo_passes"] = ",".join(disabled)
        return opts

    def values(self) -> dict[Knob, Any]:
        """The knobs set, each with its value."""
        return {k: k.choices[c] for k, c in zip(self.knobs, self.choices, strict=True)
                if k.choices[c] is not None}

    def __str__(self) -> str:
        """The knobs set by name, `fast_math=True, max_isa='AVX'`, or 'the default'."""
        return ", ".join(f"{k.name}={v!r}" for k, v in self.values().items()) or "the default"


def sample_option_configs(count: int, rng: np.random.Generator, p: float = 0.3,
                          knobs: Sequence[Knob] = OPTION_KNOBS) -> list[Choices]:
    """`count` distinct configs, the default first: each knob moves off default w.p. `p`."""
    configs = [OptionConfig.default(knobs).choices]
    seen = set(configs)
    total = int(np.prod([len(k.choices) for k in knobs]))
    for _ in range(count * 20):
        if len(configs) >= min(count, total):
            break
        c = tuple(int(rng.integers(1, len(k.choices))) if rng.random() < p else 0
                  for k in knobs)
        if c not in seen:
            seen.add(c)
            configs.append(c)
    return configs


def check_knobs(knobs: Sequence[Knob] = OPTION_KNOBS) -> dict[str, str]:
    """Compile a tiny program with every non-default choice: 'ok' or the error, by choice."""
    import jax
    import jax.numpy as jnp

    lowered = jax.jit(lambda x, w: jnp.tanh(x @ w).sum()).lower(jnp.ones((8, 8)), jnp.ones((8, 8)))
    result = {}
    for i, knob in enumerate(knobs):
        for choice in range(1, len(knob.choices)):
            config = tuple(choice if j == i else 0 for j in range(len(knobs)))
            label = f"{knob.name}={knob.choices[choice]!r}"
            try:
                lowered.compile(OptionConfig(config, knobs).compiler_options())
                result[label] = "ok"
            except Exception as e:  # XLA raises its own error types
                result[label] = str(e).splitlines()[0]
    return result

