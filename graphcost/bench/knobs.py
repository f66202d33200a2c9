"""`graphcost bench knobs`: each XLA:CPU option's effect on each program family.

Which options are worth a search space? A knob set together with others hides its own
effect, so each program is compiled once with no options (the default) and once per
single-knob change (each non-default choice of one knob, every other knob unset), and
all of them are timed in the same fresh interleaved rounds. The default is the outputs'
reference: a change that alters results beyond the dtype's tolerance is a 'mismatch',
never a speed-up. A config's speed-up is default/config, the geometric mean over paired
rounds with a 95% t interval (`ratio_interval`); it is faster *beyond noise* when the
interval's lower end is above 1, slower beyond noise when its upper end is below 1.
Rows are kept in `out/knobs.json`, rewritten atomically after each program, and reused
by a rerun that times the same way (protocol, core, knob list): a crash loses one program.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from graphcost.bench import BenchResult
from graphcost.errors import UserError
from graphcost.xla.configs import LayoutSpace
from graphcost.xla.options import CANDIDATE_KNOBS, OPTION_KNOBS, Knob, OptionConfig
from graphcost.xla.timing import ConfigResult, Protocol

DEFAULT = "default"
WORTH = 1.05  # a speed-up worth a place in a search space: 5%, beyond noise
_ENUM_PREFIX = re.compile(r"\b(?:LIBRARY_FUSION_TYPE|CPU_SCHEDULER_TYPE|CPU_OPT_PRESET|"
                          r"XNN_GRAPH_FUSION_MODE)_")


def choice_label(knob: Knob, choice: int) -> str:
    """`name=value` of one choice, enum prefixes dropped (a table column, a JSON key);
    a switch (one non-default choice, a bool) is its name alone."""
    value = knob.choices[choice]
    if len(knob.choices) == 2 and isinstance(value, bool):
        return knob.name
    text = (_ENUM_PREFIX.sub("", value) or '""') if isinstance(value, str) else repr(value)
    return f"{knob.name}={text}"


def single_knob_configs(knobs: Sequence[Knob]) -> list[tuple[Knob, int, tuple[int, ...]]]:
    """(knob, choice, config) of every non-default choice, the other knobs at default:
    one knob at a time, so each effect is separable."""
    return [(k, c, tuple(c if j == i else 0 for j in range(len(knobs))))
            for i, k in enumerate(knobs) for c in range(1, len(k.choices))]


def knob_spec(knobs: Sequence[Knob]) -> list[list[Any]]:
    """The knob list as a JSON file holds it: a stored row is reused only for the same."""
    return json.loads(json.dumps([[k.name, k.option, list(k.choices)] for k in knobs]))


def time_program(name: str, fn: Callable, args: Sequence[Any], knobs: Sequence[Knob],
                 protocol: Protocol, core: int | None = None, seed: int = 0) -> dict[str, Any]:
    """One program's row: lowered once, the default and every single-knob change
    compiled, then all timed together (pinned to `core` when given)."""

    from graphcost.autotune.measure import pinned
    from graphcost.stats import ratio_interval
    from graphcost.xla.prepare import input_maker
    from graphcost.xla.timing import error_line, time_executables

    lowered = LayoutSpace(fn, tuple(args)).lower({})
    inputs = input_maker(args)
    changes = {choice_label(k, c): (k, c, OptionConfig(cfg, knobs).compiler_options())
               for k, c, cfg in single_knob_configs(knobs)}
    results: dict[str, ConfigResult] = {}
    runnable = {}
    start = time.perf_counter()
    for label, opts in [(DEFAULT, {}), *((lb, ch[2]) for lb, ch in changes.items())]:
        try:
            exe = lowered.compile(opts or None)
        except Exception as e:  # XLA's errors have no common base class worth naming
            results[label] = ConfigResult("compile", error_line(e))
            continue
        runnable[label] = (exe, inputs(exe))
    compile_s = time.perf_counter() - start
    if DEFAULT in runnable:
        with pinned(core):
            results |= time_executables(runnable, protocol, reference=DEFAULT, seed=seed)
    base = results[DEFAULT]
    configs = []
    for label, (knob, choice, _) in changes.items():
        r = results.get(label, ConfigResult("untimed", "the default did not run"))
        entry: dict[str, Any] = {"label": label, "knob": knob.name, "choice": choice,
                                 "value": knob.choices[choice], "status": r.status,
                                 "error": r.error, "runtime_ns": r.runtime_ns if r.ok else None}
        if r.ok and base.ok:
            speed, lo, hi = ratio_interval(base.rounds_ns, r.rounds_ns)
            entry |= {"speedup": speed, "lo": lo, "hi": hi}
        configs.append(entry)
    return {"program": name, "family": name.rpartition(".")[0],
            "default": {"status": base.status, "error": base.error,
                        "runtime_ns": base.runtime_ns if base.ok else None,
                        "rounds_ns": base.rounds_ns},
            "configs": configs, "compile_s": compile_s,
            "time_s": time.perf_counter() - start - compile_s}


def knob_rows(programs: Sequence[str], out: Path, knobs: Sequence[Knob], protocol: Protocol,
              core: int | None, say: Callable[[str], Any]) -> list[dict[str, Any]]:
    """`time_program` for every program; `out/knobs.json` is rewritten atomically after
    each, and a program already there is reused when timed the same way."""
    from graphcost.atomic import write_json
    from graphcost.xla.programs import make_program

    path = out / "knobs.json"
    try:
        done: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        raise UserError(f"{path} is not JSON; delete it to time every program again") from None
    spec = {"protocol": dataclasses.asdict(protocol), "core": core, "knobs": knob_spec(knobs)}
    rows = []
    for n, program in enumerate(programs, 1):
        prior = done.get(program)
        if prior and prior.get("spec") == spec:
            say(f"[{n}/{len(programs)}] {program:22} reused from {path}")
            rows.append(prior)
            continue
        family, _, index = program.rpartition(".")
        name, fn, args = make_program(family, int(index))
        row = time_program(name, fn, args, knobs, protocol, core, seed=n)
        row["spec"] = spec  # what a rerun must ask for to reuse this row
        done[program] = row
        write_json(done, path)
        rows.append(row)
        say(f"[{n}/{len(programs)}] {program:22} {_progress(row)}")
    return rows


def _progress(row: dict[str, Any]) -> str:
    if row["default"]["status"] != "ok":
        return f"default failed ({row['default']['status']}: {row['default']['error']})"
    ok = [c for c in row["configs"] if "speedup" in c]
    best = max(ok, key=lambda c: c["speedup"], default=None)
    return (f"default {row['default']['runtime_ns'] / 1e6:.3f} ms, {len(ok)}/"
            f"{len(row['configs'])} changes timed"
            + (f", best {best['label']} {best['speedup']:.3f}x" if best else "")
            + f" ({row['compile_s']:.0f}s compile, {row['time_s']:.0f}s timing)")


def _counts(entries: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many programs a knob value makes faster or slower beyond noise, or breaks."""
    ok = [c for c in entries if "speedup" in c]
    return {"programs": len(entries), "ok": len(ok),
            "faster": sum(c["lo"] > 1 for c in ok),
            "faster_5pct": sum(c["lo"] > 1 and c["speedup"] >= WORTH for c in ok),
            "slower": sum(c["hi"] < 1 for c in ok),
            "failed": len(entries) - len(ok),
            "mismatch": sum(c["status"] == "mismatch" for c in entries)}


