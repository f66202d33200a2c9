"""Run measurement tasks on pinned worker processes, inline or pipelined.

Inline: one worker per core compiles and times each of its tasks itself, so a core's
timing shares the machine with the other cores' compiling. Pipelined: compile workers
run on every core and hand their compiled tasks (as bytes in a spool folder) to one
timer process on the last core. While the timer times, it pauses (SIGSTOP) the compile
workers that share its core and resumes them after (SIGCONT), so that core times
alone and compiles whenever there is nothing to time: no core waits for compiling.
With `quiet`, the timer pauses every compile worker, so that no compiling shares the
caches and memory bandwidth with a timed call (at the cost of compile time).

A worker function returns either bytes (a compiled task for the timer) or a finished
summary. A worker or timer that dies (a crash inside XLA) fails its task through
`on_crash` and is replaced; paused workers are always resumed. Workers die with this
process (`_die_with_parent`), and an interrupted run (Ctrl-C, or SIGTERM inside
`sigterm_raises`) first hands on every summary already sent, then kills its workers
without waiting for the tasks in progress, which a resumed run does again.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import shutil
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from graphcost.children import die_with_parent
from graphcost.xla.timing import pin_to_core

Summary = dict[str, Any]
WorkerFn = Callable[[Any, Any], "bytes | Summary"]  # (task, context) -> bytes or summary
TimerFn = Callable[[Any, Any, bytes], Summary]  # (task, context, compiled) -> summary


def _die_with_parent() -> None:
    """Make this worker die when the process that started it dies, however it dies (a
    SIGKILL included), instead of measuring on for minutes as an orphan; interrupts are
    the parent's to handle (it ends its workers), so a Ctrl-C reaching the whole process
    group does not print a traceback per worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """In the block, SIGTERM raises SystemExit(143) in the main thread instead of ending
    the process on the spot, so `finally` blocks run: `run_workers` hands on what its
    workers finished and kills them, a local Ray instance is shut down."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@contextmanager
def _interrupts_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends, then raise the first as it would
    have been raised: an interrupt lands between two messages, never in the middle of
    reading one from a worker or of recording it. (Not a signal mask: another thread
    would take the signal, and Python would run its handler here all the same.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    before = {s: signal.signal(s, lambda signum, frame: held.append(signum))
              for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        if held:
            signal.raise_signal(held[0])


def _worker(core: int, fn: WorkerFn, context: Any, inbox: mp.Queue, results: mp.Queue,
            wid: int, spool: str) -> None:
    """Pin to `core`, then run `fn` on tasks until a None arrives."""
    _die_with_parent()
    pin_to_core(core)
    while (item := inbox.get()) is not None:
        index, task = item
        out = fn(task, context)
        if isinstance(out, bytes):
            path = Path(spool) / f"{index}.bin"
            path.write_bytes(out)
            results.put(("compiled", wid, index, str(path)))
        else:
            results.put(("done", wid, index, out))


def _signal(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _timer(core: int, fn: TimerFn, context: Any, inbox: mp.Queue, results: mp.Queue) -> None:
    """Pin to `core`; time each compiled task with the workers in `pause` stopped."""
    _die_with_parent()
    pin_to_core(core)
    while (item := inbox.get()) is not None:
        index, task, path, pause = item
        _signal(pause, signal.SIGSTOP)
        try:
            summary = fn(task, context, Path(path).read_bytes())
        finally:
            _signal(pause, signal.SIGCONT)
        Path(path).unlink(missing_ok=True)
        results.put(("done", "timer", index, summary))


def run_workers(tasks: Sequence[Any], worker_fn: WorkerFn, context: Any,
                on_done: Callable[[Summary], None], on_crash: Callable[[Any, str], Summary],
                timer_fn: TimerFn | None = None, workers: int = 0,
                spool: str | Path = ".spool", quiet: bool = True) -> None:
    """Run every task; `on_done(summary)` is called in this process as each one ends.

    With `timer_fn`, tasks are pipelined (see the module doc) through the folder
    `spool`; `workers` workers (0: one per core this process may use) are dealt
    round-robin over cores.
    """
    if not tasks:
        return
    cores = sorted(os.sched_getaffinity(0))
    n = min(workers or len(cores), len(tasks))
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    spool = Path(spool)
    if timer_fn is not None:
        shutil.rmtree(spool, ignore_errors=True)  # compiled tasks of a killed run are redone
        spool.mkdir(parents=True)
    inboxes: dict[Any, Any] = {}
    procs: dict[Any, Any] = {}
    timer_core = cores[-1]

    def start(wid: Any) -> None:
        inboxes[wid] = ctx.Queue()
        if wid == "timer":
            args = (timer_core, timer_fn, context, inboxes[wid], results)
            target: Callable = _timer
        else:
            args = (cores[wid % len(cores)], worker_fn, context, inboxes[wid], results, wid,
                    str(spool))
            target = _worker
        procs[wid] = ctx.Process(target=target, args=args, daemon=True)
        procs[wid].start()

    for w in range(n):
        start(w)
    if timer_fn is not None:
        start("timer")
    holding: dict[Any, int | None] = dict.fromkeys(procs)
    ready: deque[tuple[int, str]] = deque()
    next_task = done = 0

    def finish(summary: Summary) -> None:
        nonlocal done
        on_done(summary)
        done += 1

    def to_pause() -> list[int]:
        return [procs[w].pid for w in procs
                if w != "timer" and (quiet or cores[w % len(cores)] == timer_core)]

    def hand_on(msg: tuple) -> None:
        """A worker's message: a finished summary goes to `on_done`, a compiled task
        waits for the timer."""
        if holding.get(msg[1]) != msg[2]:
            return
        holding[msg[1]] = None
        if msg[0] == "compiled":
            ready.append((msg[2], msg[3]))
        else:
            finish(msg[3])

    def step() -> None:
        """Deal tasks, hand on one message (waiting up to 0.5 s), replace dead workers."""
        nonlocal next_task
        for w in range(n):
            if holding[w] is None and next_task < len(tasks) and len(ready) <= 2 * n:
                inboxes[w].put((next_task, tasks[next_task]))
                holding[w], next_task = next_task, next_task + 1
        if "timer" in procs and holding["timer"] is None and ready:
            index, path = ready.popleft()
            inboxes["timer"].put((index, tasks[index], path, to_pause()))
            holding["timer"] = index
        try:
            hand_on(results.get(timeout=0.5))
        except queue.Empty:
            pass
        for w, p in list(procs.items()):
            if p.is_alive() or holding[w] is None:
                continue
            task = tasks[holding[w]]
            holding[w] = None
            if w == "timer":
                _signal([q.pid for q in procs.values()], signal.SIGCONT)
            finish(on_crash(task, f"{'timer' if w == 'timer' else 'worker'} died "
                                  f"(exit code {p.exitcode})"))
            start(w)

    try:
        while done < len(tasks):
            with _interrupts_held():
                step()
    except (KeyboardInterrupt, SystemExit):  # interrupted: keep what is finished already
        with _interrupts_held():
            while True:
                try:
                    hand_on(results.get_nowait())
                except queue.Empty:
                    break
        raise
    finally:
        _signal([p.pid for p in procs.values() if p.pid], signal.SIGCONT)
        for w, p in procs.items():
            if done < len(tasks):  # interrupted or failed: end the tasks in progress now
                p.kill()
            else:
                inboxes[w].put(None)
        for p in procs.values():
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        if timer_fn is not None:
            shutil.rmtree(spool, ignore_errors=True)
