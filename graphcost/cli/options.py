"""Option decorators and option-value handling that several command groups share."""

from __future__ import annotations

import os
from collections.abc import Callable

import click

from graphcost.errors import UserError
from graphcost.xla.timing import Protocol


def comma_list(value: str | None) -> list[str]:
    """A comma-separated option value as its items: `'a, b,'` is ['a', 'b']."""
    return [x.strip() for x in value.split(",") if x.strip()] if value else []


def int_list(value: str | None, option: str) -> list[int]:
    """A comma-separated list of integers (`--seeds 0,1,2`), refused naming `option`."""
    try:
        return [int(x) for x in comma_list(value)]
    except ValueError:
        raise UserError(f"{option} expects comma-separated integers, got {value!r}") from None


class ModelOption(click.Option):
    """`--model NAME`, whose help lists every registered model: read from the registry
    only when help is shown (it imports torch)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from graphcost.models.registry import models_help

        self.help = models_help()
        return super().get_help_record(ctx)


class Core(click.ParamType):
    """A core this process may use (`os.sched_getaffinity`): any other number is refused
    while the command line is parsed, not by a traceback from `sched_setaffinity`."""

    name = "core"

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        core = value if isinstance(value, int) else click.INT.convert(value, param, ctx)
        allowed = sorted(os.sched_getaffinity(0))
        if core not in allowed:
            self.fail(f"{core} is not a core this process may use; allowed: "
                      f"{', '.join(map(str, allowed))}", param, ctx)
        return core


#: the type of every `--core` option
CORE = Core()


def pin(core: int | None, no_pin: bool) -> int | None:
    """Pin this whole process (before JAX starts its threads), as the protocol wants.

    Here rather than beside `autotune.measure.pinned`: only threads started after the call
    inherit the pinning, so it must run before numpy and JAX are imported."""
    if no_pin:
        return None
    core = min(os.sched_getaffinity(0)) if core is None else core
    os.sched_setaffinity(0, {core})
    return core


def _writable(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        from graphcost.atomic import check_writable

        check_writable(value)  # a UserError: exit 2 before the command's work
    return value


#: `--json PATH`, checked writable while the command line is parsed, before any work
json_option = click.option("--json", "json_path", type=click.Path(dir_okay=False),
                           default=None, callback=_writable,
                           help="also write the results as JSON here")


def timing_options(preset: Protocol, max_run_s: bool = False) -> Callable:
    """`--runs` and `--warmup` (and `--max-run-s`) defaulting to `preset`
    (`xla.timing.COLLECTING` or `AUTOTUNING`): every command that times declares them
    here, so each default has one home."""

    def add(f: Callable) -> Callable:
        f = click.option("--runs", type=click.IntRange(min=1), default=preset.runs,
                         show_default=True, help="Timed calls per executable per round.")(f)
        f = click.option("--warmup", type=click.IntRange(min=0), default=preset.warmup,
                         show_default=True,
                         help="Untimed calls per executable per round, first.")(f)
        if max_run_s:
            f = click.option("--max-run-s", default=preset.max_run_s, show_default=True,
                             help="A config whose single call is slower fails.")(f)
        return f

    return add
