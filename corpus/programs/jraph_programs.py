"""Corpus programs written with DeepMind's jraph (graph networks), with Haiku for the MLPs.

Families: a GCN of `jraph.GraphConvolution` layers and a multi-head `jraph.GAT` over one
large sparse graph, an encode-process-decode `jraph.GraphNetwork` whose shared processor
runs in a `lax.fori_loop`, a graph classifier over a batch of small molecule-like graphs
(segment readout per graph), and one training step of a `jraph.InteractionNetwork`.
Graphs are `jraph.GraphsTuple`s of arrays passed as arguments (random sparse edges drawn
with numpy); parameters come from `hk.transform(...).init`, run abstractly.
"""

from __future__ import annotations

from collections.abc import Callable

import haiku as hk
import jax
import jax.numpy as jnp
import jraph
import numpy as np
from _corpus import Builder, Program, fill, normal, pick, select

_KEY = jax.random.PRNGKey(0)


def _graph(rng: np.random.Generator, graphs: int, nodes: int, edges: int, node_dim: int,
           edge_dim: int = 0, global_dim: int = 0) -> jraph.GraphsTuple:
    """`graphs` random graphs of `nodes` nodes and `edges` directed edges each, batched."""
    offsets = np.repeat(np.arange(graphs) * nodes, edges)
    senders = rng.integers(0, nodes, graphs * edges) + offsets
    receivers = rng.integers(0, nodes, graphs * edges) + offsets
    return jraph.GraphsTuple(
        nodes=normal(rng, (graphs * nodes, node_dim)),
        edges=normal(rng, (graphs * edges, edge_dim)) if edge_dim else None,
        globals=normal(rng, (graphs, global_dim)) if global_dim else None,
        senders=jnp.asarray(senders.astype(np.int32)),
        receivers=jnp.asarray(receivers.astype(np.int32)),
        n_node=jnp.asarray(np.full(graphs, nodes, np.int32)),
        n_edge=jnp.asarray(np.full(graphs, edges, np.int32)))


def _transform(forward: Callable, rng: np.random.Generator, *inputs
               ) -> tuple[Callable, dict]:
    model = hk.without_apply_rng(hk.transform(forward))
    return model.apply, fill(rng, jax.eval_shape(model.init, _KEY, *inputs), -1)


def _mlp(widths: list[int]) -> Callable:
    return hk.nets.MLP(widths, activation=jax.nn.relu)


