"""Multi-process training with PyTorch DDP: the plumbing that `loop.fit` hooks into.

`torchrun --nproc_per_node N -m graphcost train …` (or `graphcost train --nproc N`) starts N
processes that each run `fit` with the same arguments. How they compute exactly the step
one process would compute with the same seed:

- Every rank draws the SAME global batch: the same graph order and the same config samples
  for all B graphs (a few cheap RNG calls), then keeps its shard, graphs rank, rank + N, …
  So the batch depends on the seed only, never on N, and the RNG state (saved in `last.pt`)
  is the same on every rank.
- The loss of one process is a sum over the batch divided by a batch-wide count (config
  pairs for hinge, graphs for ListMLE, configs for MSE). A rank's shard may hold more or
  fewer configs than another's, so each rank divides its own sum by the GLOBAL count
  (all-reduced every step) and multiplies by N: DDP's gradient mean then equals the one
  process gradient; a plain mean of per-rank means would over-weight small shards.
- Validation graphs are sharded the same way and the per-graph metrics all-gathered back
  into their original order, so every rank sees the same means and makes the same
  early-stopping decision.
- Rank 0 alone writes files and progress bars; on resume it reads `last.pt` and broadcasts
  it, so the other ranks (possibly on other machines without a shared disk) restore the
  same state.

With one process (no torchrun) none of this runs: `Context` is the identity, no process
group exists and the network is not wrapped.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor, nn

from graphcost import children
from graphcost.errors import SettingsError
from graphcost.models.losses import RankingLoss

T = TypeVar("T")


def env_rank() -> int:
    """This process's global rank as torchrun announces it (0 without torchrun)."""
    return int(os.environ.get("RANK", "0"))


def env_world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Whether this process may write files and print (rank 0, or no torchrun at all)."""
    return (dist.get_rank() if dist.is_available() and dist.is_initialized() else env_rank()) == 0


def init_from_env(device: str = "cpu") -> bool:
    """Join the process group torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR/PORT):
    gloo for CPU training, NCCL for CUDA with each rank on its LOCAL_RANK GPU.

    True if a group was created here (the caller then destroys it); False without torchrun
    or when a group already exists (e.g. created by the caller's own script).
    """
    if env_world() <= 1 or dist.is_initialized():
        return False
    cuda = torch.device(device).type == "cuda"
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if local >= torch.cuda.device_count():
            raise RuntimeError(f"LOCAL_RANK {local} but only {torch.cuda.device_count()} GPUs "
                               "here: start at most one process per GPU (--nproc_per_node)")
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    return True


@dataclass(frozen=True)
class Context:
    """Where this process stands in the run: its rank, the world size and its device.

    Every collective here is a no-op at world size 1, so the training loop calls them
    unconditionally and the one-process path stays what it was.
    """

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _comm_device(self) -> torch.device:
        """NCCL moves only CUDA tensors; gloo takes CPU ones."""
        return self.device if dist.get_backend() == "nccl" else torch.device("cpu")

    # ------------------------------------------------------------ sharding

    def shard(self, items: Sequence[T]) -> Sequence[T]:
        """This rank's part of a global list: items rank, rank + N, … (the list itself at N=1)."""
        return items if self.world == 1 else list(items[self.rank::self.world])

    def unshard(self, local: list[T], total: int) -> list[T]:
        """Every rank's `shard` results, all-gathered back into the original order."""
        if self.world == 1:
            return local
        parts = all_gather_object(local)
        out: list[Any] = [None] * total
        for r, part in enumerate(parts):
            out[r::self.world] = part
        return out

    # ------------------------------------------------------------ collectives

    def broadcast(self, obj: T) -> T:
        """Rank 0's `obj` on every rank (e.g. the checkpoint only rank 0 read)."""
        if self.world == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, device=self._comm_device())
        return box[0]

    def all_mean(self, values: list[float]) -> list[float]:
        """Element-wise mean over ranks, summed in rank order so every rank gets the same bits."""
        if self.world == 1:
            return values
        parts = all_gather_object(list(values))
        return [sum(p[i] for p in parts) / self.world for i in range(len(values))]

    def all_sum(self, value: T) -> T:
        return value if self.world == 1 else sum(all_gather_object(value))

    # ------------------------------------------------------------ model and loss

    def wrap(self, net: nn.Module) -> nn.Module:
        """The network under DDP (gradients averaged across ranks); itself at N = 1."""
        if self.world == 1:
            return net
        ids = [self.local_rank] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(net, device_ids=ids)

    def replicate(self, net: nn.Module) -> None:
        """Rank 0's weights on every rank: what DDP does when it wraps a network, for a
        network trained without the wrapper (`average_gradients`)."""
        if self.world == 1:
            return
        for t in [*net.parameters(), *net.buffers()]:
            box = t.data.to(self._comm_device())
            dist.broadcast(box, src=0)
            t.data.copy_(box)

    def average_gradients(self, params: Sequence[nn.Parameter]) -> None:
        """Every rank's gradients replaced by their mean over ranks, in one all-reduce:
        DDP's work, for steps that call the network's parts several times per step
        (Graph Segment Training), which DDP's one-forward-one-backward hooks do not fit.
        A parameter without a gradient on this rank (no graph of its shard reached it)
        counts as zeros."""
        if self.world == 1 or not params:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads]).to(self._comm_device())
        dist.all_reduce(flat)
        flat /= self.world
        for p, part in zip(params, flat.split([p.numel() for p in params]), strict=True):
            p.grad = part.view_as(p).to(p.device, p.dtype)

    def loss(self, loss: RankingLoss) -> RankingLoss | ShardedLoss:
        """The loss to back-propagate on this rank's shard (see `ShardedLoss`)."""
        return loss if self.world == 1 else ShardedLoss(loss, self)


