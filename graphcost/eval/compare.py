"""Pairing crossval results: `graphcost compare`.

Two models are compared over the same graphs, scored the same way (`check_protocol`):
per graph the mean over each side's seeds, then the paired difference with a bootstrap
95% interval, pooled and, for results held out source by source, per source.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.data.families import family_of
from graphcost.errors import UserError
from graphcost.eval.crossval import by_source, held_out_in, mean_text, scored_files
from graphcost.eval.metrics import why_undefined
from graphcost.stats import mean_over


def seed_average(runs: list[dict], metric: str = "score") -> dict[str, float]:
    """Per graph, `metric` averaged over the runs (seeds) that scored it; NaN where it
    is undefined in every run (all runtimes equal), left out of means downstream."""
    values: dict[str, list[float]] = {}
    for run in runs:
        for name, row in run["graphs"].items():
            values.setdefault(name, []).append(float(row[metric]))
    return {name: float(np.mean(defined)) if (defined := [x for x in v if not np.isnan(x)])
            else np.nan for name, v in values.items()}


def run_label(run: dict) -> str:
    """The model and what was set away from its defaults (model settings, loss)."""
    extra = {**run.get("model_settings", {}),
             **({"loss": run["settings"]["loss"]} if run["settings"].get("loss") else {})}
    return " ".join([run["model"], *(f"{k}={v}" for k, v in extra.items())])


def read_results(paths: list[str | Path]) -> list[dict]:
    """Crossval result files (`crossval --json`), refused with the file named when one
    is not one."""
    out = []
    for p in paths:
        try:
            run = json.loads(Path(p).read_text())
            if not isinstance(run, dict):
                raise ValueError("not a JSON object")
            missing = {"collection", "model", "seed", "graphs", "settings"} - set(run)
            if missing:
                raise ValueError(f"no {', '.join(sorted(missing))} (not a crossval result)")
        except (OSError, ValueError) as e:
            raise UserError(f"{p}: {e}") from None
        out.append({**run, "file": str(p)})  # to name it when it cannot be paired
    return out


def protocol_of(run: dict) -> dict[str, Any]:
    """What two crossval results must share to be paired: the graphs, scored and held
    out the same way. Seeds, models and settings may differ: they are what is compared.
    A result older than `--group` was grouped by family; one older than `trained_on`
    does not say what it trained on, so that is not compared."""
    protocol = {key: run.get(key) for key in ("collection", "kind", "folds")}
    protocol["group"] = run.get("group", "family")
    if "trained_on" in run:
        protocol["trained_on"] = run["trained_on"]
    return protocol


def _file(run: dict) -> str:
    return run.get("file", f"the result of seed {run.get('seed')}")


def check_protocol(results: list[dict]) -> None:
    """Refuse results of different protocols (another grouping, number of folds,
    collection, external set, or set of graphs scored), naming both files and what
    differs: their difference would measure the protocol, not the models."""
    first = results[0]
    for r in results[1:]:
        a, b = protocol_of(first), protocol_of(r)
        for key in a.keys() & b.keys():
            if a[key] != b[key]:
                raise UserError(f"{_file(first)} and {_file(r)} differ in {key}: "
                                f"{a[key]!r} and {b[key]!r}; compare pairs results of one "
                                "crossval protocol")
        only = sorted(set(first["graphs"]) ^ set(r["graphs"]))
        if only:
            raise UserError(f"{_file(first)} and {_file(r)} differ in the graphs scored: "
                            f"{len(first['graphs'])} and {len(r['graphs'])}, {len(only)} scored "
                            f"by one only (e.g. {only[0]}); compare pairs results of one "
                            "crossval protocol")


def seed_ensemble(runs: list[dict]) -> dict:
    """The runs of one model (one per seed) as a single result: per graph, the mean of
    the seeds' scores, as a model made by `graphcost ensemble` scores (`models.ensemble`),
    scored again on the collection's runtimes. A seed ensemble costs no training beyond
    the seeds' own, so it is a fair opponent for a heuristic."""
    from graphcost.eval.metrics import graph_metrics
    from graphcost.formats.npz import read_graph

    check_protocol(runs)
    missing = [r["seed"] for r in runs if any("pred" not in g for g in r["graphs"].values())]
    if missing:
        raise UserError(f"the results of seeds {missing} keep no per-config predictions "
                        "(made by an older graphcost): run crossval again")
    files = scored_files(runs[0])
    rows = {}
    for name in sorted(set.intersection(*(set(r["graphs"]) for r in runs))):
        pred = np.mean([np.asarray(r["graphs"][name]["pred"], dtype=np.float64)
                        for r in runs], axis=0)
        target = np.asarray(read_graph(files[name]).target, dtype=np.float64)
        if target.shape != pred.shape:
            raise UserError(f"{name}: {pred.size} predictions for its {target.size} configs "
                            "(the results are of another version of the collection)")
        rows[name] = {**graph_metrics(runs[0]["kind"], pred, target), "pred": pred.tolist(),
                      **held_out_in(runs[0]["graphs"][name])}
    seeds = "+".join(str(r["seed"]) for r in runs)
    kept = ("collection", "trained_on", "data", "kind", "folds", "group", "settings")
    return {**{k: runs[0][k] for k in kept if k in runs[0]},
            "model": f"{run_label(runs[0])} ensemble", "model_settings": {}, "seed": seeds,
            "graphs": rows, "ensemble_of": [r["seed"] for r in runs],
            "file": " + ".join(_file(r) for r in runs)}


