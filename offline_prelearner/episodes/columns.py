"""Canonical column names.

They are RLlib's names (``ray.rllib.core.columns.Columns`` and the recorder's row layout), so data
recorded by RLlib needs no schema at all. A :class:`~offline_prelearner.io.schema.ColumnSchema` maps
these canonical fields to whatever a dataset calls them.
"""

from __future__ import annotations

__all__ = [
    "ACTIONS",
    "AGENT_ID",
    "CANONICAL_FIELDS",
    "DONES",
    "EPS_ID",
    "INFOS",
    "MODULE_ID",
    "NEW_OBS",
    "N_STEP",
    "OBS",
    "REWARDS",
    "TERMINATEDS",
    "TRUNCATEDS",
    "WEIGHTS",
    "T",
]

EPS_ID = "eps_id"
AGENT_ID = "agent_id"
MODULE_ID = "module_id"
OBS = "obs"
ACTIONS = "actions"
REWARDS = "rewards"
NEW_OBS = "new_obs"
TERMINATEDS = "terminateds"
TRUNCATEDS = "truncateds"
T = "t"
INFOS = "infos"

# Not schema fields: legacy / output columns.
DONES = "dones"  # old stack: terminated or truncated, undistinguished
N_STEP = "n_step"
WEIGHTS = "weights"

#: Fields a ColumnSchema can map, in the order reports list them.
CANONICAL_FIELDS: tuple[str, ...] = (
    EPS_ID,
    AGENT_ID,
    MODULE_ID,
    OBS,
    ACTIONS,
    REWARDS,
    NEW_OBS,
    TERMINATEDS,
    TRUNCATEDS,
    T,
    INFOS,
)
