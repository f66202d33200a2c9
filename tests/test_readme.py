"""Every `graphcost` command in the README and the docs/ pages names a real command with
real options, every relative link among them leads to a file, the README stays a
five-minute front door that opens with the two commands that CI and a new user run, and
every docs/ page is reachable from it."""

import json
import re
import shlex
from pathlib import Path

import click
import pytest

from graphcost.cli import main

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
NOTEBOOK = sorted((ROOT / "docs" / "notebook").glob("*.md"))  # linked from docs/results.md
PAGES = [README, *DOCS, *NOTEBOOK]
RESULTS = ROOT / "docs" / "results.md"
#: a named section of a results page, as the project's texts cite one:
#: `docs/results.md`, "Section" (the quoted name may wrap, in a comment too)
SECTION_REF = re.compile(r"docs/(results\.md|notebook/[\w.-]+\.md)`?,\s*\"([^\"]+)\"")
#: the page whose ```python blocks are the Python API examples
API_PAGE = ROOT / "docs" / "api.md"
#: a markdown link or image: [text](target), the target without spaces
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def page_commands(page: Path) -> list[list[str]]:
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("graphcost "):
                commands.append(shlex.split(line)[1:])
    return commands


def relative_links(page: Path) -> list[str]:
    """The link targets of a page that name a file, without their #anchor."""
    targets = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http(s), mailto and other schemes; an anchor in the page itself
        targets.append(target.split("#")[0])
    return targets


def _resolve(args: list[str]) -> tuple[click.Command, list[str]]:
    cmd: click.Command = main
    while isinstance(cmd, click.Group) and args and args[0] in cmd.commands:
        cmd, args = cmd.commands[args[0]], args[1:]
    return cmd, args


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_readme_opens_with_the_two_make_commands():
    first_block = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
    lines = [ln.split("#")[0].strip() for ln in first_block.strip().splitlines()]
    assert lines == ["make demo", "make test"]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "make test" in ci


def test_readme_reads_in_five_minutes():
    assert len(README.read_text().splitlines()) <= 150


def test_the_pages_hold_the_commands_they_always_held():
    assert len(page_commands(README)) >= 10
    assert sum(len(page_commands(p)) for p in PAGES) >= 70


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_readme_command_exists_with_its_options(page):
    for args in page_commands(page):
        cmd, rest = _resolve(args)
        assert not isinstance(cmd, click.Group), \
            f"{_name(page)}: not a command: graphcost {' '.join(args)}"
        declared = {o for p in cmd.params for o in getattr(p, "opts", [])}
        used = {a.split("=")[0] for a in rest if a.startswith("-")}
        assert used <= declared, \
            f"{_name(page)}: graphcost {' '.join(args)}: unknown {used - declared}"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_relative_link_leads_to_a_file(page):
    missing = [t for t in relative_links(page) if not (page.parent / t).exists()]
    assert not missing, f"{_name(page)} links to what does not exist: {missing}"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / t).resolve() for t in relative_links(README)}
    orphans = [_name(p) for p in DOCS if p.resolve() not in linked]
    assert DOCS and not orphans, f"docs pages the README does not link to: {orphans}"


def test_python_api_examples_run_in_order(tmp_path, monkeypatch):
    """docs/api.md's Python blocks (train, evaluate, predict, autotune twice) run as written,
    one after another in one namespace, from a folder where `graphcost/sample` is the
    bundled data."""
    pytest.importorskip("jax", reason="the autotune example needs the xla extra")
    blocks = re.findall(r"```python\n(.*?)```", API_PAGE.read_text(), flags=re.S)
    assert len(blocks) == 5
    (tmp_path / "graphcost").mkdir()
    (tmp_path / "graphcost" / "sample").symlink_to(ROOT / "graphcost" / "sample")
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        assert len(block.strip().splitlines()) <= 10
    names: dict = {}
    for block in blocks:
        exec(compile(block, _name(API_PAGE), "exec"), names)
    assert (tmp_path / "runs" / "py" / "model.pt").exists()
    assert names["report"]["split"] == "test" and names["report"]["graphs"]
    assert sorted(names["order"]) == list(range(names["graph"].num_configs))
    result = names["result"]
    assert result.kind == "layout" and result.arms == ["model"] and len(result.steps) >= 2
    tuned = names["tuned"]
    assert tuned.arms == ["coordinate", "random"] and set(tuned.found) == set(tuned.arms)
    assert json.loads((tmp_path / "runs" / "py" / "options.json").read_text()) == tuned.config


def test_the_results_page_holds_todays_claims_in_300_lines():
    text = RESULTS.read_text()
    assert len(text.splitlines()) <= 300
    assert "notebook/" in text  # the history it leaves out, a link away


def test_every_cited_results_section_exists():
    """A text that sends the reader to a section of the results page or the notebook
    names a heading that is there (a section moved to the notebook moves its citations)."""
    import subprocess

    files = subprocess.run(["git", "ls-files", "*.md", "*.py"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    missing = []
    for name in set(files) - {"tests/test_readme.py"}:  # its own comment shows the form
        flat = re.sub(r"\n\s*(#\s*)?", " ", (ROOT / name).read_text(errors="replace"))
        for page, section in SECTION_REF.findall(flat):
            section = re.sub(r"\s+", " ", section).rstrip(".…")
            headings = [line[3:].strip() for line in (ROOT / "docs" / page).read_text()
                        .splitlines() if line.startswith("## ")]
            if not any(h.startswith(section) for h in headings):
                missing.append(f"{name}: docs/{page}, {section!r}")
    assert not missing, missing
