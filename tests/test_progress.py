"""Progress a person can read in a log: whole lines off a terminal, a live bar on one."""

import io
import subprocess
import sys

from graphcost.data.synthetic import write_collection
from graphcost.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_each_update_is_one_line_with_its_figures():
    out = io.StringIO()
    bar = Progress(3, "collect", "graphs", stream=out)
    for k in range(3):
        bar.set_postfix(last=f"g{k}", noise_tau=0.5)
        bar.update()
    bar.close()
    assert out.getvalue().splitlines() == [f"collect {k + 1}/3 graphs last=g{k} noise_tau=0.5"
                                           for k in range(3)]


def test_on_a_terminal_it_draws_a_bar_and_writes_no_lines():
    out = Terminal()
    bar = Progress(3, "collect", "graphs", stream=out)
    bar.set_postfix(last="g0")
    bar.update()
    bar.close()
    assert "\r" in out.getvalue() and "1/3" in out.getvalue()
    assert "collect 1/3 graphs last=g0\n" not in out.getvalue()


def test_lines_come_at_most_once_an_interval_and_the_last_always(monkeypatch):
    clock = iter([0.0, 1.0, 2.0, 6.0, 7.0, 8.0])  # start, then one reading per update
    monkeypatch.setattr("graphcost.progress.time.perf_counter", lambda: next(clock))
    out = io.StringIO()
    bar = Progress(5, "writing", "graphs", every_s=5, stream=out)
    for _ in range(5):
        bar.update()
    counts = [line.split()[1] for line in out.getvalue().splitlines()]
    assert counts == ["1/5", "3/5", "5/5"]  # at 1 s, at 6 s (5 s later), and the last


def test_without_lines_or_disabled_nothing_is_written_off_a_terminal():
    out = io.StringIO()
    for bar in (Progress(2, "x", lines=False, stream=out), Progress(2, "x", enabled=False,
                                                                      stream=out)):
        list(bar.iterate(range(2)))
        bar.close()
        assert bar.n == 2
    assert out.getvalue() == ""


def test_training_into_a_pipe_logs_one_line_an_epoch_and_no_bar_frames(tmp_path):
    coll = write_collection(tmp_path / "data", "tile", source="mini",
                            splits={"train": 4, "valid": 2}, num_nodes=15, num_configs=10)
    done = subprocess.run([sys.executable, "-m", "graphcost", "train", str(coll), "--model",
                           "mlp", "--out", str(tmp_path / "run"), "--epochs", "3"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    log = done.stdout + done.stderr
    assert "\r" not in log
    epochs = [line for line in log.splitlines() if line.startswith("epoch=")]
    assert [line.split()[0] for line in epochs] == ["epoch=1", "epoch=2", "epoch=3"]
    assert all("train_loss=" in line and "configs_per_s=" in line for line in epochs)
