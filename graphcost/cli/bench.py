"""`graphcost bench …`: every benchmark, each over one module of `graphcost.bench`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from graphcost.atomic import write_json
from graphcost.cli.options import (
    comma_list,
    int_list,
    json_option,
    timing_options,
)
from graphcost.xla.timing import COLLECTING


@click.group()
def bench() -> None:
    """Benchmarks that print speed and memory figures."""


def bench_table(header: str, format_row: Callable[[Any], str], summarise: Callable[[Any], str],
                 json_path: str | None, run: Callable[[Callable[[Any], None]], Any]) -> Any:
    """Print a benchmark's rows as they come (`run(on_row)`), then its summary (bad
    settings raise UserError: a clean error); the result (a `graphcost.bench.BenchResult`)
    goes to `json_path` as its `to_json()` when one is given."""
    click.echo(header)
    result = run(lambda r: click.echo(format_row(r)))
    click.echo("\n" + summarise(result))
    if json_path:
        write_json(result.to_json(), json_path)
    return result


@bench.command("io")
@click.option("--configs", default=100_000, show_default=True, help="Configs of the big file.")
@click.option("--configurable", default=64, show_default=True, help="Configurable nodes.")
@click.option("--reads", default=64, show_default=True, help="Configs read per step.")
@click.option("--scan-files", default=200, show_default=True, help="Files in the scanned split.")
def bench_io_cmd(configs: int, configurable: int, reads: int, scan_files: int) -> None:
    """Time and peak memory of lazy config reads and of scanning a collection."""
    from graphcost.bench.io import bench_io

    result = bench_io(configs, configurable, reads, scan_files, log=click.echo)
    click.echo(f"{'step':50} {'runs':>4} {'seconds':>9} {'peak MiB':>9} {'private MiB':>12}")
    for r in result.rows:
        click.echo(f"{r['step']:50} {r['runs']:4d} {r['seconds']:9.4f} {r['peak_mib']:9.1f} "
                   f"{r['private_mib']:12.2f}")
    click.echo("peak counts memory-mapped file pages (shared, droppable); private is "
               "anonymous memory held by the result")


@bench.command("train")
@click.option("--model", "models", multiple=True, help="only these models (default: all)")
@click.option("--steps", type=int, default=20, show_default=True, help="timed training steps")
@click.option("--configs", type=int, default=128, show_default=True,
              help="configs of each inference graph")
@click.option("--threads", type=int, default=0, help="torch threads (0: torch's default)")
@json_option
def bench_train_cmd(models: tuple[str, ...], steps: int, configs: int, threads: int,
                    json_path: str | None) -> None:
    """Training graphs/s and configs/s, inference configs/s on 1k- and 10k-node graphs,
    and peak RSS, for the default ranker and every baseline on the same synthetic data."""
    from graphcost.bench.train import bench_train, format_bench

    result = bench_train(list(models) or None, steps=steps, inference_configs=configs,
                         threads=threads)
    click.echo(format_bench(result))
    if json_path:
        write_json(result.to_json(), json_path)


@bench.command("score")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(["layout", "tile"]),
              help="only these kinds (default: both)")
@click.option("--model", "models", multiple=True,
              help="only these models (default: every learned model of the kind)")
@click.option("--size", "sizes", multiple=True, type=click.IntRange(min=10),
              help="graph sizes in nodes (default: 1000, 10000, 50000)")
@click.option("--repeats", type=click.IntRange(min=1), default=2, show_default=True,
              help="interleaved rounds per figure (the median is reported)")
@click.option("--configs", type=click.IntRange(min=0), default=0,
              help="configs per call (0: 256 up to 10k nodes, 64 above)")
@json_option
def bench_score_cmd(kinds: tuple[str, ...], models: tuple[str, ...], sizes: tuple[int, ...],
                    repeats: int, configs: int, json_path: str | None) -> None:
    """Configs/s of the exact fast scoring paths against the plain forward pass, at one
    thread and at all, with peak memory and the largest score difference."""
    from graphcost.bench.score import HEADER, bench_score, format_row

    click.echo(HEADER)
    result = bench_score(kinds or ("layout", "tile"), models or None,
                         sizes or (1000, 10_000, 50_000), repeats, configs,
                         on_row=lambda r: click.echo(format_row(r)))
    if json_path:
        write_json(result.to_json(), json_path)


@bench.command("scale")
@click.option("--sizes", default="1000,10000,50000,200000", show_default=True,
              help="graph sizes in nodes, comma-separated")
@click.option("--modes", default="full,pruned,gst,gst-exact", show_default=True)
@click.option("--configs", type=int, default=32, show_default=True, help="configs per step")
@click.option("--num-configs", type=int, default=10000, show_default=True,
              help="configs stored per graph (read lazily)")
@click.option("--steps", type=int, default=3, show_default=True, help="timed steps")
@click.option("--segment-size", type=int, default=1000, show_default=True)
@click.option("--memory-budget", default="75%", show_default=True,
              help="skip full/pruned steps estimated above this ('75%', '8G')")
@click.option("--threads", type=int, default=0, help="torch threads (0: torch's default)")
@json_option
def bench_scale_cmd(sizes: str, modes: str, configs: int, num_configs: int, steps: int,
                    segment_size: int, memory_budget: str, threads: int,
                    json_path: str | None) -> None:
    """Peak RSS and seconds per step of full-graph, pruned and GST training on synthetic
    layout graphs of growing size, each in a fresh process, with growth exponents."""
    from graphcost.bench.scale import HEADER, bench_scale, format_row, format_scale

    bench_table(HEADER, format_row, format_scale, json_path, lambda on_row: bench_scale(
        [int(x) for x in comma_list(sizes)], comma_list(modes), configs, num_configs, steps,
        segment_size, memory_budget, threads, on_row=on_row))


@bench.command("replica")
@click.argument("collections", nargs=-1)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="folder for the replica, the read cache, logs and replica.json")
@click.option("--graphs", type=click.IntRange(min=0), default=2, show_default=True,
              help="graphs of the train and valid splits, each split's largest among them, "
                   "and the whole test split (0: the whole collection)")
@click.option("--epochs", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="a training setting for both trainings, as for `graphcost train`; repeatable")
@click.option("--seed", default=0, show_default=True)
@click.option("--keep", is_flag=True, help="keep each replica and its read cache")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="where the trainings, evaluations and the submission run")
@click.option("--max-configs", type=click.IntRange(min=0), default=0,
              help="cap every graph's configs (0: as published): a quicker rehearsal of "
                   "the same nodes")
@click.option("--compare-plain", is_flag=True,
              help="run every step also with the plain read cache (configs uncompressed, "
                   "as before the compact one), interleaved, to compare")
def bench_replica_cmd(collections: tuple[str, ...], out_dir: str, graphs: int, epochs: int,
                      sets: tuple[str, ...], seed: int, keep: bool, device: str,
                      max_configs: int, compare_plain: bool) -> None:
    """Write full-size replicas of the published TpuGraphs collections (default: all
    five) and time the user's path on each, every step in its own process with its peak
    RSS, projected to the whole collection (docs/replica.md)."""
    from graphcost.bench.replica import CACHES, bench_replica, format_summary

    result = bench_replica(collections, out_dir, graphs, epochs, sets, seed, keep,
                           log=click.echo, device=device, max_configs=max_configs,
                           caches=CACHES if compare_plain else CACHES[:1])
    click.echo("\n" + format_summary(result))


@bench.command("gst")
@click.option("--variants", default="full,gst,gst-nohead,gst-exact", show_default=True,
              help="full, gst (one segment back-propagated), gst-exact (every segment), "
                   "each gst one optionally with -nohead")
@click.option("--data", type=click.Path(exists=True), default=None,
              help="a layout collection (default: synthetic graphs)")
@click.option("--nodes", type=int, default=2000, show_default=True, help="synthetic: nodes")
@click.option("--graphs", type=int, default=16, show_default=True,
              help="synthetic: train and test graphs each")
@click.option("--num-configs", type=int, default=64, show_default=True,
              help="synthetic: configs per graph")
@click.option("--segment-size", type=int, default=500, show_default=True)
@click.option("--epochs", type=int, default=40, show_default=True)
@click.option("--gst-epochs", type=int, default=0,
              help="main-phase epochs of the GST variants (default: --epochs); one segment "
                   "of S per step needs about S times the epochs for the same gradient signal")
@click.option("--configs", type=int, default=16, show_default=True,
              help="configs per graph and step")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--repeats", type=int, default=1, show_default=True,
              help="trainings per variant (seeds seed, seed+1, …); each graph's τ is averaged")
@click.option("--jobs", type=int, default=1, show_default=True,
              help="trainings run at once, one process each")
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads per job")
@json_option
def bench_gst_cmd(variants: str, data: str | None, nodes: int, graphs: int, num_configs: int,
                  segment_size: int, epochs: int, gst_epochs: int, configs: int, seed: int,
                  repeats: int, jobs: int, threads: int, json_path: str | None) -> None:
    """Held-out τ of GST against full-graph training on the same data and seed, with
    95% intervals, the paired difference and the head fine-tuning effect."""
    from graphcost.bench.gst import (
        HEADER,
        GstBenchSpec,
        bench_gst,
        describe,
        format_gst,
        format_row,
    )

    spec = GstBenchSpec(data=data, nodes=nodes, graphs=graphs, num_configs=num_configs,
                        segment_size=segment_size, epochs=epochs, gst_epochs=gst_epochs,
                        configs_per_graph=configs, seed=seed, repeats=repeats,
                        threads=threads)
    click.echo(describe(spec))
    bench_table(HEADER, format_row, format_gst, json_path, lambda on_row: bench_gst(
        comma_list(variants), spec, jobs, on_row=on_row))


@bench.command("collect")
@click.option("--families", default="mlp,cnn_nhwc,transformer,reduction", show_default=True,
              help="Comma-separated zoo families.")
@click.option("--per-family", default=2, show_default=True, help="Programs per family.")
@click.option("--kinds", default="layout:random,options", show_default=True)
@click.option("--configs", default=16, show_default=True,
              help="Distinct executables per graph.")
@timing_options(COLLECTING)
@click.option("--rounds", default=COLLECTING.rounds, show_default=True)
@click.option("--repeats", default=1, show_default=True,
              help="Runs per mode, the modes alternating.")
@click.option("--modes", default="off,on", show_default=True,
              help="off (each core compiles and times), on (pipeline, every compile worker "
                   "paused while timing), shared (pipeline, only the timing core's paused), "
                   "ray (a local Ray instance, a timing slot per core); MODE:N with N "
                   "workers, e.g. ray:1,ray:2. The first is the baseline of the ratios and "
                   "paired differences.")
@click.option("--workers", default=0, show_default=True, help="Worker processes (0: one/core).")
@json_option
def bench_collect_cmd(families: str, per_family: int, kinds: str, configs: int, runs: int,
                      warmup: int, rounds: int, repeats: int, modes: str, workers: int,
                      json_path: str | None) -> None:
    """Samples/min and noise ceiling of `collect` in each mode (pipeline, Ray, workers),
    same programs."""
    from graphcost.bench.collect import HEADER, bench_collect, format_collect, format_row
    from graphcost.xla.timing import Protocol

    protocol = Protocol(warmup, runs, rounds)
    bench_table(HEADER, format_row, format_collect, json_path, lambda on_row: bench_collect(
        comma_list(families), per_family, comma_list(kinds), configs, protocol, repeats,
        workers, comma_list(modes), on_row=on_row))


@bench.command("baselines")
@click.option("--data", type=click.Path(exists=True, file_okay=False), default=None,
              help="Folder holding npz/ (default: the bundled dataset).")
@click.option("--seeds", default="0,1,2", show_default=True)
@click.option("--collections", default=None,
              help="Comma-separated, e.g. layout/cpu/default (default: all bundled).")
@click.option("--models", default=None, help="Comma-separated baselines (default: all).")
@click.option("--official", type=click.Path(exists=True, file_okay=False), default=None,
              help="Folder of the official TF code's run results (see docs/baselines.md).")
@click.option("--jobs", default=1, show_default=True, help="Runs at once.")
@click.option("--threads", default=1, show_default=True, help="Torch threads per run.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Also draw every run's validation OPA per epoch into this PNG.")
@json_option
def bench_baselines_cmd(data: str | None, seeds: str, collections: str | None,
                        models: str | None, official: str | None, jobs: int, threads: int,
                        plot_path: str | None, json_path: str | None) -> None:
    """Each official baseline at its official settings on each bundled collection, over
    seeds: test τ / tile score with 95% intervals, s/epoch, peak MB; beside the official
    code's results on the same graphs with `--official`."""
    from graphcost.atomic import check_writable
    from graphcost.bench.baselines import (
        HEADER,
        bench_baselines,
        format_baselines,
        format_row,
        plot_curves,
    )
    from graphcost.data.inspect import sample_collections

    seed_list = int_list(seeds, "--seeds")
    if plot_path:
        check_writable(plot_path)
    result = bench_table(HEADER, format_row, format_baselines, json_path,
                          lambda on_row: bench_baselines(
                              data or sample_collections(), seed_list,
                              collections and comma_list(collections),
                              models and comma_list(models), official, jobs, threads,
                              on_row=on_row))
    if plot_path:
        click.echo(f"learning curves: {plot_curves(result, plot_path)}")
