"""Checkpoint files: written atomically, read safely, refused when damaged.

Every file graphcost saves with torch (a model, a training run's `last.pt`) goes
through here: `atomic_save` never leaves half a file under the name, `load_checkpoint`
unpickles tensors and plain values only and checks the archive's CRCs first.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from graphcost.atomic import atomic_open
from graphcost.errors import UserError


def atomic_save(obj: Any, path: str | Path) -> Path:
    """torch.save that never leaves a half-written checkpoint under `path`. It saves to
    memory first: torch turns a failed write into a RuntimeError that hides the full
    disk, which `atomic_open` must see to say so (checkpoints are megabytes)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    with atomic_open(path) as f:
        f.write(buffer.getbuffer())
    return Path(path)


def load_checkpoint(path: str | Path) -> dict:
    """A checkpoint's contents, unpickled with `weights_only=True`: tensors and plain
    Python values only, so a crafted file cannot run code. Every graphcost checkpoint
    holds only those (settings as dicts, transforms as lists). A file that is not one,
    or needs more than that to unpickle, is refused naming it."""
    if not Path(path).is_file():
        raise UserError(f"{path}: no such model file")
    if not zipfile.is_zipfile(path):  # torch.save's format since PyTorch 1.6
        raise UserError(f"{path}: not a PyTorch checkpoint (expected the zip archive "
                        "torch.save writes)")
    check_archive(path)
    try:
        state = torch.load(Path(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{path}: not a graphcost checkpoint that loads safely with "
                        f"weights_only=True ({first})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as e:
        raise UserError(f"{path}: not a readable PyTorch checkpoint ({e})") from None
    if not isinstance(state, dict):
        raise UserError(f"{path}: not a graphcost checkpoint (a {type(state).__name__})")
    return state


def check_archive(path: str | Path) -> None:
    """Refuse a checkpoint whose bytes changed after torch.save wrote them: torch.load
    does not check the zip's CRCs, so a flipped bit in a tensor would load as other
    weights and rank differently without a word."""
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise UserError(f"{path}: a damaged checkpoint archive ({e})") from None
    if bad is not None:
        raise UserError(f"{path}: damaged: its member {bad} fails its CRC check (the file "
                        "changed after it was written); restore or retrain it")


def require_keys(state: dict, keys: Iterable[str], what: str) -> None:
    """Refuse a checkpoint dict that lacks a key the caller reads, naming the first."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise UserError(f"not {what}: it has no {missing[0]!r} (needs {', '.join(keys)}; "
                        f"has {', '.join(map(str, state)) or 'nothing'})")
