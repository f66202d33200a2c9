"""Commands over models: train, evaluate, crossval, predict, submit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from graphcost.cli.options import ModelOption, json_option


def _usable_device(ctx: click.Context, param: click.Parameter, value: str) -> str:
    if value != "cpu":  # refused while the command line is parsed, before any work
        from graphcost.models.model import check_device

        check_device(value)
    return value


_device_option = click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu",
                              show_default=True, callback=_usable_device)


def _given(ctx: click.Context, **values: object) -> dict[str, object]:
    """The options among `values` that the user gave (not their defaults): settings that
    a `--set` of the same key must agree with."""
    return {k: v for k, v in values.items()
            if v is not None and ctx.get_parameter_source(k) != ParameterSource.DEFAULT}


class _TrainCommand(click.Command):
    """`train --help` ends with every `--set` key, its default and meaning (read from the
    settings dataclasses, imported only when help is asked for)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from graphcost.train.settings import settings_help

        for title, rows in settings_help().items():
            with formatter.section(f"{title} (--set KEY=VALUE)"):
                formatter.write_dl(rows)


@click.command("train", cls=_TrainCommand)
@click.argument("data", nargs=-1, required=True, metavar="DATA...")
@click.option("--model", "model_name", cls=ModelOption, default="ranker", show_default=True)
@click.option("--out", "out_dir", required=True, type=click.Path(),
              help="run directory: held by one run at a time; a run already there is "
                   "refused unless --resume or --overwrite")
@click.option("--resume", is_flag=True, help="continue from OUT/last.pt")
@click.option("--overwrite", is_flag=True,
              help="replace the run already in OUT (its model, checkpoints and metrics)")
@_device_option
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--epochs", type=int, default=None)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="a training or model setting, listed below; repeatable")
@click.option("--nproc", type=click.IntRange(min=1), default=1, show_default=True,
              help="data-parallel processes on this machine (DDP via torchrun; with --device "
                   "cuda one per GPU); the global batch stays graphs_per_batch")
@click.option("--valid-fraction", type=float, default=0.15, show_default=True,
              help="several DATA: share of the pooled graphs, whole families, kept for "
                   "early stopping")
@click.option("--valid-seed", type=int, default=None,
              help="several DATA: seeds which families are kept for early stopping "
                   "[default: --seed]")
def train_cmd(data: tuple[str, ...], model_name: str, out_dir: str, resume: bool,
              overwrite: bool, device: str, seed: int, epochs: int | None,
              sets: tuple[str, ...], nproc: int, valid_fraction: float,
              valid_seed: int | None) -> None:
    """Train a ranking model on a collection (its train split; valid for early stopping).

    Several DATA (sources of programs, [NAME=]PATH as for `crossval --group source`) are
    pooled, every split: whole families are kept for early stopping, the rest trained on."""
    from graphcost.atomic import check_writable
    from graphcost.train.distributed import is_main_process, launch
    from graphcost.train.run import train_model
    from graphcost.train.settings import parse_settings

    if resume and overwrite:
        raise click.UsageError("--resume continues the run in OUT, --overwrite replaces it: "
                               "give one")
    given = _given(click.get_current_context(), device=device, seed=seed, epochs=epochs)
    settings, model_kw = parse_settings(sets, model_name, **given)  # refused before any work
    check_writable(out_dir, folder=True)
    if len(data) > 1 and nproc > 1:
        raise click.UsageError("--nproc trains one collection; pool several DATA on one "
                               "process")
    if nproc > 1:  # the same command in nproc processes, under torchrun
        from graphcost.data.collection import open_collection
        from graphcost.train.distributed import check_batch_split

        # refused here, once, rather than in every rank after it has started
        check_batch_split(settings.graphs_per_batch,
                          len(open_collection(data[0]).files("train")), nproc)
        args = ["train", data[0], "--model", model_name, "--out", out_dir,
                "--device", settings.device, "--seed", str(settings.seed),
                *(["--resume"] if resume else []), *(["--overwrite"] if overwrite else []),
                *(["--epochs", str(epochs)] if epochs is not None else []),
                *(a for s in sets for a in ("--set", s))]
        try:
            code = launch(nproc, args)
        except RuntimeError as e:
            raise click.ClickException(str(e)) from None
        raise SystemExit(code)
    if resume and is_main_process() and not (Path(out_dir) / "last.pt").exists():
        click.echo(f"--resume: no {Path(out_dir) / 'last.pt'} yet, so a new run starts")
    if len(data) > 1:
        from graphcost.data.collection import open_collection
        from graphcost.eval.crossval import pooled_sources

        sources = {n: open_collection(p) for n, p in source_paths(data).items()}
        trained: Any = pooled_sources(
            sources, settings.seed if valid_seed is None else valid_seed, valid_fraction)
    else:
        trained = _existing(data[0], folder=False)
    _, result = train_model(trained, model_name, out_dir, settings, model_kw, resume,
                            overwrite)
    if is_main_process():  # under torchrun: one summary, from rank 0
        if result.get("early_stop") and not settings.progress:  # fit printed it otherwise
            click.echo(result["early_stop"])
        click.echo(f"{result['collection']}: {_outcome(result)}; model in {out_dir}")


