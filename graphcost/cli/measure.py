"""Commands that time programs on this machine: measure, collect, merge."""

from __future__ import annotations

from collections.abc import Callable

import click

from graphcost.cli.options import CORE, comma_list, timing_options
from graphcost.kinds import MEASURE_KINDS
from graphcost.xla.timing import COLLECTING


def _protocol_options(f: Callable) -> Callable:
    """The timing-protocol options shared by `measure` and `collect`."""
    f = click.option("--configs", "num_configs", default=16, show_default=True,
                     help="Distinct executables wanted per graph (the default config "
                          "included); configs are sampled until there are this many.")(f)
    f = timing_options(COLLECTING, max_run_s=True)(f)
    f = click.option("--rounds", default=COLLECTING.rounds, show_default=True,
                     help="Timing rounds, each in a fresh order with fresh inputs; τ between "
                          "two rounds is the noise ceiling.")(f)
    f = click.option("--min-time-s", default=COLLECTING.min_time_s, show_default=True,
                     help="Fast executables get more calls (up to 10x --runs) until each "
                          "round times one for this long.")(f)
    f = click.option("--statistic", type=click.Choice(["min", "median"]), default="min",
                     show_default=True, help="A round's runtime from its calls.")(f)
    f = click.option("--flush-cache", is_flag=True,
                     help="Overwrite a buffer twice the last-level cache before each call.")(f)
    f = click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Seed of the config sampling and of the split assignment.")(f)
    return f


def _command_line() -> str:
    """This command as typed, recorded in the manifests it writes."""
    import sys

    return " ".join(["graphcost", *sys.argv[1:]])


@click.command()
@click.argument("program")
@click.option("--kind", type=click.Choice(MEASURE_KINDS), default="layout:random",
              show_default=True)
@click.option("--programs", "source", default="graphcost.xla.programs:zoo", show_default=True,
              metavar="MODULE:FUNCTION", help="Where PROGRAM comes from.")
@click.option("--per-family", type=click.IntRange(min=1), default=4, show_default=True,
              help="Zoo programs per family.")
@click.option("--core", type=CORE, default=None, help="Pin to this core (default: unpinned).")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the graph.")
@click.option("--check-options", is_flag=True, help="Also list which option knobs XLA accepts.")
@_protocol_options
def measure(program: str, kind: str, source: str, per_family: int, core: int | None,
            out: str | None, check_options: bool, num_configs: int, runs: int, warmup: int,
            rounds: int, min_time_s: float, statistic: str, flush_cache: bool,
            max_run_s: float, seed: int) -> None:
    """Time the distinct executables of one PROGRAM's sampled configs (e.g. mlp.000)."""
    from graphcost.formats.npz import write_graph
    from graphcost.xla.collect import measure_program
    from graphcost.xla.plan import program_kwargs
    from graphcost.xla.timing import Protocol

    if check_options:
        from graphcost.xla.options import check_knobs

        for label, status in check_knobs().items():
            click.echo(f"  {label:45} {status}")
    try:
        protocol = Protocol(warmup, runs, rounds, max_run_s, flush_cache=flush_cache,
                            min_time_s=min_time_s, statistic=statistic)
        protocol.check()
        graph, report = measure_program(program, kind, source, program_kwargs(per_family),
                                        num_configs, seed, protocol, core)
    except ImportError as e:  # --programs names a module that does not import
        raise click.ClickException(str(e)) from None
    for i, (fp, r) in enumerate(report.timings.items()):
        rounds_us = " ".join(f"{x / 1e3:.1f}" for x in r.rounds_ns)
        detail = (f"runtime {r.runtime_ns / 1e3:9.1f} us  rounds {rounds_us} us  "
                  f"spread {r.spread:.3f}" if r.ok else f"FAILED {r.status}: {r.error}")
        click.echo(f"  executable {i:3d} ({fp:016x})  {detail}")
    for i, status, error in report.failed:
        click.echo(f"  config {i:3d} FAILED {status}: {error}")
    s = report.summary()
    click.echo(f"{program} {kind}: {s['sampled']} configs sampled, {s['distinct']} distinct "
               f"executables ({s['timed']} timed), {s['kept']} configs kept"
               f"{' (space exhausted)' if s['exhausted'] else ''}; compile "
               f"{report.compile_s:.1f}s, timing {report.time_s:.1f}s; max/min runtime "
               f"{s['runtime_max_over_min']}, round-to-round τ {s['noise_tau']}")
    if out and graph is not None:
        write_graph(out, graph, extra=report.extra)
        click.echo(f"wrote {out}")


@click.command()
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--programs", "sources", multiple=True, metavar="MODULE:FUNCTION",
              help="Program sources (repeatable); default: the built-in zoo.")
@click.option("--per-family", type=click.IntRange(min=1), default=4, show_default=True,
              help="Zoo programs per family.")
@click.option("--families", default=None, help="Comma-separated zoo families (default: all).")
@click.option("--kinds", default=",".join(MEASURE_KINDS), show_default=True,
              help=f"Comma-separated: {', '.join(MEASURE_KINDS)}.")
@click.option("--workers", type=click.IntRange(min=0), default=0, show_default=True,
              help="Worker processes (0: one/core).")
@click.option("--limit", type=click.IntRange(min=0), default=0, show_default=True,
              help="Stop after N graphs (0: all).")
@click.option("--pipeline/--no-pipeline", default=False, show_default=True,
              help="Compile on every core while one pinned core only times (compiling "
                   "paused while it times); without: each core compiles and times its own "
                   "graphs. `graphcost bench collect` compares them on your machine.")
