"""Training loop, checkpoints and the train/evaluate/predict/submit/bench verbs."""

from graphcost.train.trainer import TrainSettings, train

__all__ = ["TrainSettings", "train"]
