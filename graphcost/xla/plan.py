"""What a collection run measures, decided before anything is measured.

The spec (and `collect_spec`, how a `collect` command line makes one), its tasks
(program x measure kind, each with its family split and its file under OUT), and for a
sharded run the shard each task belongs to, recorded in `OUT/shard.json`. Running the
tasks (`graphcost.xla.collect`) and merging shard folders (`graphcost.xla.shard`) both
build on this module, so neither has to import the other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.atomic import atomic_open
from graphcost.data.collection import SPLITS
from graphcost.errors import UserError
from graphcost.kinds import MEASURE_KINDS, space_of
from graphcost.xla.programs import family_of, load_programs, make_program, zoo_names
from graphcost.xla.timing import Protocol

DEFAULT_PROGRAMS = "graphcost.xla.programs:zoo"


@dataclass
class CollectSpec:
    """Everything that defines a collection run (the same spec resumes the same run)."""

    out: str
    programs: list[str] = field(default_factory=lambda: [DEFAULT_PROGRAMS])
    program_kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. per_family, families
    kinds: list[str] = field(default_factory=lambda: list(MEASURE_KINDS))
    num_configs: int = 16  # distinct executables wanted per graph
    seed: int = 0
    cover: bool = False  # options: every one- and two-knob change first (a search table)
    split_fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)
    protocol: Protocol = field(default_factory=Protocol)
    workers: int = 0  # 0 = one per core this process may use
    limit: int = 0  # stop after this many graphs this run (0 = all)
    retry_failed: bool = False
    shard: str = ""  # 'I/N': measure only shard I of N of the plan (graphcost.xla.shard)
    # compile on every core, time on one (graphcost.xla.workers). Off by default: on this
    # 2-core machine it measured 0.77x (quiet) and 0.90x (shared) the samples/min of no
    # pipeline with no measurable change in the noise ceiling (`graphcost bench collect`)
    pipeline: bool = False
    quiet_timing: bool = True  # pipeline: pause every compile worker while timing
    # run on Ray (graphcost.xla.ray_pool): None = local processes, "local" = a Ray
    # instance started here with this machine's cores, else a cluster's address
    ray: str | None = None

    def __post_init__(self) -> None:
        bad = sorted(set(self.kinds) - set(MEASURE_KINDS))
        if bad:
            raise UserError(f"unknown kinds {bad}; choose from {list(MEASURE_KINDS)}")
        if self.shard:
            parse_shard(self.shard)
        if isinstance(self.protocol, dict):
            self.protocol = Protocol(**self.protocol)
        self.protocol.check()
        if self.ray is not None and self.pipeline:
            raise UserError("--pipeline is not available with --ray: on Ray each timing slot "
                            "compiles and times its own graphs on its pinned core")
        check_num_configs(self.num_configs)


def program_kwargs(per_family: int, families: Sequence[str] = ()) -> dict[str, Any]:
    """What a program source (e.g. the zoo) is called with: programs per family and,
    when given, which families."""
    kwargs: dict[str, Any] = {"per_family": per_family}
    if families:
        kwargs["families"] = list(families)
    return kwargs


def collect_spec(out: str, sources: Sequence[str], per_family: int, families: Sequence[str],
                 kinds: Sequence[str], **settings: Any) -> CollectSpec:
    """The CollectSpec of a `collect` run: the zoo unless `sources` name program sources,
    `per_family` programs of each of `families` (default: all), measured under `kinds`;
    `settings` are further CollectSpec fields (num_configs, protocol, workers, …). A
    ValueError names a bad kind or shard."""
    return CollectSpec(out=out, programs=list(sources) or [DEFAULT_PROGRAMS],
                       program_kwargs=program_kwargs(per_family, families), kinds=list(kinds),
                       **settings)


def check_num_configs(num_configs: int) -> None:
    """Refuse fewer than two configs per graph (`measure` and `collect`): nothing to rank."""
    if num_configs < 2:
        raise UserError(f"--configs (num_configs) must be >= 2 (configs to rank), "
                        f"got {num_configs}")


@dataclass(frozen=True)
class Task:
    """One graph to measure: a program under one measure kind."""

    kind: str
    source: str  # the MODULE:FUNCTION the program comes from
    program: str
    split: str

    def path(self, out: str | Path) -> Path:
        """OUT/npz/SPACE/cpu[/SAMPLING]/SPLIT/PROGRAM.npz (the sampling of a layout kind)."""
        return Path(out, "npz", space_of(self.kind), "cpu", *self.kind.split(":")[1:],
                    self.split, f"{_safe(self.program)}.npz")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def assign_splits(families: Iterable[str], fractions: Sequence[float] = (0.7, 0.15, 0.15),
                  seed: int = 0) -> dict[str, str]:
    """Family -> split. Families are shuffled by `seed`; with 3+ families every split
    gets at least one, so validation and test programs are of unseen families."""
    fams = sorted(set(families))
    rng = np.random.default_rng(seed)
    fams = [fams[i] for i in rng.permutation(len(fams))]
    n = len(fams)
    counts = [int(round(f * n)) for f in fractions]
    if n >= 3:
        counts[1], counts[2] = max(1, counts[1]), max(1, counts[2])
    counts[0] = max(0, n - counts[1] - counts[2])
    out: dict[str, str] = {}
    i = 0
    for split, k in zip(SPLITS, counts, strict=False):
        for f in fams[i:i + k]:
            out[f] = split
        i += k
    for f in fams[i:]:
        out[f] = "train"
    return out


_PROGRAM_CACHE: dict[tuple, dict[str, tuple]] = {}


def program_table(source: str, kwargs: dict[str, Any]) -> dict[str, tuple]:
    """Name -> (function, example args) of a program source, loaded once per process."""
    key = (source, json.dumps(kwargs, sort_keys=True))
    if key not in _PROGRAM_CACHE:
        _PROGRAM_CACHE[key] = {n: (fn, args) for n, fn, args in load_programs(source, **kwargs)}
    return _PROGRAM_CACHE[key]


def program_names(source: str, kwargs: dict[str, Any]) -> list[str]:
    """The program names of a source; the zoo's are listed without building any program."""
    if source == DEFAULT_PROGRAMS:
        return zoo_names(**kwargs)
    return list(program_table(source, kwargs))


