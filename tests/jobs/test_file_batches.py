"""The learner stream's own read (``jobs/file_batches.py``, ``ray.read="actor"``): batches of
real Parquet and JSON files, every row once and in order; the prefetch thread; and the learner
stream reading in its actors gives the same transitions as Ray Data's read."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.config import PreLearnerConfig
from offline_prelearner.errors import ConfigError, DataError
from offline_prelearner.jobs.file_batches import iter_file_batches, prefetch

ROWS = REPO / "datasets/cartpole-v1/rows"


def _write(folder: Path, sizes: list[int], row_group: int | None = None) -> list[str]:
    """Parquet files of ``sizes`` rows; column ``i`` numbers the rows across all files."""
    paths, at = [], 0
    for k, n in enumerate(sizes):
        path = folder / f"part-{k:03d}.parquet"
        table = pa.table({"i": np.arange(at, at + n, dtype=np.int64)})
        pq.write_table(table, path, row_group_size=row_group or max(n, 1))
        paths.append(str(path))
        at += n
    return paths


def _check(batches: list[tuple[pa.Table, str | None]], paths: list[str], step: int) -> None:
    got = np.concatenate([b.column("i").to_numpy() for b, _ in batches])
    assert (got == np.arange(len(got))).all()  # every row once, in file order
    starts = np.cumsum([0] + [pq.ParquetFile(p).metadata.num_rows for p in paths])
    for table, source in batches:
        i = table.column("i").to_numpy()
        files = set(np.searchsorted(starts, i, side="right") - 1)
        if source is not None:
            assert files == {paths.index(source)}
        else:
            assert len(files) > 1
        if len(files) == 1:  # one file's rows: equal batches nearest ``step``
            (f,) = files
            rows = int(starts[f + 1] - starts[f])
            if rows >= step // 2:
                k = max(1, round(rows / step))
                assert table.num_rows in (rows // k, -(-rows // k)) or table.num_rows < rows // k


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 900), min_size=1, max_size=8),
    step=st.integers(1, 700),
    row_group=st.sampled_from([None, 37, 256]),
)
def test_batches_hold_every_row_once_in_order(
    tmp_path_factory: Any, sizes: list[int], step: int, row_group: int | None
) -> None:
    paths = _write(tmp_path_factory.mktemp("files"), sizes, row_group)
    batches = list(iter_file_batches(paths, step))
    _check(batches, paths, step)
    assert sum(b.num_rows for b, _ in batches) == sum(sizes)
    # a batch never holds more than one and a half batches' rows (files >= half are cut equal)
    assert all(b.num_rows <= max(step * 3 // 2 + 1, step) for b, _ in batches)


def test_a_large_file_is_cut_into_equal_slices_and_small_files_are_gathered(
    tmp_path: Path,
) -> None:
    paths = _write(tmp_path, [5016, 10_000, 100, 100, 100, 3000])
    got = [(b.num_rows, s) for b, s in iter_file_batches(paths, 4096)]
    assert got[:3] == [(5016, paths[0]), (5000, paths[1]), (5000, paths[1])]
    # three small files (300 rows < half a batch) wait for the next; the 3000-row file stands alone
    assert got[3:] == [(300, None), (3000, paths[5])]


def test_json_lines_and_no_batch_size(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(f'{{"i": {i}}}\n' for i in range(10)))
    got = list(iter_file_batches([str(path)], 4))
    assert [b.num_rows for b, _ in got] == [5, 5]  # 10 rows at 4: two equal batches
    assert np.concatenate([b.column("i").to_numpy() for b, _ in got]).tolist() == list(range(10))
    whole = list(iter_file_batches(_write(tmp_path, [300, 200]), None))
    assert [b.num_rows for b, _ in whole] == [300, 200]


def test_an_unreadable_file_is_a_data_error_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "part-999.parquet"
    bad.write_bytes(b"PAR1 not really")
    paths = [*_write(tmp_path, [10]), str(bad)]
    with pytest.raises(DataError, match="cannot read the file") as e:
        list(iter_file_batches(paths, 4))
    assert e.value.where.file == str(bad)


def _new_read_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """The live reading threads (:func:`prefetch`'s) started since ``before`` was taken."""
    return [
        t
        for t in threading.enumerate()
        if t not in before and t.name == "offline-prelearner-read" and t.is_alive()
    ]


def test_prefetch_keeps_order_raises_in_place_and_stops_when_closed() -> None:
    assert list(prefetch(iter(range(50)))) == list(range(50))

    def failing() -> Any:
        yield 1
        raise DataError("boom")

    got = []
    with pytest.raises(DataError, match="boom"):
        for x in prefetch(failing()):
            got.append(x)
    assert got == [1]

    produced = []

    def endless() -> Any:
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    before = set(threading.enumerate())
    gen = prefetch(endless(), depth=1)
    assert next(gen) == 0
    (reading,) = _new_read_threads(before)
    gen.close()  # returns once the thread has ended: no waiting here
    assert not reading.is_alive()  # the reading thread is gone
    assert len(produced) <= 4  # it stopped at its next item, not later


def test_read_mode_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"ray\.read must be"):
        PreLearnerConfig().with_updates({"ray.read": "disk"})
    with pytest.raises(ConfigError, match="cannot group rows by episode"):
        PreLearnerConfig().with_updates({"ray.read": "actor", "ray.group_by_episode": True})
    grouped = PreLearnerConfig().with_updates({"ray.group_by_episode": True})
    assert grouped.ray.read == "auto"  # auto: Ray Data reads when rows are grouped


