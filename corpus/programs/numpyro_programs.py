"""Corpus programs written with NumPyro (probabilistic programming on JAX).

Families: one NUTS transition (the iterative tree building is nested while loops) and
one HMC transition (a leapfrog loop whose length depends on the passed step size) from
`numpyro.infer.hmc.hmc`, the potential energy and its gradient of a hierarchical
regression for a batch of chains, one SVI step (AutoNormal guide, Trace_ELBO, Adam), and
a Gaussian-process marginal likelihood with its gradient (Cholesky solves).
Models are written with `numpyro.sample` and `numpyro.distributions`; potentials come
from `numpyro.infer.util.potential_energy`. Every random draw comes from a passed key.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from _corpus import Builder, Program, integers, normal, pick, prng_key, select, uniform
from numpyro.infer import SVI, Trace_ELBO
from numpyro.infer.autoguide import AutoNormal
from numpyro.infer.hmc import hmc
from numpyro.infer.util import potential_energy


def _logistic(X, y=None):
    """Bayesian logistic regression with a half-Cauchy scale on the weights."""
    tau = numpyro.sample("tau", dist.HalfCauchy(1.0))
    w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), tau).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, 5.0))
    numpyro.sample("y", dist.Bernoulli(logits=X @ w + b), obs=y)


def _bnn(X, y=None, hidden: int = 16):
    """A one-hidden-layer Bayesian neural network regression."""
    d = X.shape[1]
    w1 = numpyro.sample("w1", dist.Normal(jnp.zeros((d, hidden)), 1.0).to_event(2))
    w2 = numpyro.sample("w2", dist.Normal(jnp.zeros(hidden), 1.0).to_event(1))
    sigma = numpyro.sample("sigma", dist.LogNormal(0.0, 1.0))
    numpyro.sample("y", dist.Normal(jnp.tanh(X @ w1) @ w2, sigma), obs=y)


def _transition(algo: str, model: Callable, **kwargs) -> Callable:
    """`(z, step_size, inverse_mass, key, X, y) -> new state`: one `algo` transition of
    `model` from position `z` (unconstrained) with a passed step size, diagonal inverse
    mass matrix and key, no adaptation."""
    extra = {"max_tree_depth": 6} if algo == "NUTS" else {"trajectory_length": 1.0}

    def transition(z, step_size, inverse_mass, key, X, y):
        def potential(z):
            return potential_energy(model, (X,), {"y": y, **kwargs}, z)

        init_kernel, sample_kernel = hmc(potential_fn=potential, algo=algo)
        state = init_kernel(z, num_warmup=0, step_size=step_size,
                            inverse_mass_matrix=inverse_mass, adapt_step_size=False,
                            adapt_mass_matrix=False, rng_key=key, **extra)
        state = sample_kernel(state)
        return state.z, state.potential_energy, state.num_steps, state.accept_prob

    return transition


def _sampler_args(rng: np.random.Generator, z: dict, n: int, scale: float) -> tuple:
    """(z, step size, inverse mass matrix, key) for a posterior of `n` observations."""
    size = sum(int(np.size(v)) for v in z.values())
    step_size = scale * pick(rng, [0.5, 1.0]) / np.sqrt(n)  # the posterior narrows
    return (z, jnp.float32(step_size), jnp.ones(size, jnp.float32), prng_key(rng))


def numpyro_nuts_step(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One NUTS transition (max tree depth 6) of a Bayesian logistic regression, from the
    weights that generated the data (so trajectories are long, as in a warm chain)."""
    n, d = pick(rng, [2000, 5000, 10000]), pick(rng, [20, 50])
    X, w = rng.standard_normal((n, d)).astype(np.float32), 0.5 * rng.standard_normal(d)
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ w))).astype(np.float32)
    z = {"tau": jnp.float32(np.log(0.5)), "w": jnp.asarray(w.astype(np.float32)),
         "b": jnp.float32(0.0)}
    return (_transition("NUTS", _logistic),
            (*_sampler_args(rng, z, n, 1.0), jnp.asarray(X), jnp.asarray(y)))


