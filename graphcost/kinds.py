"""The words for what a config sets, defined once (it imports nothing of graphcost).

- graph kind (`GRAPH_KINDS`): the form of a graph file and of the model that ranks it.
  A `tile` graph's configs are of the whole graph (one feature row per config); a
  `layout` graph's configs are per configurable node.
- space (`SPACES`): what a program's configs set when graphcost measures or tunes it:
  the `layout`s of its configurable nodes, or the compiler `options` of the whole
  program. A layout space makes layout graphs; an options space makes tile graphs.
- measure kind (`MEASURE_KINDS`): what a collection measures of a program: a space
  and, for layouts, how its configs are sampled (`random` plans, or plans a few moves
  from the `default`).
"""

from __future__ import annotations

GRAPH_KINDS = ("tile", "layout")
SPACES = ("layout", "options")
MEASURE_KINDS = ("layout:random", "layout:default", "options")

_SPACE_OF = {"tile": "options", "layout": "layout",
             **{k: k.partition(":")[0] for k in MEASURE_KINDS}}


def space_of(kind: str) -> str:
    """The space of a graph kind or a measure kind (a tile graph's is `options`)."""
    try:
        return _SPACE_OF[kind]
    except (KeyError, TypeError):
        raise ValueError(f"unknown kind {kind!r}: expected a graph kind "
                         f"{list(GRAPH_KINDS)} or a measure kind {list(MEASURE_KINDS)}"
                         ) from None


def graph_kind_of(space: str) -> str:
    """The kind of the graphs a space makes (the inverse of `space_of` on graph kinds)."""
    if space not in SPACES:
        raise ValueError(f"unknown space {space!r}: expected one of {list(SPACES)}")
    return "tile" if space == "options" else "layout"


def collection_space(collection: str) -> str | None:
    """What the configs of a collection set, by its name's first part: a space
    (`layout:cpu:random`, `options:cpu`), `tile` for TPU tile sizes (`tile:xla`, or a
    folder `tile` of converted records), None when the name does not say."""
    head = collection.partition(":")[0]
    return head if head in (*SPACES, "tile") else None
