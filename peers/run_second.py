"""The 2nd place's entry point (`src/main.py`), run with their folder on PYTHONPATH from a
fresh working directory per fold (their data cache is relative to it), with three
changes: their worker and process init functions, which widen the CPU affinity to every
core (undoing `taskset`), do nothing; wall-clock stamps around training and their test
step; and after it, their own `_make_predictions('test')` once more, to write the raw
per-config scores (their CSVs hold ranks only) to `--scores-json FILE`."""

import json
import sys
import time

import src.sys_utils as sys_utils

sys_utils.worker_init_fn = lambda worker_id: None
sys_utils.process_init_fn = lambda: None
import src.main as their  # noqa: E402  (after the init functions are replaced)

argv = sys.argv[1:]
i = argv.index("--scores-json")
scores_json = argv[i + 1]
sys.argv = [sys.argv[0], *argv[:i], *argv[i + 2:]]
train = their.Trainer.train


def train_and_dump(self) -> None:
    start = time.time()
    train(self)
    print(f"peers: training and test {time.time() - start:.1f} s, {self.iteration} iterations")
    _, pred = self._make_predictions("test")
    with open(scores_json, "w") as f:
        json.dump({f"{k}.npz": v["pred_list"] for k, v in sorted(pred.items())}, f)


their.Trainer.train = train_and_dump
their.main()
