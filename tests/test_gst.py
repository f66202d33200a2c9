import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from graphcost.cli import main
from graphcost.data.features import FeatureTransform
from graphcost.data.synthetic import make_layout_graph, make_tile_graph, write_collection
from graphcost.models import Model, score_graph
from graphcost.models.base import collate
from graphcost.models.segments import GST_SEGMENT_SIZE, segment_bounds, split_segments
from graphcost.stats import kendall_tau
from graphcost.train import TrainSettings, fit
from graphcost.train.history import EmbeddingTable, fresh_weight, stale_sum
from graphcost.train.memory import MemoryBudgetError, memory_budget_bytes
from graphcost.train.segment_steps import GstItem, encode_fresh, fresh_segments

torch.set_num_threads(1)


def layout_split(seed: int, count: int, prefix: str, nodes: int = 160):
    rng = np.random.default_rng(seed)
    return [make_layout_graph(rng, num_nodes=nodes, num_configs=40, name=f"{prefix}{i}")
            for i in range(count)]


def gst_settings(**kw) -> TrainSettings:
    base = dict(mode="gst", epochs=2, steps_per_epoch=3, graphs_per_batch=2,
                configs_per_graph=8, head_finetune_epochs=1, progress=False, seed=3)
    return TrainSettings(**{**base, **kw})


# ---------------------------------------------------------------- segments


def test_segments_cover_the_graph_and_cut_at_nearby_computation_starts():
    b = segment_bounds(1000, np.array([0, 230, 480, 990]), 250)
    assert b[0] == 0 and b[-1] == 1000 and np.all(np.diff(b) > 0)
    assert 230 in b and 480 in b  # cuts at 250 and 500 moved to the computation starts
    assert list(segment_bounds(100, np.array([0]), 250)) == [0, 100]


def test_segments_own_every_node_once_and_take_their_halo_from_outside():
    g = layout_split(0, 1, "g", nodes=200)[0]
    gt = Model("ranker", "layout", prune_hops=-1).build(FeatureTransform.fit([g])).prepare(g)
    plain, haloed = split_segments(gt, 50), split_segments(gt, 50, halo=2)
    assert len(plain) == len(haloed) == 4
    assert all(p.x.shape[0] == p.own_nodes for p in plain.parts)
    assert sum(p.own_nodes for p in haloed.parts) == 200
    assert sum(p.own_config_nodes for p in haloed.parts) == g.node_config_ids.size
    assert haloed.config_share.sum() == pytest.approx(1.0)
    edges = {tuple(e) for e in gt.edge_index.t().tolist()}
    for s, part in enumerate(haloed.parts):
        lo, hi = int(haloed.bounds[s]), int(haloed.bounds[s + 1])
        torch.testing.assert_close(part.x[:part.own_nodes], gt.x[lo:hi])
        assert part.x.shape[0] > part.own_nodes  # edges cross every cut: there is a halo
        local = [tuple(e) for e in part.edge_index.t().tolist()]
        assert len(local) == len(set(local))  # no edge twice
        # the edges among the segment's own nodes (which come first) are the graph's
        own = {(u - lo, v - lo) for u, v in edges if lo <= u < hi and lo <= v < hi}
        assert {(u, v) for u, v in local if u < part.own_nodes and v < part.own_nodes} == own
        assert part.config_nodes[:part.own_config_nodes].max() < part.own_nodes
    capped = split_segments(gt, 50, halo=10)
    assert all(p.x.shape[0] - p.own_nodes <= 50 for p in capped.parts)