@pytest.mark.ray
@pytest.mark.parametrize("n_step", [1, 3])
def test_learner_stream_reads_in_its_actor_what_ray_data_would_read(
    ray_local: Any, n_step: int
) -> None:
    from offline_prelearner.jobs.stream.learner_stream import build_dataset, reads_in_actor

    def transitions(read: str) -> list[tuple[Any, ...]]:
        grouped = read == "group"  # Ray Data's read, rows grouped by episode (a shuffle)
        cfg = PreLearnerConfig().with_updates(
            {
                "ray.read": "auto" if grouped else read,
                "ray.group_by_episode": grouped,
                "sample_all": True,
                "n_step": n_step,
                "batch_size": 700,
            }
        )
        assert reads_in_actor(cfg) == (read == "actor")
        ds = build_dataset(ROWS, cfg)
        table = pa.concat_tables(list(ds.iter_batches(batch_format="pyarrow", batch_size=None)))
        cols = [table.column(c).to_pylist() for c in ("eps_id", "t", "rewards", "n_step")]
        return sorted(zip(*cols, strict=True))

    actor, ray_read = transitions("actor"), transitions("ray")
    assert len(actor) > 4000
    assert actor == ray_read  # every transition once, the same values
    if n_step == 3:
        assert transitions("group") == actor


@pytest.mark.ray
def test_learner_stream_error_names_the_file(ray_local: Any, tmp_path: Path) -> None:
    from offline_prelearner.jobs.stream.learner_stream import iter_learner_batches

    table = pq.read_table(sorted(ROWS.glob("*.parquet"))[0])
    bad = table.set_column(
        table.column_names.index("rewards"),
        "rewards",
        pa.array(["x"] * table.num_rows),
    )
    pq.write_table(bad, tmp_path / "part-000.parquet")
    with pytest.raises(Exception, match=r"part-000\.parquet"):
        for _ in iter_learner_batches(str(tmp_path), PreLearnerConfig()):
            pass


def test_read_groups_are_consecutive_files_of_at_least_a_batch(tmp_path: Path) -> None:
    from offline_prelearner.jobs.file_batches import read_groups

    paths = _write(tmp_path, [100, 5000, 300, 300, 4000, 10])
    bad = tmp_path / "part-100.parquet"
    bad.write_bytes(b"nope")
    groups = read_groups([*paths, str(bad), paths[0]], 4096)
    assert (
        groups
        == [
            paths[:2],  # 100 + 5000 rows
            paths[2:5],  # 300 + 300 + 4000
            paths[5:],  # the last 10 rows: a short group
            [str(bad)],  # unknown rows: alone (its reader names it)
            [paths[0]],
        ]
    )
    assert [p for g in groups for p in g] == [*paths, str(bad), paths[0]]
    assert read_groups(paths, None) == [[p] for p in paths]


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 900), min_size=1, max_size=12), step=st.integers(2, 700))
def test_groups_end_where_batches_end(tmp_path_factory: Any, sizes: list[int], step: int) -> None:
    """Reading the groups one by one (one task each) gives the batches of one read of all the
    files: no group leaves a short batch behind except the last."""
    from offline_prelearner.jobs.file_batches import read_groups

    paths = _write(tmp_path_factory.mktemp("files"), sizes)
    whole = [b.num_rows for b, _ in iter_file_batches(paths, step)]
    groups = read_groups(paths, step)
    assert [p for g in groups for p in g] == paths
    per_group = [b.num_rows for g in groups for b, _ in iter_file_batches(g, step)]
    assert per_group == whole
    assert all(sum(sizes[paths.index(p)] for p in g) >= step for g in groups[:-1])