def jraph_gcn(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Node classification with stacked jraph.GraphConvolution (self edges, sym. norm)."""
    nodes, degree = pick(rng, [2000, 4000, 8000]), pick(rng, [4, 8])
    feat, hidden, layers = pick(rng, [32, 64]), pick(rng, [64, 128]), pick(rng, [2, 3])
    graph = _graph(rng, 1, nodes, nodes * degree, feat)

    def forward(graph):
        for i in range(layers):
            width = hidden if i < layers - 1 else 16
            graph = jraph.GraphConvolution(hk.Linear(width), add_self_edges=True)(graph)
            if i < layers - 1:
                graph = graph._replace(nodes=jax.nn.relu(graph.nodes))
        return jax.nn.log_softmax(graph.nodes)

    apply, params = _transform(forward, rng, graph)
    return apply, (params, graph)


def jraph_gat(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Multi-head graph attention: jraph.GAT layers, softmax over each node's in-edges."""
    nodes, degree = pick(rng, [2000, 4000]), pick(rng, [4, 8])
    feat, heads, per_head = pick(rng, [32, 64]), pick(rng, [4, 8]), pick(rng, [8, 16])
    graph = _graph(rng, 1, nodes, nodes * degree, feat)

    def layer(graph, heads, width, last):
        def query(x):
            return hk.Linear(heads * width)(x).reshape(x.shape[0], heads, width)

        def logit(sent, received, edges):
            both = jnp.concatenate([sent, received], -1)
            return jax.nn.leaky_relu(hk.Linear(1)(both), 0.2)

        def update(x):
            return x.mean(1) if last else jax.nn.elu(x.reshape(x.shape[0], -1))

        return jraph.GAT(query, logit, update)(graph)

    def forward(graph):
        graph = layer(graph, heads, per_head, False)
        return layer(graph, 1, 16, True).nodes

    apply, params = _transform(forward, rng, graph)
    return apply, (params, graph)


def jraph_graphnet_loop(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Encode-process-decode: jraph.GraphNetwork (edge, node and global MLPs); the shared
    processor runs `steps` times in a lax.fori_loop with residual connections."""
    graphs, nodes = pick(rng, [2, 4]), pick(rng, [128, 256])
    edges, latent = nodes * pick(rng, [4, 6]), pick(rng, [32, 64])
    steps = pick(rng, [4, 6, 8])
    graph = _graph(rng, graphs, nodes, edges, 8, 4, 2)

    def encode(graph):
        embed = jraph.GraphMapFeatures(hk.Linear(latent), hk.Linear(latent),
                                       hk.Linear(latent))
        return embed(graph)

    def process(graph):
        net = jraph.GraphNetwork(
            update_edge_fn=jraph.concatenated_args(_mlp([latent, latent])),
            update_node_fn=jraph.concatenated_args(_mlp([latent, latent])),
            update_global_fn=jraph.concatenated_args(_mlp([latent, latent])))
        out = net(graph)
        return out._replace(nodes=out.nodes + graph.nodes, edges=out.edges + graph.edges,
                            globals=out.globals + graph.globals)

    def decode(graph):
        return hk.Linear(3)(graph.nodes), hk.Linear(1)(graph.globals)

    enc_apply, enc_params = _transform(encode, rng, graph)
    latent_graph = jax.eval_shape(enc_apply, enc_params, graph)
    proc_apply, proc_params = _transform(process, rng, latent_graph)
    dec_apply, dec_params = _transform(decode, rng, latent_graph)

    def forward(params, graph):
        enc, proc, dec = params
        latent = enc_apply(enc, graph)
        latent = jax.lax.fori_loop(0, steps, lambda _, g: proc_apply(proc, g), latent)
        return dec_apply(dec, latent)

    return forward, ((enc_params, proc_params, dec_params), graph)


def jraph_molecule(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """Graph classification over a batch of small graphs: jraph.InteractionNetwork layers,
    then a jraph.GraphNetwork global update summing each graph's nodes (segment_sum)."""
    graphs, nodes = pick(rng, [32, 64, 128]), pick(rng, [16, 24])
    edges, hidden, layers = nodes * 3, pick(rng, [32, 64]), pick(rng, [2, 3])
    graph = _graph(rng, graphs, nodes, edges, 16, 4)

    def forward(graph):
        graph = jraph.GraphMapFeatures(hk.Linear(hidden), hk.Linear(hidden))(graph)
        for _ in range(layers):
            graph = jraph.InteractionNetwork(
                update_edge_fn=jraph.concatenated_args(_mlp([hidden, hidden])),
                update_node_fn=jraph.concatenated_args(_mlp([hidden, hidden])))(graph)
        readout = jraph.GraphNetwork(
            update_edge_fn=None, update_node_fn=None,
            update_global_fn=lambda n, e, g: hk.Linear(2)(jnp.concatenate([n, e], -1)))
        return readout(graph._replace(globals=jnp.zeros((graph.n_node.shape[0], 1)))).globals

    apply, params = _transform(forward, rng, graph)
    return apply, (params, graph)


def jraph_train_step(rng: np.random.Generator) -> tuple[Callable, tuple]:
    """One training step of a jraph.InteractionNetwork node regressor: mean squared error,
    value_and_grad, SGD."""
    nodes, degree = pick(rng, [500, 1000, 2000]), pick(rng, [3, 4])
    hidden, layers = pick(rng, [32, 48]), 2
    graph = _graph(rng, 1, nodes, nodes * degree, 16, 8)
    targets = normal(rng, (nodes, 1))

    def forward(graph):
        graph = jraph.GraphMapFeatures(hk.Linear(hidden), hk.Linear(hidden))(graph)
        for _ in range(layers):
            graph = jraph.InteractionNetwork(
                update_edge_fn=jraph.concatenated_args(_mlp([hidden])),
                update_node_fn=jraph.concatenated_args(_mlp([hidden])))(graph)
        return hk.Linear(1)(graph.nodes)

    apply, params = _transform(forward, rng, graph)

    def step(params, graph, targets):
        loss, grads = jax.value_and_grad(
            lambda p: jnp.mean((apply(p, graph) - targets) ** 2))(params)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss

    return step, (params, graph, targets)


#: family name -> builder `(rng) -> (fn, example_args)`
FAMILIES: dict[str, Builder] = {
    "jraph_gcn": jraph_gcn, "jraph_gat": jraph_gat,
    "jraph_graphnet_loop": jraph_graphnet_loop, "jraph_molecule": jraph_molecule,
    "jraph_train_step": jraph_train_step,
}


def programs(families: list[str] | None = None) -> list[Program]:
    """3 programs of every jraph family (or of `families`)."""
    return select(FAMILIES, families)
