"""Config spaces and the timing protocol, on tiny programs (a few runs each)."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from graphcost.formats.npz import LayoutGraph, TileGraph  # noqa: E402
from graphcost.formats.validate import validate_graph  # noqa: E402
from graphcost.xla.configs import LayoutSpace, sample_layout_plans  # noqa: E402
from graphcost.xla.fingerprint import fingerprint  # noqa: E402
from graphcost.xla.options import (  # noqa: E402
    OPTION_KNOBS,
    Knob,
    OptionConfig,
    check_knobs,
    sample_option_configs,
)
from graphcost.xla.prepare import (  # noqa: E402
    Prepared,
    measure_layout,
    measure_options,
    prepare_options,
    time_prepared,
)
from graphcost.xla.timing import Protocol, outputs_agree, time_executables  # noqa: E402

FAST = Protocol(warmup=1, runs=3, max_run_s=30)  # no timeout on a busy machine


def two_dots(x, w1, w2):
    return jnp.tanh(x @ w1) @ w2


def _args():
    rng = np.random.default_rng(0)
    return tuple(jnp.asarray(rng.standard_normal(s), jnp.float32)
                 for s in [(16, 32), (32, 24), (24, 8)])


def test_space_finds_parameters_and_dots():
    space = LayoutSpace(two_dots, _args())
    kinds = [p.kind for p in space.points]
    assert kinds == ["parameter"] * 3 + ["dot"] * 2
    assert len(space.slots) == 3 + 2 * 3


def test_layout_plan_changes_the_compiled_module_and_outputs_agree():
    args = _args()
    space = LayoutSpace(two_dots, args)
    default = space.compile({})
    plan = {(0, "out"): (1, 0), (3, "out"): (1, 0)}  # x column-major, first dot transposed
    changed = space.compile(plan)
    assert "{0,1}" in changed.as_text().split("\n", 1)[0]  # entry layout of parameter 0
    assert "{0,1}" not in default.as_text().split("\n", 1)[0]
    assert changed.as_text() != default.as_text()
    x = jax.device_put(args[0], changed.input_formats[0][0])
    assert outputs_agree([changed(x, *args[1:])], [default(*args)])
    assert np.allclose(changed(x, *args[1:]), two_dots(*args), rtol=1e-4, atol=1e-4)


def test_features_are_minor_to_major_padded_with_minus_one():
    space = LayoutSpace(two_dots, _args())
    feat = space.features({(3, "in"): (1, 0), (0, "out"): (0, 1)}, [0, 3])
    assert feat.shape == (2, 18)
    assert feat[0, :2].tolist() == [1, 0] and (feat[0, 2:] == -1).all()
    assert feat[1, 6:8].tolist() == [0, 1] and (feat[1, :6] == -1).all()
    assert (feat[1, 8:] == -1).all()


@pytest.mark.parametrize("mode", ["random", "default"])
def test_plan_sampling_is_distinct_and_starts_at_default(mode):
    space = LayoutSpace(two_dots, _args())
    plans = sample_layout_plans(space, 8, mode, np.random.default_rng(0))
    assert plans[0] == {} and len(plans) == 8
    assert len({tuple(sorted(p.items())) for p in plans}) == 8
    if mode == "default":
        assert all(1 <= len(p) <= 3 for p in plans[1:])
    with pytest.raises(ValueError):
        sample_layout_plans(space, 2, "nope", np.random.default_rng(0))


def test_measure_layout_writes_a_valid_graph():
    graph, report = measure_layout("two_dots", two_dots, _args(), "random", 4, protocol=FAST)
    assert isinstance(graph, LayoutGraph)
    validate_graph(graph, "two_dots", deep=True)
    assert graph.num_configs == report.kept >= 2
    assert report.extra["config_runtime_rounds"].shape == (graph.num_configs, FAST.rounds)
    assert (graph.node_config_feat[0] == -1).all()  # config 0 is the compiler default
    assert (graph.config_runtime > 0).all()
    opcodes = graph.node_opcode[graph.node_config_ids]
    assert set(opcodes.tolist()) <= {63, 34, 31, 41}  # parameter, dot (or its wrapper)


def test_measure_times_each_executable_once_and_records_what_failed(monkeypatch):
    """Autotuning times as collection does: a config that fails to compile is recorded
    as failed, and configs that compile to one executable share one timing."""
    import graphcost.autotune.measure as measuring
    from graphcost.autotune.program import prepare

    t = prepare("two_dots", two_dots, _args(), "layout")
    slot = t.configs.units[0]
    rank = t.layout.rank(slot)
    moved = {slot: tuple(reversed(range(rank)))}
    plans = [{}, moved, dict(moved), {slot: (0,) * rank}]  # last: not a permutation
    timed, real = [], measuring.time_executables

    def spy(runnables, protocol, reference=None, seed=0):
        timed.append(len(runnables))
        return real(runnables, protocol, reference, seed)

    monkeypatch.setattr(measuring, "time_executables", spy)
    results = measuring.measure(t, plans, FAST)
    assert [r.status for r in results] == ["ok", "ok", "ok", "compile"]
    assert results[3].error
    assert timed == [2]  # the default and the moved plan; its twin is not timed again
    assert results[2].rounds_ns == results[1].rounds_ns and results[2] is not results[1]


def test_the_measurer_beside_the_default_compiles_a_config_as_a_batch_does():
    """Searching while measuring (`Measurer`) and measuring a batch (`measure`) compile a
    config one way: a layout plan is its own executable, timed once beside the default."""
    from graphcost.autotune.measure import Measurer, compile_config
    from graphcost.autotune.program import prepare

    t = prepare("two_dots", two_dots, _args(), "layout")
    slot = t.configs.units[0]
    moved = {slot: tuple(reversed(range(t.layout.rank(slot))))}
    m = Measurer(t, FAST, None)
    key, ratio, status, _ = m.measure(moved)
    assert status == "ok" and ratio > 0
    assert key == compile_config(t, moved)[1] != m.default_key
    assert m.measure(dict(moved)) == (key, ratio, status, "")  # not compiled or timed again
    assert m.measure(t.configs.default())[:2] == (m.default_key, 1.0)


def test_wrong_outputs_are_a_mismatch():
    x = jnp.ones((8, 8))
    good = jax.jit(lambda x: x * 2).lower(x).compile()
    bad = jax.jit(lambda x: x * 3).lower(x).compile()
    results = time_executables({0: (good, lambda: [x]), 1: (bad, lambda: [x])}, FAST, 0)
    assert results[0].ok and results[1].status == "mismatch"
    assert results[0].median_ns > 0 and results[0].min_ns <= results[0].median_ns


def test_outputs_agree_tolerates_rounding_only():
    a = np.linspace(0, 1, 100, dtype=np.float32)
    assert outputs_agree([a], [a + 1e-6])
    assert not outputs_agree([a], [a + 1e-2])
    assert not outputs_agree([a], [a[:50]])
    assert not outputs_agree([np.arange(3)], [np.arange(3) + 1])


def test_option_encoding_and_sampling():
    configs = sample_option_configs(10, np.random.default_rng(0))
    assert configs[0] == (0,) * len(OPTION_KNOBS) and len(set(configs)) == 10
    assert OptionConfig(configs[0]).compiler_options() == {}
    assert OptionConfig(configs[0]).features().shape == (24,)
    c = tuple(1 if k.name in ("no_fusion", "no_parallel_task_assigner", "fast_math") else 0
              for k in OPTION_KNOBS)
    opts = OptionConfig(c).compiler_options()
    assert opts == {"xla_disable_hlo_passes": "fusion,cpu-parallel-task-assigner",
                    "xla_cpu_enable_fast_math": True}
    assert OptionConfig(c).features()[-1] == 3


def test_unknown_option_name_fails_to_compile():
    bogus = (Knob("bogus", "xla_no_such_option_at_all", (None, 1), (0, 1)),)
    assert "No such compile option" in check_knobs(bogus)["bogus=1"]


def test_measure_options_normalises_by_the_default():
    configs = [(0,) * len(OPTION_KNOBS),
               tuple(1 if k.name == "no_fusion" else 0 for k in OPTION_KNOBS)]
    graph, report = measure_options("two_dots", two_dots, _args(), protocol=FAST,
                                    configs=configs)
    assert isinstance(graph, TileGraph)
    validate_graph(graph, "two_dots", deep=True)
    assert (graph.config_runtime_normalizers == graph.config_runtime[0]).all()
    assert graph.config_feat[1, 0] == 1 and graph.config_feat[0, 0] == 0
    assert graph.config_feat[0, -1] == 0 and graph.config_feat[1, -1] == 1


def _knob_config(*names: str) -> tuple[int, ...]:
    """An options config with the named knobs at their first non-default choice."""
    known = {k.name for k in OPTION_KNOBS}
    assert set(names) <= known, f"knobs {set(names) - known} are gone from OPTION_KNOBS"
    return tuple(1 if k.name in names else 0 for k in OPTION_KNOBS)


def test_configs_with_one_executable_are_timed_once_and_tie():
    """Disabling a pass that has nothing to do (no dot) leaves the executable as it is;
    fast math changes code generation, so it is a second executable."""
    def ew(x):
        return jnp.tanh(x) * 2 + 1

    configs = [_knob_config(), _knob_config("no_dot_library_rewriter"),
               _knob_config("fast_math")]
    prep = prepare_options("ew", ew, (jnp.ones((64, 64)),), distinct=3, configs=configs)
    assert prep.sampled == 3 and len(prep.executables) == 2 and prep.exhausted
    assert prep.fingerprints[0] == prep.fingerprints[1] != prep.fingerprints[2]
    graph, report = time_prepared(Prepared.from_bytes(prep.to_bytes()), (jnp.ones((64, 64)),),
                                  FAST)
    assert len(report.timings) == 2  # one measurement per executable
    assert graph.num_configs == 3
    assert graph.config_runtime[0] == graph.config_runtime[1]
    fp = report.extra["config_fingerprint"]
    assert fp[0] == fp[1] != fp[2]
    assert report.summary()["distinct"] == 2


def test_fingerprint_ignores_metadata_but_not_code_or_codegen_options():
    x = jnp.ones((16, 16))

    def f(x):
        return jnp.tanh(x @ x)

    def g(x):
        with jax.named_scope("somewhere_else"):
            return jnp.tanh(x @ x)

    text_f = jax.jit(f).lower(x).compile().as_text()
    text_g = jax.jit(g).lower(x).compile().as_text()
    assert text_f != text_g  # the names and scopes differ ...
    assert fingerprint(text_f) == fingerprint(text_g)  # ... the executable does not
    other = jax.jit(lambda x: jnp.sin(x @ x)).lower(x).compile().as_text()
    assert fingerprint(other) != fingerprint(text_f)
    assert fingerprint(text_f, {"xla_cpu_enable_fast_math": True}) != fingerprint(text_f)
    assert fingerprint(text_f, {"xla_disable_hlo_passes": "fusion"}) == fingerprint(text_f)


def test_sampling_stops_at_the_wanted_number_of_distinct_executables():
    graph, report = measure_layout("two_dots", two_dots, _args(), "random", 3, protocol=FAST)
    assert report.distinct == 3 and not report.exhausted
    assert len(set(report.extra["config_fingerprint"].tolist())) == 3


def test_rounds_are_kept_and_their_tau_is_reported():
    protocol = Protocol(warmup=1, runs=3, rounds=3, max_run_s=30)
    graph, report = measure_layout("two_dots", two_dots, _args(), "random", 4,
                                   protocol=protocol)
    rounds = report.extra["config_runtime_rounds"]
    assert rounds.shape == (graph.num_configs, 3) and (rounds > 0).all()
    tau = report.summary()["noise_tau"]
    assert tau is not None and -1 <= tau <= 1


def test_protocol_check_names_the_bad_setting():
    with pytest.raises(ValueError, match="rounds"):
        Protocol(rounds=0).check()
    with pytest.raises(ValueError, match="max_run_s"):
        Protocol(max_run_s=0).check()