def _outcome(result: dict) -> str:
    """What a run kept and by which figure: a validation figure, or the training loss
    when there was nothing to validate on (said with why, never as a negated-loss score)."""
    why = result["no_validation"]
    if "closed_form" in result:  # a heuristic baseline: fitted at once, not trained
        checked = (f"not validated: {why}" if why
                   else f"validation score {result['best_score']:.4f}")
        return f"{result['closed_form']} ({checked})"
    if why:
        return (f"best epoch {result['best_epoch']} by training loss "
                f"{result['best_value']:.4f} ({why})")
    figure = "validation OPA" if result["best_by"] == "valid_opa_pooled" else "validation score"
    return f"best epoch {result['best_epoch']} ({figure} {result['best_value']:.4f})"


@click.command("ensemble")
@click.argument("models", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False), metavar="MODEL...")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="the ensemble's model file")
def ensemble_cmd(models: tuple[str, ...], out_path: str) -> None:
    """One model that scores with the mean of MODEL...'s networks: the same model trained
    with other seeds (`train --seed S`), each keeping the feature transform it was fitted
    with. It is used as any model file is."""
    from graphcost.models.model import Model

    ensemble = Model.ensemble([Model.load(p) for p in models], models)
    ensemble.save(out_path)
    own = ", each with its own feature transform" if ensemble.member_transforms else ""
    click.echo(f"{out_path}: {ensemble.name} ({ensemble.kind}), the mean of "
               f"{ensemble.members} networks{own}")


@click.command("evaluate")
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.argument("data", type=click.Path(exists=True))
@click.option("--split", default=None,
              help="the split to score [default: test when it has runtimes, else valid]")
@click.option("--max-configs", type=click.IntRange(min=0), default=0,
              help="score a fixed subset per graph (0: all; else at least 2)")
@click.option("--eval-indices", type=click.Path(exists=True, dir_okay=False), default=None,
              help="score only these configs: JSON {graph: [config ids]}, as the official "
                   "baselines/layout/eval_indices/*.json (for the valid split)")
@json_option
@_device_option
def evaluate_cmd(model: str, data: str, split: str | None, max_configs: int,
                 eval_indices: str | None, json_path: str | None, device: str) -> None:
    """Metrics of a saved model on a split: per-graph table and means with 95% intervals."""
    from graphcost.atomic import write_json
    from graphcost.eval.evaluate import evaluate_model, format_report, load_eval_indices

    if max_configs == 1:  # one config has no order: every τ would be NaN
        raise click.BadParameter("1 config per graph has no order to score; give 0 (all) "
                                 "or at least 2", param_hint="--max-configs")
    if eval_indices and max_configs:
        raise click.UsageError("--eval-indices and --max-configs both choose the configs: "
                               "give one")
    indices = load_eval_indices(eval_indices) if eval_indices else None
    report = evaluate_model(model, data, split, max_configs=max_configs, device=device,
                            indices=indices)
    click.echo(format_report(report))
    if json_path:
        write_json(report, json_path)


@click.command("predict")
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.argument("graph", type=click.Path(exists=True, dir_okay=False))
@click.option("--top", type=click.IntRange(min=0), default=0,
              help="print only the best N (0: all)")