def test_segments_with_their_halo_sum_to_the_whole_graph_embedding():
    """With a halo as deep as the receptive field every node ends in its whole-graph
    state, so the share-weighted segment embeddings sum to the whole graph's (the
    ranker's max part, a weighted mean of maxima, is switched off); without it, not.
    (Segments of 100 nodes, so that no halo reaches its cap of 100 nodes.)"""
    g = layout_split(0, 1, "g", nodes=400)[0]
    ids = np.array([0, 3, 7])
    sums = {}
    for halo in (-1, 0):
        torch.manual_seed(0)
        m = Model("ranker", "layout", layers=3, prune_hops=-1, segment_halo=halo)
        m.build(FeatureTransform.fit([g]))
        net = m.net.eval()
        with torch.no_grad():
            d = net.s.hidden
            net.pool.weight[:, d:2 * d] = 0.0
        gt = m.prepare(g)
        segs = split_segments(gt, 100, net.segment_halo)
        assert len(segs) == 4 and all(p.x.shape[0] - p.own_nodes < 100 for p in segs.parts)
        with torch.no_grad():
            whole = net.encode_segment(collate([(gt, ids)]))
            sums[halo] = (segs.encode(net, ids), whole)
    torch.testing.assert_close(*sums[-1], atol=1e-4, rtol=1e-4)
    assert not torch.allclose(*sums[0], atol=1e-3)


# ---------------------------------------------------------------- embedding table


def test_table_tracks_staleness_is_memory_mapped_and_survives_reopening(tmp_path):
    t = EmbeddingTable(tmp_path, [(5, 3), (4, 2)], dim=6)
    assert isinstance(t.emb, np.memmap) and isinstance(t.written, np.memmap)
    assert (tmp_path / "embeddings.npy").stat().st_size >= (5 * 3 + 4 * 2) * 6 * 4
    emb, written = t.read(0, np.array([1, 4]))
    assert emb.shape == (2, 3, 6) and (written == -1).all()
    t.write(0, np.array([1, 4]), 2, np.ones((2, 6)), epoch=1)
    t.write(1, np.array([0]), 0, np.full((1, 6), 5.0), epoch=3)
    age = t.age(0, np.array([1, 4, 0]), epoch=4)
    assert age[:2, 2].tolist() == [3, 3] and age[2].tolist() == [-1, -1, -1]
    assert (t.read(1, np.array([0]))[0][0, 0] == 5.0).all()  # graphs do not overlap
    t.close()

    again = EmbeddingTable(tmp_path, [(5, 3), (4, 2)], dim=6, resume=True)
    assert (again.read(0, np.array([4]))[0][0, 2] == 1.0).all()
    assert again.forget_after(2) == 1  # the epoch-3 entry came after the checkpoint
    assert again.read(1, np.array([0]))[1][0, 0] == -1
    again.close()
    fresh = EmbeddingTable(tmp_path, [(5, 3)], dim=6, resume=True)  # other shapes: new table
    assert (fresh.read(0, np.array([4]))[1] == -1).all()
    fresh.write(0, np.array([4]), 0, np.ones((1, 6)), epoch=1)
    fresh.close()
    (tmp_path / "table.json").write_text('{"shapes": [[5, ')  # damaged: made anew, no traceback
    damaged = EmbeddingTable(tmp_path, [(5, 3)], dim=6, resume=True)
    assert (damaged.read(0, np.array([4]))[1] == -1).all()


def test_stale_dropout_drops_segments_alike_for_all_configs_and_up_weights_the_fresh_one():
    rng = np.random.default_rng(0)
    share = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    scale = np.arange(1, 5, dtype=np.float32)  # config c's entries are (c + 1) · share
    stale = torch.from_numpy(np.broadcast_to(scale[:, None, None] * share[None, :, None],
                                             (4, 4, 3)).copy())
    draws = torch.stack([stale_sum(stale, 2, 0.5, rng) for _ in range(4000)])
    kept = draws[..., 0] / torch.from_numpy(scale)  # share of stale segments kept, per config
    # one draw per segment for all configs of the graph: every config keeps the same ones
    torch.testing.assert_close(kept, kept[:, :1].expand_as(kept))
    values = np.unique(kept.numpy())  # sums of unscaled shares: 0 … 0.7 in steps of 0.1
    assert values.max() <= 0.7 + 1e-5 and np.allclose(values * 10, np.round(values * 10),
                                                      atol=1e-3)
    assert abs(float(kept.mean()) - 0.5 * 0.7) < 0.01  # each stale entry kept with 1 − p
    # the fresh segment is up-weighted by what is expected dropped: total weight 1 on average
    up = fresh_weight(share, [2], 0.5)
    assert up * 0.3 + float(kept.mean()) == pytest.approx(1.0, abs=0.01)
    assert fresh_weight(np.full(5, 0.2), [0], 0.5) == pytest.approx(1 + 0.5 * 4)  # 1 + p(S − 1)
    assert fresh_weight(share, [0, 1, 2, 3], 0.5) == 1.0 and fresh_weight(share, [2], 0.0) == 1.0
    torch.testing.assert_close(stale_sum(stale, 2, 0.0, rng), stale.sum(1) - stale[:, 2])


