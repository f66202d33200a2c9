import numpy as np
import pytest
import torch

from graphcost.bench.scale import (
    ScaleResult,
    format_scale,
    growth_exponent,
    make_graph_file,
    measure,
)
from graphcost.data.synthetic import layout_runtime, make_large_layout_graph
from graphcost.formats import read_graph
from graphcost.formats.validate import validate_graph

torch.set_num_threads(1)


def test_large_generator_is_valid_and_plants_the_same_runtime_function(tmp_path):
    g = make_large_layout_graph(np.random.default_rng(0), 2000, 64, 50, noise=0.0,
                                config_file=tmp_path / "cfg.npy")
    assert isinstance(g.node_config_feat, np.memmap)
    validate_graph(g, "large", deep=True)
    assert (g.edge_index[:, 1] < g.edge_index[:, 0]).all()  # topological order
    expected = layout_runtime(g.node_feat, g.edge_index, g.node_config_ids,
                              np.asarray(g.node_config_feat), np.random.default_rng(1), 0.0)
    np.testing.assert_allclose(g.config_runtime, expected)


def test_growth_exponent_recovers_a_power_law():
    n = np.array([1e3, 1e4, 1e5])
    assert growth_exponent(n, 3 * n ** 1.5) == pytest.approx(1.5)
    assert np.isnan(growth_exponent([10.0], [1.0]))


def test_measure_reports_every_mode_or_skips_over_budget(tmp_path):
    path = make_graph_file(tmp_path, 400, 40)
    assert read_graph(path).num_configs == 40
    gst = measure(path, "gst", configs=8, steps=1, segment_size=100)
    assert gst["seconds_per_step"] > 0 and gst["nodes_trained"] == 400
    exact = measure(path, "gst-exact", configs=8, steps=1, segment_size=100)
    assert exact["mode"] == "gst-exact" and exact["nodes_trained"] == 400
    pruned = measure(path, "pruned", configs=8, steps=1)
    assert pruned["nodes_trained"] < 400
    skipped = measure(path, "full", configs=8, steps=1, memory_budget="1M")
    assert "mode=gst" in skipped["skipped"]
    text = format_scale(ScaleResult(rows=[gst, pruned, skipped],
                                    growth={"gst": {"peak_rss": 0.1, "seconds_per_step": 0.2}}))
    assert "skipped" in text and "k=0.10" in text


def test_peak_rss_is_the_runs_own_and_grows_as_the_memory_model_says(tmp_path):
    """Each measurement in a fresh process (as `bench scale` runs them): 16× the configs
    per full-graph step must raise the reported peak RSS by at least half of what
    `train.memory.full_step_bytes` predicts for the extra activations (measured: 466 MB
    against 473 MB predicted at 1500 nodes). (It once checked only peak RSS > 0, read in
    the test process, whose high-water mark any earlier test sets.)"""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from graphcost.models.ranker import RankerSettings
    from graphcost.train.memory import full_step_bytes

    nodes, few, many = 1000, 2, 32
    path = make_graph_file(tmp_path, nodes, many)
    pools = {c: ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"))
             for c in (few, many)}  # one process each, both at once
    try:
        runs = {c: pool.submit(measure, path, "full", c, 1, 1000, "off", 1)
                for c, pool in pools.items()}
        rss = {c: run.result()["peak_rss_mb"] for c, run in runs.items()}
    finally:
        for pool in pools.values():
            pool.shutdown()
    d = RankerSettings().hidden  # `measure` trains the default ranker
    extra = full_step_bytes(nodes, many, d, 3) - full_step_bytes(nodes, few, d, 3)
    predicted_mb = extra / 2**20
    assert rss[many] - rss[few] > 0.5 * predicted_mb, (rss, predicted_mb)
    assert rss[many] - rss[few] < 2.0 * predicted_mb, (rss, predicted_mb)
