from click.testing import CliRunner

from graphcost.cli import main


def test_info_on_bundled_sample():
    result = CliRunner().invoke(main, ["info", "--sample"])
    assert result.exit_code == 0, result.output
    for name in ("layout:cpu:random train", "layout:cpu:default test", "options:cpu valid"):
        assert name in result.output


def test_info_on_one_file_and_validate_sample(tmp_path, tile_graph):
    from graphcost.data.inspect import sample_root
    from graphcost.formats import write_graph

    path = write_graph(tmp_path / "k.npz", tile_graph)
    result = CliRunner().invoke(main, ["info", str(path)])
    assert result.exit_code == 0 and "k.npz" in result.output
    ok = CliRunner().invoke(main, ["validate", str(sample_root())])
    assert ok.exit_code == 0 and " 0 bad" in ok.output


def test_bench_io_prints_figures():
    result = CliRunner().invoke(main, ["bench", "io", "--configs", "2000", "--configurable",
                                       "8", "--scan-files", "3"])
    assert result.exit_code == 0, result.output
    assert "open stored + read 64 configs" in result.output
    assert "eager: load deflated file whole" in result.output
    for form in ("compact", "plain"):
        assert f"open deflated + read 64, first: builds the {form} cache" in result.output
        assert f"open deflated + read 64 configs, {form} cache" in result.output
    assert "inflate the deflated configs alone" in result.output