def test_replayed_segments_give_the_exact_whole_graph_gradient():
    """Back-propagating every segment through checkpointed passes (one segment's memory)
    must give the same gradient as one autograd graph over all segments, dropout included."""
    g = layout_split(0, 1, "g", nodes=200)[0]
    torch.manual_seed(0)
    # no rule underneath: its zero-started head would leave the encoder without a gradient
    m = Model("ranker", "layout", dropout=0.3, prior="").build(FeatureTransform.fit([g]))
    net = m.net.train()
    gt = m.prepare(g)
    item = GstItem(gt, np.arange(gt.num_configs), split_segments(gt, 50))
    assert len(item.segments) >= 3
    fresh = [fresh_segments(np.random.default_rng(0), len(item.segments), 0)]
    ids, mask = [np.arange(6)], torch.ones(1, 6, dtype=torch.bool)
    target = torch.randn(1, 6)

    def grads() -> dict[str, torch.Tensor]:
        out = {n: q.grad.clone() for n, q in net.named_parameters() if q.grad is not None}
        net.zero_grad(set_to_none=True)
        return out

    torch.manual_seed(1)
    h, parts = encode_fresh(net, [item], fresh, ids, torch.device("cpu"))
    assert h.requires_grad and len(parts[0]) == len(item.segments)
    ((net.score_embedding(h, mask) - target) ** 2).sum().backward()
    replayed = grads()

    torch.manual_seed(1)
    whole = sum(item.segments.encode(net, ids[0], [s]) for s in range(len(item.segments)))
    ((net.score_embedding(whole, mask) - target) ** 2).sum().backward()
    direct = grads()
    assert set(replayed) == set(direct) and any(n.startswith("convs.") for n in direct)
    for n in direct:
        torch.testing.assert_close(replayed[n], direct[n], atol=1e-5, rtol=1e-4, msg=n)


def test_fresh_segments_samples_k_distinct_segments_or_all():
    rng = np.random.default_rng(0)
    assert fresh_segments(rng, 5, 0).tolist() == [0, 1, 2, 3, 4]
    assert fresh_segments(rng, 3, 7).tolist() == [0, 1, 2]
    two = fresh_segments(rng, 9, 2)
    assert two.size == 2 and two[0] < two[1] <= 8
    assert fresh_segments(rng, 9, 1).size == 1


# ---------------------------------------------------------------- training


def test_gst_training_learns_and_the_head_phase_trains_only_the_head():
    train_graphs, valid, test = (layout_split(0, 10, "tr"), layout_split(1, 2, "va"),
                                 layout_split(2, 6, "te"))
    s = gst_settings(epochs=6, steps_per_epoch=10, configs_per_graph=16, graphs_per_batch=4,
                     head_finetune_epochs=2, patience=100)
    model = Model("ranker", "layout", hidden=32, segment_size=40)  # held-out τ 0.48 (default
    # width: 0.52, 2x time)
    result = fit(model, train_graphs, valid, s)
    assert model.net.s.segment_size == 40  # prediction sums segments as training did
    assert [h["phase"] for h in result["history"]] == ["gst"] * 6 + ["head"] * 2
    assert result["before_head"] is not None
    tau = np.mean([kendall_tau(score_graph(model, g), g.target) for g in test])
    print(f"GST held-out tau {tau:.3f}, before head fine-tuning "
          f"{result['before_head']['valid_tau']:.3f}")
    assert tau > 0.3


