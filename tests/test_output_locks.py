"""One writer per output folder, and outputs whole or absent (issue 42): a second
`collect` or `merge` on a folder in use is refused naming the holder; a lock left by a
killed run blocks nothing; a merge killed mid-copy leaves no cut-off graph under its
final name, and running it again finishes it."""

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
from click.testing import CliRunner
from test_shard import _fake_run_workers, shards  # noqa: F401 (a fixture)
from test_train_guards import refused

from graphcost.atomic import one_writer
from graphcost.cli import main
from graphcost.xla import collect as collect_mod
from graphcost.xla.plan import Task
from graphcost.xla.restart_log import read_log

ONE_GRAPH = [Task("options", "zoo", "fam0.000", "train")]
COLLECT = ("--kinds", "options", "--configs", "6")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def wait_for(what: str, log: Path, proc: psutil.Popen) -> None:
    """Until LOG says `what`; the process must not end first."""
    while what not in log.read_text():
        assert proc.poll() is None, f"ended first: {log.read_text()[-2000:]}"
        psutil.wait_procs([proc], timeout=0.1)


def test_a_second_collect_on_one_folder_is_refused_and_a_killed_ones_lock_blocks_nothing(
        tmp_path, monkeypatch):
    out, log = tmp_path / "out", tmp_path / "first.log"
    # a real `graphcost collect` that plans one graph and measures it for ten minutes
    code = ("import time\n"
            "from graphcost.cli import main\n"
            "from graphcost.xla import collect\n"
            "from graphcost.xla.plan import Task\n"
            f"collect.plan_tasks = lambda spec: {ONE_GRAPH!r}\n"
            "def measuring(*args, **kwargs):\n"
            "    print('measuring', flush=True)\n"
            "    time.sleep(600)\n"
            "collect.run_workers = measuring\n"
            f"main(['collect', {str(out)!r}, *{COLLECT!r}], prog_name='graphcost')\n")
    with open(log, "w") as sink:
        first = psutil.Popen([sys.executable, "-c", code], stdout=sink,
                             stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for("measuring", log, first)
        monkeypatch.setattr(collect_mod, "plan_tasks", lambda spec: list(ONE_GRAPH))
        monkeypatch.setattr(collect_mod, "run_workers", _fake_run_workers)
        refused(run("collect", out, *COLLECT), out, f"pid {first.pid}@{socket.gethostname()}")
        assert not (out / "npz").exists() and not (out / "log.jsonl").exists()
    finally:
        first.kill()
        first.wait()
    # the killed run's lock file is still there, its lock is not
    assert (out / ".lock").exists()
    again = run("collect", out, *COLLECT)
    assert again.exit_code == 0, again.output
    assert [e["status"] for e in read_log(out).values()] == ["ok"]
    assert len((out / "log.jsonl").read_text().splitlines()) == 1


def test_a_merge_into_a_folder_in_use_is_refused(shards, tmp_path):  # noqa: F811
    _, folders = shards
    out = tmp_path / "merged"
    with one_writer(out, "merge"):  # as a running `graphcost merge` holds it
        refused(run("merge", out, *folders), out, f"pid {os.getpid()}@", "another merge")
        assert not (out / "npz").exists() and not (out / "log.jsonl").exists()
    r = run("merge", out, *folders)
    assert r.exit_code == 0, r.output


def graph_files(folder: Path) -> dict[str, bytes]:
    """Every graph file under `folder/npz` and temporary file of one, by relative path."""
    return {f.relative_to(folder).as_posix(): f.read_bytes()
            for f in (folder / "npz").rglob("*") if f.suffix in (".npz", ".part")}


def killed_merge(out: Path, folders: list[Path], max_file_bytes: int) -> None:
    """Run `graphcost merge` in a process killed by its first write past
    `max_file_bytes` in one file (SIGXFSZ, left at its default action: the process ends
    on the spot as with a kill -9, no clean-up runs)."""
    code = ("import resource, signal\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n"  # Python ignores it (EFBIG)
            "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({max_file_bytes}, {max_file_bytes}))\n"
            "from graphcost.cli import main\n"
            f"main(['merge', {str(out)!r}, *{[str(f) for f in folders]!r}], "
            "prog_name='graphcost')\n")
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                       text=True)
    assert r.returncode == -signal.SIGXFSZ, r.stdout + r.stderr


def test_a_merge_killed_mid_copy_leaves_nothing_cut_off_and_a_rerun_finishes_it(
        shards, tmp_path):  # noqa: F811
    tasks, folders = shards
    # one graph file of shard 1 is large: the merge is killed while copying it, after
    # copying every file of shard 0 (a merge reads only names and logs, not the bytes)
    big = sorted((folders[1] / "npz").rglob("*.npz"))[0]
    big.write_bytes(os.urandom(2 * 2**20))
    out = tmp_path / "merged"
    killed_merge(out, folders, 2**20)
    sources = {**graph_files(folders[0]), **graph_files(folders[1])}
    left = graph_files(out)
    assert left, "the merge was killed before it copied anything"
    cut = [rel for rel, data in left.items() if rel in sources and data != sources[rel]]
    assert not cut, f"cut off under their final names: {cut}"

    r = run("merge", out, *folders)
    assert r.exit_code == 0, r.output
    assert graph_files(out) == sources  # every graph whole, no temporary file left
    assert set(read_log(out)) == {str(t.path(out)) for t in tasks}
    assert not list(out.rglob("*.part")) and not (out / ".merging").exists()
    again = run("merge", out, *folders)  # now a finished collection
    refused(again, out, "already holds a collection")


def test_an_unfinished_merge_of_other_shards_says_how_to_finish_it(shards, tmp_path):  # noqa: F811
    _, folders = shards
    out = tmp_path / "merged"
    big = sorted((folders[1] / "npz").rglob("*.npz"))[0]
    big.write_bytes(os.urandom(2 * 2**20))
    killed_merge(out, folders, 2**20)
    copies = [tmp_path / f"copy{i}" for i in range(2)]  # the same shards, elsewhere
    for folder, copy in zip(folders, copies, strict=True):
        shutil.copytree(folder, copy)
    refused(run("merge", out, *copies), out, "unfinished merge",
            f"graphcost merge {out} {folders[0].resolve()} {folders[1].resolve()}")