@click.option("--quiet-timing/--shared-timing", default=True, show_default=True,
              help="With the pipeline: pause every compile worker while timing (quiet) or "
                   "only those on the timing core (shared: more compiling, more noise).")
@click.option("--retry-failed", is_flag=True, help="Measure graphs logged as failed again.")
@click.option("--cover", is_flag=True,
              help="Options: every one- and two-knob change of the default first, then "
                   "random configs: a table for `graphcost bench search`.")
@click.option("--shard", default="", metavar="I/N",
              help="Measure only shard I of N (0-based) of the planned graphs, e.g. one per "
                   "machine with the same options; combine with `graphcost merge`.")
@click.option("--ray", "ray", is_flag=False, flag_value="local", default=None,
              metavar="[ADDRESS]",
              help="Measure on Ray: one pinned timing slot per core of every node "
                   "(--workers caps the slots). No ADDRESS starts a local Ray instance "
                   "with this machine's cores; ADDRESS joins a cluster whose nodes were "
                   "started with `ray start --resources \"$(python -m "
                   "graphcost.xla.ray_pool)\"`. Needs `pip install 'graphcost[ray]'`.")
@_protocol_options
def collect(out: str, sources: tuple[str, ...], per_family: int, families: str | None,
            kinds: str, workers: int, limit: int, pipeline: bool, quiet_timing: bool,
            retry_failed: bool, cover: bool, shard: str, ray: str | None, num_configs: int,
            runs: int, warmup: int, rounds: int, min_time_s: float, statistic: str,
            flush_cache: bool, max_run_s: float, seed: int) -> None:
    """Measure programs x configs into TpuGraphs collections under OUT (resumable: a
    rerun with the same options measures only what is not written yet).

    Every graph that worked is written; exit 1 listing each graph that failed (this run
    or logged by an earlier one and not retried) with its first error line.

    The bundled dataset and how it was made: graphcost/sample/README.md.
    """
    from graphcost.progress import Progress
    from graphcost.xla.collect import collect as run_collect
    from graphcost.xla.plan import collect_spec
    from graphcost.xla.timing import Protocol

    spec = collect_spec(out, sources, per_family, comma_list(families), comma_list(kinds),
                        num_configs=num_configs, seed=seed, cover=cover,
                        protocol=Protocol(warmup, runs, rounds, max_run_s,
                                          flush_cache=flush_cache, min_time_s=min_time_s,
                                          statistic=statistic),
                        workers=workers, limit=limit, retry_failed=retry_failed, shard=shard,
                        pipeline=pipeline, quiet_timing=quiet_timing, ray=ray)
    bars: list = []

    def progress(total: int, initial: int):
        bar = Progress(total, "collect", "graphs", initial=initial)  # a line a graph off a tty
        bars.append(bar)
        seen = {"samples": 0, "taus": []}

        def tick(summary: dict) -> None:
            if summary["status"] == "ok":
                seen["samples"] += summary["kept"]
                if summary.get("noise_tau") is not None:
                    seen["taus"].append(summary["noise_tau"])
            minutes = bar.elapsed / 60
            taus = seen["taus"]
            task = summary["task"]
            bar.set_postfix(last=f"{task['kind']}/{task['program']}:{summary['status']}",
                            samples_per_min=round(seen["samples"] / minutes) if minutes else 0,
                            noise_tau=round(sum(taus) / len(taus), 3) if taus else None)
            bar.update(1)

        return tick

    try:
        result = run_collect(spec, progress, command=_command_line())
    except ImportError as e:  # --programs names a module that does not import
        raise click.ClickException(str(e)) from None
    finally:
        for bar in bars:
            bar.close()
    click.echo(f"{result.written} graphs written, {result.failed} failed, {result.skipped} "
               f"already done, {result.remaining} left; {result.samples} configs in "
               f"{result.wall_s / 60:.1f} min ({result.samples_per_minute:.0f} samples/min)")
    for name, m in sorted(result.manifests.items()):
        tau, ci = m.get("noise_ceiling_tau"), m.get("noise_ceiling_ci")
        click.echo(f"  {name:20} {m['splits']}  distinct/graph "
                   f"{m.get('distinct_executables_median')}  max/min median "
                   f"{m.get('runtime_max_over_min_median')}"
                   + (f"  noise ceiling τ {tau:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
                      if tau is not None else ""))
    for task, error in result.failures:
        click.echo(f"FAILED {task.kind} {task.program}: {error}")
    if result.failures:
        click.echo(f"{len(result.failures)} graphs failed (whole errors: {out}/log.jsonl; "
                   "--retry-failed measures them again)")
        raise SystemExit(1)


@click.command("merge")
@click.argument("out", type=click.Path(file_okay=False))
@click.argument("shards", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
def merge_cmd(out: str, shards: tuple[str, ...]) -> None:
    """Combine `collect --shard I/N` folders into one collection OUT; exit 1 listing every
    missing or duplicated graph."""
    from graphcost.xla.shard import MergeError, merge

    try:
        result = merge(out, shards, command=_command_line())
    except MergeError as e:
        click.echo(f"cannot merge {len(shards)} shard folders:\n{e}", err=True)
        raise SystemExit(1) from None
    click.echo(f"merged shards {', '.join(sorted(result.shards))}: {result.graphs} graphs, "
               f"{result.failed} failed, into {out}")
    for name, m in sorted(result.manifests.items()):
        click.echo(f"  {name:20} {m['splits']}")
