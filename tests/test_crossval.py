"""Leave-family-out cross-validation: every family held out exactly once and never trained
on in its fold, every graph scored exactly once, and the command's output and refusals."""

import json
from collections import Counter

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import graphcost.train.loop
import graphcost.train.run
from graphcost.cli import main
from graphcost.data.collection import open_collection
from graphcost.data.families import carve_families, family_folds, family_of
from graphcost.data.synthetic import make_layout_graph, make_tile_graph
from graphcost.eval.crossval import crossvalidate, plan_folds, source_folds
from graphcost.formats import write_graph
from graphcost.stats import bootstrap_ci
from graphcost.train import TrainSettings

torch.set_num_threads(1)

# 5 families of unequal size, spread over the splits as `collect` would not (a family
# in two splits), so that pooling is tested too
FAMILIES = {"mlp": 3, "cnn": 2, "rnn": 2, "attn": 1, "conv_nhwc": 2}
FAST = ["--epochs", "1", "--set", "steps_per_epoch=1", "--set", "graphs_per_batch=2",
        "--set", "configs_per_graph=4", "--set", "hidden=16"]


def write_families(root, kind="layout", families=FAMILIES):
    """A collection with graphs named `family.NNN`, dealt round-robin over the splits."""
    rng = np.random.default_rng(0)
    base = root / "npz" / kind / "synth" / ("random" if kind == "layout" else "")
    i = 0
    for fam, count in families.items():
        for j in range(count):
            name = f"{fam}.{j:03d}"
            g = (make_layout_graph(rng, num_nodes=16, num_configs=6, name=name)
                 if kind == "layout" else make_tile_graph(rng, num_nodes=8, num_configs=8,
                                                          name=name))
            write_graph(base / ("train", "valid", "test")[i % 3] / f"{name}.npz", g)
            i += 1
    return base


def fast_settings() -> TrainSettings:
    return TrainSettings(epochs=1, steps_per_epoch=1, graphs_per_batch=2, configs_per_graph=4,
                         valid_configs=6, progress=False)


def test_family_of_has_the_zoo_semantics():
    programs = pytest.importorskip("graphcost.xla.programs")
    for name in ("mlp.000", "cnn_nhwc.012", "bert_pretraining.4x4.fp16", "plain"):
        assert family_of(name) == programs.family_of(name)


def test_family_folds_are_a_balanced_deterministic_partition():
    sizes = {"a": 5, "b": 1, "c": 3, "d": 3, "e": 2, "f": 2, "g": 4}
    for folds in (2, 3, 7):
        groups = family_folds(sizes, folds, seed=3)
        assert Counter(f for g in groups for f in g) == Counter(list(sizes))  # each once
        assert all(groups)
        totals = [sum(sizes[f] for f in g) for g in groups]
        assert max(totals) - min(totals) <= max(sizes.values())
        assert family_folds(sizes, folds, seed=3) == groups
    with pytest.raises(ValueError, match="at least 2"):
        family_folds(sizes, 1)
    with pytest.raises(ValueError, match="at least 8 families"):
        family_folds(sizes, 8)


def test_validation_families_hold_the_fraction_and_leave_training_families():
    sizes = {"a": 5, "b": 1, "c": 3, "d": 3}
    valid = carve_families(sizes, 0.3, seed=1)
    assert valid and set(valid) < set(sizes)
    assert sum(sizes[f] for f in valid) >= 0.3 * sum(sizes.values())
    assert carve_families(sizes, 0.0) == [] and carve_families({"a": 3}, 0.5) == []
    assert len(carve_families(sizes, 0.99)) == len(sizes) - 1


@pytest.fixture
def trained_on(monkeypatch) -> list[tuple[set, set]]:
    """What the one training loop is given, call by call: (train names, valid names)."""
    seen = []
    real_fit = graphcost.train.run.fit

    def spy(model, train_graphs, valid_graphs, *args, **kwargs):
        seen.append(({g.name for g in train_graphs}, {g.name for g in valid_graphs or []}))
        return real_fit(model, train_graphs, valid_graphs, *args, **kwargs)

    monkeypatch.setattr(graphcost.train.run, "fit", spy)
    return seen