@pytest.mark.parametrize("fresh", [0, 1, 2])  # every segment; the paper's step; two
def test_resume_restores_the_table_and_matches_an_uninterrupted_run(tmp_path, fresh):
    train_graphs, valid = layout_split(0, 4, "tr"), layout_split(1, 1, "va")
    s = gst_settings(epochs=2, head_finetune_epochs=1, gst_fresh_segments=fresh)
    whole = fit(Model("ranker", "layout", hidden=16, segment_size=40), train_graphs, valid, s,
                tmp_path / "w")
    killed = fit(Model("ranker", "layout", hidden=16, segment_size=40), train_graphs, valid,
                 gst_settings(epochs=2, head_finetune_epochs=1, stop_after_epoch=2,
                              gst_fresh_segments=fresh), tmp_path / "k")
    assert killed["stopped"]
    ckpt = torch.load(tmp_path / "k" / "last.pt", weights_only=False)
    after_main = ckpt["best_state"]["state_dict"]  # the head phase starts from the best weights
    resumed_model = Model("ranker", "layout", hidden=16, segment_size=40)
    resumed = fit(resumed_model, train_graphs, valid, s, tmp_path / "k", resume=True)
    for a, b in zip(whole["history"], resumed["history"], strict=True):
        assert a["phase"] == b["phase"]
        assert abs(a["train_loss"] - b["train_loss"]) < 1e-6
    for name in ("embeddings.npy", "written.npy"):
        np.testing.assert_array_equal(np.load(tmp_path / "w" / "gst_table" / name),
                                      np.load(tmp_path / "k" / "gst_table" / name))
    final = torch.load(tmp_path / "k" / "last.pt", weights_only=False)["model"]["state_dict"]
    uninterrupted = torch.load(tmp_path / "w" / "last.pt", weights_only=False)["model"]
    for n, w in uninterrupted["state_dict"].items():  # the same weights at the end
        torch.testing.assert_close(final[n], w, rtol=0, atol=1e-6, msg=n)
    # the head phase changed the head (and the rule's weight) and nothing else
    head = {n for n in final if n.startswith(("attn.", "head.", "prior."))}
    assert head
    for n in set(final) - head:
        torch.testing.assert_close(final[n], after_main[n], msg=f"{n} changed in the head phase")
    assert any(not torch.equal(final[n], after_main[n]) for n in head)


def test_memory_budget_refuses_full_graph_training_and_suggests_gst():
    graphs = layout_split(0, 2, "tr")
    s = TrainSettings(epochs=1, steps_per_epoch=1, progress=False, memory_budget="1M")
    with pytest.raises(MemoryBudgetError, match=r"mode=gst.*prune"):
        fit(Model("ranker", "layout", prune_hops=-1), graphs, None, s)
    # a tile ranker has neither segments nor pruning: neither is offered to it
    with pytest.raises(MemoryBudgetError) as refused:
        fit(Model("ranker", "tile"), [make_tile_graph(np.random.default_rng(0), 400, 30)],
            None, s)
    assert "mode=gst" not in str(refused.value) and "prune" not in str(refused.value)
    assert "trains whole graphs only" in str(refused.value)
    assert memory_budget_bytes("8G") == 8 << 30 and memory_budget_bytes("off") is None
    assert 0 < memory_budget_bytes("50%") < memory_budget_bytes("100%")
    # GST is not refused: its memory is one segment's
    fit(Model("ranker", "layout", prune_hops=-1, segment_size=40), graphs, None,
          gst_settings(epochs=1, steps_per_epoch=1, head_finetune_epochs=0, memory_budget="1M"))