def numpyro_hmc_step(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One HMC transition (trajectory length 1, so 1/step_size leapfrog steps in a loop)
    of a Bayesian neural network regression, from the weights that generated the data."""
    n, d, hidden = pick(rng, [500, 1000, 2000]), pick(rng, [8, 16]), pick(rng, [16, 32])
    X = rng.standard_normal((n, d)).astype(np.float32)
    w1 = (0.5 * rng.standard_normal((d, hidden))).astype(np.float32)
    w2 = (0.5 * rng.standard_normal(hidden)).astype(np.float32)
    y = np.tanh(X @ w1) @ w2 + 0.3 * rng.standard_normal(n).astype(np.float32)
    z = {"w1": jnp.asarray(w1), "w2": jnp.asarray(w2), "sigma": jnp.float32(np.log(0.3))}
    return (_transition("HMC", _bnn, hidden=hidden),
            (*_sampler_args(rng, z, n, 0.3), jnp.asarray(X), jnp.asarray(y)))


def _hierarchical(group, X, y=None, groups: int = 10):
    """Varying-intercept, varying-slope regression with Student-t noise."""
    mu = numpyro.sample("mu", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
    scale = numpyro.sample("scale", dist.HalfNormal(jnp.ones(X.shape[1])).to_event(1))
    with numpyro.plate("groups", groups):
        beta = numpyro.sample("beta", dist.Normal(mu, scale).to_event(1))
        alpha = numpyro.sample("alpha", dist.Normal(0.0, 1.0))
    nu = numpyro.sample("nu", dist.Gamma(2.0, 0.1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    loc = alpha[group] + jnp.sum(X * beta[group], -1)
    numpyro.sample("y", dist.StudentT(nu, loc, sigma), obs=y)


def numpyro_potential_grad(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """The potential energy of a hierarchical regression and its gradient, vmapped over
    a batch of chains (what a multi-chain sampler evaluates at every leapfrog step)."""
    chains, n = pick(rng, [4, 8, 16]), pick(rng, [2000, 5000])
    d, groups = pick(rng, [4, 8]), pick(rng, [20, 50, 100])
    group, X, y = integers(rng, (n,), groups), normal(rng, (n, d)), normal(rng, (n,))
    z = {"mu": normal(rng, (chains, d), 0.1), "scale": normal(rng, (chains, d), 0.1),
         "beta": normal(rng, (chains, groups, d), 0.1),
         "alpha": normal(rng, (chains, groups), 0.1),
         "nu": normal(rng, (chains,), 0.1), "sigma": normal(rng, (chains,), 0.1)}

    def value_and_grad(z, group, X, y):
        def potential(z):
            return potential_energy(_hierarchical, (group, X), {"y": y, "groups": groups}, z)

        return jax.vmap(jax.value_and_grad(potential))(z)

    return value_and_grad, (z, group, X, y)


def _poisson(X, y=None):
    """Poisson regression with an overdispersion (gamma-Poisson) likelihood."""
    w = numpyro.sample("w", dist.Normal(jnp.zeros(X.shape[1]), 1.0).to_event(1))
    phi = numpyro.sample("phi", dist.Exponential(1.0))
    rate = jnp.exp(jnp.clip(X @ w, -10.0, 10.0))
    numpyro.sample("y", dist.GammaPoisson(phi, phi / rate), obs=y)


def numpyro_svi_step(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One SVI step of a gamma-Poisson regression: AutoNormal guide, Trace_ELBO with a
    few particles (reparameterised draws from the key in the state), Adam."""
    n, d = pick(rng, [2000, 5000, 10000]), pick(rng, [10, 30])
    particles = pick(rng, [1, 2])
    X = normal(rng, (n, d), 0.3)
    y = jnp.asarray(rng.poisson(2.0, n).astype(np.float32))
    svi = SVI(_poisson, AutoNormal(_poisson), numpyro.optim.Adam(1e-2),
              Trace_ELBO(num_particles=particles))
    abstract = jax.eval_shape(svi.init, jax.random.PRNGKey(0), X, y)
    floats = jax.tree.map(lambda s: uniform(rng, s.shape, 0.01, 0.1)
                          if jnp.issubdtype(s.dtype, jnp.floating)
                          else jnp.asarray(np.zeros(s.shape, s.dtype)), abstract)
    state = floats._replace(rng_key=prng_key(rng))

    def step(state, X, y):
        state, loss = svi.update(state, X, y)
        return state, loss

    return step, (state, X, y)


def numpyro_gp(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """The marginal likelihood of a Gaussian-process regression (RBF kernel, LogNormal
    hyperpriors, MultivariateNormal observation) and its gradient: a Cholesky per call."""
    n, d = pick(rng, [128, 256, 512]), pick(rng, [1, 3])
    X, y = normal(rng, (n, d)), normal(rng, (n,))

    def model(X, y=None):
        length = numpyro.sample("length", dist.LogNormal(0.0, 1.0))
        var = numpyro.sample("var", dist.LogNormal(0.0, 1.0))
        noise = numpyro.sample("noise", dist.LogNormal(-2.0, 1.0))
        sq = jnp.sum((X[:, None, :] - X[None, :, :]) ** 2, -1)
        k = var * jnp.exp(-0.5 * sq / length**2) + (noise + 1e-4) * jnp.eye(X.shape[0])
        numpyro.sample("y", dist.MultivariateNormal(jnp.zeros(X.shape[0]), k), obs=y)

    z = {"length": normal(rng, (), 0.1), "var": normal(rng, (), 0.1),
         "noise": normal(rng, (), 0.1)}

    def value_and_grad(z, X, y):
        return jax.value_and_grad(lambda z: potential_energy(model, (X,), {"y": y}, z))(z)

    return value_and_grad, (z, X, y)


#: family name -> builder `(rng) -> (fn, example_args)`
FAMILIES: dict[str, Builder] = {
    "numpyro_nuts_step": numpyro_nuts_step, "numpyro_hmc_step": numpyro_hmc_step,
    "numpyro_potential_grad": numpyro_potential_grad, "numpyro_svi_step": numpyro_svi_step,
    "numpyro_gp": numpyro_gp,
}


def programs(families: list[str] | None = None) -> list[Program]:
    """3 programs of every NumPyro family (or of `families`)."""
    return select(FAMILIES, families)
