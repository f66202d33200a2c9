"""Tuning records of our own for the converter's tests, made at test time.

The real TPU records are Google's data and stay outside the repository, so these are
built here: XLA modules compiled on this machine from small JAX functions, wrapped as
`ModuleTuningData` / `TuningData` (schema: docs/formats.md) with runs whose configs we
choose and whose runtimes come from a seeded rng. Tests then know exactly what went in.
Needs JAX (the extra graphcost[xla]); it is imported only when a module is compiled.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

from graphcost.formats import hlo_proto as pb
from graphcost.formats.hlo import parse_hlo_module
from graphcost.xla.extract import compiled_hlo_module

#: Opcodes the layout record configures: ops whose kernel depends on the layouts of their
#: operands and result (the real TPU record configures convolutions and reshapes).
CONFIGURABLE = ("convolution", "dot", "reshape", "transpose")

#: Runs of the layout record that failed (error=true, no time), as real records have some.
LAYOUT_ERROR_RUNS = (2, 5)


def _layout_program(x, w, k):
    """A dot, a convolution and a transpose: configurable nodes that survive XLA:CPU."""
    import jax

    y = jax.numpy.tanh(x @ w).reshape(2, 4, 4, 8)
    z = jax.lax.conv_general_dilated(y, k, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return z.transpose(0, 3, 1, 2).reshape(2, -1)


def _scale_shift(x):
    import jax

    return jax.numpy.tanh(x * 2.0 + 1.0)


def _row_sum(x):
    import jax

    return jax.numpy.exp(x).sum(axis=1)


def _gram(x):
    return x @ x.T


#: The tile record's kernels: (function, argument shape), 9 of them so that a third can
#: be held out of training.
KERNELS = [(fn, shape) for shape in ((8, 16), (16, 32), (32, 64))
           for fn in (_scale_shift, _row_sum, _gram)]


@cache
def _compiled(fn, shapes: tuple[tuple[int, ...], ...]) -> bytes:
    """The serialized HloModuleProto of `fn` on float32 zeros of these shapes (compiled once)."""
    return compiled_hlo_module(fn, [np.zeros(s, np.float32) for s in shapes])


def instructions(module: pb.HloModuleProto) -> list:
    """Every instruction in the converter's node order (computations, then instructions)."""
    return [i for c in module.computations for i in c.instructions]


def configurable_nodes(module: pb.HloModuleProto) -> list[int]:
    """Positions in node order of the instructions whose opcode is in CONFIGURABLE."""
    return [u for u, i in enumerate(instructions(module)) if i.opcode in CONFIGURABLE]


def layout_record(runs: int = 8, seed: int = 0) -> pb.ModuleTuningData:
    """One program's layout record. Run 0 is the default (no layout set, all −1 once
    converted); every other run gives each tensor of each configurable node (output, then
    up to two operands) a random minor-to-major order; the LAYOUT_ERROR_RUNS failed."""
    rng = np.random.default_rng(seed)
    module = parse_hlo_module(_compiled(_layout_program, ((32, 16), (16, 8), (3, 3, 8, 4))))
    record = pb.ModuleTuningData(module=module)
    insts = instructions(module)
    shape_of = {i.id: i.shape for i in insts}
    nodes = configurable_nodes(module)
    record.config_index_to_node.extend(nodes)
    for r in range(runs):
        run = record.runs.add(is_default=r == 0, error=r in LAYOUT_ERROR_RUNS)
        for u in nodes:
            node = run.module_config.layout_config.nodes.add()
            if r == 0:
                continue
            for shape in [insts[u].shape] + [shape_of[o] for o in insts[u].operand_ids[:2]]:
                node.tensors.add(dims=rng.permutation(len(shape.dimensions)).tolist())
        run.profile.compute_time_ns = 0 if run.error else int(rng.integers(500_000, 2_000_000))
    return record


def tile_records(seed: int = 0) -> pb.TuningData:
    """One record per kernel of KERNELS, each with 6 to 11 runs of random tile sizes: run 0
    is the default and one other run failed (error=true, no time)."""
    rng = np.random.default_rng(seed)
    data = pb.TuningData()
    for fn, shape in KERNELS:
        record = data.modules.add(module=parse_hlo_module(_compiled(fn, (shape,))))
        runs = int(rng.integers(6, 12))
        failed = int(rng.integers(1, runs))
        for r in range(runs):
            run = record.runs.add(is_default=r == 0, error=r == failed)
            tiles = run.op_config.tile_size_config
            tiles.kernel_bounds.extend(rng.integers(1, 9, size=3).tolist())
            tiles.output_bounds.extend(rng.integers(1, 9, size=2).tolist())
            run.profile.compute_time_ns = 0 if run.error else int(rng.integers(10_000, 100_000))
    return data


def kernel_record(path: Path, runtime: int) -> Path:
    """A tuning file of one kernel with three timed tile configs."""
    td = pb.TuningData()
    rec = td.modules.add()
    comp = rec.module.computations.add(name="c", id=1, root_id=1)
    comp.instructions.add(id=1, name="p", opcode="parameter").shape.element_type = 11
    for k in range(3):
        r = rec.runs.add(is_default=k == 0)
        r.op_config.tile_size_config.kernel_bounds.append(k + 1)
        r.profile.compute_time_ns = runtime + k
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(td.SerializeToString())
    return path
