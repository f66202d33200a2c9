"""Commands that tune one program with a model: autotune, apply."""

from __future__ import annotations

import click

from graphcost.atomic import check_writable, write_json
from graphcost.cli.options import CORE, comma_list, pin, timing_options
from graphcost.xla.timing import AUTOTUNING


@click.command("autotune")
@click.argument("spec", metavar="MODULE:FUNCTION|PROGRAM")
@click.option("--model", "model_path", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="A saved model for the model strategies: a layout model tunes layouts, "
                   "an options model compiler options. Default: the model packaged with "
                   "graphcost for the space.")
@click.option("--layouts", is_flag=True,
              help="Tune layouts instead of compiler options (with --model, or the "
                   "packaged layout model).")
@click.option("--budget", type=click.IntRange(min=1), default=10, show_default=True,
              help="Executables to time beyond the default.")
@click.option("--strategy", default=None,
              help="The search, one of graphcost.autotune.strategy's (default: coordinate "
                   "on options, model on layouts; layouts take model or random).")
@click.option("--compare", default=None,
              help="Comma-separated strategies to run beside it on the same budget and "
                   "confirm with it, e.g. random,tpe (checks the tuner; multiplies the "
                   "measuring).")
@click.option("--samples", type=click.IntRange(min=2), default=None,
              help="Layouts: the plans sampled as candidates (default: as many as a "
                   "collection measures per program; why no more: graphcost.autotune.tune).")
@click.option("--out", default="autotune.json", show_default=True,
              type=click.Path(dir_okay=False), help="Where to write the chosen config.")
@click.option("--report", "report_path", default=None, type=click.Path(dir_okay=False),
              help="Also write every measurement and figure as JSON.")
@timing_options(AUTOTUNING)
@click.option("--confirm-rounds", type=click.IntRange(min=2), default=5, show_default=True,
              help="Fresh rounds re-timing the default and each search's best: the "
                   "reported speed-ups and intervals.")
@click.option("--core", type=CORE, default=None,
              help="Pin to this core (default: the first one allowed).")
@click.option("--no-pin", is_flag=True, help="Do not pin (timings drift more).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
def autotune_cmd(spec: str, model_path: str | None, layouts: bool, budget: int,
                 strategy: str | None, compare: str | None, samples: int | None, out: str,
                 report_path: str | None, runs: int, warmup: int, confirm_rounds: int,
                 core: int | None, no_pin: bool, seed: int) -> None:
    """Tune a program's compiler options (or, with --layouts or a layout model, its
    layouts); write the chosen config.

    SPEC is MODULE:FUNCTION (FUNCTION returns (callable, example_args)) or a zoo
    program name such as mlp.000. The search runs while measuring: --strategy asks for
    a config, it is compiled and timed beside the default, up to --budget executables;
    the best is kept only if it is clearly faster than the default in fresh rounds
    (graphcost.autotune.tune).
    """
    core = pin(core, no_pin)
    for path in (out, report_path):  # refused before the measuring, not after it
        if path:
            check_writable(path)
    from graphcost.autotune.chosen import how_to_apply, save_config
    from graphcost.autotune.program import load_target
    from graphcost.autotune.tune import autotune, format_result
    from graphcost.xla.timing import Protocol

    try:
        name, fn, args = load_target(spec)
        layout_model = bool(model_path) and _is_layout_model(model_path)
        if layouts and model_path and not layout_model:
            raise click.BadParameter(f"{model_path} ranks compiler options; --layouts needs "
                                     "a layout model (or none: the packaged one)",
                                     param_hint="--model")
        result = autotune(fn, args, model_path,
                          space="layout" if layouts or layout_model else "options",
                          budget=budget, strategy=strategy, compare=comma_list(compare),
                          name=name, protocol=Protocol(warmup, runs),
                          confirm_rounds=confirm_rounds, core=core, seed=seed,
                          log=click.echo, **({"samples": samples} if samples else {}))
        click.echo(format_result(result))
    except (ImportError, RuntimeError) as e:  # an unimportable module; the default failed
        raise click.ClickException(str(e)) from None
    save_config(result.config, out)
    click.echo(f"wrote {out}" + (f" (pinned to core {core})" if core is not None else ""))
    click.echo(how_to_apply(result.config, out))
    if report_path:
        write_json(result.to_dict(), report_path)


def _is_layout_model(path: str) -> bool:
    from graphcost.kinds import space_of
    from graphcost.models.model import Model

    return space_of(Model.load(path).kind) == "layout"


@click.command("apply")
@click.argument("config_path", metavar="CONFIG.json", type=click.Path(exists=True, dir_okay=False))
@click.argument("spec", metavar="MODULE:FUNCTION|PROGRAM")
def apply_cmd(config_path: str, spec: str) -> None:
    """Compile a program with an autotuned config, run it once and compare with jax.jit."""
    from graphcost.autotune.chosen import agrees_with_jit, apply, how_to_apply, load_config
    from graphcost.autotune.program import load_target

    config = load_config(config_path)  # a bad file: a UserError, exit 2
    try:
        name, fn, args = load_target(spec)
        run = apply(fn, args, config_path)  # errors against the program name the file
    except ImportError as e:
        raise click.ClickException(str(e)) from None
    same = agrees_with_jit(fn, args, run)
    click.echo(f"{name}: compiled with {config_path}; outputs "
               f"{'match' if same else 'DIFFER FROM'} plain jax.jit")
    click.echo(how_to_apply(config, config_path))
    if not same:
        raise SystemExit(1)
