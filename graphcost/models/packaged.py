"""The trained models that ship with graphcost, so that a user's program can be tuned
without training first.

One per configuration space: `layout.pt` (a ranker of layout configs) and `options.pt`
(of compiler options), trained on every source of programs graphcost has measured (the
zoo, `external/`, the corpus). `packaged/README.md` is their card: the data, the
settings, the command that made each, and how each held on sources it never saw.
"""

from __future__ import annotations

from pathlib import Path

from graphcost.errors import UserError

HOME = Path(__file__).parent / "packaged"
#: space → the packaged model's file
FILES = {"layout": HOME / "layout.pt", "options": HOME / "options.pt"}


def packaged_model(space: str) -> Path:
    """The path of the packaged model of `space` ('layout' or 'options')."""
    if space not in FILES:
        raise UserError(f"no packaged model of {space!r}; there are: {', '.join(FILES)}")
    path = FILES[space]
    if not path.is_file():
        raise UserError(f"the packaged {space} model {path} is missing (an incomplete "
                        "install?); reinstall graphcost or give a model (--model)")
    return path
