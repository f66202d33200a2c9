"""`graphcost bench gst`: does Graph Segment Training rank as well as full-graph training?

Trains the default ranker on one dataset several ways, each in a fresh spawned process
with the same seed, and scores every model on the held-out (test) graphs:

- `full`: whole graphs, every step;
- `gst`: the GST of the paper, one segment back-propagated per graph and step, the
  others from the historical table (`gst_fresh_segments=1`);
- `gst-exact`: every segment back-propagated, one at a time (`gst_fresh_segments=0`):
  the exact gradient of the segmented model in the memory of one segment;
- a `-nohead` suffix turns the head fine-tuning phase off, so its effect is measured by
  the difference to the same variant with it.

`gst_epochs` gives the GST variants an epoch count of their own: a step that
back-propagates one segment of S sees about 1/S of a full step's gradient signal, so
equal epochs are not an equal budget.

Each row has the mean held-out τ with its bootstrap 95% interval, whether it lies
inside full training's interval, and the paired difference to full training (bootstrap
over the same test graphs, which is much tighter than comparing two intervals). With
`repeats` > 1 every variant is trained once per seed and each test graph's τ averaged
over the seeds first, since retraining alone moves τ by up to ±0.1 (docs/design.md §5).
The dataset is a collection (`data`, e.g. the bundled one) or synthetic layout graphs of
`nodes` nodes, generated alike in every process from the seed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphcost import children
from graphcost.bench import BenchResult
from graphcost.errors import UserError
from graphcost.stats import paired_difference

BASE = {"full": ("full", 1), "gst": ("gst", 1), "gst-exact": ("gst", 0)}


@dataclasses.dataclass
class GstBenchSpec:
    """What every variant trains on and how long."""

    data: str | None = None  # a layout collection; None: synthetic graphs
    nodes: int = 2000  # synthetic: nodes per graph
    graphs: int = 16  # synthetic: train and test graphs (valid: a quarter)
    num_configs: int = 64  # synthetic: configs per graph
    segment_size: int = 500
    epochs: int = 40
    gst_epochs: int = 0  # main-phase epochs of the GST variants; 0: `epochs`
    configs_per_graph: int = 16
    seed: int = 0  # the synthetic graphs' seed and the first training seed
    repeats: int = 1  # trainings per variant, seeds seed, seed + 1, …
    threads: int = 1


@dataclasses.dataclass
class GstResult(BenchResult):
    """`bench gst`'s figures: what every variant trained on, and one `combine` row per
    variant, compared with `full` where it ran (`inside_full_ci`, `diff`, `head_effect`)."""

    spec: GstBenchSpec
    rows: list[dict[str, Any]]  # in the order the variants were asked for


def parse_variant(name: str) -> dict:
    """TrainSettings overrides of a variant name such as 'gst-exact-nohead'."""
    base, nohead = (name[:-7], True) if name.endswith("-nohead") else (name, False)
    if base not in BASE:
        raise UserError(f"unknown variant '{name}'; known: "
                         f"{', '.join(BASE)} (each optionally with -nohead)")
    mode, fresh = BASE[base]
    if mode == "full" and nohead:
        raise UserError("'full' has no head fine-tuning phase to turn off")
    kw: dict = {"mode": mode}
    if mode == "gst":
        kw.update(gst_fresh_segments=fresh)
        if nohead:
            kw.update(head_finetune_epochs=0)
    return kw


def load_splits(spec: GstBenchSpec) -> tuple[list, list, list]:
    """Train, valid and test graphs: the collection's splits, or seeded synthetic ones."""
    if spec.data is not None:
        from graphcost.data.collection import open_collection

        coll = open_collection(spec.data)
        if coll.kind != "layout":
            raise UserError(f"{spec.data}: GST trains layout collections, not {coll.kind}")
        train, valid, test = (list(coll.graphs(s, lazy=True)) for s in ("train", "valid",
                                                                         "test"))
        return train, valid, test
    from graphcost.data.synthetic import make_layout_graph

    def split(offset: int, count: int, prefix: str) -> list:
        rng = np.random.default_rng([spec.seed, offset])
        return [make_layout_graph(rng, num_nodes=spec.nodes, num_configs=spec.num_configs,
                                  name=f"{prefix}{i}") for i in range(count)]

    return split(0, spec.graphs, "train"), split(1, max(2, spec.graphs // 4), "valid"), \
        split(2, spec.graphs, "test")


def run_variant(name: str, spec: GstBenchSpec, seed: int) -> dict:
    """Train one variant with one seed and score it on the test graphs (run in a fresh
    process)."""
    import torch

    from graphcost.models import Model, score_graph
    from graphcost.stats import kendall_tau
    from graphcost.train import TrainSettings, fit

    if spec.threads:
        torch.set_num_threads(spec.threads)
    train_graphs, valid, test = load_splits(spec)
    kw = parse_variant(name)
    epochs = (spec.gst_epochs or spec.epochs) if kw["mode"] == "gst" else spec.epochs
    s = TrainSettings(epochs=epochs, configs_per_graph=spec.configs_per_graph, seed=seed,
                      progress=False, patience=max(10, epochs // 4), **kw)
    model = Model("ranker", "layout",
                  **({"segment_size": spec.segment_size} if kw["mode"] == "gst" else {}))
    t0 = time.perf_counter()
    result = fit(model, train_graphs, valid, s)
    seconds = time.perf_counter() - t0
    taus = [kendall_tau(score_graph(model, g), g.target) for g in test]
    head = [h["valid_tau"] for h in result["history"] if h.get("phase") == "head"]
    return {"variant": name, "seed": seed, "taus": taus,
            "epochs": sum(h["phase"] != "head" for h in result["history"]),
            "best_epoch": result["best_epoch"], "seconds": seconds,
            "valid_tau_before_head": (result.get("before_head") or {}).get("valid_tau"),
            "valid_tau_head_epochs": head,
            "segments": _segments(model, train_graphs, spec.segment_size) if s.mode == "gst"
            else 1}


def combine(name: str, runs: Sequence[dict]) -> dict:
    """One row per variant: each test graph's τ averaged over the seeds, so the interval
    (over graphs) is not widened by retraining noise, plus each seed's own mean τ."""
    from graphcost.stats import bootstrap_ci

    taus = np.mean([r["taus"] for r in runs], axis=0)
    mean, lo, hi = bootstrap_ci(taus)
    return {"variant": name, "tau": mean, "lo": lo, "hi": hi, "taus": taus.tolist(),
            "seed_taus": [float(np.mean(r["taus"])) for r in runs],
            "epochs": int(np.median([r["epochs"] for r in runs])),
            "best_epoch": int(np.median([r["best_epoch"] for r in runs])),
            "seconds": float(np.mean([r["seconds"] for r in runs])),
            "segments": runs[0]["segments"], "runs": list(runs)}


def _segments(model, graphs: Sequence, size: int) -> float:
    """Mean segments per (pruned) train graph."""
    from graphcost.models.segments import split_segments

    return float(np.mean([len(split_segments(model.prepare(g), size)) for g in graphs]))


def bench_gst(variants: Sequence[str], spec: GstBenchSpec, jobs: int = 1,
              on_row: Callable[[dict], None] | None = None) -> GstResult:
    """Rows per variant, compared with the `full` row when there is one."""
    for v in variants:
        parse_variant(v)
    if spec.data is not None:  # a bad path fails here, not in every worker
        load_splits(spec)
    rows: dict[str, dict] = {}
    seeds = [spec.seed + k for k in range(max(1, spec.repeats))]
    with children.pool(max(1, jobs)) as pool:
        futures = [(v, [pool.submit(run_variant, v, spec, seed) for seed in seeds])
                   for v in variants]
        for v, runs in futures:
            rows[v] = combine(v, [f.result() for f in runs])
            if on_row is not None:
                on_row(rows[v])
    full = rows.get("full")
    for row in rows.values():
        if full is not None and row is not full:
            row["inside_full_ci"] = bool(full["lo"] <= row["tau"] <= full["hi"])
            row["diff"] = paired_difference(row["taus"], full["taus"])
        base = row["variant"].removesuffix("-nohead")
        if row["variant"].endswith("-nohead") and base in rows:
            rows[base]["head_effect"] = paired_difference(rows[base]["taus"], row["taus"])
    return GstResult(spec=spec, rows=[rows[v] for v in variants])


HEADER = (f"{'variant':<17} {'segments':>8} {'held-out tau [95% CI]':>24} {'in full CI':>10} "
          f"{'minus full [95% CI]':>26} {'epochs':>6} {'best ep':>7} {'train s':>8}")


def format_row(r: dict) -> str:
    inside = {True: "yes", False: "no"}.get(r.get("inside_full_ci"), "-")
    diff = "-" if "diff" not in r else \
        f"{r['diff'][0]:+.3f} [{r['diff'][1]:+.3f}, {r['diff'][2]:+.3f}]"
    tau = f"{r['tau']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]"
    return (f"{r['variant']:<17} {r['segments']:>8.1f} {tau:>24} {inside:>10} {diff:>26} "
            f"{r['epochs']:>6} {r['best_epoch']:>7} {r['seconds']:>8.0f}")


def format_gst(result: GstResult) -> str:
    """The table again, whole, then each variant's head effect, seeds and head epochs."""
    lines = [HEADER, *(format_row(r) for r in result.rows)]
    for r in result.rows:
        if "head_effect" in r:
            m, lo, hi = r["head_effect"]
            lines.append(f"head fine-tuning effect on {r['variant']}: {m:+.3f} τ "
                         f"[{lo:+.3f}, {hi:+.3f}] (with minus without, same test graphs)")
        if len(r["seed_taus"]) > 1:
            lines.append(f"  {r['variant']} mean held-out τ of each seed: "
                         + ", ".join(f"{t:.3f}" for t in r["seed_taus"]))
        for run in r["runs"]:
            if run.get("valid_tau_head_epochs"):
                epochs = ", ".join(f"{t:.3f}" for t in run["valid_tau_head_epochs"])
                lines.append(f"  {r['variant']} seed {run['seed']}: validation τ before the "
                             f"head phase {run['valid_tau_before_head']:.3f}, after each head "
                             f"epoch {epochs} (head weights are kept only if they beat the best)")
    return "\n".join(lines)


def describe(spec: GstBenchSpec) -> str:
    what = (f"collection {Path(spec.data)}" if spec.data else
            f"synthetic: {spec.graphs} train / {max(2, spec.graphs // 4)} valid / "
            f"{spec.graphs} test graphs of {spec.nodes} nodes, {spec.num_configs} configs")
    epochs = f"{spec.epochs} epochs" + (f" ({spec.gst_epochs} for GST)" if spec.gst_epochs
                                        else "")
    return (f"{what}; segment_size {spec.segment_size}, {epochs}, "
            f"{spec.configs_per_graph} configs per graph and step, "
            + (f"seed {spec.seed}" if spec.repeats <= 1 else
               f"seeds {spec.seed}–{spec.seed + spec.repeats - 1} (each graph's τ averaged)"))
