"""Ranking models: the default ranker, the official-equivalent baselines, losses, and the
one config scorer every score comes from."""

from graphcost.models.losses import RankingLoss, listmle, mse, pairwise_hinge
from graphcost.models.model import Model, as_model, load_model
from graphcost.models.ranker import Ranker, RankerSettings, reference_sets
from graphcost.models.registry import MODELS, baselines, model_names
from graphcost.models.scorer import ConfigScorer, rank_file, score_graph

__all__ = ["MODELS", "ConfigScorer", "Model", "Ranker", "RankerSettings", "RankingLoss",
           "as_model", "baselines", "listmle", "load_model", "model_names", "mse",
           "pairwise_hinge", "rank_file", "reference_sets", "score_graph"]
