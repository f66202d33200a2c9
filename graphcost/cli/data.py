"""Commands over graph files and collections: info, validate, convert, extract."""

from __future__ import annotations

import click


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


@click.command()
@click.argument("path", required=False, type=click.Path(exists=True))
@click.option("--sample", is_flag=True, help="Summarise the dataset bundled with graphcost.")
def info(path: str | None, sample: bool) -> None:
    """Summarise a .npz file or every collection below PATH (from array headers only)."""
    from graphcost.data.inspect import sample_collections, summarize

    if sample or path is None:
        path = str(sample_collections())
        click.echo(f"bundled sample: {path}")
    groups = summarize(path)  # every file's headers read (and refused) before printing
    click.echo(f"{'collection / split':34} {'kind':7} {'graphs':>6} {'bytes':>10}  "
               f"{'nodes min/med/max':>22} {'edges min/med/max':>22} "
               f"{'configs min/med/max':>22} {'configurable':>18}")

    def mmm(st) -> str:
        return f"{st.min:.0f}/{st.median:.0f}/{st.max:.0f}"

    for s in groups:
        click.echo(f"{s.name:34} {s.kind:7} {s.files:6d} {_fmt_bytes(s.bytes):>10}  "
                   f"{mmm(s.nodes):>22} {mmm(s.edges):>22} {mmm(s.configs):>22} "
                   f"{mmm(s.configurable):>18}")
        for e in s.unreadable:
            click.echo(f"  unreadable: {e}", err=True)


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
def validate(paths: tuple[str, ...]) -> None:
    """Check .npz files or whole collections fully; exit 1 listing every bad file. A
    valid file whose identical configs have contradicting runtimes gets a WARN line."""
    from graphcost.data.inspect import expand_paths, validate_paths
    from graphcost.progress import Progress

    n = len(expand_paths(paths))
    warnings: list[str] = []
    bar = Progress(n, "validate", "files", lines=False, leave=False)  # its result says enough
    bad = validate_paths(paths, progress=bar.iterate, warn=warnings.append)
    bar.close()
    for e in bad:
        click.echo(f"BAD {e}")
    for w in warnings:
        click.echo(f"WARN {w}")
    click.echo(f"{n - len(bad)} of {n} files valid, {len(bad)} bad")
    if bad:
        raise SystemExit(1)


@click.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--store", is_flag=True, help="Write uncompressed (memory-mappable) .npz.")
def convert(inputs: tuple[str, ...], out_dir: str, store: bool) -> None:
    """Convert TPU tuning records (.pb) to OUT_DIR/{tile,layout}/*.npz; exit 1 on bad records.

    Graphs are named after their input's file name (a/x.pb gives x.npz, a file of
    several records x.NNN.MODULE.npz), so two inputs with the same file name are refused
    (exit 2, before converting anything): convert them into separate OUT_DIRs. So is a
    graph already in OUT_DIR (exit 2, before writing anything): nothing is overwritten.
    """
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
            click.echo("  warning: opcodes outside docs/design.md §3 (id 0): "
                       f"{dict(r.unknown_opcodes)}")
        for e in r.errors:
            click.echo(f"  BAD {e}", err=True)
        bad += len(r.errors)
    if bad:
        raise SystemExit(1)


@click.command()
@click.argument("spec", metavar="MODULE:FUNCTION")
@click.argument("out", type=click.Path(dir_okay=False))
def extract(spec: str, out: str) -> None:
    """Compile a JAX program (FUNCTION returns (callable, example_args)) to a program graph."""
    from graphcost.atomic import check_writable
    from graphcost.errors import UserError
    from graphcost.formats.npz import write_graph
    from graphcost.xla.extract import extract_jax, load_program

    check_writable(out)
    try:
        fn, args = load_program(spec)
    except ImportError as e:  # the user's module (a GraphFileError names a bad spec)
        raise UserError(f"{spec}: cannot import it ({e})") from None
    g = extract_jax(fn, args, name=spec.rpartition(":")[2])
    write_graph(out, g)
    click.echo(f"{out}: {g.num_nodes} nodes, {len(g.edge_index)} edges, "
               f"{len(g.node_splits)} computations (program graph: no measured configs)")
