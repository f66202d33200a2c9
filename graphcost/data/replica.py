"""A replica of a published TpuGraphs collection: a synthetic collection with its
published shape (`PUBLISHED`: graphs per split, nodes per graph, configs per graph;
sources in docs/replica.md), written in the published format, compressed as published.

Its graphs come from `data.synthetic` (random DAGs, planted runtimes); what a replica
reproduces is size, not signal. Sizes are drawn from a lognormal fitted to the published
mean and clipped to the published range; every split holds one graph of the largest
published node count with the largest config count (layout test graphs: the 1,000
configs each of the released test files), so the worst file is always rehearsed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtri

from graphcost.atomic import remove_dead_writers_parts, scratch_dir
from graphcost.errors import UserError
from graphcost.progress import Progress

SPLITS = ("train", "valid", "test")
CONFIG_ROW_BYTES = 18 * 4  # one configurable node of one config: 18 float32 columns


@dataclass(frozen=True)
class Published:
    """The published shape of one collection. Each range is (mean, min, max)."""

    graphs: tuple[int, int, int]  # train, valid, test
    nodes: tuple[float, int, int]
    configs: tuple[float, int, int]
    test_configs: int = 0  # > 0: every test graph has this many configs (else as the rest)


#: Sources of every figure: docs/replica.md. Node counts are the paper's Table 1 (shared
#: by default and random); graph counts and config ranges are those of the released files.
PUBLISHED = {
    "layout:xla:random": Published((69, 7, 8), (14_105, 372, 43_615), (14_579, 20, 100_040),
                                   1000),
    "layout:xla:default": Published((61, 7, 8), (14_105, 372, 43_615),
                                    (17_159, 1_159, 100_040), 1000),
    "layout:nlp:random": Published((207, 20, 17), (5_659, 876, 21_919),
                                   (66_089, 11_098, 100_040), 1000),
    "layout:nlp:default": Published((198, 20, 17), (5_659, 876, 21_919),
                                    (56_534, 11_296, 100_040), 1000),
    # train = the paper's 6,988 kernels less the valid and test ones; the node and
    # config ranges of tile kernels are not published (docs/replica.md)
    "tile:xla": Published((5_468, 676, 844), (40, 2, 1_000), (1_842, 2, 10_000)),
}
#: configurable nodes per layout node: 185,857 configurable nodes over the 535 released
#: train graphs, whose nodes total about 3.95M (docs/replica.md)
CONFIGURABLE_FRACTION = 0.047
#: lognormal σ of nodes and of configs per graph: from the mean and median of the
#: released layout:xla:random train split (12,745 / 10,449 nodes, 14,579 / 8,368 configs)
SIGMA_NODES, SIGMA_CONFIGS = 0.63, 1.05


@dataclass(frozen=True)
class Shape:
    """One graph of a replica."""

    split: str
    index: int
    nodes: int
    configs: int

    @property
    def configurable(self) -> int:
        return max(1, round(CONFIGURABLE_FRACTION * self.nodes))

    @property
    def config_bytes(self) -> int:
        """Uncompressed `node_config_feat` (layout): what the plain read cache holds."""
        return self.configs * self.configurable * CONFIG_ROW_BYTES

    @property
    def compact_bytes(self) -> int:
        """What the compact read cache holds of a layout file: a 2-byte row number per
        config and configurable node (its table of distinct rows is a few KB)."""
        return self.configs * self.configurable * 2

    @property
    def tile_bytes(self) -> int:
        """Uncompressed arrays of a tile graph: per node 140 float32 features, an int64
        opcode and about two edges (int64 pairs); per config 24 float32 features and two
        int64 runtimes."""
        return self.nodes * (140 * 4 + 8 + 2 * 16) + self.configs * (24 * 4 + 2 * 8)


def clipped_lognormal(n: int, mean: float, low: int, high: int, sigma: float) -> np.ndarray:
    """n sizes at evenly spaced quantiles of a lognormal clipped to [low, high], its median
    chosen so that the clipped values average `mean` (low < mean < high)."""
    z = sigma * ndtri((np.arange(n) + 0.5) / n)
    mu = brentq(lambda m: np.clip(np.exp(m + z), low, high).mean() - mean,
                math.log(low) - 10 * sigma, math.log(high) + 10 * sigma)
    return np.clip(np.rint(np.exp(mu + z)), low, high).astype(np.int64)


def collection_shapes(name: str, seed: int = 0, pub: Published | None = None) -> list[Shape]:
    """Every graph of the collection's replica: per split, sizes drawn as the module
    docstring says, the first one pinned to the largest nodes and configs. `pub` replaces
    the published shape (a small replica for tests)."""
    pub = pub or published(name)
    rng = np.random.default_rng(seed)
    shapes = []
    for split, count in zip(SPLITS, pub.graphs, strict=True):
        nodes = rng.permutation(clipped_lognormal(count, *pub.nodes, SIGMA_NODES))
        configs = rng.permutation(clipped_lognormal(count, *pub.configs, SIGMA_CONFIGS))
        nodes[0], configs[0] = pub.nodes[2], pub.configs[2]
        if split == "test" and pub.test_configs:
            configs[:] = pub.test_configs
        shapes += [Shape(split, i, int(n), int(c))
                   for i, (n, c) in enumerate(zip(nodes, configs, strict=True))]
    return shapes


def published(name: str) -> Published:
    if name not in PUBLISHED:
        raise UserError(f"no published shape for collection {name!r}; known: "
                        f"{', '.join(PUBLISHED)}")
    return PUBLISHED[name]


def chosen(shapes: Sequence[Shape], per_split: int, seed: int = 0,
           max_configs: int = 0) -> list[Shape]:
    """`per_split` graphs of the train and valid splits (0: all), the largest (index 0)
    and a seeded random draw of the rest; the whole test split, so that `submit` is
    measured on it, not projected (it is small: 1,000 configs per layout graph).
    `max_configs` > 0 caps every graph's configs: a quick rehearsal of the same nodes,
    whose training and GPU memory grow with the configs a step samples, not the file's."""
    if per_split <= 0:
        out = list(shapes)
    else:
        rng = np.random.default_rng(seed + 1)
        out = []
        for split in ("train", "valid"):
            group = [s for s in shapes if s.split == split]
            rest = rng.permutation(len(group) - 1)[:per_split - 1] + 1
            out += [group[0], *(group[i] for i in sorted(rest))]
        out += [s for s in shapes if s.split == "test"]
    if max_configs > 0:
        out = [replace(s, configs=min(s.configs, max_configs)) for s in out]
    return out


