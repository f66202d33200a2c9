import pytest

from graphcost.eval.submission import (
    SubmissionError,
    ranking_from_scores,
    read_submission,
    submission_id,
    write_submission,
)


def test_round_trip(tmp_path):
    rows = {
        submission_id("tile:xla", "k1"): ranking_from_scores("tile", [.5, .1, .9, .3, .2, .8]),
        submission_id("layout:xla:random", "g1"): ranking_from_scores("layout", [3.0, 1.0, 2.0]),
    }
    assert rows["tile:xla:k1"] == [1, 4, 3, 0, 5]
    assert rows["layout:xla:random:g1"] == [1, 2, 0]
    path = write_submission(rows, tmp_path / "sub.csv")
    assert path.read_text().splitlines()[0] == "ID,TopConfigs"
    back = read_submission(path, num_configs={"tile:xla:k1": 6, "layout:xla:random:g1": 3})
    assert back == rows


@pytest.mark.parametrize("text,expected", [
    ("Id,Top\n", "header"),
    ("ID,TopConfigs\nlayout:xla:g1,0;1\n", "an ID"),
    ("ID,TopConfigs\ntile:xla:k,0;1;2;3;4\ntile:xla:k,0;1;2;3;4\n", "duplicate"),
    ("ID,TopConfigs\ntile:xla:k,0;1;2\n", "5 tile configs"),
    ("ID,TopConfigs\ntile:xla:k,0;1;x;3;4\n", "integers"),
    ("ID,TopConfigs\nlayout:xla:random:g,0;1;1\n", "distinct"),
    ("ID,TopConfigs\nlayout:xla:random:g,0;2\n", "permutation"),
])
def test_bad_submissions(tmp_path, text, expected):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(SubmissionError, match=expected) as e:
        read_submission(path, num_configs={"layout:xla:random:g": 3, "tile:xla:k": 9})
    assert str(path) in str(e.value)


def test_missing_rows_are_reported(tmp_path):
    path = write_submission({"tile:xla:a": [0, 1, 2, 3, 4]}, tmp_path / "s.csv")
    with pytest.raises(SubmissionError, match="missing 1"):
        read_submission(path, num_configs={"tile:xla:a": 9, "tile:xla:b": 9})
    assert read_submission(path, num_configs={"tile:xla:a": 9}) == {"tile:xla:a": [0, 1, 2, 3, 4]}
