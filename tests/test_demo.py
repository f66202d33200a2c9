"""The main job, shortened: every report file exists and shows the evaluation's numbers."""

import json

import numpy as np
from click.testing import CliRunner

from graphcost.cli import main
from graphcost.data.synthetic import write_collection
from graphcost.models.registry import model_names


def test_quick_demo_writes_a_consistent_report(tmp_path):
    data = tmp_path / "data"
    write_collection(data, "layout", source="mini", splits={"train": 4, "valid": 2, "test": 3},
                     num_nodes=40, num_configs=12)
    result = CliRunner().invoke(main, ["demo", "--quick", "--data", str(data),
                                       "--out", str(tmp_path / "demo")])
    assert result.exit_code == 0, result.output
    report = tmp_path / "demo" / "report"
    for name in ("index.html", "summary.json", "layout_mini_random_learning.png",
                 "layout_mini_random_per_graph_tau.png", "layout_mini_random_ranker_scatter.png"):
        assert (report / name).stat().st_size > 0, name
    summary = json.loads((report / "summary.json").read_text())
    models = [r["model"] for r in summary]
    assert models[:2] == ["ranker", "resgcn"]
    runs = tmp_path / "demo" / "runs" / "layout_mini_random"
    fitted = {m: json.loads((runs / m / "metrics.jsonl").read_text())["valid_score"]
              for m in model_names("layout", learned=False)}
    assert models[2:] == [max(fitted, key=fitted.get)]  # the best heuristic on validation
    page = (report / "index.html").read_text()
    for row in summary:
        run = tmp_path / "demo" / "runs" / "layout_mini_random" / row["model"]
        evaluation = json.loads((run / "evaluation_test.json").read_text())
        assert evaluation["split"] == "test" and len(evaluation["graphs"]) == 3
        tau = evaluation["summary"]["kendall_tau"]
        assert row["kendall_tau"] == tau
        assert f"{tau['mean']:.3f} [{tau['lo']:.3f}, {tau['hi']:.3f}]" in page
        assert f"{tau['mean']:8.3f}" in result.output  # the printed table
        assert len(evaluation["samples"]) == 3
        epochs = 1 if row["model"] in fitted else 2  # a heuristic is fitted once
        assert len((run / "metrics.jsonl").read_text().splitlines()) == epochs
    scores = {row["model"]: json.loads((runs / row["model"] / "evaluation_test.json")
                                       .read_text())["graphs"] for row in summary}
    for other in models[1:]:  # the ranker paired with the baseline and the best heuristic
        diff = np.mean([scores["ranker"][g]["score"] - scores[other][g]["score"]
                        for g in scores["ranker"]])
        assert f"ranker − {other:14} {diff:.4f} [" in result.output


def test_report_command_on_a_training_run(tmp_path):
    data = tmp_path / "data"
    coll = write_collection(data, "tile", source="mini", splits={"train": 4, "valid": 2},
                            num_nodes=15, num_configs=10)
    run = tmp_path / "run"
    trained = CliRunner().invoke(main, ["train", str(coll), "--model", "mlp", "--out", str(run),
                                        "--epochs", "2", "--set", "progress=False"])
    assert trained.exit_code == 0, trained.output
    result = CliRunner().invoke(main, ["report", str(run)])
    assert result.exit_code == 0, result.output
    evaluation = json.loads((run / "evaluation_valid.json").read_text())  # no test split
    summary = json.loads((run / "report" / "summary.json").read_text())
    assert summary[0]["score"] == evaluation["summary"]["score"]
    assert (run / "report" / "tile_mini_learning.png").exists()


def test_demo_summary_of_the_stored_crossval_names_every_bundled_collection():
    from graphcost.data.collection import find_collections
    from graphcost.data.inspect import sample_root
    from graphcost.demo import crossval_summary
    path = sample_root() / "crossval.json"
    stored = json.loads(path.read_text())
    text = crossval_summary(path)
    bundled = set(find_collections(sample_root() / "npz"))
    assert {c["collection"] for c in stored["comparisons"]} == bundled
    heuristics = stored["heuristics"]["comparisons"]  # the ranker against what needs no learning
    assert {c["collection"] for c in heuristics} == bundled
    for c in stored["comparisons"] + heuristics:
        # each line carries the stored paired difference, over the graphs both scored
        assert (f"{c['against']['model']} {c['against']['mean']['mean']:.3f}: difference "
                f"{c['difference']['mean']:+.3f}") in text
        assert c["graphs"] == c["difference"]["n"] > 0
    assert {c["against"]["model"] for c in heuristics} <= set(model_names(learned=False))
    assert "graphcost crossval" in text and "graphcost compare" in text
