"""Run measurement tasks on a Ray cluster: one timing slot per core, streamed back.

A timing slot is a Ray actor that owns one core of one node: it pins itself to that
core and compiles and times its graphs there, one at a time, as a local inline worker
process (graphcost.xla.workers) does. Every node advertises one custom resource per
core, `graphcost_core_<c>` (`node_resources`), and a slot takes the one unit of its
core's resource, so Ray never puts two slots on one core, not even two collections'
sharing a cluster. A local instance (`collect --ray` with no address) is started with
these resources for this machine's cores; a cluster's nodes are started with them:

    ray start --head --resources "$(python -m graphcost.xla.ray_pool)"
    ray start --address HEAD:6379 --resources "$(python -m graphcost.xla.ray_pool)"

Results come back to the driver as each task ends (`ray.wait`), and the driver writes
and logs them (graphcost.xla.restart_log.record), so a killed driver loses only the graphs
in flight and a resumed run skips every graph written. When a slot's process dies (a
crash inside XLA, an out-of-memory kill), Ray restarts the actor, and its task is tried
again on the next free slot; a task whose worker dies `ATTEMPTS` times is reported
through `on_crash`, as the local workers report a death. A restarted slot is given work
again once it answers, so a slot whose node is gone holds no task.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from graphcost.errors import UserError
from graphcost.xla.timing import pin_to_core

RESOURCE = "graphcost_core_"
ATTEMPTS = 2  # tries of a task whose worker process dies
LOCAL = "local"  # the address that starts a Ray instance on this machine

Summary = dict[str, Any]


def node_resources(cores: Sequence[int] | None = None) -> dict[str, float]:
    """The custom resources a node offers: one timing slot per core it may use."""
    return {f"{RESOURCE}{c}": 1.0 for c in sorted(cores or os.sched_getaffinity(0))}


def _core(resource: str) -> int:
    """The core a timing slot's resource names (`graphcost_core_3` → 3)."""
    return int(resource.removeprefix(RESOURCE))


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs Ray: pip install 'graphcost[ray]'") from None
    return ray


@contextmanager
def connected(address: str) -> Iterator[Any]:
    """The `ray` module, connected: to a new local instance with this machine's cores as
    timing slots (`address` 'local') or to the cluster at `address`. A Ray session the
    caller already started is used as it is and left running."""
    ray = _import_ray()
    if ray.is_initialized():
        yield ray
        return
    if address == LOCAL:
        cores = sorted(os.sched_getaffinity(0))
        # workers import what this process can (a --programs MODULE beside the caller)
        path = os.pathsep.join(p for p in sys.path if p)
        ray.init(num_cpus=len(cores), resources=node_resources(cores),
                 include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": path}})
    else:
        _check_reachable(address)
        try:
            ray.init(address=address, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as e:
            raise UserError(
                f"cannot join the Ray cluster at {address!r}: {e}. A cluster started with "
                "`ray start` (Ray >= 2.59) takes only authenticated drivers: set "
                "RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN, as `ray get-auth-token` "
                "prints it on the head)") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Refuse a HOST:PORT no connection reaches (Ray itself retries for minutes)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return  # 'auto' and other forms Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise UserError(f"cannot reach the Ray cluster at {address!r}: {e.strerror or e}; "
                        "start its head with `ray start --head` (see docs/scaling.md)") from None


def timing_slots(ray: Any, workers: int = 0) -> list[str]:
    """The resource name of each timing slot of the cluster (a name once per node that
    offers it); the first `workers` of them when `workers` > 0."""
    total = ray.cluster_resources()
    names = sorted((k for k in total if k.startswith(RESOURCE)),
                   key=_core)
    slots = [n for n in names for _ in range(int(total[n]))]
    if not slots:
        raise UserError("the Ray cluster offers no timing slots: start every node with "
                        "ray start ... --resources \"$(python -m graphcost.xla.ray_pool)\"")
    return slots[:workers] if workers > 0 else slots


class Slot:
    """A timing slot's actor: pinned to its core, it runs one task at a time."""

    def __init__(self, fn: Callable[[Any, Any], Summary], core: int):
        self.fn = fn
        pin_to_core(core)

    def run(self, task: Any, context: Any) -> Summary:
        return self.fn(task, context)

    def ready(self) -> bool:
        return True


def _probe(slot: Any) -> Any:
    """A call that answers once a restarted slot is back. Sent while Ray is still
    restarting the actor, a call fails at once (ActorUnavailableError: "the actor is
    restarting"), which on a busy machine is the rule, not the exception; retried until
    the actor is back, it waits for the restart instead."""
    return slot.ready.options(max_task_retries=-1).remote()


def run_ray(tasks: Sequence[Any], worker_fn: Callable[[Any, Any], Summary], context: Any,
            on_done: Callable[[Summary], None], on_crash: Callable[[Any, str], Summary],
            address: str = LOCAL, workers: int = 0) -> None:
    """Run every task on the timing slots of a Ray cluster; `on_done(summary)` is
    called in this process as each one ends, in the order they end."""
    if not tasks:
        return
    with connected(address) as ray:
        from ray.exceptions import RayActorError, RayError

        names = timing_slots(ray, workers)[:len(tasks)]
        actor = ray.remote(Slot)
        slots = [actor.options(num_cpus=1, resources={n: 1}, max_restarts=-1,
                               max_task_retries=0).remote(worker_fn, _core(n))
                 for n in names]
        todo: deque[int] = deque(range(len(tasks)))
        attempts: Counter[int] = Counter()
        running: dict[Any, tuple[int, int]] = {}  # a task's result -> (slot, task)
        probes: dict[Any, int] = {}  # a restarted slot's answer -> slot
        free = list(range(len(slots)))[::-1]
        done = 0
        try:
            while done < len(tasks):
                while free and todo:
                    s, i = free.pop(), todo.popleft()
                    attempts[i] += 1
                    running[slots[s].run.remote(tasks[i], context)] = (s, i)
                if not running and not probes:
                    raise UserError(f"every Ray timing slot died; {len(todo)} graphs were "
                                    "not measured (rerun the command to resume)")
                (ref,), _ = ray.wait([*running, *probes], num_returns=1)
                if ref in probes:
                    s = probes.pop(ref)
                    try:
                        ray.get(ref)
                        free.append(s)
                    except RayError:
                        pass  # the slot is gone for good (ActorDiedError)
                    continue
                s, i = running.pop(ref)
                try:
                    out = ray.get(ref)
                    free.append(s)
                except RayActorError as e:  # the slot's process died: Ray restarts it
                    probes[_probe(slots[s])] = s  # free again once it answers
                    if attempts[i] < ATTEMPTS:
                        todo.appendleft(i)
                        continue
                    out = on_crash(tasks[i], f"worker died {ATTEMPTS} times (Ray: "
                                             f"{str(e).splitlines()[0]})")
                except RayError as e:  # the task failed inside Ray itself
                    free.append(s)
                    out = on_crash(tasks[i], f"Ray: {str(e).splitlines()[0]}")
                on_done(out)
                done += 1
        finally:
            for slot in slots:
                ray.kill(slot)


if __name__ == "__main__":  # the --resources of `ray start` on this node
    print(json.dumps(node_resources()))
