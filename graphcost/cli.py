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

# ---------------------------------------------------------------- convert, extract (issue 4)

# ---------------------------------------------------------------- models (issue 3)