def collection_dir(root: Path, name: str) -> Path:
    """Where collection `name` lies under a TpuGraphs root (`npz/layout/xla/random`)."""
    return Path(root, "npz", *name.split(":"))


def write_replica(root: str | Path, name: str, shapes: Sequence[Shape], seed: int = 0,
                  progress: bool = False) -> Path:
    """Write `shapes` of collection `name` under `root` (resumable: a graph already
    written is kept, since every write is atomic); return the collection folder.
    `progress` shows a bar (off a terminal, a line every 5 s)."""
    from graphcost.data.synthetic import make_large_layout_graph, make_tile_graph
    from graphcost.formats import write_graph

    base = collection_dir(Path(root), name)
    for split in SPLITS:  # what a killed run left: a memory map of up to 15 GB
        if (base / split).is_dir():
            remove_dead_writers_parts(base / split)
    bar = Progress(len(shapes), f"writing {name}", "graphs", enabled=progress, every_s=5)
    for s in bar.iterate(shapes):
        path = base / s.split / f"{s.split}_{s.index:04d}.npz"
        if path.exists():
            continue
        rng = np.random.default_rng([seed, SPLITS.index(s.split), s.index])
        if name.startswith("tile"):
            graph = make_tile_graph(rng, s.nodes, s.configs, name=path.stem)
            write_graph(path, graph)
        else:  # configs go through a memory map, so a file bigger than memory can be made
            path.parent.mkdir(parents=True, exist_ok=True)
            with scratch_dir(path) as tmp:
                graph = make_large_layout_graph(rng, s.nodes, s.configs, s.configurable,
                                                name=path.stem,
                                                config_file=tmp / "configs.npy")
                write_graph(path, graph)
                del graph
    bar.close()
    return base
