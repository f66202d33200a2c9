"""`graphcost bench …` that time or tune: what tuning finds for a budget of measurements,
the option knobs it searches, and how noisy the timing core is. The commands join the
`bench` group of `cli.bench`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from graphcost.atomic import check_writable, write_json
from graphcost.cli.bench import bench, bench_table
from graphcost.cli.options import (
    CORE,
    ModelOption,
    comma_list,
    int_list,
    json_option,
    pin,
    timing_options,
)
from graphcost.kinds import SPACES
from graphcost.xla.timing import AUTOTUNING, COLLECTING


def held_out_options(f: Callable) -> Callable:
    """Where the model comes from and which held-out programs to tune: the options
    of `bench pool` (see `held_out`)."""
    options = [
        click.option("--model", "model_path", default=None,
                     type=click.Path(exists=True, dir_okay=False),
                     help="A saved model (then name the held-out programs or --families)."),
        click.option("--data", default=None, type=click.Path(exists=True, file_okay=False),
                     help="Train a small ranker on this collection; its families are held out."),
        click.option("--kind", type=click.Choice(SPACES), default="layout", show_default=True,
                     help="What to measure for training when neither is given."),
        click.option("--train-families", show_default=True,  # bench.heldout.TRAIN_FAMILIES
                     default=",".join(("mlp", "cnn_nchw", "depthwise", "transformer")),
                     help="Families measured for training when neither --model nor --data "
                          "is given."),
        click.option("--families", default=None, help="Comma-separated families to tune "
                     "(default: every zoo family not used for training)."),
        click.option("--programs", default=None, help="Comma-separated program names to tune."),
        click.option("--per-family", default=1, show_default=True,
                     help="Programs tuned per family."),
        click.option("--epochs", default=30, show_default=True,
                     help="Training epochs (small ranker)."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def held_out(model_path: str | None, data: str | None, kind: str, train_families: str,
             families: str | None, programs: str | None, per_family: int, epochs: int,
             seed: int) -> tuple[Any, dict[str, Any], list[str]]:
    """The model (loaded or trained), where it came from, and the programs to tune."""
    from graphcost.bench.heldout import choose_model, programs_to_tune

    model, info = choose_model(model_path, data, kind, comma_list(train_families), epochs, seed,
                               log=click.echo)
    return model, info, programs_to_tune(info, per_family, comma_list(families),
                                         comma_list(programs))


@bench.command("pool")
@held_out_options
@click.option("--pool", "pool_size", default=48, show_default=True,
              help="Configs sampled per program and all measured (the default included).")
@click.option("--k", default=5, show_default=True, help="Measurements each strategy may spend.")
@click.option("--batches", default=2, show_default=True,
              help="The learning strategy measures its K in this many batches.")
@timing_options(AUTOTUNING)
@click.option("--rounds", default=2, show_default=True, help="Rounds timing the pool.")
@click.option("--confirm-rounds", default=5, show_default=True,
              help="Fresh rounds re-timing each strategy's choice and the pool's best.")
@click.option("--core", type=CORE, default=None,
              help="Pin to this core (default: the first one allowed).")
@click.option("--no-pin", is_flag=True, help="Do not pin (timings drift more).")
@click.option("--seed", default=0, show_default=True)
@json_option
def bench_pool_cmd(model_path: str | None, data: str | None, kind: str, train_families: str,
                   families: str | None, programs: str | None, per_family: int, epochs: int,
                   pool_size: int, k: int, batches: int, runs: int, warmup: int, rounds: int,
                   confirm_rounds: int, core: int | None, no_pin: bool, seed: int,
                   json_path: str | None) -> None:
    """Model, learning and random search against exhaustive measurement of a sampled pool."""
    from graphcost.errors import UserError

    core = pin(core, no_pin)
    if pool_size < 2 or k < 1 or batches < 1 or confirm_rounds < 2:
        raise UserError("need --pool >= 2, --k >= 1, --batches >= 1 and --confirm-rounds >= 2")
    from graphcost.bench.pool import bench_pool, format_pool
    from graphcost.xla.timing import Protocol

    model, info, names = held_out(model_path, data, kind, train_families, families, programs,
                                  per_family, epochs, seed)
    result = bench_pool(names, model, info, pool_size, k, batches,
                        Protocol(warmup, runs, rounds), confirm_rounds, seed, None,
                        log=click.echo)
    result.core = core  # pinned above, for the whole process
    click.echo(format_pool(result))
    if json_path:
        write_json(result.to_json(), json_path)


@bench.command("families")
@click.argument("data", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="fold models (OUT/<model>-<seed>) and confirmed rows; a rerun reuses them")
@click.option("--model", "model_name", cls=ModelOption, default="ranker", show_default=True)
@click.option("--seeds", default="0,1,2", show_default=True,
              help="one leave-family-out model per fold and seed, comma-separated")
@click.option("--folds", type=click.IntRange(min=2), default=5, show_default=True)
@click.option("--k", type=click.IntRange(min=1), default=5, show_default=True,
              help="Configs each strategy may measure besides the default.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="a training or model setting, as for `graphcost crossval`; repeatable")
@click.option("--epochs", type=int, default=None)
@click.option("--families", default=None, help="only programs of these families (comma list)")
@click.option("--confirm", is_flag=True,
              help="compile the programs again and time every possible choice in fresh "
                   "rounds; the table then comes from those rounds")
@click.option("--no-search", is_flag=True,
              help="when confirming, do not also time what `graphcost autotune` would pick "
                   "beyond the pool")
@click.option("--samples", type=click.IntRange(min=1), default=None,
              help="fresh configs the search strategy's model ranks (default: autotune's)")
@click.option("--evaluations", type=click.IntRange(min=1), default=None,
              help="model scores of the search strategy: more than --samples searches "
                   "beyond the sample (default: --samples)")
@timing_options(AUTOTUNING, max_run_s=True)
@click.option("--confirm-rounds", type=click.IntRange(min=4), default=6, show_default=True,
              help="fresh rounds: the first 2 choose among the search's picks, the rest "
                   "give every figure")
@click.option("--core", type=CORE, default=None,
              help="Pin to this core when confirming (default: the first one allowed).")
@json_option
def bench_families_cmd(data: str, out_dir: str, model_name: str, seeds: str, folds: int, k: int,
                       sets: tuple[str, ...], epochs: int | None, families: str | None,
                       confirm: bool, no_search: bool, samples: int | None,
                       evaluations: int | None, runs: int, warmup: int, max_run_s: float,
                       confirm_rounds: int, core: int | None, json_path: str | None) -> None:
    """Leave-family-out autotuning: every program tuned from its stored pool by a model
    that never saw its family, against the pool's best, a portfolio, random-K and the
    default; per family and per headroom."""
    from graphcost.train.settings import parse_settings

    seed_list = int_list(seeds, "--seeds")
    given = {"epochs": epochs} if epochs is not None else {}
    settings, model_kw = parse_settings(sets, model_name, {"progress": False}, **given)
    core = pin(core, no_pin=not confirm)
    from graphcost.autotune.headroom import format_families
    from graphcost.bench.families import bench_families
    from graphcost.xla.timing import Protocol

    result = bench_families(data, out_dir, model_name, seed_list, k, folds, settings, model_kw,
                            comma_list(families), confirm, not no_search, samples, evaluations,
                            Protocol(warmup, runs, confirm_rounds, max_run_s), core,
                            log=click.echo)
    table = result.to_json()  # `autotune.headroom` formats the JSON object
    click.echo(format_families(table))
    if json_path:
        write_json(table, json_path)


@bench.command("apply")
@click.option("--programs", default="mlp.005,cnn_nhwc.000,transformer.000",
              show_default=True, help="Comma-separated zoo programs or MODULE:FUNCTION.")
@click.option("--calls", default=200, show_default=True, help="Calls per round.")
@click.option("--rounds", default=5, show_default=True, help="Alternating rounds.")
@click.option("--core", type=int, default=None, help="Pin to this core.")
@json_option
def bench_apply_cmd(programs: str, calls: int, rounds: int, core: int | None,
                    json_path: str | None) -> None:
    """Per-call cost of an autotuned program (`apply`) against plain `jax.jit`."""
    from graphcost.bench.apply import HEADER, bench_apply, format_apply, format_row

    pin(core, core is None)
    bench_table(HEADER, format_row, format_apply, json_path, lambda on_row: bench_apply(
        comma_list(programs), calls, rounds, on_row=on_row))


@bench.command("knobs")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="rows are kept in OUT/knobs.json; a rerun timing the same way reuses them")
@click.option("--families", default=None, help="comma-separated zoo families (default: all)")
@click.option("--per-family", type=click.IntRange(min=1), default=2, show_default=True,
              help="the first N programs of each family")
@timing_options(COLLECTING, max_run_s=True)
@click.option("--rounds", type=click.IntRange(min=2), default=6, show_default=True,
              help="fresh interleaved rounds; the speed-ups' intervals are over them")
@click.option("--core", type=CORE, default=None,
              help="Pin to this core (default: the first one allowed).")
@click.option("--candidates/--no-candidates", default=True, show_default=True,
              help="also the candidate knobs (xla.options.CANDIDATE_KNOBS), not only "
                   "the search space's OPTION_KNOBS")
@json_option
def bench_knobs_cmd(out_dir: str, families: str | None, per_family: int, runs: int,
                    warmup: int, rounds: int, max_run_s: float, core: int | None,
                    candidates: bool, json_path: str | None) -> None:
    """Each compiler option's effect on each program family, one knob at a time: every
    single-knob change timed against the default in the same rounds."""
    core = pin(core, no_pin=False)
    from graphcost.bench.knobs import bench_knobs, format_knobs
    from graphcost.xla.options import CANDIDATE_KNOBS, OPTION_KNOBS
    from graphcost.xla.timing import Protocol

    knobs = OPTION_KNOBS + (CANDIDATE_KNOBS if candidates else ())
    result = bench_knobs(out_dir, comma_list(families), per_family, knobs,
                         Protocol(warmup, runs, rounds, max_run_s), core, log=click.echo)
    click.echo(format_knobs(result))
    if json_path:
        write_json(result.to_json(), json_path)


@bench.command("noise")
@click.argument("program", default="pyramid.000")
@click.option("--rounds", type=click.IntRange(min=20), default=600, show_default=True)
@click.option("--runs", type=click.IntRange(min=1), default=15, show_default=True,
              help="Timed calls per round; a round's time is their minimum.")
@click.option("--core", type=CORE, default=None,
              help="Pin to this core (default: the first one allowed).")
@json_option
def bench_noise_cmd(program: str, rounds: int, runs: int, core: int | None,
                    json_path: str | None) -> None:
    """How this machine's timing noise looks: one program's default executable (a zoo
    name or MODULE:FUNCTION) timed in many short rounds on one core, a NumPy canary
    around each round. Run it beside other work to see what that work costs."""
    pin(core, no_pin=False)
    from graphcost.bench.noise import bench_noise, format_noise

    if json_path:
        check_writable(json_path)
    result = bench_noise(program, rounds, runs)
    click.echo(format_noise(result))
    if json_path:
        write_json(result.to_json(), json_path)


@bench.command("search")
@click.argument("table", type=click.Path(exists=True, file_okay=False))
@click.option("--data", default=None, type=click.Path(exists=True, file_okay=False),
              help="the collection the fold models train on, leave-family-out (default: "
                   "the bundled options:cpu)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="fold models (OUT/ranker-<seed>); a rerun reuses them")
@click.option("--strategies", default="random,coordinate,tpe,trees,prior,prior-trees,prior-tpe,"
              "model,model-online,model-coordinate,model-trees,model-prior-trees",
              show_default=True, help="comma-separated, of autotune.strategy's")
@click.option("--seeds", default="0,1,2", show_default=True,
              help="model seeds: one leave-family-out model per fold and seed")
@click.option("--folds", type=click.IntRange(min=2), default=5, show_default=True)
@click.option("--draws", type=click.IntRange(min=1), default=10, show_default=True,
              help="runs of each model-free strategy per program (their seeds)")
@click.option("--budget", type=click.IntRange(min=1), default=50, show_default=True,
              help="executables each strategy may time after the default")
@click.option("--headroom", type=click.FloatRange(min=1.0), default=1.10, show_default=True,
              help="the figures are over programs whose table optimum is this much faster")
@click.option("--epochs", type=int, default=None, help="training epochs of the fold models")
@click.option("--model", "model_name", default="ranker", show_default=True,
              help="the model strategies' scorer: a model or rule `crossval` trains per "
                   "fold (e.g. config-only, the learned order of option sets)")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="also draw the anytime curves (PNG)")
@click.option("--confirm", "confirm_k", type=click.IntRange(min=1), default=None,
              help="compile the headroom programs again and time each strategy's choice "
                   "after this many measurements with the default, in fresh rounds")
@click.option("--confirm-rounds", type=click.IntRange(min=2), default=6, show_default=True)
@click.option("--core", type=CORE, default=None,
              help="Pin to this core when confirming (default: the first one allowed).")
@click.option("--cross-rounds", is_flag=True,
              help="tell each strategy half of the table's timing rounds and score it on "
                   "the other half (both ways), so that no strategy gains from a round's luck")
@click.option("--table-rounds", type=click.IntRange(min=1), default=None,
              help="count only the table's first N timing rounds: what a table timed in "
                   "fewer rounds would say")
@click.option("--ensemble", is_flag=True,
              help="the model strategies score with the seeds' fold models as one ensemble "
                   "(the mean of their scores), not with each seed's in turn")
@json_option
def bench_search_cmd(table: str, data: str | None, out_dir: str, strategies: str, seeds: str,
                     folds: int, draws: int, budget: int, headroom: float, epochs: int | None,
                     model_name: str, plot_path: str | None, confirm_k: int | None,
                     confirm_rounds: int, core: int | None, cross_rounds: bool,
                     table_rounds: int | None, ensemble: bool, json_path: str | None) -> None:
    """Search strategies on a table of measured option configs: the best speed-up each
    finds for a budget of measurements, against the table's optimum and random search."""
    core = pin(core, no_pin=not confirm_k)  # before torch and JAX start their threads
    from graphcost.bench.search import bench_search, format_search, plot_search
    from graphcost.data.inspect import sample_root
    from graphcost.train.settings import parse_settings
    from graphcost.xla.timing import Protocol

    seed_list = int_list(seeds, "--seeds")
    given = {"epochs": epochs} if epochs is not None else {}
    settings, _ = parse_settings((), model_name, {"progress": False}, **given)
    for path in (json_path, plot_path):
        if path:
            check_writable(path)
    data = data or str(sample_root() / "npz" / "options" / "cpu")
    result = bench_search(table, data, out_dir, comma_list(strategies), seed_list, draws,
                          budget, headroom, folds, settings, confirm_k or 0,
                          Protocol(rounds=confirm_rounds), core, model_name, cross_rounds,
                          table_rounds, ensemble, log=click.echo)
    click.echo(format_search(result))
    if plot_path:
        click.echo(f"wrote {plot_search(result, plot_path)}")
    if json_path:
        write_json(result.to_json(), json_path)


