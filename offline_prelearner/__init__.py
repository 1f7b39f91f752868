"""offline_prelearner: recorded RL experience -> episodes -> replay -> learner-ready batches, on Ray Data."""

__version__ = "0.1.0"
