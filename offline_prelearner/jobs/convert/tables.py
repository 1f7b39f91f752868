"""Episodes -> the Parquet tables ``convert`` writes: rows (RLlib's recorder layout plus ``t``)
and msgpack episode records (RLlib's ``output_write_episodes=True`` layout).

Both carry the dataset's env spec and spaces in the schema metadata
(:mod:`.dataset_info`). Python loops are per episode (grouping by layout, one msgpack record
each); columns are built by :func:`~offline_prelearner.io.formats.rows.writer.episodes_to_rows`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from ...episodes import columns as C
from ...episodes.episode import Episode
from ...errors import UnsupportedFormatError
from ...io.codec import packb
from ...io.fast_tensor import Layout
from ...io.formats.episodes.reader import ITEM
from ...io.formats.rows.writer import episodes_to_rows
from ..dataset_info import DatasetInfo

__all__ = ["episode_tables", "rows_tables"]


def _signature(ep: Episode) -> tuple[Any, ...]:
    """What must agree between the episodes of one rows table: the step shape and dtype of each
    observation leaf, of the actions and of each extra column. The dtypes keep the values as
    recorded: one table of two dtypes is one concatenated column, which numpy promotes (float32
    observations would come back float64, int64 with uint64 as rounded float64)."""
    obs: Any = ep.observations
    if isinstance(obs, dict):
        leaves: Any = tuple((k, v.shape[1:], v.dtype.str) for k, v in sorted(obs.items()))
    else:
        leaves = (obs.shape[1:], obs.dtype.str)
    extras = tuple((k, v.shape[1:], v.dtype.str) for k, v in sorted(ep.extras.items()))
    return (leaves, ep.actions.shape[1:], ep.actions.dtype.str, extras)


def rows_tables(
    episodes: list[Episode],
    rows_per_file: int,
    layout: Layout = "rllib",
    info: DatasetInfo | None = None,
) -> Iterator[pa.Table]:
    """Rows tables, episodes of one layout per table, at most ``rows_per_file`` rows (or one ep);
    ``info`` in each table's schema metadata (:mod:`.dataset_info`).

    Args:
        episodes: The episodes to write. They are grouped by layout (the step shape and dtype
            of each observation leaf, of the actions and of each extra column), each group in
            input order, the groups in the order their first episode comes; an episode is never
            split across tables, and a table holds one dtype per column (no value is cast;
            rewards are written as float64, as the rows layout says).
        rows_per_file: Most rows (steps) per table; an episode longer than this is a table
            of its own.
        layout: How per-step arrays are written: ``"rllib"`` (Ray's tensor extension) or
            ``"fast"`` (:mod:`~offline_prelearner.io.fast_tensor`).
        info: The dataset's env spec and spaces for the schema metadata; None: none written.

    Yields:
        One rows table (RLlib's recorder layout plus ``t``; composite observations as struct
        columns ``obs`` / ``new_obs``) per output file.
    """
    extra = info.to_metadata() if info is not None else {}
    groups: dict[tuple[Any, ...], list[Episode]] = {}
    for ep in episodes:
        groups.setdefault(_signature(ep), []).append(ep)
    for eps in groups.values():
        chunk: list[Episode] = []
        rows = 0
        for nxt in [*eps, None]:
            if chunk and (nxt is None or rows + len(nxt) > rows_per_file):
                table = episodes_to_rows(chunk, with_t=True, layout=layout)
                if isinstance(chunk[0].observations, dict):
                    table = _nest_leaves(_nest_leaves(table, C.OBS), C.NEW_OBS)
                yield _with_metadata(table, extra)
                chunk, rows = [], 0
            if nxt is not None:
                chunk.append(nxt)
                rows += len(nxt)


def episode_tables(
    episodes: list[Episode], per_file: int, info: DatasetInfo | None = None
) -> Iterator[pa.Table]:
    """Msgpack episode records, ``per_file`` per table, with ``info``'s spaces in each record and
    ``info`` in the schema metadata. ``_last_step_time`` is None (RLlib's value for an episode
    never stepped): a converted episode has no wall-clock time, and the same input gives the same
    bytes (``Episode.get_state`` puts the clock's reading there).

    Args:
        episodes: The episodes to write, in order; plain observations only.
        per_file: Episodes per table (the last table may hold fewer); at least 1.
        info: The dataset's env spec and spaces, for each record's spaces and the schema
            metadata; None: no spaces and no env spec.

    Yields:
        One table of a single binary column ``item`` (one msgpack ``SingleAgentEpisode`` state
        per row) per output file.

    Raises:
        UnsupportedFormatError: An episode has composite (Dict / Tuple) observations (raised
            before any table is yielded).
    """
    info = info if info is not None else DatasetInfo()
    spaces = (info.observation_space, info.action_space)
    composite = next((ep for ep in episodes if isinstance(ep.observations, dict)), None)
    if composite is not None:
        raise UnsupportedFormatError(
            f"episode {composite.id!r} has composite (Dict / Tuple) observations, which msgpack "
            "episode records do not hold here (the episodes reader refuses them); convert to rows "
            "or minari"
        )
    extra = info.to_metadata()
    for s in range(0, len(episodes), per_file):
        states = [
            {**ep.get_state(*spaces), "_last_step_time": None} for ep in episodes[s : s + per_file]
        ]
        table = pa.table({ITEM: pa.array([packb(st) for st in states], type=pa.binary())})
        yield _with_metadata(table, extra)


def _nest_leaves(table: pa.Table, prefix: str) -> pa.Table:
    """The writer's flat leaf columns ``obs.<path>`` as one struct column ``obs`` (nested along
    the paths), each leaf's field metadata (tensor layout, space) kept: the layout RLlib records
    Dict observations in and the rows reader reads. Column operations only."""
    names = [n for n in table.column_names if n.startswith(prefix + ".")]
    if not names:
        return table
    tree: dict[str, Any] = {}
    for n in names:
        node = tree
        *parents, last = n[len(prefix) + 1 :].split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = n

    def build(node: dict[str, Any]) -> pa.StructArray:
        arrays, fields = [], []
        for key, sub in node.items():
            if isinstance(sub, dict):
                arr: pa.Array = build(sub)
                fields.append(pa.field(key, arr.type))
            else:
                arr = table.column(sub).combine_chunks()
                fields.append(pa.field(key, arr.type, metadata=table.schema.field(sub).metadata))
            arrays.append(arr)
        return pa.StructArray.from_arrays(arrays, fields=fields)

    at = table.column_names.index(names[0])
    return table.drop_columns(names).add_column(at, prefix, build(tree))


def _with_metadata(table: pa.Table, extra: dict[bytes, bytes]) -> pa.Table:
    if not extra:
        return table
    return table.replace_schema_metadata({**(table.schema.metadata or {}), **extra})
