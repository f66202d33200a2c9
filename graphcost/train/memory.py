"""The memory budget of full-graph training: refuse a run before it runs out of memory.

Full-graph training holds a (C, N, d) node state per layer for every graph of a step,
which for a 200k-node program is tens of gigabytes. The estimate below is checked
before the first step, so a run that cannot fit says so (and what to do instead)
rather than being killed by the kernel half-way.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from graphcost.errors import UserError

# (C, N, d) float32 tensors alive at the peak of a full-graph step, per GNN layer and fixed
# (input join, pooling, gradients); measured with `graphcost bench scale` (the ranker).
TENSORS_PER_LAYER = 12
TENSORS_FIXED = 8


class MemoryBudgetError(UserError):
    """Full-graph training would not fit; the message says what to do instead."""


def available_memory() -> int:
    """Bytes the process may still use: the system's available memory, or the cgroup
    limit when lower (psutil does not read cgroup limits, containers set them)."""
    avail = psutil.virtual_memory().available
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            avail = min(avail, int(limit))
    except OSError:
        pass
    return avail


def memory_budget_bytes(spec: str) -> int | None:
    """'75%' of available memory, an absolute '8G' / '512M' / bytes, or 'off' → None."""
    spec = str(spec).strip().upper()
    if spec in ("", "OFF", "NONE", "0"):
        return None
    if spec.endswith("%"):
        return int(available_memory() * float(spec[:-1]) / 100)
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if spec.endswith("B"):
        spec = spec[:-1]
    if spec and spec[-1] in scale:
        return int(float(spec[:-1]) * scale[spec[-1]])
    return int(float(spec))


def full_step_bytes(nodes: int, configs: int, hidden: int, layers: int) -> int:
    """Estimated peak activation bytes of one full-graph step over `nodes` batch nodes."""
    return 4 * nodes * configs * hidden * (TENSORS_PER_LAYER * layers + TENSORS_FIXED)


def check_full_graph_memory(model_settings: Any, nodes: Sequence[int], graphs_per_batch: int,
                            configs_per_graph: int, budget_spec: str, kind: str) -> int:
    """Raise MemoryBudgetError when the biggest step (the `graphs_per_batch` largest graphs,
    as the model sees them) is estimated above the budget; return the estimate. Pruning
    and segments are offered only to layout models (`kind`), the ones that have them."""
    b = max(1, min(graphs_per_batch, len(nodes)))
    step_nodes = int(sum(sorted(nodes, reverse=True)[:b]))
    hidden = int(getattr(model_settings, "hidden", 64))
    layers = int(getattr(model_settings, "layers", 3))
    need = full_step_bytes(step_nodes, configs_per_graph, hidden, layers)
    budget = memory_budget_bytes(budget_spec)
    if budget is not None and need > budget:
        hops = getattr(model_settings, "prune_hops", None) if kind == "layout" else None
        prune = ("" if hops is None else
                 "; prune harder (--set prune_hops=1)" if hops >= 0 else
                 "; prune to configurable nodes (--set prune_hops=2)")
        # only a model with segment hooks (the ranker) can train in segments
        gst = ("Use Graph Segment Training (--set mode=gst --set segment_size=1000)"
               if kind == "layout" and hasattr(model_settings, "segment_size") else
               "This model trains whole graphs only")
        raise MemoryBudgetError(
            f"full-graph training would need about {need / 2**30:.1f} GiB per step "
            f"({b} graphs, {step_nodes:,} nodes × {configs_per_graph} configs × hidden "
            f"{hidden} × {layers} layers), over the memory budget of {budget / 2**30:.1f} GiB "
            f"(memory_budget={budget_spec}). {gst}{prune}; or sample fewer configs "
            f"(--set configs_per_graph=8) or graphs (--set graphs_per_batch=1).")
    return need
