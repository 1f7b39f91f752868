"""offline_prelearner: recorded RL experience -> episodes -> replay -> learner batches."""

__version__ = "0.1.0"