@_device_option
def predict_cmd(model: str, graph: str, top: int, device: str) -> None:
    """Rank the configs of one .npz (runtimes not needed): `rank index score`, fastest first."""
    from graphcost.models.scorer import rank_file

    order, scores = rank_file(model, graph, device=device)
    for rank, i in enumerate(order[:top] if top else order):
        click.echo(f"{rank}\t{int(i)}\t{scores[i]:.6f}")


@click.command("submit")
@click.argument("data", type=click.Path(exists=True, file_okay=False))
@click.option("--model", "-m", "models", multiple=True, required=True,
              metavar="COLLECTION=MODEL.pt", help="a model per collection; repeatable")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False))
@click.option("--split", default="test", show_default=True)
@_device_option
def submit_cmd(data: str, models: tuple[str, ...], out_path: str, split: str, device: str) -> None:
    """Write a competition CSV ranking every graph of SPLIT of the named collections
    (their files need no runtimes); refused unless every graph gets a row."""
    from graphcost.eval.submit import make_submission, models_by_collection

    mapping = models_by_collection(models, data)
    out = make_submission(mapping, data, out_path, split=split, device=device)
    click.echo(f"wrote {out}")


@click.command("crossval")
@click.argument("data", nargs=-1, required=True, metavar="DATA...")
@click.option("--folds", type=int, default=5, show_default=True,
              help="folds of program families; each family is held out exactly once")
@click.option("--model", "model_name", cls=ModelOption, default="ranker", show_default=True)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="a training or model setting, as for `graphcost train`; repeatable")
@click.option("--epochs", type=int, default=None)
@click.option("--valid-fraction", type=float, default=0.15, show_default=True,
              help="share of each fold's training graphs, whole families, kept for early "
                   "stopping (0: none)")
@click.option("--seed", type=int, default=0, show_default=True,
              help="seeds the fold assignment, the validation families and training")
@click.option("--valid-seed", type=int, default=None,
              help="seeds the fold assignment and the validation families instead of "
                   "--seed (which then seeds training only): runs of other seeds hold out "
                   "the same families")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="keep each fold's run in OUT/fold-<i> and the results in OUT/crossval.json")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="also write the results (per fold, per graph, overall) here")
@click.option("--group", type=click.Choice(["family", "graph", "source"]), default="family",
              show_default=True,
              help="deal whole program families into folds (unseen programs), or single "
                   "graphs (their families seen in training: the comparison figure); or, "
                   "with several DATA, one fold per source (each DATA a source, given as "
                   "[NAME=]PATH; NAME defaults to the folder above npz/): code from a "
                   "source never trained on")
@click.option("--external", type=click.Path(exists=True, file_okay=False), default=None,
              help="instead of folds, train one model on every family of DATA and score "
                   "every graph of this collection (an external test set, same kind)")
@click.option("--verbose", is_flag=True, help="print every epoch's line, as `train` does")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="folds trained at once, each in its own process with an equal share of "
                   "the cores (several on a GPU: it is idle between one fold's steps)")
@_device_option
def crossval_cmd(data: tuple[str, ...], folds: int, model_name: str, sets: tuple[str, ...],
                 epochs: int | None, valid_fraction: float, seed: int, out_dir: str | None,
                 json_path: str | None, group: str, external: str | None, verbose: bool,
                 jobs: int, device: str, valid_seed: int | None) -> None:
    """Leave-family-out k-fold cross-validation on every graph of a collection (all its
    splits pooled): per-fold and overall mean τ (tile: tile score) with 95% intervals.
    With `--group source`, one collection per source, each held out in turn."""
    from graphcost.atomic import write_json
    from graphcost.eval.crossval import crossvalidate, format_overall
    from graphcost.train.settings import parse_settings

    given = _given(click.get_current_context(), device=device, seed=seed, epochs=epochs)
    settings, model_kw = parse_settings(sets, model_name, {"progress": verbose},
                                        **given)  # a bad --set: UserError, exit 2
    if group == "source":
        scored: str | dict[str, str] = source_paths(data)
    elif len(data) > 1:
        raise click.UsageError(f"{len(data)} DATA given: several collections are held out "
                               "source by source (--group source)")
    else:
        scored = _existing(data[0])
    result = crossvalidate(scored, model_name, folds, settings, model_kw, out_dir,
                           settings.seed,  # --seed, or --set seed=: it seeds the folds too
                           valid_fraction, group, external, log=click.echo, jobs=jobs,
                           valid_seed=valid_seed)
    click.echo(format_overall(result))
    if json_path:
        write_json(result, json_path)


