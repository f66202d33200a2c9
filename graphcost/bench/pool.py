"""`graphcost bench pool`: autotuning strategies against exhaustive measurement of a pool.

Per program, a pool of configs is sampled (the default first) and every one is measured
(docs/design.md §7 protocol, pinned). The pool's measured runtimes are then the ground truth
each strategy is judged on, all with the same measurement budget K (the default is
measured by every strategy, as the reference every speed-up is against):
- `model`: the model's K best-scored pool configs, measured at once;
- `learn`: K measured in batches, the model fine-tuned on each batch's runtimes (and the
  default's) before it picks the next (`costmodel.learn_while_measuring`);
- `random`: K pool configs drawn at random: the expectation over every draw, exactly
  (`expected_best_of_random`), and one seeded draw for the confirmation round;
- `pool`: the best of the whole pool, what exhaustive measurement finds.
Each strategy keeps the fastest config it measured or the default, whichever is faster
(`alone` figures drop the default: how good the measured picks themselves are).

Picking the fastest of many measured configs flatters it (its luck in that round), so
the pool's best, the model's, the learner's and the random draw's choices are then timed
again together with the default in fresh rounds (`confirm_rounds`), and the headline
figures come from those rounds alone: each choice's speed as a share of the pool best's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from graphcost.autotune.costmodel import CostModel, learn_picks, model_space
from graphcost.autotune.measure import measure
from graphcost.autotune.program import Tunable, prepare
from graphcost.autotune.search import best_of, top_picks
from graphcost.bench import BenchResult
from graphcost.stats import (
    expected_best_of_random,
    geomean_ci,
    kendall_tau,
    ratio_interval,
    t_interval,
)
from graphcost.xla.programs import make_program
from graphcost.xla.timing import AUTOTUNING, Protocol

STRATEGIES = ("model", "learn", "random")


def pool_picks(cm: CostModel, pool: Sequence[Any], scores: np.ndarray, runtime: np.ndarray,
               k: int, batches: int, rng: np.random.Generator) -> dict[str, list[int]]:
    """Pool indices (0 = the default, never picked) each strategy measures, in order;
    `scores` are `cm`'s predictions for the pool before it learns anything."""
    others = list(range(1, len(pool)))
    return {"model": top_picks(scores, 0, k),
            "learn": learn_picks(cm, pool, runtime, k, batches),
            "random": [int(i) for i in rng.choice(others, min(k, len(others)),
                                                  replace=False)]}


def pool_program(t: Tunable, model: Any, pool_size: int, k: int, batches: int,
                 protocol: Protocol, confirm_rounds: int, seed: int,
                 core: int | None) -> dict[str, Any]:
    """One program: measure its pool, run every strategy on it, confirm the choices."""
    rng = np.random.default_rng(seed)
    pool = t.configs.sample(pool_size, rng)
    results = measure(t, pool, protocol, core)
    runtime = np.array([r.runtime_ns if r.ok else np.nan for r in results])
    if not np.isfinite(runtime[0]):
        raise RuntimeError(f"{t.name}: the default config failed ({results[0].status})")
    cm = CostModel(model, t, pool)
    before = cm.predict(pool)
    picks = pool_picks(cm, pool, before, runtime, k, batches, rng)
    chosen = {s: best_of(p, runtime) for s, p in picks.items()}
    chosen["pool"] = best_of(range(1, len(pool)), runtime)
    ok = np.isfinite(runtime)
    others = runtime[1:][ok[1:]]
    default = runtime[0]
    speed = {s: default / runtime[i] for s, i in chosen.items()}
    speed["random_expected"] = default / expected_best_of_random(others, k, default)
    alone = {s: default / np.nanmin(runtime[p]) if np.isfinite(runtime[p]).any() else math.nan
             for s, p in picks.items() if s != "random"}
    alone["random_expected"] = default / expected_best_of_random(others, k)

    contenders = {"default": 0, **chosen}
    distinct = list(dict.fromkeys(contenders.values()))
    again = measure(t, [pool[i] for i in distinct],
                    dataclasses.replace(protocol, rounds=confirm_rounds), core)
    rounds = {i: r.rounds_ns if r.ok else None for i, r in zip(distinct, again, strict=True)}
    if any(v is None for v in rounds.values()):
        raise RuntimeError(f"{t.name}: a config measured ok in the pool failed when confirmed")
    confirmed = {}  # each choice's speed as a share of the pool best's, per round
    for s in (*STRATEGIES, "default"):
        confirmed[s] = ratio_interval(rounds[chosen["pool"]], rounds[contenders[s]])
    confirmed["learn_vs_random"] = ratio_interval(rounds[chosen["random"]],
                                                  rounds[chosen["learn"]])
    confirmed["model_vs_random"] = ratio_interval(rounds[chosen["random"]],
                                                  rounds[chosen["model"]])
    unseen = ok.copy()  # τ after learning: on configs it did not learn from
    unseen[[0, *picks["learn"]]] = False
    return {"program": t.name, "kind": t.configs.kind, "pool": len(pool),
            "failed": int((~ok).sum()), "default_us": default / 1e3,
            "runtime_ns": [float(x) for x in runtime],  # the pool's, the default first
            "picks": picks, "chosen": chosen, "speed_vs_default": speed,
            "alone_vs_default": alone,
            "tau": kendall_tau(before[ok], runtime[ok]),
            "tau_unseen_before": kendall_tau(before[unseen], runtime[unseen]),
            "tau_unseen_after": kendall_tau(cm.predict(pool)[unseen], runtime[unseen]),
            "confirmed_share_of_best": {s: list(v) for s, v in confirmed.items()},
            "confirm_rounds": confirm_rounds}


