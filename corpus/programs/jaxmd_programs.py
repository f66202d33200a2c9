"""Corpus programs written with JAX MD (molecular dynamics).

Each program runs a few simulation or minimisation steps in a `lax.fori_loop`, updating a
neighbour list (`jax_md.partition.neighbor_list`, brute-force candidates) inside the loop.
Families: Lennard-Jones in the NVE ensemble (velocity Verlet), FIRE minimisation of a
bidisperse soft-sphere packing, Morse particles under a Nose-Hoover chain thermostat
(NVT), Brownian dynamics of soft spheres with all-pairs energies, and Stillinger-Weber
silicon (three-body terms) under Langevin dynamics. Particles start on a jittered lattice
in a periodic box; velocities and noise come from a passed key. Building a program
allocates its neighbour list once (about a second).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from _corpus import Builder, Program, pick, prng_key, select
from jax_md import energy, minimize, simulate, space

_NEIGHBORS = {"disable_cell_list": True}


def _lattice(rng: np.random.Generator, n: int, dim: int, density: float
             ) -> tuple[jax.Array, float]:
    """`n` positions on a jittered cubic lattice filling a periodic box of this density."""
    side = int(np.ceil(n ** (1 / dim)))
    box = float((n / density) ** (1 / dim))
    grid = np.stack(np.meshgrid(*[np.arange(side)] * dim, indexing="ij"), -1).reshape(-1, dim)
    grid = grid[rng.permutation(len(grid))[:n]]
    spacing = box / side
    positions = (grid + 0.5 + 0.05 * rng.standard_normal((n, dim))) * spacing
    return jnp.asarray((positions % box).astype(np.float32)), box


def _simulation(init: Callable, apply: Callable, neighbor_fn, steps: int,
                **init_kwargs) -> Callable:
    """`(positions, neighbors, key) -> (positions, overflow)`: `steps` steps of a JAX MD
    simulator, the neighbour list updated before each."""

    def run(positions, neighbors, key):
        neighbors = neighbor_fn.update(positions, neighbors)
        state = init(key, positions, neighbor=neighbors, **init_kwargs)

        def body(_, carry):
            state, neighbors = carry
            neighbors = neighbor_fn.update(state.position, neighbors)
            return apply(state, neighbor=neighbors), neighbors

        state, neighbors = jax.lax.fori_loop(0, steps, body, (state, neighbors))
        return state.position, neighbors.did_buffer_overflow

    return run


def jaxmd_lj_nve(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Lennard-Jones (cutoff 2.5 sigma) in the NVE ensemble: velocity Verlet steps."""
    n, dim, steps = pick(rng, [256, 512, 1024]), pick(rng, [2, 3]), pick(rng, [5, 10])
    positions, box = _lattice(rng, n, dim, 0.8)
    displacement, shift = space.periodic(box)
    neighbor_fn, energy_fn = energy.lennard_jones_neighbor_list(
        displacement, box, r_cutoff=2.5, dr_threshold=0.3, **_NEIGHBORS)
    init, apply = simulate.nve(energy_fn, shift, 1e-3)
    run = _simulation(init, apply, neighbor_fn, steps, kT=0.5)
    return run, (positions, neighbor_fn.allocate(positions), prng_key(rng))


def jaxmd_fire(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """FIRE minimisation of a bidisperse (1 : 1.4) soft-sphere packing near jamming."""
    n, dim, steps = pick(rng, [256, 384, 512]), pick(rng, [2, 3]), pick(rng, [5, 10])
    positions, box = _lattice(rng, n, dim, 0.6)
    species = jnp.asarray((np.arange(n) % 2).astype(np.int32))
    sigma = jnp.array([[1.0, 1.2], [1.2, 1.4]], jnp.float32)
    displacement, shift = space.periodic(box)
    neighbor_fn, energy_fn = energy.soft_sphere_neighbor_list(
        displacement, box, species=species, sigma=sigma, **_NEIGHBORS)
    init, apply = minimize.fire_descent(energy_fn, shift)

    def run(positions, neighbors):
        neighbors = neighbor_fn.update(positions, neighbors)
        state = init(positions, neighbor=neighbors)

        def body(_, carry):
            state, neighbors = carry
            neighbors = neighbor_fn.update(state.position, neighbors)
            return apply(state, neighbor=neighbors), neighbors

        state, neighbors = jax.lax.fori_loop(0, steps, body, (state, neighbors))
        return state.position, energy_fn(state.position, neighbor=neighbors)

    return run, (positions, neighbor_fn.allocate(positions))


def jaxmd_morse_nvt(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Morse particles under a Nose-Hoover chain thermostat (NVT)."""
    n, dim, steps = pick(rng, [256, 512]), pick(rng, [2, 3]), pick(rng, [5, 10])
    positions, box = _lattice(rng, n, dim, 0.8)
    displacement, shift = space.periodic(box)
    neighbor_fn, energy_fn = energy.morse_neighbor_list(
        displacement, box, sigma=1.1, epsilon=1.0, alpha=3.0, dr_threshold=0.3,
        **_NEIGHBORS)
    init, apply = simulate.nvt_nose_hoover(energy_fn, shift, 1e-3, kT=0.5,
                                           chain_length=pick(rng, [3, 5]))
    run = _simulation(init, apply, neighbor_fn, steps)
    return run, (positions, neighbor_fn.allocate(positions), prng_key(rng))


def jaxmd_brownian(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Brownian dynamics of soft spheres with all-pairs energies (no neighbour list)."""
    n, dim, steps = pick(rng, [128, 192, 256]), pick(rng, [2, 3]), pick(rng, [5, 10])
    positions, box = _lattice(rng, n, dim, 0.9)
    displacement, shift = space.periodic(box)
    energy_fn = energy.soft_sphere_pair(displacement)
    init, apply = simulate.brownian(energy_fn, shift, 1e-3, kT=0.1)

    def run(positions, key):
        state = jax.lax.fori_loop(0, steps, lambda _, s: apply(s), init(key, positions))
        return state.position

    return run, (positions, prng_key(rng))


def jaxmd_silicon(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Stillinger-Weber silicon (two- and three-body terms over a neighbour list) under
    Langevin dynamics (NVT)."""
    n, steps = pick(rng, [64, 128, 216]), pick(rng, [3, 5])
    positions, box = _lattice(rng, n, 3, 0.05)  # about 2.7 A between atoms
    displacement, shift = space.periodic(box)
    neighbor_fn, energy_fn = energy.stillinger_weber_neighbor_list(
        displacement, box, dr_threshold=0.3, **_NEIGHBORS)
    init, apply = simulate.nvt_langevin(energy_fn, shift, 1e-3, kT=0.05)
    run = _simulation(init, apply, neighbor_fn, steps)
    return run, (positions, neighbor_fn.allocate(positions), prng_key(rng))


#: family name -> builder `(rng) -> (fn, example_args)`
FAMILIES: dict[str, Builder] = {
    "jaxmd_lj_nve": jaxmd_lj_nve, "jaxmd_fire": jaxmd_fire,
    "jaxmd_morse_nvt": jaxmd_morse_nvt, "jaxmd_brownian": jaxmd_brownian,
    "jaxmd_silicon": jaxmd_silicon,
}


def programs(families: list[str] | None = None) -> list[Program]:
    """3 programs of every JAX MD family (or of `families`)."""
    return select(FAMILIES, families)
