"""Training: one loop (`fit`) over step strategies, checkpoints, DDP and the memory budget."""

from graphcost.train.loop import fit
from graphcost.train.memory import MemoryBudgetError
from graphcost.train.run import train_model
from graphcost.train.settings import TrainSettings

__all__ = ["MemoryBudgetError", "TrainSettings", "fit", "train_model"]