@dataclasses.dataclass
class PoolResult(BenchResult):
    """`bench pool`'s figures: per-program `pool_program` rows and their geometric means,
    and how they were made."""

    model: dict[str, Any]  # where the model came from (`choose_model`'s info)
    rows: list[dict[str, Any]]  # one per program ({"program", "skipped"} where it failed)
    summary: dict[str, Any]  # `pool_summary`
    pool: int  # configs sampled per program
    protocol: dict[str, Any]  # the timing protocol's fields
    seed: int
    core: int | None  # the core timings were pinned to


def bench_pool(programs: Sequence[str], model: Any, model_info: dict[str, Any],
               pool_size: int = 48, k: int = 5, batches: int = 2,
               protocol: Protocol | None = None, confirm_rounds: int = 5, seed: int = 0,
               core: int | None = None, log: Callable[[str], Any] | None = None) -> PoolResult:
    """Every program's pool figures and their geometric means over programs (95% t
    intervals over programs, on the log scale)."""
    from graphcost.models.model import as_model

    say = log or (lambda _msg: None)
    m = as_model(model)
    space = model_space(m, "the model" if m is model else str(model))
    protocol = protocol or AUTOTUNING
    rows = []
    for spec in programs:
        family, _, index = spec.rpartition(".")
        name, fn, args = make_program(family, int(index))
        try:
            t = prepare(name, fn, args, space)
            row = pool_program(t, m, pool_size, k, batches, protocol, confirm_rounds, seed, core)
        except (ValueError, RuntimeError) as e:
            say(f"{name}: skipped ({e})")
            rows.append({"program": name, "skipped": str(e)})
            continue
        rows.append(row)
        say(format_row(row))
    summary = pool_summary(rows, k, batches)
    return PoolResult(model=model_info, rows=rows, summary=summary, pool=pool_size,
                      protocol=dataclasses.asdict(protocol), seed=seed, core=core)


