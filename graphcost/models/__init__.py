"""Ranking models: the default ranker, the official-equivalent baselines and losses."""

from graphcost.models.losses import RankingLoss, listmle, mse, pairwise_hinge
from graphcost.models.model import MODELS, Model, baselines, load_model, model_names
from graphcost.models.ranker import Ranker, RankerSettings, reference_ids

__all__ = ["MODELS", "Model", "Ranker", "RankerSettings", "RankingLoss", "baselines",
           "listmle", "load_model", "model_names", "mse", "pairwise_hinge", "reference_ids"]
