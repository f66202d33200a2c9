"""The `graphcost` command: one thin module per command group over public functions.

Every command imports its work inside its body, so `graphcost --help` loads neither
torch nor JAX. The submodules define commands; this module assembles them and owns the
one error path for users (`Main`).
"""

from __future__ import annotations

import os
import sys

import click

from graphcost.atomic import is_full_disk
from graphcost.cli import (
    autotune,
    bench,
    bench_tuning,  # noqa: F401  (adds its commands to `bench`)
    data,
    demo,
    measure,
    models,
)
from graphcost.errors import EnvironmentFault, UserError


class UserFailure(click.ClickException):
    """A user error as click prints it: `Error: <message>`, exit status 2."""

    exit_code = 2


class MachineFailure(click.ClickException):
    """An environment fault (a full disk) as click prints it: `Error: <message>`, exit 1."""

    exit_code = 1


class Main(click.Group):
    """The command group that turns every `UserError` (bad file, folder, path, setting,
    model) into one clean message and exit status 2, in one place rather than a
    try/except per command. A command's own `click.ClickException` is a user error too
    and exits 2 like the rest (click's default is 1). An `EnvironmentFault`, or a write
    anywhere (standard output included) that fails on a full disk, is one line and exit
    status 1. Any other exception is a bug and keeps its traceback."""

    def invoke(self, ctx: click.Context):
        debug = ctx.params.get("debug") or os.environ.get("GRAPHCOST_DEBUG")
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # a full disk under `> file` fails here, not at exit
            return result
        except UserError as e:
            if debug:
                raise
            raise UserFailure(str(e)) from None
        except EnvironmentFault as e:
            if debug:
                raise
            raise MachineFailure(str(e)) from None
        except OSError as e:
            if debug or not is_full_disk(e):
                raise
            raise MachineFailure(f"{e.filename or 'standard output'}: {e.strerror or e} "
                                 "(the disk or quota is full)") from None
        except click.ClickException as e:
            if type(e) is click.ClickException:  # not a usage error (already 2) or ours
                e.exit_code = UserFailure.exit_code
            raise


@click.group(cls=Main)
@click.version_option(package_name="graphcost")
@click.option("--debug", is_flag=True, help="Show the traceback of user errors too.")
def main(debug: bool) -> None:
    """graphcost: a learned cost model for ML compilers."""


for _command in (data.info, data.validate, data.convert, data.extract,
                 models.train_cmd, models.ensemble_cmd, models.evaluate_cmd,
                 models.crossval_cmd, models.rescore_cmd, models.compare_cmd,
                 models.predict_cmd, models.submit_cmd,
                 measure.measure, measure.collect, measure.merge_cmd,
                 autotune.autotune_cmd, autotune.apply_cmd,
                 demo.demo, demo.report,
                 bench.bench):
    main.add_command(_command)

__all__ = ["main"]