def test_gst_gives_a_model_without_a_segment_size_the_default():
    model = Model("ranker", "layout", hidden=8, opcode_dim=4)
    fit(model, layout_split(0, 2, "t", nodes=60), None,
        gst_settings(epochs=1, steps_per_epoch=1, head_finetune_epochs=0))
    assert model.settings.segment_size == GST_SEGMENT_SIZE == model.net.s.segment_size


def test_cli_trains_with_gst(tmp_path):
    write_collection(tmp_path / "data", splits={"train": 3, "valid": 1}, num_nodes=120,
                     num_configs=20)
    coll = tmp_path / "data" / "npz" / "layout" / "synth" / "random"
    r = CliRunner().invoke(main, ["train", str(coll), "--model", "ranker", "--out",
                                  str(tmp_path / "run"), "--epochs", "1", "--set", "mode='gst'",
                                  "--set", "segment_size=40", "--set", "head_finetune_epochs=1",
                                  "--set", "progress=False", "--set", "hidden=16"])
    assert r.exit_code == 0, r.output
    loaded = Model.load(tmp_path / "run" / "model.pt")
    assert loaded.settings.segment_size == 40
    assert (tmp_path / "run" / "gst_table" / "embeddings.npy").exists()


def test_cli_refuses_over_budget_training_with_a_clear_message(tmp_path):
    write_collection(tmp_path / "data", splits={"train": 2}, num_nodes=120, num_configs=20)
    coll = tmp_path / "data" / "npz" / "layout" / "synth" / "random"
    r = CliRunner().invoke(main, ["train", str(coll), "--out", str(tmp_path / "run"),
                                  "--set", "memory_budget='1M'", "--set", "progress=False"])
    assert r.exit_code == 2  # a user error (docs/design.md: one error path, exit 2)
    assert "Error:" in r.output and "mode=gst" in r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "run" / "last.pt").exists()


def test_bench_gst_compares_variants_with_full_training_on_a_collection(tmp_path):
    write_collection(tmp_path / "data", splits={"train": 3, "valid": 1, "test": 3},
                     num_nodes=100, num_configs=12)
    coll = tmp_path / "data" / "npz" / "layout" / "synth" / "random"
    out = tmp_path / "gst.json"
    r = CliRunner().invoke(main, ["bench", "gst", "--data", str(coll), "--epochs", "1",
                                  "--gst-epochs", "2", "--segment-size", "30", "--repeats", "2",
                                  "--variants", "full,gst,gst-nohead", "--json", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    full, gst, nohead = result["rows"]
    assert [full["variant"], gst["variant"], nohead["variant"]] == ["full", "gst", "gst-nohead"]
    assert full["segments"] == 1 and gst["segments"] >= 2
    assert full["epochs"] == 1 and gst["epochs"] == nohead["epochs"] == 2
    assert "1 epochs (2 for GST)" in r.output and "seeds 0–1" in r.output
    # each graph's τ is the mean over the two trainings (seeds 0 and 1)
    assert [run["seed"] for run in gst["runs"]] == [0, 1]
    np.testing.assert_allclose(gst["taus"], np.mean([run["taus"] for run in gst["runs"]], 0))
    assert gst["seed_taus"] == pytest.approx([np.mean(run["taus"]) for run in gst["runs"]])
    assert len(gst["taus"]) == 3 and gst["lo"] <= gst["tau"] <= gst["hi"]
    assert gst["diff"][0] == pytest.approx(np.mean(np.subtract(gst["taus"], full["taus"])))
    assert gst["inside_full_ci"] == (full["lo"] <= gst["tau"] <= full["hi"])
    assert gst["head_effect"][0] == pytest.approx(gst["tau"] - nohead["tau"])
    assert "head fine-tuning effect on gst" in r.output

    bad = CliRunner().invoke(main, ["bench", "gst", "--variants", "full-nohead"])
    assert bad.exit_code == 2 and "no head fine-tuning" in bad.output
    tile = write_collection(tmp_path / "tiles", kind="tile", splits={"train": 1})
    bad = CliRunner().invoke(main, ["bench", "gst", "--data", str(tile)])
    assert bad.exit_code == 2 and "layout" in bad.output