def test_every_family_is_held_out_once_and_never_trained_on_in_its_fold(tmp_path, trained_on):
    data = write_families(tmp_path)
    plan = plan_folds(open_collection(data), 3, seed=0, valid_fraction=0.2)
    assert Counter(f for fold in plan for f in fold.held_out) == Counter(list(FAMILIES))

    result = crossvalidate(data, "ranker", 3, fast_settings(), {"hidden": 16},
                           valid_fraction=0.2)
    assert len(trained_on) == len(result["fold_results"]) == 3
    for (train, valid), fold in zip(trained_on, result["fold_results"], strict=True):
        held = set(fold["held_out"])
        assert train and not {family_of(n) for n in train} & held
        assert not {family_of(n) for n in valid} & held
        assert not {family_of(n) for n in valid} & {family_of(n) for n in train}
        assert {family_of(n) for n in valid} == set(fold["valid"])
        scored = {n for n, row in result["graphs"].items() if row["fold"] == fold["fold"]}
        assert {family_of(n) for n in scored} == held


def test_overall_scores_every_graph_exactly_once(tmp_path):
    data = write_families(tmp_path)
    result = crossvalidate(data, "ranker", 2, fast_settings(), {"hidden": 16},
                           out_dir=tmp_path / "cv")
    every = {p.stem for files in open_collection(data).splits.values() for p in files}
    assert set(result["graphs"]) == every
    assert sum(f["scored"] for f in result["fold_results"]) == len(every)
    taus = np.array([row["kendall_tau"] for row in result["graphs"].values()])
    mean, lo, hi = bootstrap_ci(taus)
    assert result["overall"]["kendall_tau"]["mean"] == pytest.approx(mean)
    assert (result["overall"]["kendall_tau"]["lo"], result["overall"]["kendall_tau"]["hi"]) \
        == pytest.approx((lo, hi))
    saved = json.loads((tmp_path / "cv" / "crossval.json").read_text())
    assert set(saved["graphs"]) == every
    run = json.loads((tmp_path / "cv" / "fold-1" / "run.json").read_text())
    assert {n[:-4] for n in run["files"]["test"]} == {
        n for n, row in result["graphs"].items() if row["fold"] == 1}


def test_folds_trained_at_once_give_what_one_after_another_gives(tmp_path):
    data = write_families(tmp_path)
    one = crossvalidate(data, "ranker", 3, fast_settings(), {"hidden": 16},
                        out_dir=tmp_path / "one")
    lines: list[str] = []
    three = crossvalidate(data, "ranker", 3, fast_settings(), {"hidden": 16},
                          out_dir=tmp_path / "three", jobs=3, log=lines.append)
    assert [f["fold"] for f in three["fold_results"]] == [1, 2, 3]  # in fold order
    assert list(three["graphs"]) == list(one["graphs"])
    for name, row in one["graphs"].items():
        assert three["graphs"][name]["fold"] == row["fold"]
        assert three["graphs"][name]["pred"] == pytest.approx(row["pred"], abs=1e-5)
    assert sorted(line.split(":")[0] for line in lines) == ["fold 1/3"] * 2 + ["fold 2/3"] * 2 \
        + ["fold 3/3"] * 2  # each fold's start and its result
    for i in (1, 2, 3):  # each fold's run kept where one after another keeps it
        assert (tmp_path / "three" / f"fold-{i}" / "model.pt").is_file()


def test_cli_prints_each_fold_and_the_overall_figure(tmp_path):
    data = write_families(tmp_path, "tile")
    out = tmp_path / "cv.json"
    result = CliRunner().invoke(main, ["crossval", str(data), "--folds", "3", "--model",
                                       "mlp", "--json", str(out), *FAST])
    assert result.exit_code == 0, result.output
    for i in (1, 2, 3):
        assert f"fold {i}/3: training mlp" in result.output
        assert f"fold {i}/3: " in result.output and "held-out graphs scored, tile score" \
            in result.output
    assert "3-fold leave-family-out: 10 graphs, each scored once by the model that never " \
        "saw its family" in result.output
    graphs = CliRunner().invoke(main, ["crossval", str(data), "--folds", "3", "--model", "mlp",
                                       "--group", "graph", *FAST])
    assert graphs.exit_code == 0, graphs.output
    assert "3-fold leave-graph-out: 10 graphs, each scored once by the model that never saw " \
        "the graph" in graphs.output and "never saw its family" not in graphs.output
    saved = json.loads(out.read_text())
    assert saved["kind"] == "tile" and len(saved["fold_results"]) == 3
    assert f"tile score {saved['overall']['score']['mean']:.4f}" in result.output


