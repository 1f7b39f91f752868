"""Decoding a batch of msgpack episode records with numpy: match learned layouts, check, build.

:func:`decode_batch` works in three steps, each over the whole batch:

1. **Match.** Each :class:`~.scanner.Program` the scanner learned (a record's bytes with the
   varying parts cut out) is matched against every record at once: its literal bytes are compared
   as a ``[records, length]`` matrix, list headers, scalars and flags are parsed with lookup tables,
   and positions advance as vectors. Records no program matches are walked one by one by the
   scanner (which learns their layout for the next batch).
2. **Check.** Every per-step list of every record is gathered into one ``[elements, size]`` byte
   matrix per template and compared with the template's prefix; payloads are cut out and viewed as
   the template's dtype. Lengths, flags and ``t`` are checked as vectors too: a record passes only
   if :meth:`Episode._from_parts` would accept it.
3. **Build.** The records a program matched become one
   :class:`~offline_prelearner.episodes.episode_columns.EpisodeColumns` (its observations are the
   program's observation values as they lie; step columns are gathered once, without lookback).
   The first record of each layout goes through the full constructor, so everything that is the
   same for all records of a layout (dtypes, shapes) is checked by the real invariants.

Records that fail any check come back as :class:`~.layout.Fallback`: the reader decodes
them with the general path, which gives the definitive episode or error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ....episodes.episode import Episode
from ....episodes.episode_columns import EpisodeColumns
from .layout import (
    EMPTY_MAP,
    ArrayHint,
    Fallback,
    Template,
    be_uint,
    gather,
    ints_at,
    scalar,
)
from .layout import scalar_lengths as _scalar_lengths
from .scanner import DATA, EXTRA, FLAG_BYTE, SCALAR, SKIP, Column, EpisodeScanner, Plan, Program

__all__ = ["decode_batch"]

Result = Episode | Fallback | None
#: The records a program matched, as columns: their rows (ascending) and the columns.
Group = tuple[np.ndarray, EpisodeColumns]


@dataclass
class _Lists:
    """One per-step column (observations, an extra...) of many records, one template."""

    name: str
    extra: bool
    template: Template
    lookback: int
    first: np.ndarray  # position of each record's first element
    count: np.ndarray  # elements per record (lookback included)


def decode_batch(
    scanner: EpisodeScanner, buf: bytes, offsets: list[int], valid: np.ndarray
) -> tuple[list[Group], list[Result], dict[str, bytes]]:
    """The records of ``buf`` decoded: those a learned program matches as columns (one group
    per program), the others one by one.

    Args:
        scanner: The reader's scanner (its learned programs; it learns new ones here).
        buf: The batch's records, back to back.
        offsets: The ``n + 1`` record boundaries in ``buf``.
        valid: Per record, whether it is not null.

    Returns:
        The groups; per record an ``Episode`` or a ``Fallback`` (``None`` for invalid rows and
        rows a group holds); the space maps of the last record decoded here, for the reader's
        ``observation_space``/``action_space``.
    """
    n = len(offsets) - 1
    out: list[Result] = [None] * n
    groups: list[Group] = []
    data = np.frombuffer(buf, dtype=np.uint8)
    bounds = np.asarray(offsets, dtype=np.int64)
    todo = np.flatnonzero(valid[:n]) if n else np.zeros(0, np.int64)
    spaces: tuple[int, dict[str, bytes]] = (-1, {})
    tried: set[int] = set()
    plans: list[Plan] = []
    while len(todo):
        for prog in [p for p in scanner.programs if id(p) not in tried and len(data)]:
            tried.add(id(prog))
            matched = _match_program(
                prog, data, buf, bounds[todo], bounds[todo + 1], todo, out, groups
            )
            if len(matched):
                spaces = max(spaces, (int(matched[-1]), prog.spaces), key=lambda s: s[0])
                todo = todo[~np.isin(todo, matched)]
        if len(todo) == 0:
            break
        # A record of a layout not seen before: walk it (which learns its program), then match
        # the new program against the rest. Once no more programs can be learned, walk them all.
        learning = len(scanner.programs) < scanner.MAX_PROGRAMS
        walk, todo = (todo[:1], todo[1:]) if learning else (todo, todo[:0])
        for row in walk.tolist():
            try:
                plans.append(scanner.scan(buf, offsets[row], offsets[row + 1], row))
            except Fallback as fb:
                out[row] = fb
    for plan, result in zip(plans, _assemble(data, plans), strict=True):
        out[plan.row] = result
    last = max((p for p in plans if p.spaces), key=lambda p: p.row, default=None)
    if last is not None and last.row > spaces[0]:
        spaces = (last.row, last.spaces)
    return groups, out, spaces[1]


# --------------------------------------------------------------------------------------------
# 1. match a program against many records
# --------------------------------------------------------------------------------------------
def _literal(
    data: np.ndarray, pos: np.ndarray, ends: np.ndarray, alive: np.ndarray, literal: bytes
) -> np.ndarray:
    """``alive`` narrowed to the records that repeat ``literal`` at ``pos``."""
    if not literal:
        return alive
    lit = np.frombuffer(literal, dtype=np.uint8)
    ok = alive & (pos + len(lit) <= ends)
    mat = gather(data, pos, len(lit))
    if not np.array_equal(mat, np.broadcast_to(lit, mat.shape)):
        ok &= (mat == lit).all(axis=1)
    return ok


def _list_headers(
    data: np.ndarray, pos: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Position of the first element, element count, and where a list header is at ``pos``."""
    c = data[np.minimum(pos, len(data) - 1)].astype(np.int64)
    fix = (c >= 0x90) & (c <= 0x9F)
    a16, a32 = c == 0xDC, c == 0xDD
    count = np.where(fix, c & 0x0F, 0)
    if a16.any():
        count = np.where(a16, be_uint(data, pos + 1, 2), count)
    if a32.any():
        count = np.where(a32, be_uint(data, pos + 1, 4), count)
    header = np.where(fix, 1, np.where(a16, 3, 5))
    return pos + header, count, (fix | a16 | a32) & (pos + header <= ends)


