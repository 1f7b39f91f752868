"""The ``rows`` reader: one transition per row -> episodes, grouped and ordered with numpy.

A batch (an Arrow table or a dict of numpy columns) becomes episodes in a handful of array passes:

1. **Key.** Rows are factorized by episode id, plus agent id where it is set (one episode per
   ``(eps_id, agent_id)``; ``Episode.id`` is the eps_id, ``Episode.agent_id`` the agent).
   Schemas without an episode id (D4RL-style) split the rows at ``terminateds | truncateds`` in
   row order, with ids ``"<source or 'batch'>:<k>"``, ``k`` counting that source's episodes.
2. **Order.** With a ``t`` column, rows are stably sorted by (key, t) and ``t`` must go up by
   exactly 1 within an episode; ``t_started`` is the first ``t``. Without ``t`` (RLlib's recorder
   writes none) the row order within an episode is the step order. Either way, with
   ``check_continuity`` each step's ``new_obs`` must equal the next step's ``obs`` (with ``t``:
   ``new_obs[t] == obs[t+1]``), so a scrambled episode, or a ``t`` that contradicts the recorded
   transitions, is an error rather than silent garbage.
3. **Duplicates.** Copies of rows *within the batch* (both copies of an episode in one batch: two
   files holding it merged into one batch, a file written or listed twice) are dropped before
   the checks and counted in ``ledger.rows_duplicate`` / ``episodes_duplicate``, as if each copy
   had come in its own batch (copies across batches are the Deduplicator's). Rows are copies when
   every column the episode is built from is equal (obs, new_obs, actions, rewards, flags,
   extras, module id, infos; bytes compared, NaN equals NaN); the first in batch order is kept.
   With ``t``: rows of one key and one ``t``. The same key and ``t`` with different content is a
   conflict, not a copy: the episode fails with ``t_not_consecutive`` ("t=.. appears twice ...
   with different content", naming both rows). Without ``t``: only a whole repetition is
   recognised -- the key's first done flag before its last row ends the first copy, and every
   later row equals its counterpart in that copy (full copies back to back, possibly ending in a
   partial one). Not recognised, and failing as before (``done_mid_episode`` / ``discontinuous``):
   a repeated not-done fragment (no done flag marks where it repeats), a copy that differs
   anywhere, a copy of rows read in an earlier batch; without an episode id (split at done
   flags) a repeated episode is a new episode. A copy of a bad episode is still a duplicate
   (the one left is rejected), but rows that fail conversion reject every row of their episode,
   copies included (conversion comes first). Cost on clean data: one compare of ``t`` (or one
   pass over the done flags) in grouped order; see :mod:`.duplicates`.
4. **Episodes.** The observations of all episodes are scattered once into one
   ``[rows + episodes, ...]`` array (each episode's rows' ``obs``, then its last ``new_obs``); every
   episode's columns are views. ``terminated`` / ``truncated`` come from the last row (both set:
   terminated wins, a terminal state needs no bootstrap); a done flag on another row is an error.

**Streams.** The reader keeps state across calls (it lives in a Ray actor). Without ``t``, an
episode that ended not done continues in a later batch: ``t_started`` counts on and (with
``check_continuity``) its first ``obs`` must equal the last ``new_obs`` seen. Only pending episodes
are kept (key -> next t and last observation; :mod:`.open_episodes` keeps them, and the held
rows below); done episodes leave. Fragments read by *different*
readers cannot be stitched here: give the data a ``t`` column (the buffer stitches by ``t``).

**Rows with observations only** (schema ``"next_obs_from": "next_row"``, presets ``lerobot`` and
``rllib_obs_only``): there is no ``new_obs`` column; a step's next observation is the next row's
``obs`` in the same episode (``t`` order, else row order), settled by position once the rows are
grouped -- no shifted copy of the observations is made (the episode's observations are its rows'
obs, the final one ``obs[last row]``), and there is nothing to check for continuity. The last row
follows D4RL's ``qlearning_dataset`` (which skips a timeout row and keeps a terminal one):

* terminated: ``L`` rows give ``L`` steps; the last step's next observation, never bootstrapped
  from, is stored as a copy of the last row's obs;
* truncated: ``L - 1`` steps; the last row's obs is the final observation, its action and reward
  are not used: counted ``rows_rejected["next_obs_unknown"]`` (never raised, not quarantined; a
  1-row truncated episode is rejected whole under that reason);
* open (no flag at the end of a batch): ``L - 1`` steps, and the last row is *held*: it leads the
  next batch, where its episode's next rows give it its next observation (a 1-row open episode
  emits nothing yet). Held rows are counted in the batch they came in, as kept, under
  ``ledger.rows_held``; the batch that takes them counts ``rows_held`` down and the rows with
  their episode (kept, rejected or duplicate), so every batch balances and, summed over a stream,
  ``rows_held`` is the rows still waiting (their episodes are in :attr:`RowsReader.pending`; if
  the data ends there, their action and reward are never used -- D4RL drops that step too --
  and :meth:`RowsReader.finish` moves them to ``next_obs_unknown``). Errors
  on a held row name no row (it is not in the batch read). A later batch with other columns, or
  column types Arrow cannot unify, is refused in one line (the held rows stay held).

Fragments stitch as the rows' fragments do: the fragment before a cut ends at the held row's
``obs`` and ``t``, the next one starts with the held row, so :meth:`EpisodeColumns.join_fragments`
and the buffer join them. The held row lives in this reader: fragments of one episode read by
*different* readers (Ray Data blocks spread over actors) lose the step across the cut -- the
first fragment stays open, the second starts one ``t`` later and they do not join; nothing wrong
is emitted, but read each episode's rows in one stream (the batch job's units do: all rows of an
episode reach one prelearner, in file order).

Struct ``obs`` / ``new_obs`` columns (gymnasium Dict / Tuple spaces, nested) are read leaf by leaf
(:mod:`..composite`) into one record array per batch (a field per leaf path): the columns' composite
layout, whose episode views hold ``{leaf path: array}`` maps.

Every batch's episodes are one :class:`EpisodeColumns`. Unmapped columns become per-step
``extras``; a mapped ``infos`` column becomes each episode's ``[{}] + row infos``. Under
``on_invalid="skip"``/``"quarantine"`` a bad episode is rejected whole (its rows as payload) and
counted, so ``rows_in == kept + rejected + duplicate``; under ``"raise"`` the first
:class:`~offline_prelearner.errors.DataError` propagates naming file, column, episode id and row
(the row's index in the batch given to :meth:`RowsReader.read`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from ....config import ReadConfig
from ....episodes import columns as C
from ....episodes.episode import Episode
from ....episodes.episode_columns import EpisodeColumns
from ....episodes.ledger import EpisodeBatch
from ....errors import ConfigError, DataError, EpisodeValidationError, Where
from ...arrow_numpy import ColumnValueError
from ...schema import ColumnSchema, load_schema
from .decode import RowDecoder
from .duplicates import find_duplicates
from .frame import (
    ColumnBatch,
    Groups,
    Keys,
    Verdicts,
    assemble_observations,
    factorize,
    rows_differ,
)
from .open_episodes import OpenEpisodes
from .row_arrays import RowColumns, factorize_column, locate

__all__ = ["RowsReader"]

_NEEDED = (C.OBS, C.NEW_OBS, C.ACTIONS, C.REWARDS)


class RowsReader:
    """Reads row batches into episodes; see the module docstring for the semantics.

    Args:
        config: The read settings (``schema``, ``on_invalid``, ``legacy_pickle``, ``limits``...);
            None means the defaults (format ``rows``).

    Raises:
        ConfigError: The schema maps no column for ``obs``, ``actions``, ``rewards`` or (unless
            ``next_obs_from: next_row``) ``new_obs``.
    """

    def __init__(self, config: ReadConfig | None = None) -> None:
        self.config = config if config is not None else ReadConfig()
        schema = load_schema(self.config.schema)
        #: ``next_obs_from: next_row``: no new_obs column, the next row's obs is the next one.
        self._next_row = schema.next_obs_from_next_row
        needed = tuple(f for f in _NEEDED if not (self._next_row and f == C.NEW_OBS))
        unmapped = [f for f in needed if schema.column(f) is None]
        if unmapped:
            raise ConfigError(
                f"schema {schema.name!r} maps no column for {unmapped}; the rows "
                f"reader needs {list(needed)}"
            )
        required = tuple(dict.fromkeys((*schema.required, *needed)))
        #: Reads the batches' columns into arrays (and owns the schema, which learns packed
        #: columns from the data).
        self._decoder = RowDecoder(
            dataclasses.replace(schema, required=required), self.config.limits, self._next_row
        )
        #: What the stream leaves open between batches: pending episodes, held rows.
        self._open = OpenEpisodes(self.schema.column(C.OBS))
        self._split_next: dict[str, int] = {}  # source -> number of its open episode (no eps_id)

    @property
    def schema(self) -> ColumnSchema:
        """The column mapping in use (with the packed columns recognised in the data so far)."""
        return self._decoder.schema

    @property
    def detected_packed(self) -> list[str]:
        """Columns recognised as RLlib's packed layout (``output_compress_columns``) in the data."""
        return self._decoder.detected_packed

    @property
    def pending(self) -> Mapping[tuple[Any, Any], Any]:
        """Episodes that ended not done, awaiting their continuation (a copy). With
        ``next_obs_from: next_row`` this includes every episode whose last row is held."""
        return self._open.pending

    # ------------------------------------------------------------------ entry point
    def read(
        self, batch: pa.Table | Mapping[str, np.ndarray], source: str | None = None
    ) -> EpisodeBatch:
        """Turns one batch of rows into episodes; every row ends up kept or rejected.

        The reader is stateful across calls: episodes left open (not done, data without ``t``)
        and held rows (``next_obs_from: next_row``) continue in the next batch.

        Args:
            batch: One batch of transition rows: an Arrow table / record batch or a dict of
                numpy columns, mapped to fields by ``config.schema``.
            source: The file named in errors and used to number its episodes when rows carry
                no episode id; None when unknown.

        Returns:
            The batch's episodes; rejected, duplicate and held rows are in the ledger.

        Raises:
            SchemaError: ``batch`` is not a table or dict of equal-length columns (under
                every policy).
            DecodeError: A compressed column is present and ``legacy_pickle`` is off (a
                configuration problem: under every policy).
            DataError: A row or episode is refused and ``config.on_invalid`` is ``"raise"``.
        """
        out = EpisodeBatch()
        frame = ColumnBatch(batch, source)
        out.ledger.rows_in += frame.num_rows
        if frame.num_rows == 0:
            return out
        self._decoder.detect_packed(batch)
        # A configuration problem, not bad data: raised under every policy.
        self.schema.check_codecs(self.config.legacy_pickle, frame.names, source)
        carried = 0
        if self._open.holds_rows:  # next_row: held rows lead this batch (counted down here)
            try:
                self.schema.check(frame.names, source)  # a batch refused: held rows stay held
                frame, carried = self._open.carry_in(frame, source)
            except DataError as e:
                self._reject(out, e, frame, np.arange(frame.num_rows))
                return out
            out.ledger.rows_held -= carried
            out.sync()
        # Batch row of each frame row; rows carried from the previous batch are negative.
        rows = np.arange(-carried, frame.num_rows - carried, dtype=np.int64)
        try:
            self.schema.check(frame.names, source)
            keys = self._keys(frame, source)
        except DataError as e:
            whole = np.arange(frame.num_rows)
            self._reject(out, locate(e, source, rows), frame, whole)  # the whole batch
            return out
        codes = keys.codes
        while True:  # each pass drops every episode a failing column names; few passes
            try:
                cols = self._decoder.columns(frame, source)
                break
            except ColumnValueError as e:
                if e.rows is None or len(e.rows) == 0:
                    self._reject(out, locate(e, source, rows), frame, np.arange(len(rows)))
                    return out
                bad = np.isin(codes, codes[e.rows])
                self._reject_groups(out, e, frame, rows, codes, bad, e.rows, keys, source)
                frame, rows, codes = frame.filter(~bad), rows[~bad], codes[~bad]
                if len(rows) == 0:
                    return out
        frame, cols, rows, gr = self._drop_duplicates(out, frame, cols, rows, codes, keys)
        self._build(out, frame, cols, rows, gr, source)
        return out

    # ------------------------------------------------------------------ columns
    def _keys(self, frame: ColumnBatch, source: str | None) -> Keys:
        eps_col = self.schema.present(C.EPS_ID, frame.names)
        if eps_col is None:  # no episode id: split at the done flags, in row order
            term, trunc = self._decoder.flags(frame, source)
            done = term | trunc
            seg = np.zeros(len(done), np.int64)
            np.cumsum(done[:-1], out=seg[1:])
            src = source or "batch"
            k0 = self._split_next.get(src, 0)
            self._split_next[src] = k0 + int(np.count_nonzero(done))
            n = int(seg[-1]) + 1
            return Keys(seg, [f"{src}:{k0 + i}" for i in range(n)], [None] * n)
        ecodes, eids = factorize_column(frame, eps_col, source)
        agent_col = self.schema.present(C.AGENT_ID, frame.names)
        acodes, aids = factorize_column(frame, agent_col, source) if agent_col else (None, [None])
        if acodes is None or aids == [None]:
            return Keys(ecodes, eids, [None] * len(eids))
        codes, combined = factorize(ecodes * len(aids) + acodes)
        na = len(aids)
        return Keys(codes, [eids[c // na] for c in combined], [aids[c % na] for c in combined])

    # ------------------------------------------------------------------ rejection
    def _reject(
        self, out: EpisodeBatch, err: DataError, frame: ColumnBatch, members: np.ndarray
    ) -> None:
        payload = frame.take(members) if self.config.on_invalid == "quarantine" else None
        out.reject(err, len(members), payload, policy=self.config.on_invalid)

    def _reject_groups(
        self,
        out: EpisodeBatch,
        err: DataError,
        frame: ColumnBatch,
        rows: np.ndarray,
        codes: np.ndarray,
        bad: np.ndarray,
        bad_rows: np.ndarray,
        keys: Keys,
        source: str | None,
    ) -> None:
        """Rejects, one by one, the episodes (codes) holding the offending ``bad_rows``."""
        u, first = np.unique(codes[bad_rows], return_index=True)
        first_row = dict(zip(u.tolist(), bad_rows[first].tolist(), strict=True))
        idx = np.flatnonzero(bad)
        idx = idx[np.argsort(codes[idx], kind="stable")]
        for members in np.split(idx, np.flatnonzero(np.diff(codes[idx])) + 1):
            code = int(codes[members[0]])
            eid = keys.ids[code]
            e = locate(err, source, rows, episode_id=eid, row=first_row[code])
            self._reject(out, e, frame, members)
            if self.schema.present(C.T, frame.names) is None:  # streams are tracked without t
                key = (eid, keys.agents[code])
                if self._ends_done(frame, int(members[-1]), source):
                    self._open.close(key)
                else:
                    self._open.poison(key)

    def _ends_done(self, frame: ColumnBatch, row: int, source: str | None) -> bool:
        """Whether ``row`` carries a done flag (False when the flags themselves are unreadable)."""
        try:
            term, trunc = self._decoder.flags(frame, source)
        except DataError:
            return False
        return bool(term[row] or trunc[row])

    # ------------------------------------------------------------------ episodes
    @staticmethod
    def _drop_duplicates(
        out: EpisodeBatch,
        frame: ColumnBatch,
        c: RowColumns,
        rows: np.ndarray,
        codes: np.ndarray,
        keys: Keys,
    ) -> tuple[ColumnBatch, RowColumns, np.ndarray, Groups]:
        """Groups the rows into episodes; copies of rows within the batch (see
        :mod:`.duplicates`) are dropped from the frame first and counted as duplicates."""
        gr = Groups.of(codes, c.t, rows, keys)
        done = c.term | c.trunc if c.t is None else None
        dup = find_duplicates(gr, c.content(), done, c.t, c.infos)
        if dup is None:
            return frame, c, rows, gr
        keep = np.ones(len(rows), bool)
        keep[dup.rows] = False
        out.ledger.rows_duplicate += len(dup.rows)
        out.ledger.episodes_duplicate += dup.episodes
        c, rows = c.select(keep), rows[keep]
        return frame.filter(keep), c, rows, Groups.of(codes[keep], c.t, rows, keys)

    def _build(
        self,
        out: EpisodeBatch,
        frame: ColumnBatch,
        c: RowColumns,
        rows: np.ndarray,
        gr: Groups,
        source: str | None,
    ) -> None:
        v = Verdicts(gr, source, raise_now=self.config.on_invalid == "raise")
        t_started = self._check(gr, c, v, frame.names)
        if c.t is None and self._open.has_pending:
            self._open.resume(gr, c.obs, v, t_started, self.config.check_continuity)
        g, n_ep, last = gr.g, len(gr.starts), gr.last
        term = c.term[last]
        length = gr.ends - gr.starts
        # Rows without a next-observation column: an episode not terminated keeps its last row
        # only as its final observation (truncated: the row's action and reward go unused; open:
        # the row waits for the next batch). Its final observation is obs[last] either way.
        cut = ~term if self._next_row else None
        if cut is not None:
            length = length - cut
        # Rows already in episode order: the episodes' observations are the rows' own obs plus
        # each last row's new_obs (split observations: no frame is copied here).
        split = gr.perm is None
        cols = EpisodeColumns(
            obs=c.obs if split else assemble_observations(gr, c.obs, c.new_obs),
            last_obs=c.new_obs[last] if split else None,
            actions=g(c.actions),
            rewards=g(c.rewards),
            extras={k: g(x) for k, x in c.extras.items()},
            obs_at=gr.starts + np.arange(n_ep, dtype=np.int64),
            step_at=gr.starts,
            length=length,
            t_started=t_started,
            terminated=term,
            truncated=c.trunc[last] & ~term,  # both set: terminated wins
            ids=gr.ids,
            agents=gr.agents,
            modules=c.module[gr.first].tolist() if c.module is not None else [None] * n_ep,
        )
        if c.infos is not None:
            cols = dataclasses.replace(cols, infos=_episode_infos(c.infos, gr.perm, cols))
        good = np.ones(n_ep, bool)
        good[list(v.bad)] = False
        empty = length == 0  # a 1-row episode cut to no step (next_row only)
        # Shared arrays: what the vector checks above do not cover (dtypes, object columns) is
        # the same for every episode, so one episode through the checking constructor covers
        # all (each is tried in turn until one passes).
        for e in np.flatnonzero(good & ~empty).tolist():
            err = _construct_error(cols, e)
            if err is None:
                break
            v.record(e, locate(err, source, rows, gr.ids[e], int(gr.first[e])))
            good[e] = False
        keep = good & ~empty
        out.add(cols if keep.all() else cols.select(keep))
        for e in sorted(v.bad):
            pos = np.arange(gr.starts[e], gr.ends[e])
            self._reject(out, v.bad[e], frame, pos if gr.perm is None else gr.perm[pos])
        if cut is not None:
            self._cut_last_rows(out, frame, cols, gr, rows, good, source)
        if c.t is None:
            self._open.track(cols, good)

    def _cut_last_rows(
        self,
        out: EpisodeBatch,
        frame: ColumnBatch,
        cols: EpisodeColumns,
        gr: Groups,
        rows: np.ndarray,
        good: np.ndarray,
        source: str | None,
    ) -> None:
        """``next_obs_from: next_row``: the last rows of good episodes that are not terminated.

        Truncated: the row's action and reward are not used (counted rejected,
        ``next_obs_unknown``, never raised; its episode too when it had no other row). Open: the
        row is held for the next batch (``rows_held``), where it leads its episode's next rows.
        """
        trunc_col = self.schema.column(C.TRUNCATEDS)
        for e in np.flatnonzero(good & cols.truncated).tolist():  # one per truncated episode
            row = rows[int(gr.last[e])]
            err = DataError(
                "the episode ends truncated and the data has no next-observation column: its "
                "last row's obs is the episode's final observation, its action and reward are "
                "not used",
                Where(
                    file=source,
                    column=trunc_col,
                    episode_id=gr.ids[e],
                    row=int(row) if row >= 0 else None,
                ),
                reason="next_obs_unknown",
            )
            out.reject(err, 1, episodes=int(cols.length[e] == 0), policy="skip")
        hold = np.flatnonzero(good & ~cols.done)
        members = gr.last[hold]
        keys = [(gr.ids[e], gr.agents[e]) for e in hold.tolist()]
        self._open.hold(frame, members, keys, rows[members], cols.length[hold] == 0, source)
        out.ledger.rows_held += len(hold)
        out.sync()

    def finish(self) -> EpisodeBatch:
        """The end of the stream: rows still held will get no next observation.

        ``next_obs_from: next_row`` only (otherwise an empty batch). Each held row -- the last row
        of an episode that never ended -- leaves ``rows_held`` for ``rows_rejected``, reason
        ``next_obs_unknown`` (as D4RL drops an open end's last step; never raised), naming its
        file, episode and row; its episode is counted rejected too when the row was all of it.
        The fragments before it were handed over already (they end at its observation). The
        reader then holds nothing; its episodes are no longer pending.
        """
        return self._open.finish()

    def _check(self, gr: Groups, c: RowColumns, v: Verdicts, names: list[str]) -> np.ndarray:
        """Row-level contracts, vectorized; returns ``t_started`` per episode."""
        s, g = self.schema, gr.g
        if s.present(C.EPS_ID, names):
            null = np.array([i is None for i in gr.ids], bool)
            v.flag(gr.starts[null], "episode id is null", s.column(C.EPS_ID), reason="null_id")
        t_started = np.zeros(len(gr.starts), np.int64)
        if c.t is not None:
            ts = g(c.t)
            t_col = s.column(C.T)
            gap = np.flatnonzero(gr.same_next & (np.diff(ts) != 1)) + 1
            v.flag(
                gap,
                lambda p: (
                    f"t={ts[p]} appears twice in this episode with different content (also at "
                    f"row {gr.pos_rows[p - 1]}; identical copies are dropped as duplicates)"
                    if ts[p] == ts[p - 1]
                    else f"t jumps from {ts[p - 1]} to {ts[p]}; rows need consecutive t"
                ),
                t_col,
                ts,
                reason="t_not_consecutive",
            )
            t_started = ts[gr.starts].astype(np.int64)
            v.flag(
                gr.starts[t_started < 0],
                lambda p: f"t must be >= 0, found {ts[p]}",
                t_col,
                ts,
                reason="bad_t",
            )
        not_last = np.ones(len(gr.ep_of), bool)
        not_last[gr.ends - 1] = False
        for flags, col in (
            (c.term, s.column(C.TERMINATEDS) or s.dones),
            (c.trunc, s.column(C.TRUNCATEDS)),
        ):
            v.flag(
                np.flatnonzero(g(flags) & not_last),
                lambda p: (
                    f"row is marked done but is not its episode's last row "
                    f"({gr.ends[gr.ep_of[p]] - 1 - p} more rows follow, and they are not a "
                    f"copy of the rows up to it)"
                ),
                col,
                reason="done_mid_episode",
            )
        if self.config.check_continuity and len(gr.ep_of) > 1 and not self._next_row:
            # Only pairs within an episode are compared (episode boundaries masked out); with
            # t, only consecutive steps (a gap is flagged above): new_obs[t] == obs[t+1].
            pairs = gr.same_next if c.t is None else gr.same_next & (np.diff(g(c.t)) == 1)
            p = gr.perm
            if p is None:  # grouped: the two sides are views, new_obs[:-1] vs obs[1:]
                broken = rows_differ(c.new_obs[:-1], c.obs[1:], where=pairs)
            else:
                broken = rows_differ(c.new_obs, c.obs, p[:-1], p[1:], where=pairs)
            v.flag(
                np.flatnonzero(broken) + 1,
                "row's obs differs from the previous row's new_obs: this episode's rows are out "
                "of order or missing (without a t column, row order is step order)"
                if c.t is None
                else "row's obs differs from new_obs of the step before (t - 1): the t column "
                "contradicts the recorded transitions",
                s.column(C.OBS),
                reason="discontinuous",
            )
        return t_started


def _construct_error(cols: EpisodeColumns, e: int) -> EpisodeValidationError | None:
    """What the checking :class:`Episode` constructor says about episode ``e`` (None: it passes)."""
    ep = cols.episode(e)
    try:
        Episode(**{k: getattr(ep, k) for k in Episode.__slots__})
    except EpisodeValidationError as err:
        return err
    return None


def _episode_infos(
    infos: list[Any], perm: np.ndarray | None, cols: EpisodeColumns
) -> list[list[Any] | None]:
    """Per episode, RLlib's ``length + 1`` info dicts (an empty reset info first) from the rows'
    infos (Python objects: one per row by nature)."""
    if perm is not None:
        infos = [infos[i] for i in perm.tolist()]
    spans = zip(cols.step_at.tolist(), cols.length.tolist(), strict=True)
    return [[{}, *(i or {} for i in infos[s : s + n])] for s, n in spans]
