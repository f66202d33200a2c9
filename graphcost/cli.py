"""The `graphcost` command: thin click wrappers over functions tests can call too."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="graphcost")
def main() -> None:
    """graphcost: a learned cost model for ML compilers."""


@main.group()
def bench() -> None:
    """Benchmarks that print speed and memory figures."""


# ---------------------------------------------------------------- data (formats/, data/)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


@main.command()
@click.argument("path", required=False, type=click.Path(exists=True))
@click.option("--sample", is_flag=True, help="Summarise the dataset bundled with graphcost.")
def info(path: str | None, sample: bool) -> None:
    """Summarise a .npz file or every collection below PATH (from array headers only)."""
    from graphcost.data.inspect import sample_root, summarize

    if sample or path is None:
        path = str(sample_root())
        click.echo(f"bundled sample: {path}")
    header = f"{'collection / split':34} {'kind':7} {'graphs':>6} {'bytes':>10}  " \
             f"{'nodes min/med/max':>22} {'edges min/med/max':>22} " \
             f"{'configs min/med/max':>22} {'configurable':>18}"
    click.echo(header)
    for s in summarize(path):
        def mmm(st) -> str:
            return f"{st.min:.0f}/{st.median:.0f}/{st.max:.0f}"
        click.echo(f"{s.name:34} {s.kind:7} {s.files:6d} {_fmt_bytes(s.bytes):>10}  "
                   f"{mmm(s.nodes):>22} {mmm(s.edges):>22} {mmm(s.configs):>22} "
                   f"{mmm(s.configurable):>18}")
        for e in s.unreadable:
            click.echo(f"  unreadable: {e}", err=True)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
def validate(paths: tuple[str, ...]) -> None:
    """Check .npz files or whole collections fully; exit 1 listing every bad file."""
    from tqdm import tqdm

    from graphcost.data.inspect import expand_paths, validate_paths

    n = len(expand_paths(paths))
    bad = validate_paths(paths, progress=lambda it: tqdm(it, total=n, desc="validate", disable=None,
                                                         unit="file", leave=False))
    for e in bad:
        click.echo(f"BAD {e}")
    click.echo(f"{n - len(bad)} of {n} files valid, {len(bad)} bad")
    if bad:
        raise SystemExit(1)


@bench.command("io")
@click.option("--configs", default=100_000, show_default=True, help="Configs of the big file.")
@click.option("--configurable", default=64, show_default=True, help="Configurable nodes.")
@click.option("--reads", default=64, show_default=True, help="Configs read per step.")
@click.option("--scan-files", default=200, show_default=True, help="Files in the scanned split.")
def bench_io_cmd(configs: int, configurable: int, reads: int, scan_files: int) -> None:
    """Time and peak memory of lazy config reads and of scanning a collection."""
    from graphcost.bench.io import bench_io

    rows = bench_io(configs, configurable, reads, scan_files, log=click.echo)
    click.echo(f"{'step':50} {'runs':>4} {'seconds':>9} {'peak MiB':>9} {'private MiB':>12}")
    for r in rows:
        click.echo(f"{r['step']:50} {r['runs']:4d} {r['seconds']:9.4f} {r['peak_mib']:9.1f} "
                   f"{r['private_mib']:12.2f}")
    click.echo("peak counts memory-mapped file pages (shared, droppable); private is "
               "anonymous memory held by the result")

# ---------------------------------------------------------------- convert, extract (issue 4)


@main.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--store", is_flag=True, help="Write uncompressed (memory-mappable) .npz.")
def convert(inputs: tuple[str, ...], out_dir: str, store: bool) -> None:
    """Convert TPU tuning records (.pb) to OUT_DIR/{tile,layout}/*.npz; exit 1 on bad records."""
    from graphcost.formats.tuning import DROP_RULES, convert_files

    bad = 0
    for r in convert_files(list(inputs), out_dir, compress=not store):
        click.echo(f"{r.source}: {len(r.written)} graphs written")
        for g, path in zip(r.graphs, r.written, strict=True):
            click.echo(f"  {g.kind:6} {g.num_nodes:6d} nodes {g.num_configs:6d} configs  {path}")
        for reason, count in sorted(r.dropped_runs.items()):
            click.echo(f"  dropped {count} runs: {reason} ({DROP_RULES[reason]})")
        for record, reason in r.skipped:
            click.echo(f"  skipped {record}: {reason} ({DROP_RULES[reason]})")
        if r.unknown_opcodes:
            click.echo(f"  warning: opcodes outside DESIGN §3 (id 0): {dict(r.unknown_opcodes)}")
        for e in r.errors:
            click.echo(f"  BAD {e}", err=True)
        bad += len(r.errors)
    if bad:
        raise SystemExit(1)


@main.command()
@click.argument("spec", metavar="MODULE:FUNCTION")
@click.argument("out", type=click.Path(dir_okay=False))
def extract(spec: str, out: str) -> None:
    """Compile a JAX program (FUNCTION returns (callable, example_args)) to a program graph."""
    from graphcost.formats.errors import GraphFileError
    from graphcost.formats.npz import write_graph
    from graphcost.xla.extract import extract_jax, load_program

    try:
        fn, args = load_program(spec)
        g = extract_jax(fn, args, name=spec.rpartition(":")[2])
    except (GraphFileError, ImportError) as e:
        raise click.ClickException(str(e)) from None
    write_graph(out, g)
    click.echo(f"{out}: {g.num_nodes} nodes, {len(g.edge_index)} edges, "
               f"{len(g.node_splits)} computations (program graph: no measured configs)")


# ---------------------------------------------------------------- models (issue 3)


def _parse_sets(pairs: tuple[str, ...]) -> tuple[dict, dict]:
    """`--set key=value` pairs → (training settings, model settings), by field name."""
    import ast
    import dataclasses

    from graphcost.train.trainer import TrainSettings

    train_fields = {f.name for f in dataclasses.fields(TrainSettings)}
    train_kw, model_kw = {}, {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"expected key=value, got '{pair}'", param_hint="--set")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        (train_kw if key in train_fields else model_kw)[key] = value
    return train_kw, model_kw


@main.command("train")
@click.argument("data", type=click.Path(exists=True))
@click.option("--model", "model_name", default="ranker", show_default=True,
              help="ranker, or a baseline: sage-early, sage-late, mlp (tile), resgcn (layout)")
@click.option("--out", "out_dir", required=True, type=click.Path(), help="run directory")
@click.option("--resume", is_flag=True, help="continue from OUT/last.pt")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--epochs", type=int, default=None)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="a training setting (lr, configs_per_graph, loss, …) or model setting "
                   "(hidden, layers, prune_hops, …); repeatable")
@click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="data-parallel processes on this machine (DDP via torchrun; with --device "
                   "cuda one per GPU); the global batch stays graphs_per_batch")
def train_cmd(data: str, model_name: str, out_dir: str, resume: bool, device: str, seed: int,
              epochs: int | None, sets: tuple[str, ...], nproc: int) -> None:
    """Train a ranking model on a collection (its train split; valid for early stopping)."""
    from graphcost.train.distributed import is_main_process, launch
    from graphcost.train.tasks import train_model
    from graphcost.train.trainer import TrainSettings

    if nproc > 1:  # the same command in nproc processes, under torchrun
        args = ["train", data, "--model", model_name, "--out", out_dir, "--device", device,
                "--seed", str(seed), *(["--resume"] if resume else []),
                *(["--epochs", str(epochs)] if epochs is not None else []),
                *(a for s in sets for a in ("--set", s))]
        try:
            code = launch(nproc, args)
        except RuntimeError as e:
            raise click.ClickException(str(e)) from None
        raise SystemExit(code)
    train_kw, model_kw = _parse_sets(sets)
    train_kw.update(device=device, seed=seed)
    if epochs is not None:
        train_kw["epochs"] = epochs
    from graphcost.train.gst import MemoryBudgetError

    try:
        _, result = train_model(data, model_name, out_dir, TrainSettings(**train_kw), model_kw,
                                resume)
    except MemoryBudgetError as e:  # said before training starts, with what to do instead
        raise click.ClickException(str(e)) from None
    if is_main_process():  # under torchrun: one summary, from rank 0
        click.echo(f"{result['collection']}: best epoch {result['best_epoch']} "
                   f"(score {result['best_score']:.4f}); model in {out_dir}")


@main.command("evaluate")
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.argument("data", type=click.Path(exists=True))
@click.option("--split", default="valid", show_default=True)
@click.option("--max-configs", type=int, default=0, help="score a fixed subset per graph (0: all)")
@click.option("--json", "json_path", type=click.Path(), default=None, help="also write JSON here")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
def evaluate_cmd(model: str, data: str, split: str, max_configs: int, json_path: str | None,
                 device: str) -> None:
    """Metrics of a saved model on a split: per-graph table and means with 95% intervals."""
    from graphcost.train.tasks import evaluate_model, format_report, write_json

    report = evaluate_model(model, data, split, max_configs=max_configs, device=device)
    click.echo(format_report(report))
    if json_path:
        write_json(report, json_path)


@main.command("predict")
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.argument("graph", type=click.Path(exists=True, dir_okay=False))
@click.option("--top", type=int, default=0, help="print only the best N (0: all)")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
def predict_cmd(model: str, graph: str, top: int, device: str) -> None:
    """Rank the configs of one .npz: `rank index score`, fastest first."""
    from graphcost.train.tasks import predict_file

    order, scores = predict_file(model, graph, device=device)
    for rank, i in enumerate(order[:top] if top else order):
        click.echo(f"{rank}\t{int(i)}\t{scores[i]:.6f}")


@main.command("submit")
@click.argument("data", type=click.Path(exists=True, file_okay=False))
@click.option("--model", "-m", "models", multiple=True, required=True,
              metavar="COLLECTION=MODEL.pt", help="a model per collection; repeatable")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False))
@click.option("--split", default="test", show_default=True)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
def submit_cmd(data: str, models: tuple[str, ...], out_path: str, split: str, device: str) -> None:
    """Write a competition CSV ranking every graph of SPLIT of the named collections."""
    from graphcost.data.collection import find_collections
    from graphcost.train.tasks import make_submission

    mapping = {}
    for item in models:
        name, sep, path = item.rpartition("=")
        if not sep:  # a bare model path: only for a root holding one collection
            found = find_collections(data)
            if len(found) != 1:
                raise click.BadParameter(f"name the collection: one of {sorted(found)}",
                                         param_hint="--model")
            name, path = next(iter(found)), item
        mapping[name] = path
    out = make_submission(mapping, data, out_path, split=split, device=device)
    click.echo(f"wrote {out}")


@bench.command("train")
@click.option("--model", "models", multiple=True, help="only these models (default: all)")
@click.option("--steps", type=int, default=20, show_default=True, help="timed training steps")
@click.option("--configs", type=int, default=128, show_default=True,
              help="configs of each inference graph")
@click.option("--threads", type=int, default=0, help="torch threads (0: torch's default)")
@click.option("--json", "json_path", type=click.Path(), default=None)
def bench_train_cmd(models: tuple[str, ...], steps: int, configs: int, threads: int,
                    json_path: str | None) -> None:
    """Training graphs/s and configs/s, inference configs/s on 1k- and 10k-node graphs,
    and peak RSS, for the default ranker and every baseline on the same synthetic data."""
    import json

    from graphcost.train.bench import bench_train, format_bench

    rows = bench_train(list(models) or None, steps=steps, inference_configs=configs,
                       threads=threads)
    click.echo(format_bench(rows))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)


# ---------------------------------------------------------------- measure, collect (issue 5)


def _protocol_options(f):
    """The timing-protocol options shared by `measure` and `collect`."""
    f = click.option("--configs", "num_configs", default=16, show_default=True,
                     help="Configs sampled per graph (the default config included).")(f)
    f = click.option("--runs", default=20, show_default=True, help="Timed rounds.")(f)
    f = click.option("--warmup", default=3, show_default=True, help="Untimed rounds first.")(f)
    f = click.option("--max-run-s", default=0.25, show_default=True,
                     help="A config whose single run is slower fails.")(f)
    f = click.option("--seed", default=0, show_default=True,
                     help="Seed of the config sampling and of the split assignment.")(f)
    return f


def _program_kwargs(per_family: int, families: str | None) -> dict:
    kwargs: dict = {"per_family": per_family}
    if families:
        kwargs["families"] = [f.strip() for f in families.split(",") if f.strip()]
    return kwargs


@main.command()
@click.argument("program")
@click.option("--kind", type=click.Choice(["layout:random", "layout:default", "options"]),
              default="layout:random", show_default=True)
@click.option("--programs", "source", default="graphcost.xla.programs:zoo", show_default=True,
              metavar="MODULE:FUNCTION", help="Where PROGRAM comes from.")
@click.option("--per-family", default=4, show_default=True, help="Zoo programs per family.")
@click.option("--core", type=int, default=None, help="Pin to this core (default: unpinned).")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Write the graph.")
@click.option("--check-options", is_flag=True, help="Also list which option knobs XLA accepts.")
@_protocol_options
def measure(program: str, kind: str, source: str, per_family: int, core: int | None,
            out: str | None, check_options: bool, num_configs: int, runs: int, warmup: int,
            max_run_s: float, seed: int) -> None:
    """Time the sampled configs of one PROGRAM (e.g. mlp.000) and print each one."""
    from graphcost.formats.npz import write_graph
    from graphcost.xla.collect import measure_program
    from graphcost.xla.measure import Protocol

    if check_options:
        from graphcost.xla.configs import check_knobs

        for label, status in check_knobs().items():
            click.echo(f"  {label:45} {status}")
    try:
        graph, report = measure_program(program, kind, source, _program_kwargs(per_family, None),
                                        num_configs, seed, Protocol(warmup, runs, max_run_s),
                                        core)
    except (ImportError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    for i, r in enumerate(report.results):
        detail = (f"median {r.median_ns / 1e3:9.1f} us  min {r.min_ns / 1e3:9.1f} us  "
                  f"spread {r.spread:.3f}" if r.ok else f"FAILED {r.status}: {r.error}")
        click.echo(f"  config {i:3d}  {detail}")
    s = report.summary()
    click.echo(f"{program} {kind}: {len(report.kept)}/{len(report.results)} configs ok, "
               f"compile {report.compile_s:.1f}s, total {report.time_s:.1f}s, "
               f"max/min runtime {s['runtime_max_over_min']}")
    if out and graph is not None:
        write_graph(out, graph)
        click.echo(f"wrote {out}")


@main.command()
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--programs", "sources", multiple=True, metavar="MODULE:FUNCTION",
              help="Program sources (repeatable); default: the built-in zoo.")
@click.option("--per-family", default=4, show_default=True, help="Zoo programs per family.")
@click.option("--families", default=None, help="Comma-separated zoo families (default: all).")
@click.option("--kinds", default="layout:random,layout:default,options", show_default=True,
              help="Comma-separated: layout:random, layout:default, options.")
@click.option("--workers", default=0, show_default=True, help="Worker processes (0: one/core).")
@click.option("--limit", default=0, show_default=True, help="Stop after N graphs (0: all).")
@click.option("--repeat", default=0, show_default=True,
              help="Re-time N graphs per kind in fresh processes: the noise ceiling τ.")
@click.option("--retry-failed", is_flag=True, help="Measure graphs logged as failed again.")
@click.option("--shard", default="", metavar="I/N",
              help="Measure only shard I of N (0-based) of the planned graphs, e.g. one per "
                   "machine with the same options; combine with `graphcost merge`.")
@_protocol_options
def collect(out: str, sources: tuple[str, ...], per_family: int, families: str | None,
            kinds: str, workers: int, limit: int, repeat: int, retry_failed: bool, shard: str,
            num_configs: int, runs: int, warmup: int, max_run_s: float, seed: int) -> None:
    """Measure programs x configs into TpuGraphs collections under OUT (resumable).

    The bundled dataset: graphcost collect build/sample --per-family 12 --configs 24
    --repeat 3, then copy build/sample/npz/{layout,options}/cpu into graphcost/sample/npz/.
    """
    import sys

    from tqdm import tqdm

    from graphcost.xla.collect import DEFAULT_PROGRAMS, CollectSpec
    from graphcost.xla.collect import collect as run_collect
    from graphcost.xla.measure import Protocol

    try:
        spec = CollectSpec(out=out, programs=list(sources) or [DEFAULT_PROGRAMS],
                           program_kwargs=_program_kwargs(per_family, families),
                           kinds=[k.strip() for k in kinds.split(",") if k.strip()],
                           num_configs=num_configs, seed=seed,
                           protocol=Protocol(warmup, runs, max_run_s), workers=workers,
                           limit=limit, retry_failed=retry_failed, shard=shard)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    bars: list = []

    def progress(total: int, initial: int):
        bar = tqdm(total=total, initial=initial, unit="graph", dynamic_ncols=True)
        bars.append(bar)
        return bar.update

    try:
        result = run_collect(spec, progress, repeat, command=" ".join(["graphcost", *sys.argv[1:]]))
    except (ImportError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    finally:
        for bar in bars:
            bar.close()
    click.echo(f"{result.written} graphs written, {result.failed} failed, {result.skipped} "
               f"already done, {result.remaining} left")
    for name, m in sorted(result.manifests.items()):
        tau = m.get("noise_ceiling_tau")
        click.echo(f"  {name:20} {m['splits']}  {m['samples_per_minute_per_core']} samples/min/"
                   f"core  configs failed {m['configs_failed']}"
                   + (f"  noise-ceiling τ {tau:.3f}" if tau is not None else ""))


# ---------------------------------------------------------------- demo, report (issue 8)


@main.command()
@click.option("--out", "out_dir", default="runs/demo", show_default=True, type=click.Path())
@click.option("--data", type=click.Path(exists=True), default=None,
              help="a dataset root (default: the bundled dataset)")
@click.option("--quick", is_flag=True, help="a smoke run: two epochs, first collection only")
@click.option("--epochs", type=int, default=None)
@click.option("--seed", type=int, default=0, show_default=True)
def demo(out_dir: str, data: str | None, quick: bool, epochs: int | None, seed: int) -> None:
    """Train the default ranker and the baseline on the bundled dataset, evaluate, report."""
    from graphcost.demo import DemoSettings, run_demo

    s = DemoSettings(quick=quick, seed=seed)
    if epochs is not None:
        s.epochs = epochs
    run_demo(out_dir, data, s, log=click.echo)


@main.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--data", type=click.Path(exists=True), default=None,
              help="the collection (default: the one in RUN_DIR/run.json)")
@click.option("--split", default="test", show_default=True)
@click.option("--out", "out_dir", type=click.Path(), default=None,
              help="report folder (default: RUN_DIR/report)")
def report(run_dir: str, data: str | None, split: str, out_dir: str | None) -> None:
    """Evaluate a training run and write its report: curves, per-graph τ, scatter."""
    from graphcost.demo import report_run

    click.echo(f"report: {report_run(run_dir, out_dir, data, split)}")

# ---- autotune (issue 7)


def _pin_cli(core: int | None, no_pin: bool) -> int | None:
    """Pin this whole process (before JAX starts its threads), as the protocol wants."""
    import os

    if no_pin:
        return None
    core = min(os.sched_getaffinity(0)) if core is None else core
    os.sched_setaffinity(0, {core})
    return core


def _autotune_options(f):
    """Search and measurement options shared by `autotune` and `bench autotune`."""
    f = click.option("--k", default=5, show_default=True,
                     help="Measure the model's best K and K random configs (and the default).")(f)
    f = click.option("--samples", default=1024, show_default=True,
                     help="Configs sampled before searching.")(f)
    f = click.option("--evaluations", default=4096, show_default=True,
                     help="Model scores the search may spend (sample included).")(f)
    f = click.option("--runs", default=20, show_default=True, help="Timed rounds.")(f)
    f = click.option("--warmup", default=3, show_default=True, help="Untimed rounds first.")(f)
    f = click.option("--core", type=int, default=None,
                     help="Pin to this core (default: the first one allowed).")(f)
    f = click.option("--no-pin", is_flag=True, help="Do not pin (timings drift more).")(f)
    f = click.option("--seed", default=0, show_default=True)(f)
    return f


@main.command("autotune")
@click.argument("spec", metavar="MODULE:FUNCTION|PROGRAM")
@click.option("--model", "model_path", required=True,
              type=click.Path(exists=True, dir_okay=False),
              help="A saved model: layout models tune layouts, tile models compiler options.")
@click.option("--out", default="autotune.json", show_default=True,
              type=click.Path(dir_okay=False), help="Where to write the chosen config.")
@click.option("--report", "report_path", default=None, type=click.Path(dir_okay=False),
              help="Also write every measurement and figure as JSON.")
@_autotune_options
def autotune_cmd(spec: str, model_path: str, out: str, report_path: str | None, k: int,
                 samples: int, evaluations: int, runs: int, warmup: int, core: int | None,
                 no_pin: bool, seed: int) -> None:
    """Search a program's configs with a model, measure the best, write the chosen config.

    SPEC is MODULE:FUNCTION (FUNCTION returns (callable, example_args)) or a zoo
    program name such as mlp.000.
    """
    import json

    core = _pin_cli(core, no_pin)
    from graphcost.autotune.tune import (
        autotune,
        format_result,
        how_to_apply,
        load_target,
        save_config,
    )
    from graphcost.formats.errors import GraphFileError
    from graphcost.xla.measure import Protocol

    try:
        name, fn, args = load_target(spec)
        result = autotune(fn, args, model_path, name=name, k=k, samples=samples,
                          evaluations=evaluations, protocol=Protocol(warmup, runs), seed=seed,
                          log=click.echo)
    except (GraphFileError, ImportError, ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from None
    click.echo(format_result(result))
    save_config(result.config, out)
    click.echo(f"wrote {out}" + (f" (pinned to core {core})" if core is not None else ""))
    click.echo(how_to_apply(result.config, out))
    if report_path:
        with open(report_path, "w") as f:
            json.dump(result.to_dict(), f, indent=1, default=float)


@main.command("apply")
@click.argument("config_path", metavar="CONFIG.json", type=click.Path(exists=True, dir_okay=False))
@click.argument("spec", metavar="MODULE:FUNCTION|PROGRAM")
def apply_cmd(config_path: str, spec: str) -> None:
    """Compile a program with an autotuned config, run it once and compare with jax.jit."""
    import jax

    from graphcost.autotune.tune import apply, how_to_apply, load_config, load_target
    from graphcost.formats.errors import GraphFileError
    from graphcost.xla.measure import outputs_agree

    try:
        name, fn, args = load_target(spec)
        config = load_config(config_path)
        run = apply(fn, args, config)
    except (GraphFileError, ImportError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    got = jax.tree.leaves(jax.block_until_ready(run(*args)))
    want = jax.tree.leaves(jax.jit(fn)(*args))
    same = outputs_agree(got, want)
    click.echo(f"{name}: compiled with {config_path}; outputs "
               f"{'match' if same else 'DIFFER FROM'} plain jax.jit")
    click.echo(how_to_apply(config, config_path))
    if not same:
        raise SystemExit(1)


@bench.command("autotune")
@click.option("--model", "model_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="A saved model (then name the held-out programs or --families).")
@click.option("--data", default=None, type=click.Path(exists=True, file_okay=False),
              help="Train a small ranker on this collection; its families are held out.")
@click.option("--kind", type=click.Choice(["layout", "options"]), default="layout",
              show_default=True, help="What to measure for training when neither is given.")
@click.option("--train-families", default=",".join(("mlp", "cnn_nchw", "depthwise",
                                                      "transformer")), show_default=True,
              help="Families measured for training when neither --model nor --data is given.")
@click.option("--families", default=None, help="Comma-separated families to tune "
              "(default: every zoo family not used for training).")
@click.option("--programs", default=None, help="Comma-separated program names to tune.")
@click.option("--per-family", default=1, show_default=True, help="Programs tuned per family.")
@click.option("--epochs", default=30, show_default=True, help="Training epochs (small ranker).")
@click.option("--json", "json_path", type=click.Path(), default=None)
@_autotune_options
def bench_autotune_cmd(model_path: str | None, data: str | None, kind: str, train_families: str,
                       families: str | None, programs: str | None, per_family: int,
                       epochs: int, json_path: str | None, k: int, samples: int,
                       evaluations: int, runs: int, warmup: int, core: int | None,
                       no_pin: bool, seed: int) -> None:
    """Measured speed-ups over default and random-K on held-out programs, and candidates/s."""
    import json

    core = _pin_cli(core, no_pin)
    from graphcost.autotune.bench import (
        bench_autotune,
        format_bench,
        held_out_programs,
        model_from_collection,
        model_from_measurements,
    )
    from graphcost.xla.measure import Protocol

    split = lambda s: [x.strip() for x in s.split(",") if x.strip()] if s else []  # noqa: E731
    if model_path:
        from graphcost.models.model import Model

        model, info = Model.load(model_path), {"source": f"loaded from {model_path}",
                                               "families_seen": ["(unknown)"]}
        seen: list[str] = []
    elif data:
        model, info = model_from_collection(data, epochs, seed)
        seen = info["families_seen"]
    else:
        model, info = model_from_measurements(kind, split(train_families), epochs=epochs,
                                              seed=seed, log=click.echo)
        seen = info["families_seen"]
    names = split(programs) or held_out_programs(seen, per_family, split(families) or None)
    result = bench_autotune(names, model, info, k, samples, evaluations, Protocol(warmup, runs),
                            seed, None, log=click.echo)
    result["core"] = core
    click.echo(format_bench(result))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1, default=float)


# ---- scale, GST (issue 6)


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
@click.option("--json", "json_path", type=click.Path(), default=None)
def bench_scale_cmd(sizes: str, modes: str, configs: int, num_configs: int, steps: int,
                    segment_size: int, memory_budget: str, threads: int,
                    json_path: str | None) -> None:
    """Peak RSS and seconds per step of full-graph, pruned and GST training on synthetic
    layout graphs of growing size, each in a fresh process, with growth exponents."""
    from graphcost.bench.scale import HEADER, bench_scale, format_row, format_scale

    _bench_table(HEADER, format_row, format_scale, json_path, lambda on_row: bench_scale(
        [int(x) for x in sizes.split(",") if x.strip()],
        [m.strip() for m in modes.split(",") if m.strip()], configs, num_configs, steps,
        segment_size, memory_budget, threads, on_row=on_row))


def _bench_table(header: str, format_row, summarise, json_path: str | None, run) -> None:
    """Print a benchmark's rows as they come (`run(on_row)`), then its summary; bad
    settings are a clean error; the result goes to `json_path` when one is given."""
    import json

    click.echo(header)
    try:
        result = run(lambda r: click.echo(format_row(r)))
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    click.echo("\n" + summarise(result))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)


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
@click.option("--json", "json_path", type=click.Path(), default=None)
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
    _bench_table(HEADER, format_row, format_gst, json_path, lambda on_row: bench_gst(
        [v.strip() for v in variants.split(",") if v.strip()], spec, jobs, on_row=on_row))


# ---- distributed (issue 9)


@main.command("merge")
@click.argument("out", type=click.Path(file_okay=False))
@click.argument("shards", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
def merge_cmd(out: str, shards: tuple[str, ...]) -> None:
    """Combine `collect --shard I/N` folders into one collection OUT; exit 1 listing every
    missing or duplicated graph."""
    import sys

    from graphcost.xla.shard import MergeError, merge

    try:
        result = merge(out, shards, command=" ".join(["graphcost", *sys.argv[1:]]))
    except MergeError as e:
        click.echo(f"cannot merge {len(shards)} shard folders:\n{e}", err=True)
        raise SystemExit(1) from None
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"merged shards {', '.join(sorted(result.shards))}: {result.graphs} graphs, "
               f"{result.failed} failed, into {out}")
    for name, m in sorted(result.manifests.items()):
        click.echo(f"  {name:20} {m['splits']}")
