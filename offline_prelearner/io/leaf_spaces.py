"""The space of each composite-observation leaf, in the output columns' Arrow field metadata.

A sample batch carries a composite observation as one column per leaf (``obs.desired_goal``,
``new_obs.desired_goal``; :mod:`offline_prelearner.episodes.observations`). :func:`with_leaf_spaces`
puts each leaf's gymnasium space, serialized as RLlib does (``space_to_dict``), under the field
metadata key ``space``, and the whole observation space on the table (``observation_space``), so
a learner reading the output can rebuild ``gymnasium.spaces.Dict`` / ``Tuple`` as well as the
nested arrays (``SampleBatch.nested``).
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import pyarrow as pa

from ..episodes import columns as C
from ..spaces import leaf_spaces, space_from_dict, space_to_dict

__all__ = ["SPACE_KEY", "leaf_spaces", "read_leaf_space", "with_leaf_spaces"]

SPACE_KEY = b"space"


def with_leaf_spaces(table: pa.Table, space: gym.Space[Any] | None) -> pa.Table:
    """``table`` with each ``obs.<path>`` / ``new_obs.<path>`` field's leaf space in its
    metadata (unchanged when ``space`` is None or not composite).

    Args:
        table: A sample batch as Arrow, its composite observations one column per leaf.
        space: The observation space the batch was sampled under, or None when unknown.

    Returns:
        The same columns (no copy) under a schema whose leaf fields carry their space under
        :data:`SPACE_KEY` and whose table metadata carries the whole ``observation_space``.
    """
    if not isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        return table
    spaces = {p: json.dumps(space_to_dict(s)).encode() for p, s in leaf_spaces(space).items()}
    fields = []
    for f in table.schema:
        path = next(
            (f.name[len(c) + 1 :] for c in (C.OBS, C.NEW_OBS) if f.name.startswith(c + ".")), None
        )
        if path in spaces:
            f = f.with_metadata({**(f.metadata or {}), SPACE_KEY: spaces[str(path)]})
        fields.append(f)
    whole = json.dumps(space_to_dict(space)).encode()
    schema = pa.schema(
        fields, metadata={**(table.schema.metadata or {}), b"observation_space": whole}
    )
    return pa.Table.from_arrays(table.columns, schema=schema)


def read_leaf_space(field: pa.Field) -> gym.Space[Any] | None:
    """The leaf space a field's metadata carries (None if it carries none).

    Args:
        field: A field of an output file's schema (``obs.<path>`` or ``new_obs.<path>``).

    Returns:
        The gymnasium space under :data:`SPACE_KEY`, or None.

    Raises:
        DecodeError: The metadata is not a space dict :func:`~..spaces.space_from_dict` reads.
    """
    raw = (field.metadata or {}).get(SPACE_KEY)
    return None if raw is None else space_from_dict(json.loads(raw))