#: issue 43's bar for a learned model against its rule: no program family may lose more
FAMILY_LOSS = -0.10


def compare_crossval(runs: list[dict], against: list[dict], metric: str = "score") -> dict:
    """Runs of one model (one JSON per seed) against runs of another on the same graphs:
    each side's per-graph mean over its seeds, both means and the paired difference
    runs − against over the graphs both scored, with bootstrap 95% intervals; and the
    difference of each program family (its graphs' mean)."""
    for side in (runs, against):
        if not side:
            raise UserError("compare needs at least one crossval result on each side")
    for name, side_runs in (("RUNS", runs), ("--against", against)):
        seeds = [r["seed"] for r in side_runs]
        if len(set(seeds)) < len(seeds):
            raise UserError(f"{name} holds two results of one seed ({seeds}): one file per "
                            "seed on each side, and --against before each of its files")
    check_protocol(runs + against)
    a, b = seed_average(runs, metric), seed_average(against, metric)
    common = sorted(set(a) & set(b))
    if not common:
        raise UserError("the two sides scored no graph in common")
    rows = {n: r["graphs"][n] for r in runs + against for n in common if n in r["graphs"]}

    def why(name: str) -> str:  # a graph with no value on a side: its metric is undefined
        return why_undefined(rows[name], metric)

    def side(results: list[dict], values: dict[str, float]) -> dict:
        return {"model": run_label(results[0]), "seeds": [r["seed"] for r in results],
                "mean": dataclasses.asdict(mean_over({n: values[n] for n in common}, why)),
                "per_seed": [float(np.nanmean([r["graphs"][n][metric] for n in common
                                               if n in r["graphs"]])) for r in results]}

    difference = mean_over({n: a[n] - b[n] for n in common}, why)
    sources = {}  # held out source by source: each source's means and difference too
    for source, graphs in by_source(rows).items():
        names = sorted(graphs)
        sources[source] = {"graphs": len(names), **{
            key: dataclasses.asdict(mean_over(values, why)) for key, values in (
                ("runs", {n: a[n] for n in names}), ("against", {n: b[n] for n in names}),
                ("difference", {n: a[n] - b[n] for n in names}))}}
    per_family: dict[str, list[float]] = {}
    for n in common:
        if np.isfinite(a[n] - b[n]):
            per_family.setdefault(family_of(n), []).append(a[n] - b[n])
    return {"collection": runs[0]["collection"], "metric": metric, "graphs": len(common),
            "runs": side(runs, a), "against": side(against, b),
            "difference": dataclasses.asdict(difference),
            "families": {f: float(np.mean(v)) for f, v in sorted(per_family.items())},
            **({"by_source": sources} if sources else {})}


def best_heuristic(runs: list[dict], heuristics: list[dict], metric: str = "score") -> dict:
    """`compare_crossval` of `runs` with the best of several heuristic baselines (results
    of one heuristic, one per seed, are its seeds): the one of the highest mean over the
    graphs both scored. Choosing it on these graphs favours the heuristics, so a paired
    difference that still excludes 0 is one learning earned."""
    by_model: dict[str, list[dict]] = {}
    for h in heuristics:
        by_model.setdefault(run_label(h), []).append(h)
    comparisons = [compare_crossval(runs, side, metric) for side in by_model.values()]
    return max(comparisons, key=lambda c: c["against"]["mean"]["mean"])


def _side(s: dict) -> str:
    seeds = ", ".join(f"{v:.3f}" for v in s["per_seed"])
    return f"{s['model']:<12} {mean_text(s['mean'])}  (seeds {s['seeds']}: {seeds})"


def _difference(c: dict) -> str:
    return (f"paired difference {c['runs']['model']} − {c['against']['model']}: "
            f"{mean_text(c['difference'])}")


def _by_source(c: dict) -> list[str]:
    """A line per held-out source: both sides' means and their difference."""
    return [f"    {source} ({row['graphs']} graphs): {mean_text(row['runs'])} against "
            f"{mean_text(row['against'])}, difference {mean_text(row['difference'])}"
            for source, row in c.get("by_source", {}).items()]


def _families(c: dict) -> list[str]:
    """A line counting the families whose difference is below `FAMILY_LOSS`, worst first."""
    low = sorted((v, f) for f, v in c["families"].items() if v < FAMILY_LOSS)
    worst = ", ".join(f"{f} {v:+.3f}" for v, f in low)
    return [f"    families below {FAMILY_LOSS:+.2f}: {len(low)} of {len(c['families'])}"
            + (f" ({worst})" if worst else "")]


def format_comparison(c: dict) -> str:
    """Both sides' means and the paired difference, one line each (held out source by
    source: a line per source too); with the best heuristic (`c['heuristic']`, from
    `best_heuristic`), its mean and difference too."""
    lines = [f"{c['collection']}: {c['metric']} over {c['graphs']} graphs scored by both, "
             "mean over seeds per graph [95% interval]:",
             f"  {_side(c['runs'])}", f"  {_side(c['against'])}", f"  {_difference(c)}",
             *_by_source(c), *_families(c)]
    h = c.get("heuristic")
    if h is not None:
        lines += [f"best heuristic, over the {h['graphs']} graphs it and "
                  f"{c['runs']['model']} scored:", f"  {_side(h['against'])}",
                  f"  {_difference(h)}", *_by_source(h), *_families(h)]
    return "\n".join(lines)
