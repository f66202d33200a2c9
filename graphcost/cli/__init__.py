"""The `graphcost` command: one thin module per command group over public functions.

Every command imports its work inside its body, so `graphcost --help` loads neither
torch nor JAX. The submodules define commands; this module only assembles them.
"""

from __future__ import annotations

import click

from graphcost.cli import autotune, bench, data, demo, measure, models


@click.group()
@click.version_option(package_name="graphcost")
def main() -> None:
    """graphcost: a learned cost model for ML compilers."""


for _command in (data.info, data.validate, data.convert, data.extract,
                 models.train_cmd, models.evaluate_cmd, models.crossval_cmd, models.predict_cmd,
                 models.submit_cmd,
                 measure.measure, measure.collect, measure.merge_cmd,
                 autotune.autotune_cmd, autotune.apply_cmd,
                 demo.demo, demo.report,
                 bench.bench):
    main.add_command(_command)

__all__ = ["main"]
