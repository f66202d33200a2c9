"""Commands that tune one program with a model: autotune, apply."""

from __future__ import annotations

import click

from graphcost.atomic import check_writable, write_json
from graphcost.cli.options import autotune_options, pin


@click.command("autotune")
@click.argument("spec", metavar="MODULE:FUNCTION|PROGRAM")
@click.option("--model", "model_path", required=True,
              type=click.Path(exists=True, dir_okay=False),
              help="A saved model: layout models tune layouts, tile models compiler options.")
@click.option("--out", default="autotune.json", show_default=True,
              type=click.Path(dir_okay=False), help="Where to write the chosen config.")
@click.option("--report", "report_path", default=None, type=click.Path(dir_okay=False),
              help="Also write every measurement and figure as JSON.")
@click.option("--compare", type=click.Choice(["random"]), default=None,
              help="Also measure K random configs and report the choice against their best "
                   "(checks the tuner; doubles the measurements).")
@autotune_options
def autotune_cmd(spec: str, model_path: str, out: str, report_path: str | None,
                 compare: str | None, k: int, samples: int, evaluations: int, runs: int,
                 warmup: int, core: int | None, no_pin: bool, seed: int, confirm_rounds: int,
                 batches: int) -> None:
    """Search a program's configs with a model, measure the best, write the chosen config.

    SPEC is MODULE:FUNCTION (FUNCTION returns (callable, example_args)) or a zoo
    program name such as mlp.000.
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
        result = autotune(fn, args, model_path, name=name, k=k, samples=samples,
                          evaluations=evaluations, protocol=Protocol(warmup, runs), seed=seed,
                          confirm_rounds=confirm_rounds, batches=batches,
                          compare_random=compare == "random", log=click.echo)
    except (ImportError, RuntimeError) as e:  # an unimportable module; the default failed
        raise click.ClickException(str(e)) from None
    click.echo(format_result(result))
    save_config(result.config, out)
    click.echo(f"wrote {out}" + (f" (pinned to core {core})" if core is not None else ""))
    click.echo(how_to_apply(result.config, out))
    if report_path:
        write_json(result.to_dict(), report_path)


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
