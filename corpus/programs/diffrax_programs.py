"""Corpus programs written with diffrax (differential equation solvers) and Equinox.

Every `diffrax.diffeqsolve` is a while loop. Families: a neural ODE (an `eqx.nn.MLP`
vector field) solved by Tsit5 with adaptive steps for a batch of initial states; a stiff
Van der Pol oscillator solved by the implicit Kvaerno5 (Newton iterations inside each
step); a neural SDE driven by a `VirtualBrownianTree` from passed keys; a neural CDE over
irregular time series (cubic Hermite interpolation of the control); and one training
step of a neural ODE, differentiated through the solve (`RecursiveCheckpointAdjoint`).
Equinox parameters come from `eqx.filter_eval_shape`, their values from numpy.
"""

from __future__ import annotations

from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from _corpus import Builder, Program, fill, normal, pick, prng_key, select, uniform


def _eqx_split(make: Callable[[jax.Array], eqx.Module], rng: np.random.Generator
               ) -> tuple[Callable[[eqx.Module], eqx.Module], eqx.Module]:
    """(rebuild, params) of the module `make(key)` builds: its arrays as an argument."""
    abstract = eqx.filter_eval_shape(make, jax.random.PRNGKey(0))
    params, static = eqx.partition(abstract, lambda x: isinstance(x, jax.ShapeDtypeStruct))
    return (lambda p: eqx.combine(p, static)), fill(rng, params, 0)


def _mlp(d_in: int, d_out: int, width: int, depth: int, final=lambda x: x):
    return lambda key: eqx.nn.MLP(d_in, d_out, width, depth, activation=jax.nn.softplus,
                                  final_activation=final, key=key)


def diffrax_neural_ode(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A neural ODE dy/dt = tanh-MLP(y): Tsit5, PID step-size control, saved at `ts`."""
    batch, dim = pick(rng, [16, 32, 64]), pick(rng, [4, 8, 16])
    width, depth = pick(rng, [64, 128]), pick(rng, [2, 3])
    rebuild, params = _eqx_split(_mlp(dim, dim, width, depth, jnp.tanh), rng)
    y0 = normal(rng, (batch, dim))
    ts = jnp.linspace(0.0, 3.0, 16)

    def forward(params, y0):
        field = rebuild(params)

        def solve(y):
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(lambda t, y, args: field(y)), diffrax.Tsit5(), 0.0, 3.0,
                0.1, y, saveat=diffrax.SaveAt(ts=ts), max_steps=1024,
                stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-6))
            return sol.ys

        return jax.vmap(solve)(y0)

    return forward, (params, y0)


def diffrax_stiff(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Van der Pol oscillators with large damping mu (stiff), solved by the implicit
    Kvaerno5 with PID control; mu and the initial states are arguments."""
    batch = pick(rng, [4, 8, 16])
    mu = uniform(rng, (batch,), *pick(rng, [(5.0, 10.0), (10.0, 20.0)]))
    y0 = normal(rng, (batch, 2))
    t1 = pick(rng, [2.0, 4.0])

    def vector_field(t, y, mu):
        x, v = y[0], y[1]
        return jnp.stack([v, mu * (1 - x**2) * v - x])

    def forward(mu, y0):
        def solve(mu, y):
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(vector_field), diffrax.Kvaerno5(), 0.0, t1, 0.01, y,
                args=mu, saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, t1, 8)),
                stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-6),
                max_steps=2048)
            return sol.ys

        return jax.vmap(solve)(mu, y0)

    return forward, (mu, y0)


class _SDE(eqx.Module):
    drift: eqx.nn.MLP
    diffusion: eqx.nn.MLP

    def __init__(self, dim: int, width: int, key: jax.Array):
        k1, k2 = jax.random.split(key)
        self.drift = _mlp(dim, dim, width, 2, jnp.tanh)(k1)
        self.diffusion = _mlp(dim, dim, width, 2, jax.nn.sigmoid)(k2)


