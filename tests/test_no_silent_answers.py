"""Wrong answers that used to pass silently (issue 18), each now an error or a message."""

import logging

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from graphcost.cli import main
from graphcost.data.collection import open_collection
from graphcost.data.synthetic import make_layout_graph, write_collection
from graphcost.errors import UserError
from graphcost.eval.metrics import evaluate_graphs
from graphcost.eval.submission import read_submission
from graphcost.models import ConfigScorer, Model
from graphcost.models.checkpoint import load_checkpoint
from graphcost.stats import kendall_tau, opa
from graphcost.train import TrainSettings, fit

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tile(tmp_path_factory):
    """A tile collection and a small model trained on its train split."""
    root = tmp_path_factory.mktemp("tile")
    write_collection(root, kind="tile", source="xla", splits={"train": 3, "valid": 1, "test": 2},
                     num_nodes=15, num_configs=12)
    coll = root / "npz" / "tile" / "xla"
    model = Model("mlp", "tile", hidden=8)
    fit(model, list(open_collection(coll).graphs("train")), None,
        TrainSettings(epochs=1, progress=False))
    model.save(root / "model.pt")
    return root, coll, model


def _strip_runtimes(path, how: str) -> None:
    a = dict(np.load(path))
    for key in ("config_runtime", "config_runtime_normalizers"):
        if how == "zeros":
            a[key] = np.zeros_like(a[key])
        else:
            del a[key]
    path.unlink()
    np.savez(path, **a)