def summarize_knobs(rows: Sequence[dict[str, Any]], knobs: Sequence[Knob]) -> dict[str, Any]:
    """Per family x knob value: the geometric-mean and the best program's speed-up; per
    knob value, counts over programs; per knob, a verdict."""
    from graphcost.stats import geomean

    timed = [r for r in rows if r["default"]["status"] == "ok"]
    labels = [choice_label(k, c) for k, c, _ in single_knob_configs(knobs)]
    by = {lb: [(r, c) for r in timed for c in r["configs"] if c["label"] == lb]
          for lb in labels}
    per_value = {lb: _counts([c for _, c in by[lb]]) for lb in labels}
    per_family: dict[str, dict[str, Any]] = {r["family"]: {} for r in timed}
    for fam in per_family:
        for lb in labels:
            entries = [(r, c) for r, c in by[lb] if r["family"] == fam]
            ok = [(r, c) for r, c in entries if "speedup" in c]
            best = max(ok, key=lambda rc: rc[1]["speedup"], default=None)
            per_family[fam][lb] = {
                **_counts([c for _, c in entries]),
                "geomean": geomean([c["speedup"] for _, c in ok]) if ok else None,
                "best": best[1]["speedup"] if best else None,
                "best_program": best[0]["program"] if best else None}
    verdicts = {}
    for k in knobs:
        mine = [(r, c) for lb in labels for r, c in by[lb] if c["knob"] == k.name
                and "speedup" in c and c["lo"] > 1]
        big = [r["family"] for r, c in mine if c["speedup"] >= WORTH]
        small = [r["family"] for r, _ in mine]
        verdicts[k.name] = (f"speeds up {', '.join(dict.fromkeys(big))}" if big else
                            f"under 5% faster only ({', '.join(dict.fromkeys(small))})"
                            if small else "no program faster")
    return {"programs": len(rows), "timed": len(timed),
            "default_failed": [r["program"] for r in rows if r["default"]["status"] != "ok"],
            "per_value": per_value, "per_family": per_family, "verdicts": verdicts}