def _array_records(
    data: np.ndarray, pos: np.ndarray, ends: np.ndarray, alive: np.ndarray, hint: ArrayHint
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``alive`` narrowed to the records holding an array record of ``hint``'s layout at
    ``pos``; where each one's payload starts, and its element count (the first dimension)."""
    alive = _literal(data, pos, ends, alive, hint.head)
    at = pos + len(hint.head)
    count, is_int = ints_at(data, at)
    length = _scalar_lengths(data, at)
    # a count above the record's bytes is no array of it (and could overflow count * size)
    alive &= is_int & (length > 0) & (count > 0) & (count <= ends - at)
    count = np.where(alive, count, 0)
    at = np.where(alive, at + length, ends)
    alive = _literal(data, at, ends, alive, hint.mid)
    at = at + len(hint.mid)
    c = data[np.minimum(at, len(data) - 1)].astype(np.int64)
    width = np.where(c == 0xC4, 1, np.where(c == 0xC5, 2, 4))
    nbytes = np.where(c == 0xC4, be_uint(data, at + 1, 1), 0)
    for code, w in ((0xC5, 2), (0xC6, 4)):
        if (c == code).any():
            nbytes = np.where(c == code, be_uint(data, at + 1, w), nbytes)
    alive &= (c >= 0xC4) & (c <= 0xC6) & (at + 1 + width <= ends)
    alive &= nbytes == count * hint.template.size
    return alive, at + 1 + width, np.where(alive, count, 0)


def _first_element_ok(
    data: np.ndarray, first: np.ndarray, ends: np.ndarray, tmpl: Template
) -> np.ndarray:
    ok = first + max(len(tmpl.prefix), 1) <= ends
    if len(tmpl.prefix):
        ok &= (gather(data, first, len(tmpl.prefix)) == tmpl.prefix_u8).all(axis=1)
    if tmpl.check is not None:
        ok &= tmpl.check(data[np.minimum(first, len(data) - 1)])
    return ok


def _flag_table(values: dict[int, bool]) -> np.ndarray:
    table = np.full(256, -1, dtype=np.int8)
    for byte, value in values.items():
        table[byte] = int(value)
    return table


def _match_program(
    prog: Program,
    data: np.ndarray,
    buf: bytes,
    starts: np.ndarray,
    ends: np.ndarray,
    rows: np.ndarray,
    out: list[Result],
    groups: list[Group],
) -> np.ndarray:
    """Matches ``prog`` against records ``rows``; adds their group (``Fallback`` in ``out`` for
    those that fail a check); returns those matched."""
    pos = starts.copy()
    alive = np.ones(len(rows), dtype=bool)
    scalars: dict[str, np.ndarray] = {}
    flags: dict[str, np.ndarray] = {}
    lists: list[_Lists] = []
    for literal, op, arg, lookback, hint in prog.steps:
        alive = _literal(data, pos, ends, alive, literal)
        pos = pos + len(literal)
        if op in (DATA, EXTRA):
            if hint is None:  # learned from an unusual array record or decoded infos
                return np.zeros(0, dtype=np.int64)
            if isinstance(hint, ArrayHint):  # a finalized buffer: one array record
                alive, first, count = _array_records(data, pos, ends, alive, hint)
                tmpl = hint.template
            else:
                first, count, ok = _list_headers(data, pos, ends)
                alive &= ok & (count > 0) & _first_element_ok(data, first, ends, hint)
                tmpl = hint
            stop = first + count * tmpl.size
            alive &= stop <= ends
            lists.append(_Lists(arg, op == EXTRA, tmpl, lookback, first, count))
            pos = np.where(alive, stop, ends)
        elif op in (SCALAR, SKIP):
            length = _scalar_lengths(data, pos)
            alive &= (length > 0) & (pos + length <= ends)
            if op == SCALAR:
                scalars[arg] = pos
            pos = np.where(alive, pos + length, ends)
        elif op == FLAG_BYTE:
            value = _flag_table(hint)[data[np.minimum(pos, len(data) - 1)]]
            alive &= (value >= 0) & (pos < ends)
            flags[arg[0]] = value == 1
            pos = pos + 1
        else:  # a flag in an unusual encoding: decoded one by one, by the scanner
            return np.zeros(0, dtype=np.int64)
        if not alive.any():
            return np.zeros(0, dtype=np.int64)
    alive = _literal(data, pos, ends, alive, prog.tail)
    alive &= pos + len(prog.tail) == ends
    keep = np.flatnonzero(alive)
    if len(keep) == 0:
        return keep
    sub = [
        _Lists(c.name, c.extra, c.template, c.lookback, c.first[keep], c.count[keep]) for c in lists
    ]
    _build_matched(
        data,
        buf,
        rows[keep],
        {k: v[keep] for k, v in scalars.items()},
        {k: v[keep] for k, v in flags.items()},
        sub,
        out,
        groups,
    )
    return rows[keep]


# --------------------------------------------------------------------------------------------
# 2 + 3. check lists and invariants as vectors, build episodes
# --------------------------------------------------------------------------------------------
def _split(
    data: np.ndarray, tmpl: Template, first: np.ndarray, count: np.ndarray
) -> tuple[np.ndarray | None, list[int], np.ndarray]:
    """All elements of many lists of one template: values, per-list offsets, and which lists
    hold an element that is not of the template (indices into ``first``)."""
    m = len(first)
    offsets = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(count, out=offsets[1:])
    owner = np.repeat(np.arange(m), count)
    starts = first[owner] + (np.arange(offsets[-1]) - offsets[owner]) * tmpl.size
    mat = gather(data, starts, tmpl.size)  # [elements, size], one gather
    bad_rows = tmpl.bad_rows(mat)
    bad = np.zeros(0, np.int64) if bad_rows is None else np.unique(owner[bad_rows])
    values = None if tmpl is EMPTY_MAP else tmpl.values(mat)
    return values, offsets.tolist(), bad


def _field_objects(
    buf: bytes, data: np.ndarray, pos: np.ndarray | None, m: int, ok: np.ndarray
) -> list[Any]:
    """Python values of the scalars at ``pos`` (all ``None`` for an absent field).

    Records whose value does not decode (bad UTF-8) are cleared from ``ok``.
    """
    objs: list[Any] = [None] * m
    if pos is None:
        return objs
    nil = data[np.minimum(pos, len(data) - 1)] == 0xC0
    at = pos.tolist()
    for j in np.flatnonzero(~nil).tolist():  # one per record: ids are strings
        try:
            objs[j] = scalar(buf, at[j])[0]
        except (UnicodeDecodeError, Fallback):
            ok[j] = False
    return objs


def _build_matched(
    data: np.ndarray,
    buf: bytes,
    rows: np.ndarray,
    scalars: dict[str, np.ndarray],
    flags: dict[str, np.ndarray],
    lists: list[_Lists],
    out: list[Result],
    groups: list[Group],
) -> None:
    m = len(rows)
    ok = np.ones(m, dtype=bool)
    ids = _field_objects(buf, data, scalars.get("id_"), m, ok)
    agents = _field_objects(buf, data, scalars.get("agent_id"), m, ok)
    modules = _field_objects(buf, data, scalars.get("module_id"), m, ok)
    row_list = rows.tolist()
    by_name = {("x:" if c.extra else "") + c.name: c for c in lists}
    core = [by_name.get(k) for k in ("observations", "actions", "rewards")]
    infos = by_name.get("infos")
    if any(c is None or c.template is EMPTY_MAP for c in core) or (
        infos is not None and infos.template is not EMPTY_MAP
    ):
        for j, row in enumerate(row_list):
            out[row] = Fallback(ids[j])
        return

    def steps(c: _Lists) -> np.ndarray:
        return np.asarray(np.maximum(c.count - c.lookback, 0))

    obs, act, rew = core
    assert obs is not None and act is not None and rew is not None
    n = steps(act)
    ok &= (steps(obs) == n + 1) & (steps(rew) == n)
    for c in lists:
        if c.extra:
            ok &= steps(c) == n
    term = flags.get("is_terminated", np.zeros(m, dtype=bool))
    trunc = flags.get("is_truncated", np.zeros(m, dtype=bool))
    ok &= ~(term & trunc)
    t0 = np.zeros(m, dtype=np.int64)
    if "t_started" in scalars:
        t0, is_int = ints_at(data, scalars["t_started"])
        nil = data[scalars["t_started"]] == 0xC0
        t0 = np.where(nil, 0, t0)
        ok &= (is_int & (t0 >= 0)) | nil
    if "t" in scalars:
        t_end, is_int = ints_at(data, scalars["t"])
        ok &= (is_int & (t_end == t0 + n)) | (data[scalars["t"]] == 0xC0)
    columns: dict[str, tuple[np.ndarray | None, list[int], int]] = {}
    for key, c in by_name.items():
        values, offs, bad = _split(data, c.template, c.first, c.count)
        ok[bad] = False
        columns[key] = (values, offs, c.lookback)
    extras = [(k[2:], columns[k]) for k in by_name if k.startswith("x:")]
    for j in np.flatnonzero(~ok).tolist():
        out[row_list[j]] = Fallback(ids[j])
    good = np.flatnonzero(ok)
    if not len(good):
        return
    j = int(good[0])

    def col(key: str) -> np.ndarray:
        values, offs, lb = columns[key]
        assert values is not None
        return values[offs[j] + lb : offs[j + 1]]

    try:  # the first episode of a layout meets every invariant of the real constructor
        Episode._from_parts(
            id=ids[j],
            observations=col("observations"),
            actions=col("actions"),
            rewards=col("rewards"),
            terminated=bool(term[j]),
            truncated=bool(trunc[j]),
            agent_id=agents[j],
            module_id=modules[j],
            t_started=int(t0[j]),
            t=None,
            infos=None,
            extras={name: col("x:" + name) for name, _ in extras},
        )
    except Exception:  # the layout itself is invalid: every record goes the general way
        for k, r in enumerate(row_list):
            out[r] = Fallback(ids[k])
        return
    length = n[good].astype(np.int64)
    step_at = np.zeros(len(good), np.int64)
    np.cumsum(length[:-1], out=step_at[1:])

    def steps_of(key: str) -> np.ndarray:  # one gather per column, lookback left out
        values, offs, lb = columns[key]
        assert values is not None
        first = np.asarray(offs[:-1], np.int64)[good] + lb
        return values[np.repeat(first - step_at, length) + np.arange(int(length.sum()))]

    obs_values, obs_offs, obs_lb = columns["observations"]
    assert obs_values is not None
    pick = good.tolist()
    groups.append(
        (
            rows[good],
            EpisodeColumns(
                obs=obs_values,  # as they lie: each record's observations after its lookback
                obs_at=np.asarray(obs_offs[:-1], np.int64)[good] + obs_lb,
                actions=steps_of("actions"),
                rewards=steps_of("rewards"),
                extras={name: steps_of("x:" + name) for name, _ in extras},
                step_at=step_at,
                length=length,
                t_started=t0[good],
                terminated=term[good],
                truncated=trunc[good],
                ids=[ids[k] for k in pick],
                agents=[agents[k] for k in pick],
                modules=[modules[k] for k in pick],
            ),
        )
    )


# --------------------------------------------------------------------------------------------
# records walked one by one
# --------------------------------------------------------------------------------------------
def _assemble(data: np.ndarray, plans: list[Plan]) -> list[Result]:
    """Checks the walked plans' lists (one numpy pass per template) and builds their episodes."""
    groups: dict[int, tuple[Template, list[tuple[int, Column]]]] = {}
    for i, plan in enumerate(plans):
        for cols in (plan.columns, plan.extras):
            for c in cols.values():
                if c.template is not None:
                    groups.setdefault(id(c.template), (c.template, []))[1].append((i, c))
    bad: set[int] = set()
    for tmpl, members in groups.values():
        first = np.array([c.pos for _, c in members], dtype=np.int64)
        count = np.array([c.count for _, c in members], dtype=np.int64)
        values, offs, bad_idx = _split(data, tmpl, first, count)
        bad.update(members[j][0] for j in bad_idx.tolist())
        if values is not None:
            for j, (_, c) in enumerate(members):
                c.values = values[offs[j] : offs[j + 1]]
    out: list[Result] = []
    for i, plan in enumerate(plans):
        if i in bad:
            out.append(Fallback(plan.fields.get("id_")))
            continue
        try:
            out.append(_build(plan))
        except Exception:  # an invalid episode: the general path raises the definitive error
            out.append(Fallback(plan.fields.get("id_")))
    return out


def _column_values(col: Column) -> Any:
    arr: Any
    if col.array is not None:
        arr = col.array
    elif col.items is not None:
        arr = col.items
    elif col.template is EMPTY_MAP:
        return None  # all infos empty: the episode keeps none
    else:
        arr = col.values
    return arr[col.lookback :] if col.lookback else arr


def _build(plan: Plan) -> Episode:
    f, cols = plan.fields, plan.columns
    for name in ("observations", "actions", "rewards"):
        if name not in cols or cols[name].template is EMPTY_MAP:
            raise Fallback(f.get("id_"))
    infos_col = cols.get("infos")
    return Episode._from_parts(
        id=f.get("id_"),
        observations=_column_values(cols["observations"]),
        actions=_column_values(cols["actions"]),
        rewards=_column_values(cols["rewards"]),
        terminated=bool(f.get("is_terminated", False)),
        truncated=bool(f.get("is_truncated", False)),
        agent_id=f.get("agent_id"),
        module_id=f.get("module_id"),
        t_started=f.get("t_started"),
        t=f.get("t"),
        infos=None if infos_col is None else _column_values(infos_col),
        extras={k: _column_values(c) for k, c in plan.extras.items()},
    )