def find_program(source: str, kwargs: dict[str, Any], name: str) -> tuple:
    """(function, example args) of one program; a zoo program is built alone, so a
    worker does not hold every program's arrays."""
    if source == DEFAULT_PROGRAMS and name in zoo_names(**kwargs):
        family, index = name.split(".", 1)
        _, fn, args = make_program(family, int(index), kwargs.get("seed", 0))
        return fn, args
    programs = program_table(source, kwargs)
    if name not in programs:
        raise UserError(f"no program {name!r} in {source}; e.g. {sorted(programs)[:5]}")
    return programs[name]


def written_splits(out: str | Path, kinds: Iterable[str]) -> dict[str, str]:
    """Family -> the split its graphs already written under OUT are in (for `kinds`)."""
    found: dict[str, str] = {}
    for kind in kinds:
        for split in SPLITS:
            for f in sorted((collection_dir(out, kind) / split).glob("*.npz")):
                found.setdefault(family_of(f.stem), split)
    return found


def plan_tasks(spec: CollectSpec) -> list[Task]:
    """Every graph of the collection, in a stable order (programs x kinds). A family with
    graphs already under OUT keeps their split: the split drawn depends on which families
    a run names, so a resumed run that names fewer would otherwise measure them again
    into another split, and one family would sit in two splits."""
    names = [(src, n) for src in spec.programs for n in program_names(src, spec.program_kwargs)]
    splits = assign_splits([family_of(n) for _, n in names], spec.split_fractions, spec.seed)
    splits.update({f: s for f, s in written_splits(spec.out, spec.kinds).items() if f in splits})
    return [Task(kind, src, n, splits[family_of(n)]) for src, n in names for kind in spec.kinds]


def spec_dict(spec: CollectSpec) -> dict[str, Any]:
    """The spec as plain fields that rebuild it (`CollectSpec(**d)`): what workers receive."""
    d = asdict(spec)
    d["split_fractions"] = tuple(d["split_fractions"])
    return d


def collection_dir(out: str | Path, kind: str) -> Path:
    """The folder of one measure kind's collection (its splits are subfolders)."""
    return Task(kind, "", "x", "train").path(out).parent.parent


def collection_name(kind: str) -> str:
    """The name a measure kind's collection is listed under: its space, the machine and,
    for layouts, the sampling (`layout:cpu:random`, `options:cpu`)."""
    return ":".join([space_of(kind), "cpu", *kind.split(":")[1:]])


# ------------------------------------------------------------------ shards

FORMAT = "graphcost-shard/1"
PLAN_FILE = "shard.json"
# spec fields that may differ between the machines of one collection
LOCAL_FIELDS = ("out", "workers", "limit", "retry_failed", "shard", "ray")


def parse_shard(text: str) -> tuple[int, int]:
    """'I/N' → (I, N) with 0 ≤ I < N."""
    index, sep, count = str(text).partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i = n = -1
    if not sep or n < 1 or not 0 <= i < n:
        raise UserError(f"--shard takes I/N with 0 <= I < N (e.g. 0/4), got {text!r}")
    return i, n


def _key(task: Task) -> str:
    """A graph's identity; its split follows from the plan and is left out."""
    return hashlib.sha1(f"{task.kind}|{task.source}|{task.program}".encode()).hexdigest()


def assign_shards(tasks: Sequence[Task], count: int) -> dict[Task, int]:
    """Each task's shard in 0..count−1: ordered by a stable hash, then dealt round-robin."""
    ranked = sorted(tasks, key=lambda t: (_key(t), t.kind, t.source, t.program))
    return {t: i % count for i, t in enumerate(ranked)}


def shard_tasks(tasks: Sequence[Task], index: int, count: int) -> list[Task]:
    """The tasks of shard `index` of `count`, in plan order."""
    owner = assign_shards(tasks, count)
    return [t for t in tasks if owner[t] == index]


def _plan_spec(spec: CollectSpec | dict[str, Any]) -> dict[str, Any]:
    """The spec fields every shard must share (what is measured, and how)."""
    d = spec_dict(spec) if isinstance(spec, CollectSpec) else dict(spec)
    return json.loads(json.dumps({k: v for k, v in d.items() if k not in LOCAL_FIELDS}))


def take_shard(spec: CollectSpec, tasks: list[Task]) -> list[Task]:
    """This machine's part of the full plan `tasks`; records the plan in OUT/shard.json.

    Refuses an OUT that already holds a shard of another plan, so two runs cannot mix.
    """
    index, count = parse_shard(spec.shard)
    owner = assign_shards(tasks, count)
    plan = {"format": FORMAT, "shard": spec.shard, "index": index, "count": count,
            "spec": _plan_spec(spec),
            "plan": [{"task": asdict(t), "shard": owner[t]} for t in tasks]}
    path = Path(spec.out) / PLAN_FILE
    if path.exists():
        old = json.loads(path.read_text())
        if (old.get("index"), old.get("count"), old.get("plan")) != (index, count, plan["plan"]):
            raise UserError(f"{spec.out} holds shard {old.get('shard')} of another plan; "
                             "measure this shard into a fresh folder")
    with atomic_open(path, "w") as f:
        json.dump(plan, f, indent=1)
    return [t for t in tasks if owner[t] == index]