@bench.command("online")
@click.option("--programs", "spec", default=None,
              help="MODULE:FUNCTION returning (name, callable, example_args) entries, or "
                   "comma-separated zoo programs (default: the zoo, --per-family each)")
@click.option("--per-family", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="rows are kept in OUT/online.json; a rerun with the same settings reuses them")
@click.option("--strategies", default=None,
              help="comma-separated, of autotune.strategy's: the first is judged against "
                   "the others (default: coordinate,random,tpe; with --layouts "
                   "model,random)")
@click.option("--layouts", is_flag=True, help="tune layouts (a layout model ranks them)")
@click.option("--model", "model_path", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="a saved model for the model strategies (default: the packaged one)")
@click.option("--budget", type=click.IntRange(min=1), default=10, show_default=True,
              help="executables each strategy may time after the default")
@click.option("--headroom-from", type=click.Path(exists=True, file_okay=False), default=None,
              help="an options collection of the same programs: the summary is over those "
                   "whose stored best is --headroom faster than their default")
@click.option("--headroom", type=click.FloatRange(min=1.0), default=1.10, show_default=True)
@timing_options(AUTOTUNING)
@click.option("--confirm-rounds", type=click.IntRange(min=2), default=6, show_default=True)
@click.option("--core", type=CORE, default=None,
              help="Pin to this core (default: the first one allowed).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="also draw the anytime curves (PNG)")
@json_option
def bench_online_cmd(spec: str | None, per_family: int, out_dir: str,
                     strategies: str | None, layouts: bool, model_path: str | None,
                     budget: int, headroom_from: str | None, headroom: float, runs: int,
                     warmup: int, confirm_rounds: int, core: int | None, seed: int,
                     plot_path: str | None, json_path: str | None) -> None:
    """Search strategies run live on programs with one budget each, their choices
    confirmed together in fresh rounds (issue 44's online confirmation)."""
    core = pin(core, no_pin=False)
    from graphcost.autotune.program import load_target
    from graphcost.bench.online import bench_online, format_online_bench, plot_online
    from graphcost.xla.programs import load_programs, zoo
    from graphcost.xla.timing import Protocol

    for path in (json_path, plot_path):
        if path:
            check_writable(path)
    if spec and ":" in spec:
        programs = load_programs(spec)
    elif spec:
        programs = [load_target(name) for name in comma_list(spec)]
    else:
        programs = zoo(per_family=per_family)
    strategies = strategies or ("model,random" if layouts else "coordinate,random,tpe")
    result = bench_online(programs, out_dir, comma_list(strategies), budget,
                          Protocol(warmup, runs), confirm_rounds, core, seed, headroom_from,
                          headroom, "layout" if layouts else "options", model_path,
                          log=click.echo)
    click.echo(format_online_bench(result))
    if plot_path:
        click.echo(f"wrote {plot_online(result, plot_path)}")
    if json_path:
        write_json(result.to_json(), json_path)
