"""The one config scorer: every score of a configuration comes from here.

Evaluation, prediction, submissions, validation during training, autotuning and the
benchmarks all score configurations of one graph at a time. `ConfigScorer` prepares
the graph once (pruned and transformed as the model sees it) and scores in chunks of
bounded memory, always in eval mode (no dropout, whatever mode the network was left in):

- `scores(ids)`: the graph's own configurations (default all), as measured data has them;
- `rank()`: all of them fastest first;
- `candidates()`: a function scoring raw configurations that need not be in the graph
  (autotuning), through the network's `config_scorer`: the config-independent work is
  done once, so each call runs only what a configuration changes.

With `fast` (the default) networks score on their exact fast paths (`fastpath`: cached
graph states, batched configs, incremental recomputation of local configs); `fast=False`
runs the plain forward pass, to check and to measure the fast paths against.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from graphcost.errors import UserError
from graphcost.formats import Graph, read_graph
from graphcost.models.base import GraphTensors
from graphcost.models.model import Model, as_model


@contextmanager
def eval_mode(net: torch.nn.Module):
    """Run with dropout off, then put the network back in the mode it was in."""
    was_training = net.training
    net.eval()
    try:
        yield net
    finally:
        net.train(was_training)


class ConfigScorer:
    """Scores (lower = faster) of configurations of one graph under one model."""

    def __init__(self, model: Model, graph: Graph | GraphTensors, chunk_size: int = 1024,
                 fast: bool = True):
        if model.net is None:
            raise RuntimeError("the model is not fitted: train it (graphcost.train.fit) "
                               "or load() one")
        self.model, self.net, self.chunk_size, self.fast = model, model.net, chunk_size, fast
        self.graph = graph
        self._tensors = graph if isinstance(graph, GraphTensors) else None
        self._cached: Callable[[torch.Tensor], torch.Tensor] | None = None

    @property
    def tensors(self) -> GraphTensors:
        """The graph as the network sees it, prepared on first use."""
        if self._tensors is None:
            self._tensors = self.model.prepare(self.graph)
        return self._tensors

    def scores(self, ids: np.ndarray | None = None) -> np.ndarray:
        """Scores of the graph's configs `ids` (default: all)."""
        gt = self.tensors
        ids = np.arange(gt.num_configs) if ids is None else np.asarray(ids, dtype=np.int64)
        if ids.size == 0:
            return np.zeros(0, dtype=np.float32)
        with eval_mode(self.net):
            out = self.net.score_configs(gt, ids, self.chunk_size, self.fast).numpy()
        finite(out, gt.name, ids)
        return out

    def rank(self) -> tuple[np.ndarray, np.ndarray]:
        """All config indices fastest first (ties by index) and their scores."""
        scores = self.scores()
        return np.argsort(scores, kind="stable"), scores

    def candidates(self, cache: bool = True) -> Callable[[np.ndarray], np.ndarray]:
        """A function scoring raw configurations of the graph's program: (C, nc, 18)
        layouts of its configurable nodes, or (C, 24) tile/option features. A config of
        the graph gets the score `scores` gives it (for graphs without repeated configs).

        With `cache` the graph-side work is done here, once; `cache=False` redoes it on
        every call (the same scores, to measure what the cache saves)."""
        with eval_mode(self.net):
            cached = self._candidate_fn() if cache else None

        def score(configs: np.ndarray) -> np.ndarray:
            raw = np.asarray(configs, dtype=np.float32)
            if raw.shape[0] == 0:
                return np.zeros(0, dtype=np.float32)
            transform, gt = self.model.transform, self.tensors
            assert transform is not None
            if self.model.kind == "tile":
                raw = transform.tile_config(raw)
            elif gt.layout_config is not None:
                raw = gt.layout_config(raw)
            x = torch.from_numpy(raw)
            with eval_mode(self.net):
                out = (cached or self._candidate_fn(fresh=True))(x).numpy()
            return finite(out, self.tensors.name)

        return score

    def _candidate_fn(self, fresh: bool = False) -> Callable[[torch.Tensor], torch.Tensor]:
        """The network's tensor-level scorer of candidates; `fresh` prepares the graph anew."""
        redo = fresh and not isinstance(self.graph, GraphTensors)
        gt = self.model.prepare(self.graph) if redo else self.tensors
        return self.net.config_scorer(gt, self.chunk_size, self.fast)


def finite(scores: np.ndarray, graph: str, ids: np.ndarray | None = None) -> np.ndarray:
    """`scores`, refused when any is NaN or infinite: a diverged model must not rank
    (NaNs sort anywhere) nor be scored (they crash OPA and skew τ) silently."""
    bad = np.flatnonzero(~np.isfinite(scores))
    if bad.size:
        first = int(bad[0] if ids is None else ids[bad[0]])
        raise UserError(f"graph {graph}: the model scores {bad.size} of {scores.size} configs "
                        f"NaN or infinite (first: config {first}); its training diverged "
                        "(retrain it, e.g. with a lower lr)")
    return scores


def rank_file(model: Model | str | Path, path: str | Path, chunk_size: int = 1024,
              device: str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Config indices of one `.npz` fastest first, and every config's score (the file
    needs no runtimes)."""
    return ConfigScorer(as_model(model, device), read_graph(path, runtimes=False),
                        chunk_size).rank()


def score_graph(model: Model, graph: Graph | GraphTensors, ids: np.ndarray | None = None,
                chunk_size: int = 1024) -> np.ndarray:
    """Scores of a graph's configs `ids` (default: all): `ConfigScorer(...).scores(ids)`."""
    return ConfigScorer(model, graph, chunk_size).scores(ids)
