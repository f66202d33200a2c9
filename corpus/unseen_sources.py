"""A packaged model on corpus sources it was never trained on, paired per graph with a
rule that needs no training (docs/results.md, "Source by source").

    python corpus/unseen_sources.py MODEL COLLECTION RULE_JSON SOURCE...

MODEL is a saved model (e.g. graphcost/models/packaged/options.pt); COLLECTION the
collection below each source's npz/ folder (options/cpu, layout/cpu/random, ...);
RULE_JSON a `graphcost crossval --group source --model RULE --json` result that scored
every graph of those sources. Every split of each SOURCE is scored. It prints, pooled and
per source, the model's mean Kendall τ, the rule's, and model − rule with a bootstrap 95%
interval over the graphs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from graphcost.eval.evaluate import evaluate_model
from graphcost.models import load_model
from graphcost.stats import bootstrap_ci

CORPUS = Path(__file__).parent / "collection"


def interval(values: list[float]) -> str:
    mean, lo, hi = bootstrap_ci(np.asarray(values))
    return f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def main(model_path: str, collection: str, rule_json: str, sources: list[str]) -> None:
    model = load_model(model_path)
    graphs = json.loads(Path(rule_json).read_text())["graphs"]
    rule = {n: g["kendall_tau"] for n, g in graphs.items()}
    rows = []  # (source, model τ, rule τ)
    for source in sources:
        data = CORPUS / source / "npz" / collection
        for split in ("train", "valid", "test"):
            for name, g in evaluate_model(model, data, split=split)["graphs"].items():
                if name not in rule:
                    sys.exit(f"{rule_json} did not score {name}")
                if not (np.isnan(g["kendall_tau"]) or np.isnan(rule[name])):
                    rows.append((source, g["kendall_tau"], rule[name]))
    print(f"{model_path} on {len(rows)} graphs of {', '.join(sources)} ({collection}):")
    print(f"  pooled: model {np.mean([r[1] for r in rows]):.3f}, rule "
          f"{np.mean([r[2] for r in rows]):.3f}, "
          f"model − rule {interval([r[1] - r[2] for r in rows])}")
    for source in sources:
        mine = [r for r in rows if r[0] == source]
        print(f"  {source} ({len(mine)}): model {np.mean([r[1] for r in mine]):.3f}, rule "
              f"{np.mean([r[2] for r in mine]):.3f}, {interval([r[1] - r[2] for r in mine])}")


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
