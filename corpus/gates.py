"""Ways to fall back to a rule on the graphs where a learned correction might invert
it, tried offline on a leave-source-out result (docs/results.md, "Source by source").

    python corpus/gates.py RANKER_JSON RULE_JSON [RANKER_JSON_OF_ANOTHER_SEED ...]

The JSONs are `graphcost crossval --group source --json` results over the same graphs
(the ranker's and the rule's). Each gate is decided from what a user has before
measuring: the graph, and the two models' scores.

- loop gate: the rule alone on graphs with a while loop, the ranker elsewhere;
- agreement gate: the rule alone where the ranker's order of the configs agrees with the
  rule's less than g (Kendall τ between their scores), g chosen on the other sources;
- distance gate: the rule alone where the graph's mix of opcodes (the share of its nodes
  of each) lies farther than d (L1) from every graph of the other sources, the ones its
  model trained on; d chosen on the other sources among the distances' quantiles.

With more seeds of the ranker, two more: the seeds' ensemble (per graph the mean of
the seeds' scores, as `graphcost ensemble` scores), and a disagreement gate (the rule alone where
two seeds order the configs alike less than g, g chosen on the other sources).

It prints ranker − rule (τ, bootstrap 95% interval over graphs) without a gate, on the
graphs with and without a loop, and with each gate; and, first, both scored as the
rankings a tuner makes of them (`stats.kendall_tau_ranked`: a rule's ties broken at
random, where τ-b counts them as neither right nor wrong).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from graphcost.formats.hlo import OPCODE_IDS
from graphcost.stats import bootstrap_ci, kendall_tau, kendall_tau_ranked

WHILE = OPCODE_IDS["while"]
LEVELS = (-1.0, 0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8)  # agreement levels g tried


def interval(values: list[float]) -> str:
    mean, lo, hi = bootstrap_ci(np.asarray(values))
    return f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}] ({len(values)} graphs)"


def gate(agree: dict[str, float], gain: dict[str, float], source: dict[str, str],
         label: str, levels: tuple[float, ...] = LEVELS) -> list[float]:
    """ranker − rule where `agree` ≥ g, 0 (the rule) elsewhere; each source's g chosen
    among `levels` as the one best on the other sources."""
    def kept(level: float, among: list[str]) -> list[float]:
        return [gain[n] if agree[n] >= level else 0.0 for n in among]

    chosen = []
    for s in sorted(set(source.values())):
        others = [n for n in gain if source[n] != s]
        g = max(levels, key=lambda level: np.mean(kept(level, others)))
        chosen += kept(g, [n for n in gain if source[n] == s])
        print(f"  {label} for {s}: g = {g:+.2f} (chosen on the other sources)")
    return chosen


def by_source(values: dict[str, float], source: dict[str, str]) -> dict[str, str]:
    """Each source's interval over its graphs' `values`."""
    return {s: interval([v for n, v in values.items() if source[n] == s])
            for s in sorted(set(source.values()))}


def agreement(a: list[float], b: list[float]) -> float:
    """Kendall τ between two models' scores of one graph; a model that ties every config
    says nothing to agree with: τ is NaN there, taken as 0."""
    return float(np.nan_to_num(kendall_tau(a, b)))


def main(ranker_json: str, rule_json: str, seeds: list[str]) -> None:
    ranker = json.loads(Path(ranker_json).read_text())
    rule = json.loads(Path(rule_json).read_text())["graphs"]
    others = [json.loads(Path(f).read_text())["graphs"] for f in seeds]
    files = {f.stem: f for run in (ranker, json.loads(Path(rule_json).read_text()))
             for folder in run["data"].values() for f in Path(folder).glob("*/*.npz")}
    graphs = ranker["graphs"]
    names = [n for n in graphs if n in rule and all(n in o for o in others)
             and not np.isnan(graphs[n]["kendall_tau"]) and not np.isnan(rule[n]["kendall_tau"])]
    gain = {n: graphs[n]["kendall_tau"] - rule[n]["kendall_tau"] for n in names}
    source = {n: graphs[n]["source"] for n in names}
    loop, runtime, mix = {}, {}, {}
    for n in names:
        with np.load(files[n]) as arrays:
            loop[n] = bool((arrays["node_opcode"] == WHILE).any())
            runtime[n] = arrays["config_runtime"]
            mix[n] = np.bincount(arrays["node_opcode"], minlength=256) / arrays["node_opcode"].size
    agree = {n: agreement(graphs[n]["pred"], rule[n]["pred"]) for n in names}

    ranked = {n: kendall_tau_ranked(graphs[n]["pred"], runtime[n])
              - kendall_tau_ranked(rule[n]["pred"], runtime[n]) for n in names}
    print(f"ranker − rule, no gate:          {interval(list(gain.values()))}")
    print(f"  as rankings, ties at random:   {interval(list(ranked.values()))}")
    ranked_by_source = by_source(ranked, source)
    for s, text in by_source(gain, source).items():
        print(f"    {s}: {text}, as rankings {ranked_by_source[s]}")
    print(f"  on graphs with a while loop:   {interval([gain[n] for n in names if loop[n]])}")
    print(f"  on graphs without:             {interval([gain[n] for n in names if not loop[n]])}")
    kept = [0.0 if loop[n] else gain[n] for n in names]
    print(f"loop gate:                       {interval(kept)}")
    chosen = gate(agree, gain, source, "agreement gate")
    print(f"agreement gate:                  {interval(chosen)}")
    r = np.corrcoef([agree[n] for n in names], [gain[n] for n in names])[0, 1]
    print(f"correlation of agreement and ranker − rule: {r:+.3f}")
    far = {n: -min(float(np.abs(mix[n] - mix[m]).sum()) for m in names
                   if source[m] != source[n]) for n in names}  # −distance: near = high
    chosen = gate(far, gain, source, "distance gate",
                  levels=tuple(np.quantile(list(far.values()), (0, .05, .1, .2, .3, .4, .5))))
    print(f"distance gate:                   {interval(chosen)}")
    r = np.corrcoef([far[n] for n in names], [gain[n] for n in names])[0, 1]
    print(f"correlation of nearness and ranker − rule: {r:+.3f}")
    if not others:
        return
    runs = [graphs, *others]
    mean_gain = {n: np.mean([o[n]["kendall_tau"] for o in runs]) - rule[n]["kendall_tau"]
                 for n in names}
    print(f"{len(runs)} seeds, their mean τ − rule: {interval(list(mean_gain.values()))}")
    for s, text in by_source(mean_gain, source).items():
        print(f"    {s}: {text}")
    ensemble = {n: kendall_tau(np.mean([o[n]["pred"] for o in runs], axis=0),
                               runtime[n]) - rule[n]["kendall_tau"] for n in names}
    print(f"ensemble of the seeds − rule:    {interval(list(ensemble.values()))}")
    for s, text in by_source(ensemble, source).items():
        print(f"    {s}: {text}")
    alike = {n: agreement(graphs[n]["pred"], others[0][n]["pred"]) for n in names}
    chosen = gate(alike, mean_gain, source, "disagreement gate")
    print(f"disagreement gate:               {interval(chosen)}")
    r = np.corrcoef([alike[n] for n in names], [mean_gain[n] for n in names])[0, 1]
    print(f"correlation of seed agreement and ranker − rule: {r:+.3f}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
