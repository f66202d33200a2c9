"""The 1st place's training entry point (`train_kfold.py`), run from its folder, with one
change: NB_FOLDS (20 models of a seed ensemble, all trained on the same split) comes
from the environment, default 1."""

import os
import sys

sys.path.insert(0, os.getcwd())
import train_kfold  # noqa: E402  (their module, from their folder)

train_kfold.NB_FOLDS = int(os.environ.get("NB_FOLDS", "1"))
train_kfold.main()