def diffrax_sde(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A neural SDE (MLP drift, diagonal MLP diffusion) driven by a VirtualBrownianTree,
    one path per passed key: Euler-Maruyama or Heun with a constant step."""
    paths, dim, width = pick(rng, [4, 8, 16]), pick(rng, [4, 8]), pick(rng, [32, 64])
    steps = pick(rng, [50, 100])
    solver = pick(rng, [diffrax.Euler, diffrax.Heun])
    rebuild, params = _eqx_split(lambda key: _SDE(dim, width, key), rng)
    keys = jnp.stack([prng_key(rng) for _ in range(paths)])
    y0 = normal(rng, (paths, dim))
    dt = 1.0 / steps

    def forward(params, keys, y0):
        sde = rebuild(params)

        def solve(key, y):
            brownian = diffrax.VirtualBrownianTree(0.0, 1.0, dt / 2, (dim,), key)
            terms = diffrax.MultiTerm(
                diffrax.ODETerm(lambda t, y, args: sde.drift(y)),
                diffrax.ControlTerm(lambda t, y, args: jnp.diag(sde.diffusion(y)), brownian))
            sol = diffrax.diffeqsolve(terms, solver(), 0.0, 1.0, dt, y,
                                      saveat=diffrax.SaveAt(t1=True), max_steps=steps + 1)
            return sol.ys[-1]

        return jax.vmap(solve)(keys, y0)

    return forward, (params, keys, y0)


class _CDE(eqx.Module):
    embed: eqx.nn.Linear
    field: eqx.nn.MLP
    head: eqx.nn.Linear
    hidden: int = eqx.field(static=True)
    channels: int = eqx.field(static=True)

    def __init__(self, channels: int, hidden: int, width: int, key: jax.Array):
        k1, k2, k3 = jax.random.split(key, 3)
        self.hidden, self.channels = hidden, channels
        self.embed = eqx.nn.Linear(channels, hidden, key=k1)
        self.field = _mlp(hidden, hidden * channels, width, 2, jnp.tanh)(k2)
        self.head = eqx.nn.Linear(hidden, 1, key=k3)


def diffrax_cde(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """A neural CDE classifier of irregular time series: cubic Hermite interpolation of the
    observations (the control), Tsit5 with PID control, a linear head on the last state."""
    batch, length = pick(rng, [4, 8, 16]), pick(rng, [24, 48])
    channels, hidden, width = pick(rng, [3, 5]), pick(rng, [16, 32]), pick(rng, [32, 64])
    rebuild, params = _eqx_split(lambda key: _CDE(channels, hidden, width, key), rng)
    gaps = rng.uniform(0.5, 1.5, (batch, length)).astype(np.float32)
    times = np.cumsum(gaps, 1) - gaps[:, :1]
    times = jnp.asarray(times / times[:, -1:])  # each series on [0, 1]
    values = normal(rng, (batch, length, channels - 1))

    def forward(params, times, values):
        cde = rebuild(params)

        def classify(ts, xs):
            xs = jnp.concatenate([ts[:, None], xs], -1)  # time is a channel
            coeffs = diffrax.backward_hermite_coefficients(ts, xs)
            control = diffrax.CubicInterpolation(ts, coeffs)
            term = diffrax.ControlTerm(
                lambda t, z, args: cde.field(z).reshape(cde.hidden, cde.channels), control)
            sol = diffrax.diffeqsolve(
                term.to_ode(), diffrax.Tsit5(), ts[0], ts[-1], None,
                cde.embed(control.evaluate(ts[0])), max_steps=512,
                stepsize_controller=diffrax.PIDController(rtol=1e-3, atol=1e-5))
            return jax.nn.sigmoid(cde.head(sol.ys[-1]))

        return jax.vmap(classify)(times, values)

    return forward, (params, times, values)


def diffrax_node_train(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One training step of a neural ODE: trajectories at `ts` from a constant-step solve,
    mean squared error, gradient through the solver (RecursiveCheckpointAdjoint), SGD."""
    batch, dim = pick(rng, [8, 16, 32]), pick(rng, [2, 4, 8])
    width, steps = pick(rng, [32, 64]), pick(rng, [20, 40])
    solver = pick(rng, [diffrax.Heun, diffrax.Midpoint])
    rebuild, params = _eqx_split(_mlp(dim, dim, width, 2, jnp.tanh), rng)
    ts = jnp.linspace(0.0, 2.0, 10)
    y0, targets = normal(rng, (batch, dim)), normal(rng, (batch, 10, dim))

    def loss_fn(params, y0, targets):
        field = rebuild(params)

        def solve(y):
            return diffrax.diffeqsolve(
                diffrax.ODETerm(lambda t, y, args: field(y)), solver(), 0.0, 2.0,
                2.0 / steps, y, saveat=diffrax.SaveAt(ts=ts), max_steps=steps + 1,
                adjoint=diffrax.RecursiveCheckpointAdjoint(checkpoints=steps + 1)).ys

        return jnp.mean((jax.vmap(solve)(y0) - targets) ** 2)

    def step(params, y0, targets):
        loss, grads = jax.value_and_grad(loss_fn)(params, y0, targets)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss

    return step, (params, y0, targets)


#: family name -> builder `(rng) -> (fn, example_args)`
FAMILIES: dict[str, Builder] = {
    "diffrax_neural_ode": diffrax_neural_ode, "diffrax_stiff": diffrax_stiff,
    "diffrax_sde": diffrax_sde, "diffrax_cde": diffrax_cde,
    "diffrax_node_train": diffrax_node_train,
}


def programs(families: list[str] | None = None) -> list[Program]:
    """3 programs of every diffrax family (or of `families`)."""
    return select(FAMILIES, families)