@dataclasses.dataclass
class KnobsResult(BenchResult):
    """`bench knobs`' figures: every program's `time_program` row, their summary per
    family and knob value, and how they were timed."""

    programs: list[str]
    protocol: dict[str, Any]  # the timing protocol's fields
    core: int | None
    knobs: list[list[Any]]  # `knob_spec`
    worth: float  # the speed-up worth a place in a search space (`WORTH`)
    rows: list[dict[str, Any]]  # as OUT/knobs.json holds them, by program
    summary: dict[str, Any]  # `summarize_knobs`


def bench_knobs(out: str | Path, families: Sequence[str] = (), per_family: int = 2,
                knobs: Sequence[Knob] = OPTION_KNOBS + CANDIDATE_KNOBS,
                protocol: Protocol | None = None, core: int | None = None,
                log: Callable[[str], Any] | None = None) -> KnobsResult:
    """Every single-knob change of the first `per_family` programs of each family (all
    families when none are given), timed against the default; see the module docstring."""
    from graphcost.xla.programs import zoo_names

    protocol = protocol or Protocol(rounds=6)
    protocol.check()
    if protocol.rounds < 2:
        raise UserError(f"need at least 2 rounds for a noise interval, got {protocol.rounds}")
    if per_family < 1:
        raise UserError(f"--per-family must be at least 1, got {per_family}")
    if len({k.name for k in knobs}) != len(knobs):
        raise UserError(f"knob names must differ, got {[k.name for k in knobs]}")
    programs = zoo_names(per_family, families=list(families) or None)  # UserError if unknown
    rows = knob_rows(programs, Path(out), knobs, protocol, core, log or (lambda _msg: None))
    return KnobsResult(programs=programs, protocol=dataclasses.asdict(protocol), core=core,
                       knobs=knob_spec(knobs), worth=WORTH, rows=rows,
                       summary=summarize_knobs(rows, knobs))


def _shown(f: dict[str, Any]) -> bool:
    """A family's effect worth a line: 5% either way with a program beyond noise that
    way, or a failure (noisy programs move every config's mean by 10% and more)."""
    g = f["geomean"] or 1.0  # None: nothing ran
    return bool(f["failed"] or (g >= WORTH and f["faster"])
                or (g <= 1 / WORTH and f["slower"]))


def _x(v: float | None, width: int) -> str:  # a speed-up, or - where nothing ran
    return f"{v:>{width - 1}.3f}x" if v is not None else f"{'-':>{width}}"


def format_knobs(result: KnobsResult) -> str:
    """Per family, the knob values that move it (`_shown`); per knob value, counts over
    all programs; per knob, a verdict."""
    s = result.summary
    lines = [f"{s['timed']} of {s['programs']} programs timed in {result.protocol['rounds']} "
             "rounds; speed-up = default/config, geometric mean over a family's programs;",
             f"shown: >= {WORTH:.2f}x or <= {1 / WORTH:.2f}x with a program beyond "
             "noise (95% interval) that way, or failing",
             f"{'family':16} {'knob=value':36} {'speed-up':>8} {'best':>7} "
             f"{'faster':>6} {'slower':>6} {'failed':>6}"]
    for fam, values in s["per_family"].items():
        for lb, f in values.items():
            if _shown(f):
                lines.append(f"{fam:16.16} {lb:36.36} {_x(f['geomean'], 8)} {_x(f['best'], 7)} "
                             f"{f['faster']:>6} {f['slower']:>6} {f['failed']:>6}")
    lines += ["", "over all programs: faster / slower beyond noise, faster by >= "
              f"{WORTH - 1:.0%} beyond noise, failed or mismatched",
              f"{'knob=value':36} {'faster':>6} {'>=5%':>6} {'slower':>6} {'failed':>6} {'of':>4}"]
    lines += [f"{lb:36.36} {c['faster']:>6} {c['faster_5pct']:>6} {c['slower']:>6} "
              f"{c['failed']:>6} {c['programs']:>4}" for lb, c in s["per_value"].items()]
    lines += ["", "verdicts:"] + [f"  {k:32} {v}" for k, v in s["verdicts"].items()]
    if s["default_failed"]:
        lines.append(f"default failed (left out): {', '.join(s['default_failed'])}")
    return "\n".join(lines)
