"""`graphcost bench baselines`: graphcost's baseline trained at its official settings,
beside official-format results scored by the same metric code."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from graphcost.bench.baselines import bench_baselines, format_baselines, load_official
from graphcost.cli import main
from graphcost.data.collection import open_collection
from graphcost.data.synthetic import write_collection
from graphcost.errors import UserError


@pytest.fixture(scope="module")
def bundled_like(tmp_path_factory):
    """A tiny collection where the bundled layout:cpu:default sits, and two official
    runs: one ranking every test graph perfectly (τ = 1), one exactly backwards (τ = −1)."""
    root = tmp_path_factory.mktemp("bb")
    coll = write_collection(root, kind="layout", source="cpu", search="default",
                            splits={"train": 4, "valid": 2, "test": 3}, num_nodes=30,
                            num_configs=20)
    official = root / "official"
    official.mkdir()
    runtimes = {g.name: np.asarray(g.target) for g in open_collection(coll).graphs("test")}
    for seed, sign in ((0, 1.0), (1, -1.0)):
        run = {"collection": "layout/cpu/default", "model": "ResModel", "seed": seed,
               "epochs_run": 4, "best_epoch": 1, "train_lib_wall_seconds": 8.0,
               "peak_rss_mb": 900.0,
               "train_curve": [{"val_opa": 0.5 + 0.1 * i} for i in range(4)],
               "test": {n: (sign * rt).tolist() for n, rt in runtimes.items()}}
        (official / f"run{seed}.json").write_text(json.dumps(run))
    return root, official


def test_official_runs_are_scored_by_the_same_metric_code(bundled_like):
    root, official = bundled_like
    runs = load_official(official, root)[("layout/cpu/default", "resgcn")]
    assert sorted(r["seed"] for r in runs) == [0, 1]
    by_seed = {r["seed"]: r for r in runs}
    assert all(v == pytest.approx(1.0) for v in by_seed[0]["test"].values())
    assert all(v == pytest.approx(-1.0) for v in by_seed[1]["test"].values())
    assert by_seed[0]["seconds_per_epoch"] == 2.0 and by_seed[0]["best_epoch"] == 2


def test_graphcost_beside_the_official_spread(bundled_like):
    root, official = bundled_like
    result = bench_baselines(root, seeds=[0], collections=["layout/cpu/default"],
                             official=official)
    (entry,) = result.table
    ours, theirs = entry["graphcost"], entry["official"]
    assert theirs["spread"] == [-1.0, 1.0] and theirs["mean"] == pytest.approx(0.0)
    assert -1.0 <= ours["mean"] <= 1.0 and entry["mean_inside_range"]
    assert entry["official_spread"] == 2.0 and entry["within_spread"] and entry["ranges_overlap"]
    assert entry["difference"][0] == pytest.approx(ours["mean"])  # minus the official 0
    assert len(ours["valid_opa"][0]) == ours["epochs_run"][0] <= 50  # official epochs
    assert entry["speedup"] == pytest.approx(2.0 / ours["seconds_per_epoch"])
    assert "|gap| within the official seed spread (2.000): yes" in format_baselines(result)


def test_bad_official_results_are_refused_naming_the_file(bundled_like, tmp_path):
    root, _ = bundled_like
    (tmp_path / "broken.json").write_text(json.dumps({"model": "ResModel"}))
    with pytest.raises(UserError, match="broken.json: not an official run result"):
        load_official(tmp_path, root)
    r = CliRunner().invoke(main, ["bench", "baselines", "--data", str(root), "--collections",
                                  "options/cpu"])
    assert r.exit_code == 2 and "options/cpu: no such collection" in r.output


def test_a_diverged_official_run_is_left_out_and_named(bundled_like, tmp_path):
    root, official = bundled_like
    for f in official.glob("*.json"):
        (tmp_path / f.name).write_text(f.read_text())
    run = json.loads((official / "run0.json").read_text())
    run["seed"] = 2
    run["test"] = {n: [float("nan")] * len(v) for n, v in run["test"].items()}
    (tmp_path / "run2.json").write_text(json.dumps(run))  # json writes NaN, as TF runs do
    from graphcost.bench.baselines import summarize

    s = summarize(load_official(tmp_path, root)[("layout/cpu/default", "resgcn")])
    assert s["diverged_seeds"] == [2] and sorted(s["seeds"]) == [0, 1]
    assert s["mean"] == pytest.approx(0.0)