def check_batch_split(graphs_per_batch: int, train_graphs: int, processes: int) -> None:
    """Refuse a step that cannot be split over `processes`: each rank needs a graph of
    every step (DDP needs a backward pass on every rank), and a step has
    min(graphs_per_batch, train graphs) graphs. `graphcost train --nproc` checks it
    before any rank starts; each rank checks it again on the graphs it kept."""
    if min(graphs_per_batch, train_graphs) >= processes:
        return
    short = (f"graphs_per_batch is {graphs_per_batch}" if graphs_per_batch < processes
             else f"there are {train_graphs} train graphs")
    raise SettingsError(
        f"--nproc {processes} splits every step's graphs over {processes} processes, each "
        f"needing at least one, but {short}: set graphs_per_batch to at least {processes} "
        f"(with as many train graphs), or --nproc to at most "
        f"{min(graphs_per_batch, train_graphs)}")


def context(device: str = "cpu") -> Context:
    """This process's Context: from the initialised process group, else world size 1.

    Under CUDA DDP each rank trains on `cuda:LOCAL_RANK`; otherwise on `device` as given.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return Context(device=torch.device(device))
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    dev = torch.device(device)
    if dev.type == "cuda" and world > 1:
        dev = torch.device("cuda", local)
    return Context(rank=rank, world=world, local_rank=local, device=dev)


def all_gather_object(obj: T) -> list[T]:
    """Every rank's (picklable) `obj`, in rank order, on every rank."""
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def launch(nproc: int, args: Sequence[str]) -> int:
    """Run `graphcost ARGS…` in `nproc` processes on this machine under torchrun
    (`--standalone`: a local rendezvous on a free port); its exit status.

    The `graphcost train --nproc N` path; across machines, call torchrun directly.
    """
    if env_world() > 1:
        raise RuntimeError("already running under torchrun: drop --nproc")
    # torchrun dies with this process, and each rank with torchrun (a kill -9 of either
    # would leave the ranks training on)
    return children.run("torch.distributed.run", [
        "--standalone", "--nproc_per_node", str(nproc),
        "-m", children.__name__, "graphcost", *args]).returncode


def in_process_group(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorate `fit(model, …, settings, …)`: under torchrun, run it inside the process
    group (created from the environment and destroyed afterwards, even on errors); without
    torchrun, call it as is."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        settings = signature.bind(*args, **kwargs).arguments.get("settings")
        device = getattr(settings, "device", "cpu")
        created = init_from_env(device)
        try:
            return fn(*args, **kwargs)
        finally:
            if created:
                dist.destroy_process_group()

    return run


# ---------------------------------------------------------------- the sharded loss


def _pairs(runtime: Tensor, mask: Tensor) -> Tensor:
    """Ordered config pairs of the same graph: what `pairwise_hinge` divides by."""
    m = mask.unsqueeze(2) & mask.unsqueeze(1)
    return ((runtime.unsqueeze(2) < runtime.unsqueeze(1)) & m).sum()


def _graphs(runtime: Tensor, mask: Tensor) -> Tensor:
    """Graphs with a real config: what `listmle` averages over."""
    return mask.any(1).sum()


def _configs(runtime: Tensor, mask: Tensor) -> Tensor:
    """Real configs: what `mse` averages over."""
    return mask.sum()


NORMALIZERS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "hinge": _pairs, "listmle": _graphs, "mse": _configs, "tf-listmle": _graphs,
    "tf-mse": _graphs}


class ShardedLoss:
    """One rank's share of the global-batch loss, scaled for DDP's gradient mean.

    Each loss in the mix is (sum over the batch) / (batch-wide count n). On a shard
    with local count n_r the plain loss is sum_r / n_r, so sum_r / n = loss_r · n_r / n,
    with n = Σ_r n_r all-reduced each step; times N, because DDP averages gradients.
    The returned value, averaged over ranks, is the loss one process would report.
    """

    def __init__(self, loss: RankingLoss, ctx: Context):
        unknown = sorted(set(loss.weights) - set(NORMALIZERS))
        if unknown:
            raise ValueError(f"no distributed normaliser for losses {unknown}")
        self.ctx = ctx
        self.parts = [(w, RankingLoss(name, loss.margin, loss.temperature), NORMALIZERS[name])
                      for name, w in loss.weights.items()]

    def counts(self, runtime: Tensor, mask: Tensor) -> Tensor:
        """Each loss's normalising count over a batch (see `NORMALIZERS`)."""
        return torch.stack([count(runtime, mask) for _, _, count in self.parts]).double()

    def __call__(self, scores: Tensor, runtime: Tensor, mask: Tensor,
                 total: Tensor | None = None) -> Tensor:
        """This rank's loss. `total`: the batch-wide counts when every rank can compute
        them itself (`counts` of the global batch); otherwise they are all-reduced here,
        a collective every rank must join."""
        local = self.counts(runtime, mask)
        if total is None:
            total = local.to(self.ctx._comm_device(), copy=True)
            dist.all_reduce(total)
        share = (local / total.to(local.device).clamp(min=1)).to(scores.dtype)
        out = scores.new_zeros(())
        for (w, part, _), f in zip(self.parts, share, strict=True):
            out = out + w * part(scores, runtime, mask) * f
        return out * self.ctx.world