def pool_summary(rows: list[dict[str, Any]], k: int, batches: int) -> dict[str, Any]:
    """Geometric means over the programs tuned, with 95% t intervals (log scale); the
    learner's τ on the configs it did not learn from, before and after, paired."""
    done = [r for r in rows if "skipped" not in r]
    summary: dict[str, Any] = {"programs": len(done), "k": k, "batches": batches}
    for s in ("pool", *STRATEGIES, "random_expected"):
        summary[f"{s}_vs_default"] = geomean_ci([r["speed_vs_default"][s] for r in done])
    for s in ("model", "learn", "random_expected"):
        summary[f"{s}_alone_vs_default"] = geomean_ci([r["alone_vs_default"][s] for r in done])
    for s in ("model", "learn"):
        summary[f"{s}_vs_random_expected"] = geomean_ci(
            [r["speed_vs_default"][s] / r["speed_vs_default"]["random_expected"] for r in done])
        summary[f"{s}_alone_vs_random_alone"] = geomean_ci(
            [r["alone_vs_default"][s] / r["alone_vs_default"]["random_expected"] for r in done])
    summary["learn_vs_model"] = geomean_ci([r["speed_vs_default"]["learn"]
                                            / r["speed_vs_default"]["model"] for r in done])
    for s in (*STRATEGIES, "default", "learn_vs_random", "model_vs_random"):
        summary[f"confirmed_{s}"] = geomean_ci([r["confirmed_share_of_best"][s][0]
                                                for r in done])
    before = np.array([r["tau_unseen_before"] for r in done], dtype=np.float64)
    after = np.array([r["tau_unseen_after"] for r in done], dtype=np.float64)
    summary["tau_unseen"] = [float(np.nanmean(before)), float(np.nanmean(after))]
    summary["tau_unseen_gain"] = list(t_interval((after - before)[np.isfinite(after - before)]))
    return summary


def format_row(r: dict[str, Any]) -> str:
    """One program: pool-round speed-ups over the default and the confirmed shares."""
    s, c = r["speed_vs_default"], r["confirmed_share_of_best"]
    return (f"{r['program']:20} pool best {s['pool']:.3f}x | model {s['model']:.3f}x "
            f"learn {s['learn']:.3f}x random-K {s['random_expected']:.3f}x (expected) | "
            f"confirmed share of best: model {c['model'][0]:.3f} learn {c['learn'][0]:.3f} "
            f"random {c['random'][0]:.3f} default {c['default'][0]:.3f} | tau "
            f"{r['tau']:.3f}; unseen {r['tau_unseen_before']:.3f} -> {r['tau_unseen_after']:.3f}")


def format_pool(result: PoolResult) -> str:
    """The per-program lines and the geometric means with their intervals."""
    s = result.summary

    def ci(name: str) -> str:
        v = s[name]
        return f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"

    lines = [f"model: {result.model['source']}"]
    lines += [format_row(r) if "skipped" not in r else f"{r['program']:20} skipped: "
              f"{r['skipped'][:70]}" for r in result.rows]
    if not s["programs"]:
        return "\n".join(lines + ["no program could be tuned"])
    lines += [
        f"{s['programs']} programs, pool of {result.pool}, K = {s['k']}, learn in "
        f"{s['batches']} batches; geometric means, 95% intervals over programs",
        f"pool round, speed-up vs default: pool best {ci('pool_vs_default')}, model "
        f"{ci('model_vs_default')}, learn {ci('learn_vs_default')}, random-K expected "
        f"{ci('random_expected_vs_default')}",
        f"pool round, picks alone (no default): model {ci('model_alone_vs_default')}, learn "
        f"{ci('learn_alone_vs_default')}, random-K expected "
        f"{ci('random_expected_alone_vs_default')}",
        f"pool round vs random-K expected: model {ci('model_vs_random_expected')}, learn "
        f"{ci('learn_vs_random_expected')}; learn vs model {ci('learn_vs_model')}; picks "
        f"alone vs random picks alone: model {ci('model_alone_vs_random_alone')}, learn "
        f"{ci('learn_alone_vs_random_alone')}",
        f"learning: tau on the configs it did not measure {s['tau_unseen'][0]:.3f} -> "
        f"{s['tau_unseen'][1]:.3f}, paired {ci('tau_unseen_gain')}",
        f"confirmed, speed as a share of the pool best's: model {ci('confirmed_model')}, "
        f"learn {ci('confirmed_learn')}, random draw {ci('confirmed_random')}, default "
        f"{ci('confirmed_default')}",
        f"confirmed vs the random draw's choice: model {ci('confirmed_model_vs_random')}, "
        f"learn {ci('confirmed_learn_vs_random')}"]
    return "\n".join(lines)
