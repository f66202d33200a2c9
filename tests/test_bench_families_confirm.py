"""`graphcost bench families --confirm` end to end: a tiny collection measured now (two
zoo families, two programs each, options and random layouts), fold models the command
trains itself (a tiny ranker; the fewest-changes heuristic), then the confirmation stage
compiles the programs again, maps the stored configs back (`stored_configs`), times them
in fresh rounds with the `search` strategy's picks, and keeps what it timed in
OUT/confirmed.json for a rerun, each row with the `confirm_spec` it was timed under: a
rerun reuses a row only for the same spec and choices."""

import json
import math
import os
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("jax")

from graphcost.autotune.program import prepare  # noqa: E402
from graphcost.bench.families import confirm_set, default_index, stored_configs  # noqa: E402
from graphcost.cli import main  # noqa: E402
from graphcost.data.collection import open_collection  # noqa: E402
from graphcost.formats.npz import read_graph  # noqa: E402
from graphcost.kinds import space_of  # noqa: E402
from graphcost.xla.options import OptionConfig  # noqa: E402
from graphcost.xla.programs import make_program  # noqa: E402

FAMILIES = ("mlp", "reduction")  # the cheapest zoo families; two give two folds
PER_FAMILY = 2
NUM_CONFIGS = 4
PROGRAMS = {f"{f}.{i:03d}" for f in FAMILIES for i in range(PER_FAMILY)}
COLLECTIONS = {"options": ("options", "cpu"), "layout:random": ("layout", "cpu", "random")}
K = 2
RUNS = 3
MAX_RUN_S = 30  # a call's limit when confirming: timing under load must drop no config
#: a ranker small enough to train 2 folds in seconds (model settings, then training ones)
TINY_RANKER = ["--epochs", "1", "--set", "hidden=8", "--set", "opcode_dim=4",
               "--set", "layers=1", "--set", "ref_configs=4", "--set", "configs_per_graph=4"]
STRATEGIES = {"pool", "model", "portfolio", "random", "default", "learn", "search",
              "model_fastest"}


def core() -> int:
    """A core this test process may use: the command pins the whole process to it."""
    return min(os.sched_getaffinity(0))