def test_many_small_files_make_full_batches(tmp_path: Path) -> None:
    from offline_prelearner.jobs.file_batches import read_groups

    paths = _write(tmp_path, [100] * 200)  # RLlib's recorder: many small files
    groups = read_groups(paths, 4096)
    sizes = [b.num_rows for g in groups for b, _ in iter_file_batches(g, 4096)]
    assert sizes == [4100] * 4 + [3600]  # whole files gathered past a batch; the rest at the end


@pytest.mark.ray
def test_learner_batches_are_whole_train_batches_however_large(
    ray_local: Any, tmp_path: Path
) -> None:
    """A learner takes ``train_batch_size`` rows per update. Rows of 32 KB frames make a 64-row
    train batch 4 MB, past 1.5x a 1 MiB ``block_mb``, where Ray Data cuts an output block into
    pieces (it did, before); the learner stream keeps each whole, and its last batch
    alone may be short."""
    from offline_prelearner.episodes.episode import Episode
    from offline_prelearner.io.formats.rows.writer import episodes_to_rows
    from offline_prelearner.jobs.stream.learner_stream import build_dataset, iter_learner_batches

    rng = np.random.default_rng(3)
    eps = [
        Episode(
            id=f"ep-{i}",
            observations=rng.integers(0, 256, (41, 64, 128, 4), dtype=np.uint8),
            actions=rng.integers(0, 4, 40),
            rewards=rng.normal(size=40),
            terminated=True,
        )
        for i in range(10)
    ]
    pq.write_table(episodes_to_rows(eps, layout="fast"), tmp_path / "part-000.parquet")
    cfg = PreLearnerConfig().with_updates(
        {"sample_all": True, "train_batch_size": 64, "ray.block_mb": 1, "batch_size": 200}
    )
    blocks = list(build_dataset(str(tmp_path), cfg).iter_batches(batch_size=None))
    assert all(len(b["t"]) % 64 == 0 for b in blocks[:-1])  # no output cut inside a batch
    sizes = [len(b["default_policy"]) for b in iter_learner_batches(str(tmp_path), cfg)]
    assert sum(sizes) == 400 and set(sizes[:-1]) == {64} and 0 < sizes[-1] <= 64


def test_read_ahead_gives_each_group_its_batches_in_any_order_of_calls(tmp_path: Path) -> None:
    """Groups asked in order continue one stream (the next group's first batch is read while
    the current one is used); a group asked out of order restarts it; either way a group gets
    exactly its own batches, as :func:`iter_file_batches` cuts them."""
    from offline_prelearner.jobs.file_batches import ReadAhead, read_groups

    paths = _write(tmp_path, [700, 300, 300, 900, 50, 1200, 400])
    groups = read_groups(paths, 500)
    assert len(groups) >= 4

    def expected(k: int) -> list[list[int]]:
        return [b.column("i").to_pylist() for b, _ in iter_file_batches(groups[k], 500)]

    for ahead in (True, False):
        reader = ReadAhead(groups, 500, ahead)
        for k in [0, 1, 2, 3, 1, 2, 0, len(groups) - 1, 0, 2, 3]:
            got = [b.column("i").to_pylist() for b, _ in reader.batches(k)]
            assert got == expected(k), (ahead, k)
        reader.close()