def test_submit_ranks_test_files_without_runtimes_and_refuses_a_csv_missing_a_graph(
        tile, tmp_path):
    root, coll, _ = tile
    data = tmp_path / "data"
    import shutil

    shutil.copytree(root / "npz", data / "npz")
    tests = sorted((data / "npz" / "tile" / "xla" / "test").glob("*.npz"))
    _strip_runtimes(tests[0], "zeros")  # as the published test split
    _strip_runtimes(tests[1], "absent")
    out = tmp_path / "sub.csv"
    args = ["submit", str(data), "-m", f"tile:xla={root / 'model.pt'}", "--out", str(out)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert sorted(read_submission(out, {f"tile:xla:{p.stem}": 12 for p in tests})) == \
        sorted(f"tile:xla:{p.stem}" for p in tests)
    out.unlink()
    tests[1].write_bytes(tests[1].read_bytes()[:200])  # now unreadable: no row possible
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and tests[1].name in r.output and "lack" in r.output
    assert not out.exists()


def test_evaluate_says_which_split_it_scored_and_warns_on_valid(tile, tmp_path):
    root, coll, _ = tile
    cli = CliRunner()
    r = cli.invoke(main, ["evaluate", str(root / "model.pt"), str(coll)])
    assert r.exit_code == 0, r.output
    assert "scored the test split (held out" in r.output and "tile:xla test" in r.output
    r = cli.invoke(main, ["evaluate", str(root / "model.pt"), str(coll), "--split", "valid"])
    assert r.exit_code == 0 and "warning: valid is the split early stopping chose" in r.output
    import shutil

    copy = tmp_path / "c"
    shutil.copytree(coll, copy)
    for p in (copy / "test").glob("*.npz"):
        _strip_runtimes(p, "zeros")
    r = cli.invoke(main, ["evaluate", str(root / "model.pt"), str(copy)])
    assert r.exit_code == 0, r.output
    assert "scored the valid split (test has no usable runtimes" in r.output
    r = cli.invoke(main, ["evaluate", str(root / "model.pt"), str(copy), "--split", "test"])
    assert r.exit_code == 2 and "no graph of" in r.output and "config_runtime" in r.output


def test_nan_scores_are_an_error_naming_the_graph(tile):
    _, coll, model = tile
    graph = next(open_collection(coll).graphs("test"))
    broken = Model.load(tile[0] / "model.pt")
    with torch.no_grad():
        next(broken.net.parameters()).fill_(float("nan"))
    with pytest.raises(UserError, match=f"graph {graph.name}: .*NaN.*diverged"):
        ConfigScorer(broken, graph).scores()
    runtime = np.array([1.0, 2.0, 3.0])
    for metric in (kendall_tau, opa):
        with pytest.raises(ValueError, match="NaN"):
            metric(np.array([0.1, np.nan, 0.3]), runtime)
    with pytest.raises(ValueError, match="graph g1"):
        evaluate_graphs("layout", {"g0": runtime, "g1": np.array([np.nan, 1.0, 2.0])},
                        {"g0": runtime, "g1": runtime})


def test_opcodes_outside_the_embedding_are_counted_in_a_warning(caplog):
    g = make_layout_graph(np.random.default_rng(0), num_nodes=40, num_configs=4, name="op")
    g.node_opcode[:3] = [130, 200, 200]
    model = Model("ranker", "layout", hidden=16)
    from graphcost.data.features import FeatureTransform

    model.build(FeatureTransform.fit([g]))
    with caplog.at_level(logging.WARNING, logger="graphcost"):
        gt = model.prepare(g)
    assert "graph op: 3 nodes have opcode ids outside 0..127 (130, 200)" in caplog.text
    assert (gt.opcode[:3] == 0).all()


def test_checkpoints_load_with_weights_only_and_code_in_one_is_refused(tile, tmp_path):
    root, _, model = tile
    assert load_checkpoint(root / "model.pt")["name"] == "mlp"

    state = load_checkpoint(root / "model.pt")
    state["settings"]["from_the_future"] = 1
    torch.save(state, tmp_path / "newer.pt")
    with pytest.raises(UserError, match="newer.pt: unknown mlp setting in the checkpoint "
                                        "'from_the_future'"):
        Model.load(tmp_path / "newer.pt")

    evil = tmp_path / "evil.pt"
    torch.save({"format": "graphcost-model/1", "payload": np.random.default_rng(0)}, evil)
    with pytest.raises(UserError, match="evil.pt: not a graphcost checkpoint that loads "
                                        "safely with weights_only=True"):
        Model.load(evil)


def test_early_stopping_says_when_and_why(tile, tmp_path):
    root, coll, _ = tile
    r = CliRunner().invoke(main, ["train", str(coll), "--model", "mlp", "--out",
                                  str(tmp_path / "run"), "--epochs", "10", "--set", "lr=1e-12",
                                  "--set", "warmup_steps=0", "--set", "patience=2",
                                  "--set", "hidden=8", "--set", "progress=false",
                                  "--set", "valid_resample=false"])  # the same configs
    assert r.exit_code == 0, r.output
    assert "early stopping after epoch 3 of 10: 2 epochs without a better validation " \
           "score than epoch 1's (patience=2); the model is epoch 1's" in r.output



def test_evaluate_scores_exactly_the_official_eval_indices(tile, tmp_path):
    """`--eval-indices` (the official {graph: [config ids]} JSON) scores those configs
    and no others; a graph the file lacks is an error, not a silently full graph."""
    import json

    from graphcost.models import score_graph

    root, coll, model = tile
    graph = next(open_collection(coll).graphs("valid"))
    ids = [7, 0, 3, 11, 5]
    (tmp_path / "idx.json").write_text(json.dumps({graph.name: ids}))
    out = tmp_path / "eval.json"
    r = CliRunner().invoke(main, ["evaluate", str(root / "model.pt"), str(coll), "--split",
                                  "valid", "--eval-indices", str(tmp_path / "idx.json"),
                                  "--json", str(out)])
    assert r.exit_code == 0, r.output
    row = json.loads(out.read_text())["graphs"][graph.name]
    chosen = np.sort(ids)
    assert row["configs"] == 5
    assert row["kendall_tau"] == pytest.approx(
        kendall_tau(score_graph(model, graph, chosen), graph.target[chosen]))
    (tmp_path / "other.json").write_text(json.dumps({"another_graph": ids}))
    r = CliRunner().invoke(main, ["evaluate", str(root / "model.pt"), str(coll), "--split",
                                  "valid", "--eval-indices", str(tmp_path / "other.json")])
    assert r.exit_code == 2 and f"graph {graph.name} has no entry" in r.output


def test_resume_without_a_checkpoint_says_it_starts_afresh(tile, tmp_path):
    _, coll, _ = tile
    r = CliRunner().invoke(main, ["train", str(coll), "--model", "mlp", "--out",
                                  str(tmp_path / "run"), "--resume", "--epochs", "1",
                                  "--set", "hidden=8", "--set", "progress=false"])
    assert r.exit_code == 0 and "--resume: no " in r.output and "a new run starts" in r.output