def invoke(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


PINNED: list[set[int]] = []  # the cores each `bench` call left its process on


def bench(coll, out, *args, k: int = K, runs: int = RUNS) -> object:
    """The command in this process, which it pins for the timing; the cores it had are
    given back here, since a module fixture's call runs before any function fixture."""
    before = os.sched_getaffinity(0)
    try:
        r = invoke("bench", "families", coll, "--out", out, "--confirm", "--seeds", "0",
                   "--folds", "2", "--k", k, "--runs", runs, "--warmup", "1",
                   "--max-run-s", MAX_RUN_S, "--confirm-rounds", "4", "--core", core(), *args)
        PINNED.append(os.sched_getaffinity(0))
    finally:
        os.sched_setaffinity(0, before)
    return r


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    """Both kinds of the programs measured now: few configs and runs, no timeout."""
    root = tmp_path_factory.mktemp("collection")
    r = invoke("collect", root, "--families", ",".join(FAMILIES), "--per-family", PER_FAMILY,
               "--kinds", ",".join(COLLECTIONS), "--configs", NUM_CONFIGS, "--runs", "3",
               "--warmup", "1", "--min-time-s", "0", "--max-run-s", "30",  # under load
               "--workers", "1")
    assert r.exit_code == 0, r.output
    colls = {kind: root.joinpath("npz", *parts) for kind, parts in COLLECTIONS.items()}
    for path in colls.values():
        assert {p.stem for p in path.rglob("*.npz")} == PROGRAMS
    return colls


@pytest.fixture(scope="module")
def options_run(collection, tmp_path_factory):
    """The options collection confirmed once, the ranker's folds trained by the command."""
    out = tmp_path_factory.mktemp("options-bench")
    json_path = out.parent / f"{out.name}.json"
    r = bench(collection["options"], out, *TINY_RANKER, "--samples", "8", "--evaluations",
              "12", "--json", json_path)
    assert r.exit_code == 0, r.output
    assert PINNED[-1] == {core()}  # pinned for the timing, as documented
    return out, r.output, json.loads(json_path.read_text())


def progress_lines(output: str) -> list[str]:
    """The lines `confirm_rows` prints for each program it times."""
    return [ln for ln in output.splitlines()
            if ln.startswith("[") and "confirmed vs default" in ln]


def default_json(kind: str):
    """The default config as a search pick is recorded (as chosen.json holds it): no
    layout set, no compiler option passed."""
    return {"layouts": [], "compiler_options": {}}


def check_confirmed(result: dict, output: str, kind: str, samples: int, evaluations: int,
                    programs: set[str] = PROGRAMS, k: int = K, runs: int = RUNS) -> None:
    """Every program confirmed with every strategy, figures consistent with the choices,
    the search's budget and picks as asked, each row's `confirm_spec` the run's, the
    summary and table agreeing."""
    rows = {r["program"]: r for r in result["rows"]}
    assert set(rows) == programs
    protocol = result["protocol"]
    assert protocol["rounds"] == 4 and protocol["runs"] == runs
    assert protocol["warmup"] == 1 and protocol["max_run_s"] == MAX_RUN_S
    assert result["core"] == core()
    assert (result["samples"], result["evaluations"], result["k"]) == (samples, evaluations, k)
    spec = {"k": k, "protocol": protocol, "core": core(),
            "search_budget": [samples, evaluations],
            "strategies": ["pool", "model", "portfolio", "random", "default", "learn",
                           "search"]}
    for name, row in rows.items():
        assert row["confirm_spec"] == spec, (name, row["confirm_spec"])
        assert row["confirm_spec"]["protocol"]["max_run_s"] == MAX_RUN_S, name
        c, conf, d = row["choice"], row["confirmed"], row["default"]
        assert set(conf) == STRATEGIES, name
        assert conf["default"] == 1.0, name
        assert all(math.isfinite(v) and v > 0 for v in conf.values()), (name, conf)
        # learning while measuring ends on the default or on a config stored faster than
        # it, whose confirmed figure is that config's own
        learned = row["learn_choice"]
        rt = row["runtime_ns"]
        assert learned == d or learned in row["clear"], (name, row)
        # every strategy that chooses ends on the default or a config stored clearly faster
        assert all(i == d or i in row["clear"] for i in [c["portfolio"], *c["model"]]), row
        assert all(rt[i] < rt[d] for i in row["clear"]), (name, row)
        for arm in ("model", "model_fastest"):  # each choice's figure is its config's own
            assert [row["confirmed_speed"][str(i)] for i in c[arm]] == row[arm + "_ci"]
        assert conf["learn"] == row["confirmed_speed"][str(learned)][0], (name, row)
        # a strategy that ends on the default is the default's own rounds: exactly 1
        for s in ("pool", "portfolio"):
            if c[s] == d:
                assert conf[s] == 1.0, (name, s, row)
            if c[s] == c["pool"]:  # the same config: the same confirmed figure
                assert conf[s] == conf["pool"], (name, s, row)
        assert len(c["model"]) == len(row["model_ci"]) == 1  # one seed
        mid, lo, hi = row["model_ci"][0]  # (point, 95% low, high)
        assert mid == pytest.approx(conf["model"]) and lo <= mid <= hi, (name, row)
        if c["model"] == [c["pool"]]:
            assert conf["model"] == pytest.approx(conf["pool"]), (name, row)
        # with nothing stored faster than the default every draw of random-K keeps it
        rt = np.asarray(row["runtime_ns"])
        if not (rt < rt[d]).any():
            assert conf["random"] == 1.0 == conf["pool"], (name, row)
        ids = confirm_set(row)
        assert len(ids) <= row["confirmed_configs"] <= len(ids) + k, (name, row)
        assert row["confirm_rounds"] == 4 and row["select_rounds"] == 2
        assert row["search_budget"] == [samples, evaluations], name
        picks = row["search_configs"]
        assert 1 <= len(picks) <= k, (name, picks)
        assert default_json(kind) not in picks, (name, picks)
        assert len({json.dumps(p, sort_keys=True) for p in picks}) == len(picks), picks
        assert 0 <= row["search_failed"] <= len(picks)
    s = result["summary"]
    assert s["source"] == "confirmed" and s["all"]["programs"] == len(programs)
    assert {f: v["programs"] for f, v in s["families"].items()} == \
        {f: sum(n.startswith(f + ".") for n in programs) for f in FAMILIES
         if any(n.startswith(f + ".") for n in programs)}
    beats = sum(r["confirmed"]["search"] > r["confirmed"]["pool"] for r in rows.values())
    assert s["all"]["search_beats_pool"] == beats
    assert s["all"]["default"][0] == pytest.approx(1.0)
    # the table: a search column, the search line, confirmed figures
    head = [ln for ln in output.splitlines() if ln.split()[:3] == ["n", "pool", "best"]]
    assert len(head) == 1 and head[0].split()[-1] == "search", output
    assert f"all: the search beat the pool's best on {beats} of {len(programs)} programs" \
        in output
    assert "confirmed runtimes" in output and f"best {k} of {samples} fresh configs" in output
    assert f"({evaluations} scored" in output


def test_confirm_times_every_options_program_with_every_strategy(options_run):
    out, output, result = options_run
    assert "ranker seed 0: training 2 leave-family-out folds" in output
    assert "config-only seed 0: training 2 leave-family-out folds" in output
    for fold in (1, 2):  # the search's models, one per leave-family-out fold
        assert (out / "ranker-0" / f"fold-{fold}" / "model.pt").exists()
    assert result["portfolio"] == "config-only"
    lines = progress_lines(output)
    assert len(lines) == len(PROGRAMS)
    assert {ln.split()[1] for ln in lines} == PROGRAMS
    assert all(ln.startswith(f"[{i}/{len(PROGRAMS)}]") for i, ln in enumerate(lines, 1))
    check_confirmed(result, output, "options", 8, 12)
    kept = json.loads((out / "confirmed.json").read_text())
    assert kept == {r["program"]: r for r in result["rows"]}  # confirm_spec included
    assert all(r["confirm_spec"]["protocol"]["max_run_s"] == MAX_RUN_S for r in kept.values())


def test_a_rerun_reuses_the_confirmed_rows_and_another_spec_times_again(options_run,
                                                                        tmp_path):
    first_out, _, first = options_run
    out = tmp_path / "out"
    shutil.copytree(first_out, out)
    log = out / "confirmed.json"
    before = (log.read_bytes(), log.stat().st_mtime_ns)
    args = [*TINY_RANKER, "--samples", "8", "--evaluations", "12"]
    again = bench(first["data"], out, *args, "--json", tmp_path / "again.json")
    assert again.exit_code == 0, again.output
    assert again.output.count("reusing") == 2 and "leave-family-out folds" not in again.output
    assert progress_lines(again.output) == []  # nothing timed again
    assert (log.read_bytes(), log.stat().st_mtime_ns) == before
    reused = json.loads((tmp_path / "again.json").read_text())
    assert reused["rows"] == first["rows"]
    assert reused["summary"] == first["summary"]

    # another search budget: what was confirmed with the old one is timed again
    other = bench(first["data"], out, *TINY_RANKER, "--samples", "6", "--evaluations", "12",
                  "--families", "mlp", "--json", tmp_path / "other.json")
    assert other.exit_code == 0, other.output
    lines = progress_lines(other.output)
    assert [ln.split()[:2] for ln in lines] == [["[1/2]", "mlp.000"], ["[2/2]", "mlp.001"]]
    result = json.loads((tmp_path / "other.json").read_text())
    mlp = {p for p in PROGRAMS if p.startswith("mlp.")}
    check_confirmed(result, other.output, "options", 6, 12, mlp)
    kept = json.loads(log.read_text())
    assert set(kept) == PROGRAMS  # the other family's rows are kept as they were
    assert {n: r["search_budget"] for n, r in kept.items()} == \
        {n: [6, 12] if n in mlp else [8, 12] for n in PROGRAMS}
    old = {r["program"]: r for r in first["rows"]}
    assert all(kept[n] == old[n] for n in PROGRAMS - mlp)

    # another k: every program is timed again, its search keeping at most k picks
    new_k = K - 1
    result = rerun(first["data"], out, tmp_path / "k.json", *args, k=new_k)
    check_confirmed(result, result["output"], "options", 8, 12, k=new_k)
    kept = json.loads(log.read_text())
    assert kept == {r["program"]: r for r in result["rows"]}
    assert all(r["confirm_spec"]["k"] == new_k and len(r["search_configs"]) <= new_k
               for r in kept.values()), kept

    # other runs per round (the same k): every program is timed again
    result = rerun(first["data"], out, tmp_path / "runs.json", *args, k=new_k, runs=RUNS - 1)
    check_confirmed(result, result["output"], "options", 8, 12, k=new_k, runs=RUNS - 1)
    kept = json.loads(log.read_text())
    assert kept == {r["program"]: r for r in result["rows"]}
    assert all(r["confirm_spec"]["protocol"]["runs"] == RUNS - 1 for r in kept.values())


def rerun(data, out, json_path, *args, **kw) -> dict:
    """`bench` again on `out` where no confirmed row may be reused: its fold models are,
    and every program is timed again, in order. The result, with the command's output."""
    r = bench(data, out, *args, "--json", json_path, **kw)
    assert r.exit_code == 0, r.output
    assert r.output.count("reusing") == 2 and "leave-family-out folds" not in r.output
    lines = progress_lines(r.output)
    assert [ln.split()[0] for ln in lines] == \
        [f"[{i}/{len(PROGRAMS)}]" for i in range(1, len(PROGRAMS) + 1)], r.output
    assert {ln.split()[1] for ln in lines} == PROGRAMS
    return {**json.loads(json_path.read_text()), "output": r.output}


def test_confirm_on_random_layouts_with_a_heuristic_fold_model(collection, tmp_path):
    """The layout plans are sampled again and matched; the search scores with the
    fewest-changes heuristic of the program's fold (its model.pt)."""
    out = tmp_path / "out"
    r = bench(collection["layout:random"], out, "--model", "fewest-changes", "--samples", "8",
              "--json", tmp_path / "f.json")
    assert r.exit_code == 0, r.output
    assert "fewest-changes seed 0: training 2 leave-family-out folds" in r.output
    assert "fewest-changes seed 0: reusing" in r.output  # the portfolio's candidate
    assert "moved-bytes seed 0: training 2 leave-family-out folds" in r.output
    assert "changed-bytes seed 0: training 2 leave-family-out folds" in r.output
    for fold in (1, 2):
        assert (out / "fewest-changes-0" / f"fold-{fold}" / "model.pt").exists()
    result = json.loads((tmp_path / "f.json").read_text())
    assert result["collection"] == "layout:cpu:random"
    assert result["portfolio"] in ("fewest-changes", "moved-bytes", "changed-bytes")
    assert len(progress_lines(r.output)) == len(PROGRAMS)
    check_confirmed(result, r.output, "layout", 8, 8)


@pytest.mark.parametrize("kind", list(COLLECTIONS))
def test_stored_configs_map_every_stored_row_back_to_its_config(collection, kind):
    coll = open_collection(collection[kind])
    spec = json.loads((coll.root / "manifest.json").read_text())["spec"]
    assert spec["num_configs"] == NUM_CONFIGS
    files = sorted(p for p in collection[kind].rglob("*.npz"))
    for path in files:
        g = read_graph(path)
        family, _, index = g.name.rpartition(".")
        name, fn, args = make_program(family, int(index))
        t = prepare(name, fn, args, space_of(kind))
        configs = stored_configs(t, g, coll.name, spec["seed"], spec["num_configs"])
        assert len(configs) == g.num_configs, name
        d = default_index(g)
        assert t.configs.key(configs[d]) == t.configs.key(t.configs.default()), name
        if kind == "options":
            stored = np.asarray(g.config_feat)
            for row, config in enumerate(configs):
                assert all(0 <= c < len(k.choices) for k, c in zip(t.configs.knobs, config,
                                                                   strict=True))
                np.testing.assert_array_equal(OptionConfig(config).features(), stored[row],
                                              err_msg=f"{name} row {row}")
        else:
            stored = np.asarray(g.node_config_feat, dtype=np.float32)
            units = set(t.configs.units)
            for row, plan in enumerate(configs):
                assert set(plan) <= units, (name, row, plan)
                np.testing.assert_array_equal(t.configs.encode([plan])[0], stored[row],
                                              err_msg=f"{name} row {row}")
        # distinct stored rows are distinct configs
        feats = {stored[i].tobytes() for i in range(len(configs))}
        assert len({t.configs.key(c) for c in configs}) == len(feats), name