def test_read_ahead_reads_the_next_group_while_the_current_one_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from offline_prelearner.jobs import file_batches
    from offline_prelearner.jobs.file_batches import ReadAhead

    paths = _write(tmp_path, [100, 100, 100])
    opened: list[str] = []
    group_1_opened = threading.Event()
    real = file_batches.iter_file_batches

    def spy(group: list[str], batch_size: int | None, *limits: Any) -> Any:
        opened.extend(group)
        if paths[1] in group:
            group_1_opened.set()
        return real(group, batch_size, *limits)

    monkeypatch.setattr(file_batches, "iter_file_batches", spy)
    before = set(threading.enumerate())
    reader = ReadAhead([[p] for p in paths], 100)
    assert [b.num_rows for b, _ in reader.batches(0)] == [100]
    # group 1 is being read before its task asks for it (the thread opens it on its own)
    assert group_1_opened.wait(timeout=30)
    assert opened[:2] == paths[:2]
    assert [b.column("i")[0].as_py() for b, _ in reader.batches(1)] == [100]
    # group 2 is read ahead in turn: the thread is still there, blocked on its full queue
    (reading,) = _new_read_threads(before)
    assert reading.is_alive()
    reader.close()  # returns once the thread has ended: no waiting here
    assert not reading.is_alive()  # the reading thread ended
    assert not _new_read_threads(before)
    opened.clear()
    alone = ReadAhead([[p] for p in paths], 100, ahead=False)
    # the group's end closes the stream, which joins the thread: `opened` is final here
    assert [b.num_rows for b, _ in alone.batches(0)] == [100]
    assert not _new_read_threads(before)
    assert opened == paths[:1]  # no read-ahead with several actors: nothing read for nobody


@settings(max_examples=30, deadline=None)
@given(
    rows=st.integers(1, 2500),
    row_group=st.integers(1, 1200),
    step=st.integers(1, 3000),
)
def test_list_cells_are_decoded_in_pieces_and_cut_at_step(
    tmp_path_factory: pytest.TempPathFactory, rows: int, row_group: int, step: int
) -> None:
    """A file with list cells (RLlib's tensor layout) is decoded ``READ_ROWS`` rows at a time;
    the tables handed on still hold exactly ``step`` rows (the last fewer), every row once."""
    from offline_prelearner.jobs.file_batches import READ_ROWS, has_list_cells, parquet_chunks

    path = tmp_path_factory.mktemp("lists") / "part-000.parquet"
    i = np.arange(rows, dtype=np.int64)
    cells = pa.array([[k % 251, (k + 1) % 251] for k in range(rows)], pa.large_list(pa.uint8()))
    pq.write_table(pa.table({"i": i, "obs": cells}), path, row_group_size=row_group)
    assert has_list_cells(pq.ParquetFile(path).schema_arrow) and READ_ROWS < 2500
    got = list(parquet_chunks(str(path), step))
    sizes = [t.num_rows for t in got]
    assert all(n == step for n in sizes[:-1]) and 0 < sizes[-1] <= step
    whole = pa.concat_tables(got)
    assert whole.column("i").to_pylist() == i.tolist()
    assert whole.column("obs").to_pylist() == cells.to_pylist()


@pytest.mark.ray
def test_two_actors_read_their_own_groups_without_read_ahead(
    ray_local: Any, tmp_path: Path
) -> None:
    """With two actors the group a task brings is not known in advance: each actor reads its own
    groups (no read-ahead) and together they emit every transition once (files of whole
    episodes, ``sample_all``)."""
    from offline_prelearner.episodes.episode import Episode
    from offline_prelearner.io.formats.rows.writer import episodes_to_rows
    from offline_prelearner.jobs.stream.learner_stream import build_dataset

    rng = np.random.default_rng(5)
    for f in range(6):
        eps = [
            Episode(
                id=f"f{f}-ep{i}",
                observations=rng.normal(size=(n + 1, 3)).astype(np.float32),
                actions=rng.integers(0, 2, n),
                rewards=rng.normal(size=n),
                terminated=True,
            )
            for i, n in enumerate(rng.integers(5, 40, 8).tolist())
        ]
        pq.write_table(episodes_to_rows(eps, layout="fast"), tmp_path / f"part-{f:03d}.parquet")
    total = sum(pq.read_metadata(p).num_rows for p in tmp_path.glob("*.parquet"))
    cfg = PreLearnerConfig().with_updates(
        {"sample_all": True, "ray.concurrency": 2, "batch_size": 100, "ray.read": "actor"}
    )
    table = pa.concat_tables(
        list(
            build_dataset(str(tmp_path), cfg).iter_batches(batch_size=None, batch_format="pyarrow")
        )
    )
    keys = list(zip(table.column("eps_id").to_pylist(), table.column("t").to_pylist(), strict=True))
    assert len(keys) == total == len(set(keys))