def _existing(path: str, folder: bool = True) -> str:
    """`path`, refused as DATA (exit 2, named) unless it exists (and is a folder)."""
    if not (Path(path).is_dir() if folder else Path(path).exists()):
        what = "Directory" if folder else "Path"
        raise click.BadParameter(f"{what} {path!r} does not exist", param_hint="DATA")
    return path


def source_paths(data: tuple[str, ...]) -> dict[str, str]:
    """`[NAME=]PATH` arguments as source name → folder; a name not given is the folder
    above `npz/` (what `collect` wrote into), or the folder's own name."""
    out: dict[str, str] = {}
    for arg in data:
        name, _, path = arg.rpartition("=")
        parts = Path(_existing(path)).resolve().parts
        name = name or (parts[parts.index("npz") - 1] if "npz" in parts else parts[-1])
        if name in out:
            raise click.BadParameter(f"two sources named {name} ({out[name]} and {path}); "
                                     "name them: NAME=PATH", param_hint="DATA")
        out[name] = path
    return out


@click.command("rescore")
@click.argument("result", type=click.Path(exists=True, dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", required=True,
              help="a scoring setting: correction, ref_configs or ref_sets; repeatable")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), required=True,
              help="write the new result here (a crossval result, for `compare`)")
def rescore_cmd(result: str, sets: tuple[str, ...], json_path: str) -> None:
    """Score a crossval result's held-out graphs again with its saved fold models (crossval
    --out), a scoring setting changed: e.g. how much of what a ranker learned on top of its
    rule to keep (`--set correction=0.5`). No training."""
    from graphcost.atomic import write_json
    from graphcost.eval.compare import read_results
    from graphcost.eval.crossval import format_overall, rescore
    from graphcost.train.settings import parse_settings

    (run,) = read_results([result])
    _, overrides = parse_settings(sets, run["model"], {})  # every value checked
    given = dict.fromkeys(pair.partition("=")[0].strip() for pair in sets)
    new = rescore(run, {**given, **overrides}, log=click.echo)  # refuses training keys
    click.echo(format_overall(new))
    write_json(new, json_path)


@click.command("compare")
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--against", multiple=True, required=True,
              type=click.Path(exists=True, dir_okay=False),
              help="a crossval result of the model compared with (one per seed); repeatable")
@click.option("--heuristic", "heuristics", multiple=True,
              type=click.Path(exists=True, dir_okay=False),
              help="a crossval result of a heuristic baseline (e.g. --model moved-bytes); "
                   "repeatable: the best of them is shown too, paired with RUNS")
@click.option("--metric", type=click.Choice(["score", "kendall_tau", "opa"]), default="score",
              show_default=True,
              help="the per-graph figure compared: score (layout: τ; tile: tile score), "
                   "Kendall τ, or OPA")
@click.option("--ensemble", is_flag=True,
              help="compare the seed ensemble of RUNS (per graph, the mean of the seeds' "
                   "scores, as `graphcost ensemble` scores) instead of their mean score")
@json_option
def compare_cmd(runs: tuple[str, ...], against: tuple[str, ...], heuristics: tuple[str, ...],
                metric: str, ensemble: bool, json_path: str | None) -> None:
    """Paired comparison of two models' leave-family-out results (`crossval --json`, one
    file per seed on each side): per graph the mean over seeds, both means and the
    difference RUNS − AGAINST over the same graphs, with bootstrap 95% intervals; and
    with --heuristic, the same for RUNS − the best heuristic."""
    from graphcost.atomic import write_json
    from graphcost.eval.compare import (
        best_heuristic,
        compare_crossval,
        format_comparison,
        read_results,
        seed_ensemble,
    )

    mine = read_results(list(runs))
    if ensemble:
        mine = [seed_ensemble(mine)]
    c = compare_crossval(mine, read_results(list(against)), metric)
    if heuristics:
        c["heuristic"] = best_heuristic(mine, read_results(list(heuristics)), metric)
    click.echo(format_comparison(c))
    if json_path:
        write_json(c, json_path)
