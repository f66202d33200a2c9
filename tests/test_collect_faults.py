"""Bad input to measure, collect, autotune and convert, and faults during a collection
(issue 30): a bad setting or program source is refused with exit 2 naming it, a
program that fails makes `collect` exit 1 listing it while every graph that worked is
written, and a killed `collect` leaves no worker running and loses nothing finished.

The `--programs` sources the tests use are the functions of this module (the tests
folder is on the path of pytest and of the subprocesses started here).
"""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

pytest.importorskip("jax")

from conftest import refused

from graphcost.cli import main  # noqa: E402

HERE = Path(__file__).parent
SMALL = ["--kinds", "options", "--configs", "2", "--runs", "3", "--warmup", "1",
         "--max-run-s", "30"]  # no timeout on a busy machine


def run(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


# ------------------------------------------------------------------ program sources

def _matmul(x):
    return (x @ x).sum()


def _args() -> tuple:
    import jax.numpy as jnp

    return (jnp.ones((8, 8)),)


not_callable = 5


def raises():
    raise RuntimeError("no programs today")


def returns_none():
    return None


def bad_entry():
    return [("a.000", "not a function", ())]


def empty():
    return []


def fine_and_failing():
    """One program that works and one whose tracing raises."""

    def failing(x):
        raise ValueError("shapes do not fit\nsecond line")

    return [("fine.000", _matmul, _args()), ("failing.000", failing, _args())]


def fine_and_stuck():
    """One program that works and two whose tracing blocks for ten minutes: the workers
    holding them are busy until they are killed."""

    def stuck(x):
        time.sleep(600)
        return x.sum()

    return [("fine.000", _matmul, _args()), ("stuck.000", stuck, _args()),
            ("stuck.001", stuck, _args())]


# ------------------------------------------------------------------ bad settings

ALLOWED = ", ".join(map(str, sorted(os.sched_getaffinity(0))))


@pytest.mark.parametrize("args, needles", [
    (["--configs", "-1"], ["--configs", ">= 2", "-1"]),
    (["--configs", "1"], ["--configs", ">= 2"]),
    (["--core", "99"], ["--core", "99", f"allowed: {ALLOWED}"]),
    (["--per-family", "0"], ["--per-family", "x>=1"]),
    (["--seed", "-1"], ["--seed", "x>=0"]),
    (["--min-time-s", "-1"], ["min_time_s", ">= 0"]),
    (["--runs", "0"], ["runs"]),
])
def test_measure_refuses_bad_numbers_naming_the_option(args, needles):
    refused(run("measure", "mlp.000", "--per-family", "1", *args), *needles)


@pytest.mark.parametrize("args, needles", [
    (["--configs", "-1"], ["--configs", ">= 2", "-1"]),
    (["--workers", "-1"], ["--workers", "x>=0"]),
    (["--limit", "-1"], ["--limit", "x>=0"]),
    (["--per-family", "0"], ["--per-family", "x>=1"]),
    (["--seed", "-1"], ["--seed", "x>=0"]),
    (["--min-time-s", "-1"], ["min_time_s", ">= 0"]),
    (["--warmup", "-1"], ["warmup"]),
])
def test_collect_refuses_bad_numbers_naming_the_option(tmp_path, args, needles):
    refused(run("collect", tmp_path / "out", *args), *needles)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args, needles", [
    (["--core", "99"], ["--core", "99", f"allowed: {ALLOWED}"]),
    (["--samples", "1"], ["--samples", "x>=2"]),
    (["--seed", "-1"], ["--seed", "x>=0"]),
    (["--no-pin", "--runs", "0"], ["runs"]),
    (["--no-pin", "--confirm-rounds", "1"], ["--confirm-rounds", "x>=2"]),
    (["--no-pin", "--budget", "0"], ["--budget", "x>=1"]),
])
def test_autotune_refuses_bad_numbers_naming_the_option(tmp_path, args, needles):
    model = tmp_path / "model.pt"  # refused before the model is read
    model.write_bytes(b"")
    refused(run("autotune", "mlp.000", "--model", model, "--out", tmp_path / "c.json", *args),
            *needles)
    assert not (tmp_path / "c.json").exists()


# ------------------------------------------------------------------ bad program sources

@pytest.mark.parametrize("function, needles", [
    ("missing", ["no function 'missing'"]),
    ("not_callable", ["expected a function", "found int 5"]),
    ("raises", ["raised RuntimeError: no programs today"]),
    ("returns_none", ["expected a list of (name, callable, example_args)", "found NoneType"]),
    ("bad_entry", ["entry 0 should be (name, callable, example_args)", "not a function"]),
    ("empty", ["returned no programs"]),
])
@pytest.mark.parametrize("command", ["measure", "collect"])
def test_a_bad_program_source_is_refused_naming_it(tmp_path, command, function, needles):
    spec = f"test_collect_faults:{function}"
    args = (["measure", "a.000", "--programs", spec] if command == "measure"
            else ["collect", tmp_path / "out", "--programs", spec])
    refused(run(*args), spec, *needles)
    assert not (tmp_path / "out" / "log.jsonl").exists()


