"""The main job and its report: demo, report."""

from __future__ import annotations

import click


@click.command()
@click.option("--out", "out_dir", default="runs/demo", show_default=True, type=click.Path())
@click.option("--data", type=click.Path(exists=True), default=None,
              help="a dataset root (default: the bundled dataset)")
@click.option("--quick", is_flag=True, help="a smoke run: two epochs, first collection only")
@click.option("--epochs", type=int, default=None)
@click.option("--seed", type=int, default=0, show_default=True)
def demo(out_dir: str, data: str | None, quick: bool, epochs: int | None, seed: int) -> None:
    """Train the default ranker and the baseline on the bundled dataset, evaluate, report."""
    from graphcost.atomic import check_writable
    from graphcost.demo import DemoSettings, run_demo

    check_writable(out_dir, folder=True)  # before minutes of training
    s = DemoSettings(quick=quick, seed=seed)
    if epochs is not None:
        s.epochs = epochs
    run_demo(out_dir, data, s, log=click.echo)


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--data", type=click.Path(exists=True), default=None,
              help="the collection (default: the one in RUN_DIR/run.json)")
@click.option("--split", default="test", show_default=True)
@click.option("--out", "out_dir", type=click.Path(), default=None,
              help="report folder (default: RUN_DIR/report)")
def report(run_dir: str, data: str | None, split: str, out_dir: str | None) -> None:
    """Evaluate a training run and write its report: curves, per-graph τ, scatter."""
    from graphcost.atomic import check_writable
    from graphcost.demo import report_run

    check_writable(out_dir or f"{run_dir}/report", folder=True)
    click.echo(f"report: {report_run(run_dir, out_dir, data, split)}")
