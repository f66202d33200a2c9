"""DDP training: 2 CPU processes (gloo) compute what 1 process computes with the same batch."""

import json
import os
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from graphcost.data.synthetic import make_layout_graph, write_collection
from graphcost.models import Model, score_graph
from graphcost.models.losses import LOSSES, RankingLoss
from graphcost.train import TrainSettings, fit
from graphcost.train.distributed import NORMALIZERS, Context, check_batch_split

# 3 losses mixed, so every normaliser is exercised; graphs of 5..20 configs, so shards of
# one step hold unequal numbers of configs (padding, masks)
SETTINGS = dict(epochs=3, steps_per_epoch=3, graphs_per_batch=4, configs_per_graph=8,
                warmup_steps=2, seed=3, loss="hinge:1,listmle:0.5,mse:0.2")
MODEL = dict(hidden=16, dropout=0.0, layers=2)


def graphs(seed: int, count: int, prefix: str) -> list:
    rng = np.random.default_rng(seed)
    return [make_layout_graph(rng, num_nodes=40, num_configs=int(rng.integers(5, 21)),
                              name=f"{prefix}{i}") for i in range(count)]


def data():
    return graphs(0, 7, "tr"), graphs(1, 3, "va")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, ports: list[int], root: str) -> None:
    """One spawned rank: a whole run, then a killed run and its resumption.

    Rank r > 0 gets its own run directories (as on another machine without a shared
    disk): they must stay absent. stdout/stderr go to a per-rank log.
    """
    os.environ.update(MASTER_ADDR="127.0.0.1", RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    base = Path(root)
    sys.stdout = sys.stderr = open(base / f"rank{rank}.log", "w")  # noqa: SIM115
    tr, va = data()
    suffix = "" if rank == 0 else f"-rank{rank}"
    jobs = [("whole", {}, False), ("split", {"stop_after_epoch": 1}, False),
            ("split", {}, True)]
    for i, (name, extra, resume) in enumerate(jobs):
        os.environ["MASTER_PORT"] = str(ports[i])
        model = Model("ranker", "layout", **MODEL)
        result = fit(model, tr, va, TrainSettings(**SETTINGS, **extra),
                       base / f"{name}{suffix}", resume=resume)
        assert not torch.distributed.is_initialized()  # train destroyed its group
        preds = np.concatenate([score_graph(model, g) for g in va]) if not extra else None
        with open(base / f"out-{i}-rank{rank}.json", "w") as f:
            json.dump({"history": [h["train_loss"] for h in result["history"]],
                       "tau": [h["valid_tau"] for h in result["history"]],
                       "preds": None if preds is None else preds.tolist()}, f)
    sys.stdout.flush()


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    mp.spawn(_rank_main, args=(2, [free_port() for _ in range(3)], str(root)), nprocs=2)
    out = {(i, r): json.loads((root / f"out-{i}-rank{r}.json").read_text())
           for i in range(3) for r in range(2)}
    return root, out


def test_two_processes_train_like_one(ddp_run, tmp_path):
    root, out = ddp_run
    torch.set_num_threads(1)
    tr, va = data()
    model = Model("ranker", "layout", **MODEL)
    single = fit(model, tr, va, TrainSettings(**SETTINGS, progress=False), tmp_path / "one")
    one = np.concatenate([score_graph(model, g) for g in va])
    for rank in range(2):
        ddp = out[(0, rank)]
        diff = np.asarray(ddp["preds"]) - one
        # a ranking loss leaves one constant shift of every score free (the output bias
        # gets a ~0 gradient that Adam may scale up); compare scores up to that shift
        centred = np.abs(diff - diff.mean()).max()
        print(f"rank {rank}: max |prediction difference| 1 vs 2 processes: "
              f"{np.abs(diff).max():.2e} raw, {centred:.2e} up to a constant")
        assert centred < 1e-4 and np.abs(diff).max() < 1e-2
        np.testing.assert_allclose(ddp["history"], [h["train_loss"] for h in single["history"]],
                                   atol=1e-5)
        np.testing.assert_allclose(ddp["tau"], [h["valid_tau"] for h in single["history"]],
                                   atol=1e-6)


def test_only_rank_zero_writes(ddp_run):
    root, _ = ddp_run
    assert {p.name for p in (root / "whole").iterdir()} == {"best.pt", "last.pt",
                                                            "metrics.jsonl"}
    assert len((root / "whole" / "metrics.jsonl").read_text().splitlines()) == 3
    assert not list(root.glob("*-rank1"))  # not even created
    assert (root / "rank1.log").read_text() == ""  # no progress bars, no epoch lines
    assert "epoch=1" in (root / "rank0.log").read_text()
    best = Model.load(root / "whole" / "best.pt")
    assert best.name == "ranker"


def test_resume_under_ddp_matches_the_uninterrupted_run(ddp_run):
    root, out = ddp_run
    assert len(out[(1, 0)]["history"]) == 1
    for rank in range(2):
        resumed, whole = out[(2, rank)], out[(0, 0)]
        np.testing.assert_allclose(resumed["history"], whole["history"], atol=1e-6)
        np.testing.assert_allclose(resumed["preds"], whole["preds"], atol=1e-6)
    lines = (root / "split" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == [1, 2, 3]


@pytest.mark.parametrize("spec", ["hinge", "listmle", "mse", "tf-listmle", "tf-mse",
                                  "hinge:1,listmle:0.5,mse:0.2"])
def test_shard_losses_over_global_counts_sum_to_the_batch_loss(spec):
    """What ShardedLoss relies on: loss_r · n_r / n summed over shards is the batch loss."""
    assert set(NORMALIZERS) == set(LOSSES)
    g = torch.Generator().manual_seed(0)
    scores, runtime = torch.randn(5, 9, generator=g), torch.rand(5, 9, generator=g)
    mask = torch.rand(5, 9, generator=g) > 0.3
    mask[:, :2] = True
    loss = RankingLoss(spec)
    whole = loss(scores, runtime, mask)
    for split in ([0, 2, 4], [1, 3]), ([0], [1, 2, 3, 4]):
        total = torch.zeros(())
        for name, w in loss.weights.items():
            part = RankingLoss(name)
            n = sum(NORMALIZERS[name](runtime[r], mask[r]) for r in split)
            for r in split:
                total += w * part(scores[r], runtime[r], mask[r]) \
                    * NORMALIZERS[name](runtime[r], mask[r]) / n
        torch.testing.assert_close(total, whole)


def test_shard_and_unshard_partition_a_list():
    items = list(range(11))
    shards = [Context(rank=r, world=3).shard(items) for r in range(3)]
    assert sorted(sum(shards, [])) == items and [len(s) for s in shards] == [4, 4, 3]
    one = Context()
    assert one.shard(items) is items and one.unshard(items, 11) is items
    assert one.all_mean([1.0, 2.0]) == [1.0, 2.0] and one.all_sum(5) == 5
    net = torch.nn.Linear(2, 2)
    assert one.wrap(net) is net
    with pytest.raises(ValueError, match="graphs_per_batch"):
        check_batch_split(3, 10, 4)


def test_cli_nproc_relaunches_the_same_command_under_torchrun(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from graphcost.cli import main
    from graphcost.train import distributed

    calls = []
    monkeypatch.setattr(distributed, "launch", lambda n, args: calls.append((n, args)) or 0)
    data = str(write_collection(tmp_path / "data", splits={"train": 2}, num_nodes=10,
                                num_configs=4))  # the parent counts its train graphs
    r = CliRunner().invoke(main, ["train", data, "--out", str(tmp_path / "run"),
                                  "--nproc", "2", "--epochs", "3", "--resume", "--set", "lr=0.01"])
    assert r.exit_code == 0, r.output
    assert calls == [(2, ["train", data, "--model", "ranker", "--out",
                          str(tmp_path / "run"), "--device", "cpu", "--seed", "0", "--resume",
                          "--epochs", "3", "--set", "lr=0.01"])]
    monkeypatch.undo()  # the real launch, inside a (pretend) torchrun world
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match="already running under torchrun"):
        distributed.launch(2, ["train"])


# ---------------------------------------------------------------- Graph Segment Training

# 5 train graphs of 4 segments: rank 0 owns graphs 0, 2, 4 and rank 1 graphs 1, 3, so the
# shards of a step are uneven and some steps leave a rank without a graph. Stale dropout
# and dropout off: with them on the ranks would draw torch dropout masks differently.
GST_MODEL = {**MODEL, "segment_size": 40}
GST = dict(mode="gst", epochs=2, steps_per_epoch=3, graphs_per_batch=3,
           configs_per_graph=8, head_finetune_epochs=1, stale_drop_p=0.0, seed=3,
           loss="hinge:1,listmle:0.5")


def gst_data():
    rng = np.random.default_rng(5)
    tr = [make_layout_graph(rng, num_nodes=160, num_configs=30, name=f"tr{i}") for i in range(5)]
    return tr, [make_layout_graph(rng, num_nodes=160, num_configs=30, name="va")]


def _gst_rank_main(rank: int, world: int, ports: list[int], root: str) -> None:
    """One spawned rank: a GST run per step strategy (every segment fresh; one fresh
    segment and the table of historical embeddings)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    base = Path(root)
    sys.stdout = sys.stderr = open(base / f"rank{rank}.log", "w")  # noqa: SIM115
    tr, va = gst_data()
    for fresh, port in zip((0, 1), ports, strict=True):
        os.environ["MASTER_PORT"] = str(port)
        model = Model("ranker", "layout", **GST_MODEL)
        result = fit(model, tr, va, TrainSettings(**GST, gst_fresh_segments=fresh),
                     base / f"gst{fresh}" if rank == 0 else None)
        with open(base / f"gst{fresh}-rank{rank}.json", "w") as f:
            json.dump({"history": [h["train_loss"] for h in result["history"]],
                       "phases": [h["phase"] for h in result["history"]],
                       "stale_age": [h["stale_age"] for h in result["history"]],
                       "tau": [h["valid_tau"] for h in result["history"]],
                       "preds": score_graph(model, va[0]).tolist()}, f)
    sys.stdout.flush()


@pytest.fixture(scope="module")
def gst_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("gst-ddp")
    mp.spawn(_gst_rank_main, args=(2, [free_port() for _ in range(2)], str(root)), nprocs=2)
    return root, {(f, r): json.loads((root / f"gst{f}-rank{r}.json").read_text())
                  for f in (0, 1) for r in range(2)}


@pytest.mark.parametrize("fresh", [0, 1])
def test_gst_in_two_processes_takes_the_steps_of_one(gst_run, tmp_path, fresh):
    root, out = gst_run
    torch.set_num_threads(1)
    tr, va = gst_data()
    model = Model("ranker", "layout", **GST_MODEL)
    single = fit(model, tr, va, TrainSettings(**GST, gst_fresh_segments=fresh, progress=False),
                 tmp_path / "one")
    one = score_graph(model, va[0])
    assert [h["phase"] for h in single["history"]] == ["gst", "gst", "head"]
    for rank in range(2):
        ddp = out[(fresh, rank)]
        assert ddp["phases"] == ["gst", "gst", "head"]
        assert ddp["stale_age"] == [h["stale_age"] for h in single["history"]]  # all ranks'
        np.testing.assert_allclose(ddp["history"], [h["train_loss"] for h in single["history"]],
                                   atol=1e-5)
        np.testing.assert_allclose(ddp["tau"], [h["valid_tau"] for h in single["history"]],
                                   atol=1e-6)
        diff = np.asarray(ddp["preds"]) - one
        print(f"GST fresh={fresh} rank {rank}: max |prediction difference| 1 vs 2 processes "
              f"{np.abs(diff).max():.2e}")
        assert np.abs(diff - diff.mean()).max() < 1e-4 and np.abs(diff).max() < 1e-2


def test_gst_ranks_keep_only_their_own_graphs_in_the_table(gst_run, tmp_path):
    """Rank 0's table (in its run folder) holds rows for graphs 0, 2, 4 only, and has
    written some of each; the one-process table holds every graph's."""
    root, _ = gst_run
    meta = json.loads((root / "gst1" / "gst_table" / "table.json").read_text())
    assert [c * s > 0 for c, s in meta["shapes"]] == [True, False, True, False, True]
    written = np.load(root / "gst1" / "gst_table" / "written.npy")
    sizes = [c * s for c, s in meta["shapes"]]
    assert written.size == sum(sizes)
    assert all((part >= 0).any() for part in np.split(written, np.cumsum(sizes)[:-1])
               if part.size)
    tr, va = gst_data()
    fit(Model("ranker", "layout", **GST_MODEL), tr, va,
        TrainSettings(**GST, gst_fresh_segments=1, progress=False), tmp_path / "one")
    whole = json.loads((tmp_path / "one" / "gst_table" / "table.json").read_text())
    assert all(c * s > 0 for c, s in whole["shapes"])
    assert sum(c * s for c, s in whole["shapes"]) > written.size