def test_a_program_source_that_does_not_import_is_refused_naming_it(tmp_path):
    refused(run("collect", tmp_path / "out", "--programs", "no_such_module_xyz:programs"),
            "no_such_module_xyz:programs", "cannot import no_such_module_xyz")


# ------------------------------------------------------------------ failing programs

#: how collect lists the program whose tracing raised: the function and its file
FAILING = ("FAILED options failing.000: JAX could not trace function "
           f"'fine_and_failing.<locals>.failing' ({__file__}:")


def test_collect_exits_1_listing_failed_graphs_and_writes_the_rest(tmp_path):
    out = tmp_path / "out"
    args = ["collect", out, "--programs", "test_collect_faults:fine_and_failing", *SMALL,
            "--workers", "1"]
    first = run(*args)
    assert first.exit_code == 1, first.output
    assert "Traceback" not in first.output
    assert FAILING in first.output and "ValueError: shapes do not fit\n" in first.output
    assert "1 graphs written, 1 failed" in first.output
    lines = [line.split() for line in first.output.splitlines() if line.startswith("collect ")]
    assert [line[1] for line in lines] == ["1/2", "2/2"]  # a line a graph: no bar off a tty
    assert {line[3].rsplit(":", 1)[0] for line in lines} == {"last=options/fine.000",
                                                              "last=options/failing.000"}
    written = list(out.rglob("fine.000.npz"))
    assert len(written) == 1 and not list(out.rglob("failing.000.npz"))
    mtime = written[0].stat().st_mtime_ns

    again = run(*args)  # the failure is still the collection's: still exit 1
    assert again.exit_code == 1, again.output
    assert "0 graphs written, 0 failed, 2 already done" in again.output
    assert FAILING in again.output and "ValueError: shapes do not fit\n" in again.output
    assert written[0].stat().st_mtime_ns == mtime  # the graph that worked: not measured again


# ------------------------------------------------------------------ a killed collect

def _running(p: psutil.Process) -> bool:
    """Whether a process still runs (a zombie waiting to be reaped runs nothing)."""
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _is_worker(p: psutil.Process) -> bool:
    try:
        return "spawn_main" in " ".join(p.cmdline())
    except psutil.Error:  # it ended meanwhile
        return False


def _wait_for(condition, what: str, proc: subprocess.Popen | None = None,
              output: Path | None = None, seconds: float = 60) -> None:
    """Poll until `condition()` holds; fail naming `what` after `seconds`, or at once
    when `proc` has ended (showing the end of its `output`)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"collect ended before {what}:\n{output.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} after {seconds} s")
        time.sleep(0.1)


@contextmanager
def _sigint_not_ignored() -> Iterator[None]:
    """A child started in the block gets SIGINT's default action, as from a terminal, also
    when the tests run in the background: a shell starts a background job with SIGINT
    ignored, an ignored signal stays ignored across exec, and collect would rightly go on
    measuring through a SIGINT it inherited as ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL],
                         ids=["TERM", "INT", "KILL"])
def test_killing_collect_alone_ends_its_workers_and_keeps_what_is_finished(tmp_path, sig):
    """Signal only the parent while one graph is written and both workers are busy (each
    on a program that blocks): no worker outlives it, the finished graph stays written
    and logged, and the graphs in progress are not logged, so a rerun does them."""
    from graphcost.xla.restart_log import read_log

    out, output = tmp_path / "out", tmp_path / "output.txt"
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    with open(output, "w") as sink, _sigint_not_ignored():
        proc = subprocess.Popen(
            [sys.executable, "-m", "graphcost", "collect", str(out), "--programs",
             "test_collect_faults:fine_and_stuck", *SMALL, "--workers", "2"],
            env={**os.environ, "PYTHONPATH": path}, stdout=sink, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        parent = psutil.Process(proc.pid)
        _wait_for(lambda: sum(map(_is_worker, parent.children())) == 2
                  and len(read_log(out)) == 1, "two workers and a graph logged", proc, output)
        everyone = parent.children(recursive=True)  # the workers and multiprocessing's helper
        os.kill(proc.pid, sig)
        proc.wait(timeout=60)
        assert proc.returncode != 0
        _wait_for(lambda: not any(map(_running, everyone)), "end of every worker")

        assert not list(out.rglob("*.part"))
        log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
        assert [(e["task"]["program"], e["status"]) for e in log] == [("fine.000", "ok")]
        assert [p.name for p in out.rglob("*.npz")] == ["fine.000.npz"]
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


# ------------------------------------------------------------------ convert

def test_convert_refuses_two_inputs_with_the_same_file_name(tmp_path):
    a, b = tmp_path / "a" / "x.pb", tmp_path / "b" / "x.pb"
    for path in (a, b):  # refused before either is read
        path.parent.mkdir()
        path.write_bytes(b"")
    refused(run("convert", a, b, tmp_path / "out"), str(a), str(b), "'x'")
    assert not (tmp_path / "out").exists()
