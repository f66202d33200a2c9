"""`graphcost bench knobs`: real compiles and timings of one tiny program, few rounds.

Nothing here depends on which knob is faster: only on what was compiled, timed, stored,
reused and counted."""

import json
import math
import os

import pytest
from click.testing import CliRunner

from graphcost.bench import knobs as bench
from graphcost.cli import main
from graphcost.errors import UserError
from graphcost.xla.options import CANDIDATE_KNOBS, OPTION_KNOBS, Knob
from graphcost.xla.timing import Protocol

FAMILY = "pyramid"  # the cheapest zoo family: compiles in ~20 ms, runs in ~1 ms
PROGRAM = f"{FAMILY}.000"
BOGUS = Knob("bogus", "xla_cpu_no_such_option", (None, True), (0, 1))  # never compiles
KNOBS = ([k for k in OPTION_KNOBS if k.name == "fast_math"]
         + [k for k in CANDIDATE_KNOBS if k.name in ("fast_min_max", "scheduler")][:1]
         + [BOGUS])


def protocol(rounds: int = 2) -> Protocol:
    return Protocol(warmup=1, runs=2, rounds=rounds, max_run_s=30, min_time_s=0)


def core() -> int:
    return min(os.sched_getaffinity(0))


def run(out, rounds: int = 2, knobs=KNOBS) -> tuple[bench.KnobsResult, list[str]]:
    said: list[str] = []
    result = bench.bench_knobs(out, [FAMILY], 1, knobs, protocol(rounds), core(), said.append)
    return result, said


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    out = tmp_path_factory.mktemp("knobs")
    result, said = run(out)
    return out, result, said


def test_every_single_knob_change_is_compiled_and_has_a_status(first):
    out, result, said = first
    assert len(KNOBS) == 3 and result.programs == [PROGRAM]
    (row,) = result.rows
    assert row["default"]["status"] == "ok" and len(row["default"]["rounds_ns"]) == 2
    wanted = [bench.choice_label(k, c) for k, c, _ in bench.single_knob_configs(KNOBS)]
    assert [c["label"] for c in row["configs"]] == wanted
    assert len(wanted) == sum(len(k.choices) - 1 for k in KNOBS)
    for c in row["configs"]:
        assert c["status"] in ("ok", "compile", "run", "timeout", "mismatch"), c
        if c["status"] == "ok":
            assert math.isfinite(c["speedup"]) and c["speedup"] > 0
            assert 0 < c["lo"] <= c["speedup"] <= c["hi"]
        else:
            assert "speedup" not in c and c["error"]
    bogus = [c for c in row["configs"] if c["knob"] == "bogus"]
    assert [c["status"] for c in bogus] == ["compile"]
    assert "xla_cpu_no_such_option" in bogus[0]["error"]
    assert len(said) == 1 and said[0].startswith(f"[1/1] {PROGRAM}") and "reused" not in said[0]
    assert json.loads((out / "knobs.json").read_text())[PROGRAM]["configs"] == row["configs"]


def test_summary_counts_follow_from_the_rows(first):
    _, result, _ = first
    s = result.summary
    (row,) = result.rows
    assert s["programs"] == s["timed"] == 1 and s["default_failed"] == []
    for c in row["configs"]:
        ok = "speedup" in c
        counts = s["per_value"][c["label"]]
        assert counts == {
            "programs": 1, "ok": int(ok), "faster": int(ok and c["lo"] > 1),
            "faster_5pct": int(ok and c["lo"] > 1 and c["speedup"] >= bench.WORTH),
            "slower": int(ok and c["hi"] < 1), "failed": int(not ok),
            "mismatch": int(c["status"] == "mismatch")}
        fam = s["per_family"][FAMILY][c["label"]]
        if ok:
            assert fam["geomean"] == pytest.approx(c["speedup"]) == fam["best"]
            assert fam["best_program"] == PROGRAM
        else:
            assert fam["geomean"] is fam["best"] is fam["best_program"] is None
    for k in KNOBS:
        mine = [c for c in row["configs"] if c["knob"] == k.name and "speedup" in c]
        if any(c["lo"] > 1 and c["speedup"] >= bench.WORTH for c in mine):
            assert s["verdicts"][k.name] == f"speeds up {FAMILY}"
        elif not any(c["lo"] > 1 for c in mine):
            assert s["verdicts"][k.name] == "no program faster"
    assert s["verdicts"]["bogus"] == "no program faster"


def test_a_rerun_reuses_the_stored_rows_and_another_protocol_times_again(first, monkeypatch):
    out, result, _ = first
    stored = (out / "knobs.json").read_bytes()

    def never(*args, **kwargs):
        raise AssertionError("a stored row was timed again")

    with monkeypatch.context() as m:
        m.setattr(bench, "time_program", never)
        again, said = run(out)
    assert again.rows == result.rows and (out / "knobs.json").read_bytes() == stored
    assert len(said) == 1 and "reused" in said[0]
    assert again.summary == json.loads(json.dumps(result.summary))

    retimed, said = run(out, rounds=3)
    assert "reused" not in said[0]
    assert len(retimed.rows[0]["default"]["rounds_ns"]) == 3
    assert json.loads((out / "knobs.json").read_text())[PROGRAM]["spec"]["protocol"][
        "rounds"] == 3


def test_unknown_family_and_too_few_rounds_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="no_such_family.*known:.*pyramid"):
        bench.bench_knobs(tmp_path, ["no_such_family"], 1, KNOBS, protocol())
    with pytest.raises(UserError, match="2 rounds"):
        bench.bench_knobs(tmp_path, [FAMILY], 1, KNOBS, protocol(rounds=1))
    assert not (tmp_path / "knobs.json").exists()


def test_the_command_prints_the_table_and_verdicts(tmp_path):
    json_path = tmp_path / "knobs-result.json"
    r = CliRunner().invoke(main, [
        "bench", "knobs", "--out", str(tmp_path / "out"), "--families", FAMILY,
        "--per-family", "1", "--runs", "2", "--warmup", "1", "--rounds", "2",
        "--max-run-s", "30", "--core", str(core()), "--no-candidates",
        "--json", str(json_path)])
    assert r.exit_code == 0, r.output
    assert f"[1/1] {PROGRAM}" in r.output and "knob=value" in r.output
    assert "verdicts:" in r.output
    result = json.loads(json_path.read_text())
    assert [k[0] for k in result["knobs"]] == [k.name for k in OPTION_KNOBS]
    for k in OPTION_KNOBS:
        assert f"  {k.name:32} {result['summary']['verdicts'][k.name]}" in r.output
    bad = CliRunner().invoke(main, ["bench", "knobs", "--out", str(tmp_path / "o2"),
                                    "--families", "nope"])
    assert bad.exit_code == 2 and "nope" in bad.output