# (arguments, words the message must contain); messages written elsewhere (models, --set
# parsing) are matched loosely so that rewording them does not break this test
@pytest.mark.parametrize("args, words", [
    (["--folds", "1"], ["folds must be at least 2"]),
    (["--folds", "6"], ["6 folds need at least 6 families"]),
    (["--model", "mlp"], ["mlp", "tile"]),
    (["--model", "nope"], ["nope"]),
    (["--set", "epochs"], ["epochs", "key=value"]),
    (["--valid-fraction", "1.5"], ["validation fraction must be in [0, 1)"]),
    (["--jobs", "0"], ["--jobs", "range"]),
])
def test_cli_refuses_bad_input_with_a_message(tmp_path, args, words):
    data = write_families(tmp_path)
    result = CliRunner().invoke(main, ["crossval", str(data), *args, *FAST])
    assert result.exit_code != 0
    assert isinstance(result.exception, SystemExit)  # a message, not a traceback
    assert "Error" in result.output and "Traceback" not in result.output
    assert all(w.lower() in result.output.lower() for w in words), result.output
    assert "fold 1/" not in result.output  # refused before any training


def test_cli_refuses_a_folder_without_a_collection(tmp_path):
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(main, ["crossval", str(tmp_path / "empty")])
    assert result.exit_code != 0 and isinstance(result.exception, SystemExit)
    assert "empty" in result.output and "collection" in result.output
    missing = CliRunner().invoke(main, ["crossval", str(tmp_path / "missing")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_compare_pairs_graphs_and_averages_seeds(tmp_path):
    data = write_families(tmp_path, "tile")
    files = {}
    for model, seed in (("mlp", 0), ("mlp", 1), ("sage-late", 0)):
        files[model, seed] = tmp_path / f"{model}{seed}.json"
        result = CliRunner().invoke(main, ["crossval", str(data), "--folds", "3", "--model",
                                           model, "--seed", str(seed), "--json",
                                           str(files[model, seed]), *FAST])
        assert result.exit_code == 0, result.output
    out = tmp_path / "cmp.json"
    result = CliRunner().invoke(main, ["compare", str(files["mlp", 0]), str(files["mlp", 1]),
                                       "--against", str(files["sage-late", 0]),
                                       "--json", str(out)])
    assert result.exit_code == 0, result.output
    cmp = json.loads(out.read_text())
    runs = [json.loads(files[k].read_text())["graphs"] for k in files]
    names = sorted(runs[0])
    mlp = np.array([(runs[0][n]["score"] + runs[1][n]["score"]) / 2 for n in names])
    sage = np.array([runs[2][n]["score"] for n in names])
    assert cmp["graphs"] == len(names) == 10
    assert cmp["difference"]["mean"] == pytest.approx(float(np.mean(mlp - sage)))
    assert cmp["runs"]["seeds"] == [0, 1] and cmp["runs"]["model"] == "mlp hidden=16"
    assert "paired difference mlp hidden=16 − sage-late hidden=16" in result.output


def test_compare_ensemble_scores_the_mean_of_the_seeds_scores(tmp_path):
    from graphcost.data.collection import open_collection
    from graphcost.eval.crossval import pooled_files
    from graphcost.eval.metrics import graph_metrics
    from graphcost.formats.npz import read_graph

    data = write_families(tmp_path, "tile")
    files = []
    for seed in (0, 1):
        files.append(tmp_path / f"mlp{seed}.json")
        result = CliRunner().invoke(main, ["crossval", str(data), "--folds", "3", "--model",
                                           "mlp", "--seed", str(seed), "--json",
                                           str(files[-1]), *FAST])
        assert result.exit_code == 0, result.output
    out = tmp_path / "ens.json"
    result = CliRunner().invoke(main, ["compare", *map(str, files), "--against", str(files[0]),
                                       "--ensemble", "--json", str(out)])
    assert result.exit_code == 0, result.output
    cmp = json.loads(out.read_text())
    runs = [json.loads(f.read_text())["graphs"] for f in files]
    paths = pooled_files(open_collection(data))
    want = []
    for name in sorted(runs[0]):  # as an ensemble model scores: the mean of the scores
        mean = np.mean([r[name]["pred"] for r in runs], axis=0)
        target = np.asarray(read_graph(paths[name]).target, dtype=np.float64)
        want.append(graph_metrics("tile", mean, target)["score"])
    assert cmp["runs"]["mean"]["mean"] == pytest.approx(float(np.mean(want)))
    assert cmp["runs"]["model"] == "mlp hidden=16 ensemble" and cmp["runs"]["seeds"] == ["0+1"]
    assert "ranker" not in result.output and "mlp hidden=16 ensemble" in result.output
    stale = tmp_path / "stale.json"  # a result without predictions is refused, not scored
    old = json.loads(files[1].read_text())
    for row in old["graphs"].values():
        del row["pred"]
    stale.write_text(json.dumps(old))
    refused = CliRunner().invoke(main, ["compare", str(files[0]), str(stale), "--against",
                                        str(files[0]), "--ensemble"])
    assert refused.exit_code == 2 and "seeds [1]" in refused.output
    assert "Traceback" not in refused.output


def test_compare_refuses_a_file_that_is_not_a_crossval_result(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1}')
    result = CliRunner().invoke(main, ["compare", str(bad), "--against", str(bad)])
    assert result.exit_code != 0 and isinstance(result.exception, SystemExit)
    assert "bad.json" in result.output and "not a crossval result" in result.output


def test_compare_refuses_a_seed_twice_on_one_side(tmp_path):
    data = write_families(tmp_path, "tile")
    out = tmp_path / "a.json"
    CliRunner().invoke(main, ["crossval", str(data), "--folds", "3", "--model", "mlp",
                              "--json", str(out), *FAST])
    result = CliRunner().invoke(main, ["compare", str(out), str(out), "--against", str(out)])
    assert result.exit_code != 0 and isinstance(result.exception, SystemExit)
    assert "two results of one seed" in result.output


def test_graph_folds_hold_out_each_graph_once_with_its_family_seen_in_training(tmp_path):
    data = write_families(tmp_path)
    plan = plan_folds(open_collection(data), 3, seed=0, valid_fraction=0.2, group="graph")
    every = {p.stem for files in open_collection(data).splits.values() for p in files}
    held = [n for fold in plan for n in fold.held_out]
    assert sorted(held) == sorted(every)  # single graphs, each held out once
    assert max(len(f.held_out) for f in plan) - min(len(f.held_out) for f in plan) <= 1
    for fold in plan:
        test = {p.stem for p in fold.collection.splits["test"]}
        train = {p.stem for p in fold.collection.splits["train"]}
        assert test == set(fold.held_out) and not test & train
    # families of more than one graph reach training in some fold where one is held out
    assert any({family_of(n) for n in fold.held_out}
               & {p.stem.split(".")[0] for p in fold.collection.splits["train"]}
               for fold in plan)
    with pytest.raises(ValueError, match="unknown fold grouping"):
        plan_folds(open_collection(data), 3, group="program")


EXTERNAL = {"flax_cnn": 2, "eqx_mlp": 1}


def test_external_trains_on_every_family_and_scores_every_external_graph(tmp_path,
                                                                         trained_on):
    data = write_families(tmp_path / "zoo")
    ext = write_families(tmp_path / "ext", families=EXTERNAL)
    result = crossvalidate(data, "ranker", 5, fast_settings(), {"hidden": 16},
                           valid_fraction=0.2, external=ext)
    zoo = {p.stem for files in open_collection(data).splits.values() for p in files}
    (train, valid), = trained_on  # one model
    assert train | valid == zoo and not train & valid and valid
    assert set(result["graphs"]) == {f"{f}.{j:03d}" for f, n in EXTERNAL.items()
                                     for j in range(n)}
    assert result["folds"] == 1 and result["group"] == "external"
    assert result["data"] == str(ext.resolve()) and str(ext) in result["collection"]
    assert all(len(row["pred"]) == 6 for row in result["graphs"].values())


def test_external_results_pair_in_compare_and_bad_externals_are_refused(tmp_path):
    data = write_families(tmp_path / "zoo", "tile")
    ext = write_families(tmp_path / "ext", "tile", families=EXTERNAL)
    files = []
    for model, seed in (("mlp", 0), ("mlp", 1), ("config-only", 0)):
        files.append(tmp_path / f"{model}{seed}.json")
        fast = FAST if model == "mlp" else []
        r = CliRunner().invoke(main, ["crossval", str(data), "--external", str(ext),
                                      "--model", model, "--seed", str(seed), "--json",
                                      str(files[-1]), *fast])
        assert r.exit_code == 0, r.output
        assert "external: 3 graphs, each scored once by the model that never saw its " \
               "programs" in r.output
    r = CliRunner().invoke(main, ["compare", str(files[0]), str(files[1]), "--against",
                                  str(files[2])])
    assert r.exit_code == 0 and "over 3 graphs scored by both" in r.output, r.output
    layout = write_families(tmp_path / "lay", "layout", families=EXTERNAL)
    same = write_families(tmp_path / "same", "tile", families={"mlp": 1})
    for bad, words in ((layout, "holds layout graphs"), (same, "in the training one too")):
        r = CliRunner().invoke(main, ["crossval", str(data), "--external", str(bad), *FAST])
        assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output, r.output


SOURCES = {"zoo": {"mlp": 2, "cnn": 2}, "haiku": {"haiku_gpt": 2, "haiku_lstm": 1},
           "eqx": {"eqx_gru": 2}}


def test_each_source_is_held_out_once_by_a_model_trained_on_the_others(tmp_path, trained_on):
    data = {s: write_families(tmp_path / s, families=f) for s, f in SOURCES.items()}
    result = crossvalidate(data, "ranker", 5, fast_settings(), {"hidden": 16},
                           valid_fraction=0.2, group="source")
    assert result["folds"] == 3 and result["group"] == "source"
    assert set(result["data"]) == set(SOURCES)
    for (train, valid), fold in zip(trained_on, result["fold_results"], strict=True):
        (held,) = fold["held_out"]
        others = {f"{fam}.{j:03d}" for s, fams in SOURCES.items() if s != held
                  for fam, n in fams.items() for j in range(n)}
        assert train | valid == others and not train & valid
    for name, row in result["graphs"].items():
        assert family_of(name) in SOURCES[row["source"]]
    assert len(result["graphs"]) == sum(sum(f.values()) for f in SOURCES.values())


def test_crossval_by_source_and_compare_report_every_source(tmp_path):
    args = [f"{s}={write_families(tmp_path / s, 'tile', families=f)}"
            for s, f in SOURCES.items()]
    files = []
    for model in ("mlp", "config-only"):
        files.append(tmp_path / f"{model}.json")
        r = CliRunner().invoke(main, ["crossval", *args, "--group", "source", "--model",
                                      model, "--json", str(files[-1]),
                                      *(FAST if model == "mlp" else [])])
        assert r.exit_code == 0, r.output
        assert "3-fold leave-source-out: 9 graphs" in r.output
        assert "  haiku (3 graphs): tile score" in r.output and "  eqx (2 graphs)" in r.output
    r = CliRunner().invoke(main, ["compare", str(files[0]), "--against", str(files[1]),
                                  "--heuristic", str(files[1])])
    assert r.exit_code == 0, r.output
    assert r.output.count("    zoo (4 graphs): ") == 2, r.output  # the model's and the rule's
    r = CliRunner().invoke(main, ["compare", str(files[0]), "--against", str(files[1]),
                                  "--metric", "kendall_tau", "--json", str(tmp_path / "c.json")])
    assert r.exit_code == 0 and "kendall_tau over 9 graphs" in r.output, r.output
    c = json.loads((tmp_path / "c.json").read_text())
    taus = [row["kendall_tau"] for row in json.loads(files[0].read_text())["graphs"].values()]
    assert c["runs"]["mean"]["mean"] == pytest.approx(np.mean(taus))
    # the ensemble of one seed reads its targets from every source's collection
    r = CliRunner().invoke(main, ["compare", str(files[0]), "--ensemble", "--against",
                                  str(files[1])])
    assert r.exit_code == 0 and "    haiku (3 graphs): " in r.output, r.output


def test_source_folds_name_the_source_of_every_graph_they_train_on(tmp_path):
    data = {s: open_collection(write_families(tmp_path / s, families=f))
            for s, f in SOURCES.items()}
    for fold in source_folds(data, seed=0, valid_fraction=0.2):
        coll = fold.collection
        pooled = [p.stem for split in ("train", "valid") for p in coll.splits.get(split, [])]
        assert sorted(coll.sources) == sorted(pooled)
        assert all(family_of(n) in SOURCES[s] for n, s in coll.sources.items())
        assert fold.held_out[0] not in coll.sources.values()


@pytest.mark.parametrize(("kind", "balance", "drawn"), [
    ("layout", "graph", "graph"), ("layout", "source", "source"), ("tile", "source", "source"),
    ("layout", "", "source"), ("tile", "", "graph")])  # '': the ranker's default for the kind
def test_balance_by_source_weighs_every_source_alike(tmp_path, monkeypatch, kind, balance,
                                                     drawn):
    """Sources of 6, 3 and 2 graphs pooled by `train`: by graph the steps draw whole
    passes (no weights); by source each source's graphs together weigh a third. The
    layout ranker draws by source unless told otherwise, the tile ranker by graph."""
    families = {"zoo": {"mlp": 3, "cnn": 3}, "haiku": {"haiku_gpt": 3}, "eqx": {"eqx_gru": 2}}
    args = [f"{s}={write_families(tmp_path / s, kind, families=f)}"
            for s, f in families.items()]
    given, real = [], graphcost.train.loop.epoch_order

    def spy(rng, items, steps, per_step, last_batch, weights):
        given.append(weights)
        return real(rng, items, steps, per_step, last_batch, weights)

    monkeypatch.setattr(graphcost.train.loop, "epoch_order", spy)
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["train", *args, "--out", str(out), "--valid-fraction", "0",
                                  *FAST, "--set", f"balance={balance}"])
    assert r.exit_code == 0, r.output
    run = json.loads((out / "run.json").read_text())
    assert run["sources"] == {"zoo": 6, "haiku": 3, "eqx": 2}
    assert run["balance"] == drawn
    if drawn == "graph":
        assert given == [None]
        return
    # the step's items are the train files in order; each source's weights sum to 1/3
    names = [f[:-4] for f in run["files"]["train"]]
    source = {f: s for s, fams in families.items() for f in fams}
    share = Counter()
    for name, w in zip(names, given[0], strict=True):
        share[source[family_of(name)]] += w
    assert [share[s] for s in families] == pytest.approx([1 / 3] * 3)


def test_crossval_by_source_refuses_what_cannot_be_held_out(tmp_path):
    zoo = write_families(tmp_path / "zoo", families={"mlp": 2, "cnn": 2})
    gpt = write_families(tmp_path / "haiku", families={"haiku_gpt": 2})
    again = write_families(tmp_path / "again", families={"mlp": 1})
    tile = write_families(tmp_path / "tiles", "tile", families={"eqx_gru": 2})
    for args, words in (
            ([str(zoo), str(gpt)], "several collections are held out source by source"),
            ([str(zoo), "--group", "source"], "at least two sources"),
            ([str(zoo), str(again), "--group", "source"], "family mlp is in two sources"),
            ([str(zoo), str(tile), "--group", "source"], "not one collection"),
            ([f"a={zoo}", f"a={gpt}", "--group", "source"], "two sources named a"),
            ([str(zoo), str(tmp_path / "nowhere"), "--group", "source"], "does not exist")):
        r = CliRunner().invoke(main, ["crossval", *args, *FAST])
        assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output, \
            (args, r.output)


def test_rescore_scores_the_kept_fold_models_again_with_a_scoring_setting(tmp_path):
    """correction=0 leaves the rule alone (its weight starts at 1 and one step keeps it
    positive): every held-out graph then scores as changed-bytes does in the same folds."""
    args = [f"{s}={write_families(tmp_path / s, families=f)}" for s, f in SOURCES.items()]
    ranker, rule, shrunk = (tmp_path / f"{n}.json" for n in ("ranker", "rule", "shrunk"))
    for model, path, extra in (("ranker", ranker, ["--out", str(tmp_path / "runs"), *FAST]),
                               ("changed-bytes", rule, [])):
        r = CliRunner().invoke(main, ["crossval", *args, "--group", "source", "--model",
                                      model, "--json", str(path), *extra])
        assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["rescore", str(ranker), "--set", "correction=0",
                                  "--json", str(shrunk)])
    assert r.exit_code == 0 and "leave-source-out" in r.output, r.output
    got, want = (json.loads(p.read_text()) for p in (shrunk, rule))
    assert got["model_settings"] == {"hidden": 16, "correction": 0.0}
    assert got["group"] == "source"
    assert set(got["graphs"]) == set(want["graphs"])
    for name, row in want["graphs"].items():
        assert got["graphs"][name]["source"] == row["source"]
        np.testing.assert_allclose(got["graphs"][name]["score"], row["score"], atol=1e-9)
    before = json.loads(ranker.read_text())
    assert any(abs(got["graphs"][n]["score"] - before["graphs"][n]["score"]) > 1e-6
               for n in before["graphs"])  # the learned part did move some ranking
    r = CliRunner().invoke(main, ["compare", str(shrunk), "--against", str(rule)])
    assert r.exit_code == 0 and "zoo (4 graphs)" in r.output, r.output
    for sets, words in ((["hidden=8"], "not hidden"), (["lr=0.1"], "not lr"),
                        (["correction=-1"], "correction")):
        r = CliRunner().invoke(main, ["rescore", str(ranker), *(f"--set={s}" for s in sets),
                                      "--json", str(tmp_path / "x.json")])
        assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output, r.output
    r = CliRunner().invoke(main, ["rescore", str(rule), "--set", "correction=0.5", "--json",
                                  str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "unknown setting 'correction'" in r.output, r.output
    before["fold_results"][1]["run_dir"] = None  # crossval without --out keeps no model
    ranker.write_text(json.dumps(before))
    r = CliRunner().invoke(main, ["rescore", str(ranker), "--set", "correction=0.5", "--json",
                                  str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "fold 2 of" in r.output and "kept no model" in r.output
    assert not (tmp_path / "x.json").exists()


def test_train_pools_several_sources_keeping_whole_families_for_early_stopping(tmp_path):
    args = [f"{s}={write_families(tmp_path / s, 'tile', families=f)}"
            for s, f in SOURCES.items()]
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["train", *args, "--model", "mlp", "--out", str(out),
                                  "--valid-fraction", "0.3", *FAST])
    assert r.exit_code == 0, r.output
    files = json.loads((out / "run.json").read_text())["files"]
    train, valid = ({family_of(f[:-4]) for f in files[s]} for s in ("train", "valid"))
    every = {f for fams in SOURCES.values() for f in fams}
    assert train | valid == every and not train & valid and valid
    assert (out / "model.pt").is_file()
    r = CliRunner().invoke(main, ["train", *args, args[0], "--out", str(tmp_path / "again"),
                                  *FAST])
    assert r.exit_code == 2 and "two sources named zoo" in r.output, r.output


def test_valid_seed_keeps_the_families_of_that_seed_whatever_the_training_seed(tmp_path):
    """The members of an ensemble train with other seeds on the same graphs: `--valid-seed`
    picks the early-stopping families, `--seed` the rest."""
    args = [f"{s}={write_families(tmp_path / s, 'tile', families=f)}"
            for s, f in SOURCES.items()]

    def valid(*seeds: str) -> set[str]:
        out = tmp_path / "-".join(seeds)
        r = CliRunner().invoke(main, ["train", *args, "--model", "mlp", "--out", str(out),
                                      "--valid-fraction", "0.3", *seeds, *FAST])
        assert r.exit_code == 0, r.output
        return set(json.loads((out / "run.json").read_text())["files"]["valid"])

    chosen = {seed: valid("--seed", seed) for seed in ("0", "1", "2")}
    assert len({frozenset(v) for v in chosen.values()}) > 1  # seeds pick other families
    for seed in ("0", "1", "2"):
        assert valid("--seed", "3", "--valid-seed", seed) == chosen[seed]


def test_crossval_valid_seed_holds_out_the_families_of_that_seed(tmp_path):
    """`--valid-seed` seeds the folds and their early-stopping families; `--seed` then
    seeds training alone, so runs of several seeds can form one ensemble's members."""
    data = write_families(tmp_path / "data", "tile")

    def folds(*seeds: str) -> tuple[list, dict]:
        out = tmp_path / ("-".join(seeds) + ".json")
        r = CliRunner().invoke(main, ["crossval", str(data), "--folds", "2", "--model", "mlp",
                                      *seeds, "--json", str(out), *FAST])
        assert r.exit_code == 0, r.output
        result = json.loads(out.read_text())
        plan = [(f["held_out"], f["valid"]) for f in result["fold_results"]]
        return plan, result

    plans = {seed: folds("--seed", seed)[0] for seed in ("0", "1", "2")}
    assert len({json.dumps(p) for p in plans.values()}) > 1  # seeds deal other folds
    for seed in ("0", "1", "2"):
        plan, result = folds("--seed", "3", "--valid-seed", seed)
        assert plan == plans[seed]
        assert (result["seed"], result["valid_seed"]) == (3, int(seed))
