"""Every `graphcost` command in the README names a real command with real options, and
the README opens with the two commands that CI and a new user run."""

import re
import shlex
from pathlib import Path

import click
import pytest

from graphcost.cli import main

README = Path(__file__).parents[1] / "README.md"


def readme_commands() -> list[list[str]]:
    text = README.read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("graphcost "):
                commands.append(shlex.split(line)[1:])
    return commands


def _resolve(args: list[str]) -> tuple[click.Command, list[str]]:
    cmd: click.Command = main
    while isinstance(cmd, click.Group) and args and args[0] in cmd.commands:
        cmd, args = cmd.commands[args[0]], args[1:]
    return cmd, args


def test_readme_opens_with_the_two_make_commands():
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
    lines = [ln.split("#")[0].strip() for ln in first_block.strip().splitlines()]
    assert lines == ["make demo", "make test"]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "make test" in ci


def test_every_readme_command_exists_with_its_options():
    commands = readme_commands()
    assert len(commands) >= 15
    for args in commands:
        cmd, rest = _resolve(args)
        assert not isinstance(cmd, click.Group), f"not a command: graphcost {' '.join(args)}"
        declared = {o for p in cmd.params for o in getattr(p, "opts", [])}
        used = {a.split("=")[0] for a in rest if a.startswith("-")}
        assert used <= declared, f"graphcost {' '.join(args)}: unknown {used - declared}"


def test_python_api_examples_run_in_order(tmp_path, monkeypatch):
    """The README's Python blocks (train, evaluate, predict, autotune) run as written, one
    after another in one namespace, from a folder where `graphcost/sample` is the bundled
    data."""
    pytest.importorskip("jax", reason="the autotune example needs the xla extra")
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 4
    (tmp_path / "graphcost").mkdir()
    (tmp_path / "graphcost" / "sample").symlink_to(README.parent / "graphcost" / "sample")
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        assert len(block.strip().splitlines()) <= 10
    names: dict = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), names)
    assert (tmp_path / "runs" / "py" / "model.pt").exists()
    assert names["report"]["split"] == "test" and names["report"]["graphs"]
    assert sorted(names["order"]) == list(range(names["graph"].num_configs))
    assert names["result"].kind == "layout" and len(names["result"].measured) >= 3
