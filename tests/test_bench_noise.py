"""`graphcost bench noise`: the figures it derives from per-round timings, and the run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from graphcost.bench.noise import noise_figures
from graphcost.cli import main


def test_figures_find_the_slow_stretch_and_what_the_canary_saw():
    rounds = np.array([1.0] * 10 + [1.5] * 4 + [1.0] * 5 + [1.5])  # 20 rounds in 2 s
    canary = np.array([0.2] * 10 + [0.4, 0.4, 0.2, 0.2] + [0.2] * 5 + [0.2])
    f = noise_figures(rounds, canary, seconds=2.0)
    assert f["p5_ms"] == pytest.approx(1.0) and f["max_over_min"] == pytest.approx(1.5)
    assert f["slow_share"] == pytest.approx(5 / 20)
    assert f["longest_slow_rounds"] == 4 and f["longest_slow_s"] == pytest.approx(0.4)
    assert f["canary_slow_share"] == pytest.approx(2 / 20)
    assert f["slow_when_canary_slow"] == pytest.approx(1.0)
    assert f["slow_when_canary_fast"] == pytest.approx(3 / 18)


def test_figures_of_a_steady_machine_have_no_slow_round():
    f = noise_figures(np.full(30, 2.0), np.full(30, 0.3), seconds=1.0)
    assert f["slow_share"] == 0 and f["longest_slow_rounds"] == 0
    assert f["slow_when_canary_slow"] is None  # the canary never ran slow


def test_bench_noise_times_a_program_in_rounds(tmp_path):
    out = tmp_path / "noise.json"
    r = CliRunner().invoke(main, ["bench", "noise", "mlp.000", "--rounds", "20", "--runs", "2",
                                  "--json", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    assert result["program"] == "mlp.000" and len(result["round_ms"]) == 20
    assert len(result["canary_ms"]) == 20 and min(result["round_ms"]) > 0
    f = result["figures"]
    assert f["p5_ms"] <= f["median_ms"] <= f["p95_ms"] and 0 <= f["slow_share"] <= 1
    assert "slow rounds" in r.output and "canary" in r.output


def test_bench_noise_names_an_unknown_program():
    r = CliRunner().invoke(main, ["bench", "noise", "nosuch.000", "--rounds", "20"])
    assert r.exit_code == 2 and "nosuch.000" in r.output, r.output
