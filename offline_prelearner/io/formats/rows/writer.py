"""Episodes -> rows in RLlib's recorder layout (one transition per row), as Arrow and Parquet.

Row ``i`` of an episode of ``T`` steps holds::

    eps_id, agent_id, module_id      the episode's ids (repeated on every row)
    obs        observations[i]       actions  actions[i]     rewards  rewards[i] (float64)
    new_obs    observations[i + 1]
    terminateds / truncateds         the episode's flag on its last row, False elsewhere
    t          t_started + i         (only with ``with_t=True``; RLlib's recorder writes no ``t``)
    <extra>    extras[name][i]       every per-step extra column, in the first episode's order
    infos      json(infos[i + 1])    only when some episode carries infos (null for the others)

Edges:

* ``infos[i + 1]`` is the info returned together with ``new_obs``; that is what RLlib's reader puts
  after an empty reset info. The reset info ``infos[0]`` has no row and is not written.
* A zero-length episode has no transition and so writes no row.
* Ids are written as strings (``str(id)``); ``agent_id`` / ``module_id`` columns have Arrow type
  ``null`` when every episode has ``None`` there, as RLlib's single-agent files do.
* Per-step values with one or more dimensions (CartPole's ``obs`` of shape ``(4,)``) are laid out
  by ``layout`` (:data:`~...fast_tensor.LAYOUTS`):

  - ``"rllib"`` (the default here): Ray Data's fixed-shape tensor layout, written without
    importing Ray: a ``large_list<element>`` column of the flattened values whose field metadata
    names the extension ``ray.data.arrow_tensor_v2`` and the shape as JSON. Plain pyarrow reads it
    as lists; ``ray.data.read_parquet`` and RLlib read a tensor column.
  - ``"lists"``: plain nested ``fixed_size_list`` (``fixed_size_list<float>[4]``; an 8x8 grid is a
    list of 8 lists of 8), no extension: pandas, polars (``Array``), Hugging Face ``datasets`` and
    torch (through numpy) read numbers with the shape kept, without this library.
  - ``"fast"``: the fast tensor layout (:mod:`...fast_tensor`: ``fixed_size_binary`` cells, dtype
    and shape in the field metadata), which Parquet reads 10-30x faster for image-sized cells and
    only this library reads as arrays.
  - ``"auto"``: per column, ``"fast"`` for cells of at least
    :data:`~...fast_tensor.FAST_MIN_CELL_BYTES` bytes, ``"lists"`` below (what ``process`` writes).
* A composite observation (gymnasium Dict / Tuple, nested; a ``{leaf path: array}`` map, see
  :mod:`~offline_prelearner.episodes.observations`) is written as one column per leaf,
  ``obs.<path>`` and ``new_obs.<path>`` (``obs.goal.pos``, ``obs.pair.0``), each laid out as a
  plain column would be: the names the prelearner's output uses. Each leaf's space goes in its
  field metadata with :func:`~...leaf_spaces.with_leaf_spaces` when the space is known. All
  episodes must have the same leaves (``SchemaError`` otherwise).
* All episodes must agree on the per-step shape of each column (``SchemaError`` otherwise); dtypes
  that differ are promoted with numpy's rules (int32 and int64 actions give int64).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ....episodes import columns as C
from ....episodes import observations as O
from ....episodes.episode import Episode
from ....errors import SchemaError, Where
from ...fast_tensor import (
    Layout,
    cell_layout,
    check_layout,
    fixed_binary_column,
    parquet_dictionary_columns,
)

__all__ = [
    "TENSOR_EXTENSION_NAME",
    "columns_to_table",
    "episodes_to_rows",
    "tensor_field",
    "write_rows",
]

#: Ray Data's extension name for fixed-shape tensor columns with 64-bit offsets.
TENSOR_EXTENSION_NAME = b"ray.data.arrow_tensor_v2"

_FIXED = (
    C.EPS_ID,
    C.AGENT_ID,
    C.MODULE_ID,
    C.OBS,
    C.ACTIONS,
    C.REWARDS,
    C.NEW_OBS,
    C.TERMINATEDS,
    C.TRUNCATEDS,
    C.T,
    C.INFOS,
)


def tensor_field(name: str, value_type: pa.DataType, shape: tuple[int, ...]) -> pa.Field:
    """The Arrow field Ray Data reads back as a tensor column of per-row ``shape``.

    Args:
        name: The column's name.
        value_type: The Arrow type of one element (``pa.float32()``...).
        shape: The per-row shape, e.g. ``(4,)`` or ``(84, 84, 4)``; the values are stored
            flattened, the shape goes in the field metadata.

    Returns:
        A ``large_list<element: value_type>`` field tagged with Ray's
        ``ray.data.arrow_tensor_v2`` extension name and the shape as JSON.
    """
    return pa.field(
        name,
        pa.large_list(pa.field("element", value_type)),
        metadata={
            b"ARROW:extension:name": TENSOR_EXTENSION_NAME,
            b"ARROW:extension:metadata": json.dumps(list(shape)).encode(),
        },
    )


def _column(name: str, values: np.ndarray, layout: Layout = "rllib") -> tuple[pa.Field, pa.Array]:
    """One per-step column (``values`` is ``[rows, *shape]``) as an Arrow field and array."""
    if values.ndim == 1:
        arr = _object_strings(values) if values.dtype == object else None
        if arr is None:
            arr = pa.array(values)
        return pa.field(name, arr.type), arr
    if values.dtype.kind not in "biuf":
        raise SchemaError(
            f"cannot write a {values.dtype} tensor (numeric or bool only)", Where(column=name)
        )
    shape = tuple(int(s) for s in values.shape[1:])
    layout = cell_layout(layout, values.dtype, shape)
    if layout == "fast":
        return fixed_binary_column(name, values)
    if layout == "lists" and 0 not in shape:  # (pyarrow has no fixed_size_list of size 0)
        arr = pa.array(np.ascontiguousarray(values).reshape(-1))
        for size in reversed(shape):
            arr = pa.FixedSizeListArray.from_arrays(arr, size)
        return pa.field(name, arr.type), arr
    flat = np.ascontiguousarray(values).reshape(-1)
    width = int(np.prod(shape))
    offsets = pa.array(np.arange(len(values) + 1, dtype=np.int64) * width)
    flat_arr = pa.array(flat)
    fld = tensor_field(name, flat_arr.type, shape)
    return fld, pa.LargeListArray.from_arrays(offsets, flat_arr, type=fld.type)


def _object_strings(values: np.ndarray) -> pa.Array | None:
    """An object column of ``str`` (ids) as Arrow strings, as ``pa.array`` would infer them but
    several times faster: ids come in runs (an episode's rows, a module's), so each run's
    string is converted once and repeated with a take. None when it holds anything else."""
    if not len(values) or not isinstance(values[0], str):
        return None
    starts = np.flatnonzero(values[1:] != values[:-1]) + 1  # runs (a repeated id is one object)
    try:
        firsts = pa.array(values[np.concatenate(([0], starts))], type=pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if len(firsts) == len(values):
        return firsts
    if len(firsts) == 1 and firsts.null_count == 0:  # one id for all (module_id): its bytes
        one = firsts[0].as_py().encode()  # repeated, offsets in steps of its length
        if len(one) * len(values) < 1 << 31:
            offsets = np.arange(len(values) + 1, dtype=np.int32) * np.int32(len(one))
            data = pa.py_buffer(one * len(values))
            return pa.StringArray.from_buffers(len(values), pa.py_buffer(offsets), data)
    run = np.zeros(len(values), np.int32)
    run[starts] = 1
    return pc.take(firsts, pa.array(np.cumsum(run, out=run)))


def columns_to_table(columns: dict[str, np.ndarray], *, layout: Layout = "rllib") -> pa.Table:
    """A dict of per-row numpy columns (the prelearner's output) as an Arrow table: arrays of
    one dimension as plain columns, of more in ``layout`` (see the module docstring).

    Args:
        columns: Column name -> ``[rows, *shape]`` values, all with the same number of rows.
        layout: How per-step values of one or more dimensions are laid out: ``"rllib"``
            (Ray Data tensor extension), ``"lists"``, ``"fast"`` or ``"auto"`` (module
            docstring); 1-D columns are plain columns whatever the layout.

    Returns:
        One column per entry, in the dict's order.

    Raises:
        SchemaError: ``layout`` is not one of the layouts.
    """
    layout = _layout(layout)
    cols = [_column(name, np.asarray(v), layout) for name, v in columns.items()]
    return pa.Table.from_arrays([a for _, a in cols], schema=pa.schema([f for f, _ in cols]))


def _layout(layout: object) -> Layout:
    try:
        return check_layout(layout)
    except ValueError as e:
        raise SchemaError(str(e)) from None


def _concat(episodes: Sequence[Episode], name: str, get: Any) -> np.ndarray:
    """Concatenates one column of every episode, once, after checking per-step shapes agree."""
    parts = [get(e) for e in episodes]
    want = parts[0].shape[1:]
    for ep, part in zip(episodes, parts, strict=True):
        if part.shape[1:] != want:
            raise SchemaError(
                f"per-step shape {part.shape[1:]} differs from the first episode's {want}",
                Where(column=name, episode_id=ep.id),
            )
    return np.concatenate(parts)


#: Per-step observation size from which obs / new_obs are gathered from views of each episode
#: instead of from one concatenation of all observations (saves a copy of large observations).
_LARGE_OBS_BYTES = 4096


def _obs_columns(
    episodes: Sequence[Episode], lengths: np.ndarray
) -> tuple[O.Observations, O.Observations]:
    """``obs`` (each episode's observations but the last) and ``new_obs`` (all but the first):
    arrays for plain observations, ``{leaf path: array}`` maps for composite ones."""
    want = _leaf_set(episodes[0].observations)
    for ep in episodes:
        got = _leaf_set(ep.observations)
        if got != want:
            raise SchemaError(
                f"observation leaves {_describe(got)} differ from the first episode's "
                f"{_describe(want)}",
                Where(column=C.OBS, episode_id=ep.id),
            )
    paths = None if want is None else list(episodes[0].observations)
    if paths is None:
        return _obs_pair(episodes, lengths, "", lambda e: e.observations)
    pairs = {p: _obs_pair(episodes, lengths, p, lambda e, p=p: e.observations[p]) for p in paths}
    return {p: o for p, (o, _) in pairs.items()}, {p: n for p, (_, n) in pairs.items()}


def _leaf_set(obs: O.Observations) -> frozenset[str] | None:
    """A composite observation's leaf paths (None for a plain array)."""
    return frozenset(obs) if O.is_composite(obs) else None


def _describe(leaves: frozenset[str] | None) -> str:
    return "none (a plain array)" if leaves is None else str(sorted(leaves))


def _obs_pair(
    episodes: Sequence[Episode], lengths: np.ndarray, path: str, get: Any
) -> tuple[np.ndarray, np.ndarray]:
    """``obs`` / ``new_obs`` of one observation array per episode (``get(e)``, ``[T + 1, ...]``);
    ``path`` names a composite leaf in errors (``""``: a plain observation)."""
    obs_name, new_name = _leaf_name(C.OBS, path), _leaf_name(C.NEW_OBS, path)
    first = get(episodes[0])
    if first[0].nbytes >= _LARGE_OBS_BYTES:
        return (
            _concat(episodes, obs_name, lambda e: get(e)[:-1]),
            _concat(episodes, new_name, lambda e: get(e)[1:]),
        )
    # Small observations: concatenate all of them once ([T_i + 1] each) and drop, with boolean
    # masks, each episode's last one (obs) or first one (new_obs).
    all_obs = _concat(episodes, obs_name, get)
    obs_end = np.cumsum(lengths + 1)  # one past each episode's last observation
    is_last = np.zeros(len(all_obs), dtype=bool)
    is_last[obs_end - 1] = True
    is_first = np.zeros(len(all_obs), dtype=bool)
    is_first[obs_end - lengths - 1] = True
    return all_obs[~is_last], all_obs[~is_first]


def _leaf_name(column: str, path: str) -> str:
    """A leaf's column name, as the prelearner's output names it (``obs.<path>``; ``column``
    itself for a plain observation, path ``""``)."""
    return f"{column}{O.SEP}{path}" if path else column


def _obs_fields(
    column: str, values: O.Observations, layout: Layout
) -> list[tuple[pa.Field, pa.Array]]:
    """The ``obs`` (or ``new_obs``) column, or one column per leaf of a composite observation."""
    return [
        _column(_leaf_name(column, path), leaf, layout) for path, leaf in O.leaves(values).items()
    ]


def _ids(values: list[Any], lengths: np.ndarray) -> pa.Array:
    """An id per episode, repeated over its rows: string, or null type when all are None."""
    if all(v is None for v in values):
        return pa.nulls(int(lengths.sum()))
    per_episode = pa.array([None if v is None else str(v) for v in values], pa.string())
    return pc.take(per_episode, pa.array(np.repeat(np.arange(len(values)), lengths)))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _infos(episodes: Sequence[Episode]) -> pa.Array:
    # Infos are arbitrary Python dicts already; encoding them is one json.dumps per row.
    texts: list[str | None] = []
    for ep in episodes:
        if ep.infos is None:
            texts.extend([None] * len(ep))
            continue
        try:
            texts.extend(json.dumps(i, default=_json_default) for i in ep.infos[1:])
        except (TypeError, ValueError) as e:
            raise SchemaError(
                f"infos are not JSON-serializable: {e}", Where(column=C.INFOS, episode_id=ep.id)
            ) from None
    return pa.array(texts, pa.string())


def _empty_table(with_t: bool) -> pa.Table:
    types = {
        C.EPS_ID: pa.string(),
        C.AGENT_ID: pa.null(),
        C.MODULE_ID: pa.null(),
        C.OBS: pa.null(),
        C.ACTIONS: pa.null(),
        C.REWARDS: pa.float64(),
        C.NEW_OBS: pa.null(),
        C.TERMINATEDS: pa.bool_(),
        C.TRUNCATEDS: pa.bool_(),
    }
    if with_t:
        types[C.T] = pa.int64()
    return pa.schema(list(types.items())).empty_table()


def episodes_to_rows(
    episodes: Sequence[Episode], *, with_t: bool = True, layout: Layout = "rllib"
) -> pa.Table:
    """The episodes as one Arrow table of transitions; see the module docstring for the layout.

    Each column is concatenated once over all episodes and sliced with numpy index math; the only
    Python loops are per episode (ids, shape checks) and per row for ``infos`` (JSON text).
    An empty sequence gives an empty table whose obs/actions columns have type ``null``.
    ``layout`` lays out per-step arrays of one or more dimensions (module docstring).

    Args:
        episodes: The episodes, in order; each writes ``len(episode)`` rows (none for an
            empty one). All must have the same extra columns and observation leaves.
        with_t: Write the ``t`` column (``t_started + step``); False leaves it out.
        layout: How per-step values of one or more dimensions are laid out: ``"rllib"``
            (Ray Data tensor extension), ``"lists"``, ``"fast"`` or ``"auto"`` (module
            docstring); 1-D columns are plain columns whatever the layout.

    Returns:
        One row per transition: ids, ``obs``, ``actions``, ``rewards`` (float64),
        ``new_obs``, flags (set on each episode's last row), ``t``, extras and ``infos``
        (JSON text, when any episode has infos).

    Raises:
        SchemaError: An unknown ``layout``; episodes whose extra columns, per-step shapes or
            observation leaves differ; an extra column named like a row-layout column.
    """
    layout = _layout(layout)
    episodes = list(episodes)
    if not episodes:
        return _empty_table(with_t)
    first = episodes[0]
    extra_names = list(first.extras)
    for ep in episodes:
        if set(ep.extras) != set(extra_names):
            raise SchemaError(
                f"extra columns {sorted(ep.extras)} differ from the first episode's "
                f"{sorted(extra_names)}",
                Where(episode_id=ep.id),
            )
    clash = set(extra_names) & set(_FIXED)
    if clash:
        raise SchemaError(
            f"extra columns {sorted(clash)} collide with row-layout columns",
            Where(column=sorted(clash)[0], episode_id=first.id),
        )

    lengths = np.array([len(e) for e in episodes], dtype=np.int64)
    n_rows = int(lengths.sum())
    row_start = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    obs, new_obs = _obs_columns(episodes, lengths)

    last_row = (row_start + lengths - 1)[lengths > 0]
    terminated = np.array([e.terminated for e in episodes], dtype=bool)[lengths > 0]
    truncated = np.array([e.truncated for e in episodes], dtype=bool)[lengths > 0]
    terminateds = np.zeros(n_rows, dtype=bool)
    terminateds[last_row] = terminated
    truncateds = np.zeros(n_rows, dtype=bool)
    truncateds[last_row] = truncated

    cols: list[tuple[pa.Field, pa.Array]] = [
        (pa.field(C.EPS_ID, pa.string()), _ids([e.id for e in episodes], lengths)),
    ]
    for name, attr in ((C.AGENT_ID, "agent_id"), (C.MODULE_ID, "module_id")):
        arr = _ids([getattr(e, attr) for e in episodes], lengths)
        cols.append((pa.field(name, arr.type), arr))
    cols.extend(_obs_fields(C.OBS, obs, layout))
    actions = _concat(episodes, C.ACTIONS, lambda e: e.actions)
    cols.append(_column(C.ACTIONS, actions, layout))
    rewards = _concat(episodes, C.REWARDS, lambda e: e.rewards).astype(np.float64, copy=False)
    cols.append(_column(C.REWARDS, rewards))
    cols.extend(_obs_fields(C.NEW_OBS, new_obs, layout))
    cols.append(_column(C.TERMINATEDS, terminateds))
    cols.append(_column(C.TRUNCATEDS, truncateds))
    if with_t:
        t_started = np.array([e.t_started for e in episodes], dtype=np.int64)
        t = np.arange(n_rows, dtype=np.int64) + np.repeat(t_started - row_start, lengths)
        cols.append(_column(C.T, t))
    for name in extra_names:
        extra = _concat(episodes, name, lambda e, n=name: e.extras[n])
        cols.append(_column(name, extra, layout))
    if any(e.infos is not None for e in episodes):
        cols.append((pa.field(C.INFOS, pa.string()), _infos(episodes)))
    schema = pa.schema([f for f, _ in cols])
    return pa.Table.from_arrays([a for _, a in cols], schema=schema)


def write_rows(
    episodes: Sequence[Episode],
    path: str | os.PathLike[str],
    *,
    with_t: bool = True,
    layout: Layout = "rllib",
) -> str:
    """Writes :func:`episodes_to_rows` to one Parquet file (parent folders are created); on an
    object store (a URI) as one object, whole once written.

    Args:
        episodes: The episodes to write (see :func:`episodes_to_rows`).
        path: The file's local path or store URI; an existing file is overwritten.
        with_t: Write the ``t`` column.
        layout: How per-step values of one or more dimensions are laid out: ``"rllib"``
            (Ray Data tensor extension), ``"lists"``, ``"fast"`` or ``"auto"`` (module
            docstring); 1-D columns are plain columns whatever the layout.

    Returns:
        ``path`` as given (as a str).

    Raises:
        SchemaError: The episodes cannot be laid out as rows (see :func:`episodes_to_rows`).
        StorageError: The store refused the write.
    """
    table = episodes_to_rows(episodes, with_t=with_t, layout=layout)
    return write_parquet(table, path)


def write_parquet(table: pa.Table, path: str | os.PathLike[str]) -> str:
    """Writes ``table`` as one Parquet file at ``path``, a local path (parent folders are
    created) or a store's URI (one object); returns the path as given.

    Args:
        table: The table to write; columns :func:`parquet_dictionary_columns` picks are
            dictionary-encoded.
        path: The file's local path or store URI; an existing file is overwritten.

    Returns:
        ``path`` as given (as a str).

    Raises:
        StorageError: The store refused the write (denied, no such bucket, unreachable).
    """
    from ...stores import is_remote, locate, storage_error

    path = os.fspath(path)
    dictionary = parquet_dictionary_columns(table.schema)
    if is_remote(path):
        at = locate(path)
        try:
            with at.open_output_stream() as sink:
                pq.write_table(table, sink, use_dictionary=dictionary)
        except OSError as e:
            raise storage_error(e, at) from None
        return path
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    pq.write_table(table, path, use_dictionary=dictionary)
    return path
