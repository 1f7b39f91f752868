"""Checkpoints under faults: real SIGKILLs during saves, the exact files a death at each step of a
save leaves, a second process's live save, and tampered manifests.

* A child process saves a ~50 MB pixel buffer in a loop and is SIGKILLed at seeded moments
  (``OFFLINE_PRELEARNER_CKPT_KILLS`` tries, 15 by default): the path always loads, to exactly the
  state of the last save the child reported or of the one after it, and the next save leaves no
  leftover of the dead one.
* The files a death leaves before the commit, between the commit and the clean-up, and in the
  middle of a first save, built on disk: each loads to the committed state and is cleaned.
* A live save of another process is never cleaned away.
* Every invariant of the ring, violated alone in the manifest or an array, is one ``DataError``
  naming the manifest and the field; an untampered checkpoint of any history always loads.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import numpy as np
import pytest
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import ConfigError, DataError, DecodeError, EmptyBufferError
from offline_prelearner.replay import EpisodeReplayBuffer, MixInReplayBuffer, Reservoir
from offline_prelearner.replay.prioritized import PrioritizedEpisodeReplayBuffer as PER
from offline_prelearner.replay.samplers import Prioritized
from offline_prelearner.replay.units import NStep, Transition

KILLS = int(os.environ.get("OFFLINE_PRELEARNER_CKPT_KILLS", "15"))

# ---------------------------------------------------------------------------------------------
# the pixel stream: state k is "episodes 0..k-1 added to an empty buffer", nothing else
# ---------------------------------------------------------------------------------------------
CHILD = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from offline_prelearner.episodes.episode import Episode
    from offline_prelearner.errors import DecodeError
    from offline_prelearner.replay import EpisodeReplayBuffer

    CAPACITY, LENGTH, SHAPE = 4200, 50, (64, 64, 3)

    def episode(k):
        rng = np.random.default_rng(k)
        return Episode(
            id=k,
            observations=rng.integers(0, 256, (LENGTH + 1, *SHAPE), dtype=np.uint8),
            actions=rng.integers(0, 6, LENGTH),
            rewards=rng.standard_normal(LENGTH).astype(np.float32),
            terminated=True,
        )

    def buffer():
        return EpisodeReplayBuffer(CAPACITY, seed=0)

    if __name__ == "__main__":
        path = sys.argv[1]
        buf = buffer()
        try:
            buf.load(path)
        except DecodeError:  # nothing committed yet: fill the ring, then commit once
            for k in range(CAPACITY // (LENGTH + 1) + 2):
                buf.add([episode(k)])
        k = buf.stats()["episodes_added"]
        while True:
            t = time.perf_counter()
            buf.save(path)
            print(k, time.perf_counter() - t, flush=True)
            buf.add([episode(k)])
            k += 1
    """
)


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    d = tmp_path_factory.mktemp("child")
    (d / "ckpt_child.py").write_text(CHILD)
    sys.path.insert(0, str(d))
    try:
        import ckpt_child

        yield d / "ckpt_child.py", ckpt_child
    finally:
        sys.path.remove(str(d))
        sys.modules.pop("ckpt_child", None)


def _state(buf):
    """A copy of the buffer's state (``get_state`` shares the ring's arrays)."""
    s = buf.get_state()
    return copy.deepcopy(s["meta"]), {k: np.array(v) for k, v in s["arrays"].items()}


def _assert_same_state(a, b):
    (ma, aa), (mb, ab) = a, b
    assert ma == mb
    assert sorted(aa) == sorted(ab)
    for k in aa:
        assert aa[k].dtype == ab[k].dtype and np.array_equal(aa[k], ab[k]), k


def _listing(path):
    return sorted(p.name for p in path.iterdir())


def _clean_listing(path):
    names = _listing(path)
    gens = [n for n in names if n.startswith("g-")]
    return names == sorted([".lock", "manifest.json", *gens]) and len(gens) == 1


def test_sigkill_at_seeded_moments_loads_old_or_new_and_leaves_nothing(tmp_path, child):
    """A child saves a ~50 MB buffer in a loop; SIGKILL at seeded moments. After every kill the
    path loads to exactly the last reported state or the next one; the next save cleans up."""
    script, mod = child
    path = tmp_path / "ckpt"
    rnd = random.Random(20)
    ref = mod.buffer()
    added = 0  # episodes in ref
    leftovers = newer = 0
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for _ in range(KILLS):
        proc = subprocess.Popen(
            [sys.executable, str(script), str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            first = proc.stdout.readline().split()
            assert first, proc.stderr.read()
            reported, seconds = int(first[0]), float(first[1])
            time.sleep(rnd.uniform(0.0, 2.5 * seconds))
            proc.send_signal(signal.SIGKILL)
            rest = proc.stdout.read().split("\n")
        finally:
            proc.kill()
            proc.wait()
        for line in rest:
            if line.strip():
                reported = int(line.split()[0])
        leftovers += not _clean_listing(path)
        snap = shutil.copytree(path, tmp_path / "snap")  # the disk as the kill left it
        loaded = mod.buffer()
        loaded.load(snap)  # loads, and cleans what the dead save left
        assert _clean_listing(snap), _listing(snap)
        shutil.rmtree(snap)
        k = loaded.stats()["episodes_added"]
        assert k in (reported, reported + 1), (k, reported)  # the old state or the new one
        newer += k == reported + 1
        while added < k:
            ref.add([mod.episode(added)])
            added += 1
        _assert_same_state(_state(loaded), _state(ref))
        ref.save(path)  # the next save, without a load first: nothing of the dead one is left
        assert _clean_listing(path), _listing(path)
    print(f"\n{KILLS} kills: {leftovers} left a dead save's files (each cleaned by the next save")
    print(f"and by a load), {newer} died after the commit: loaded the new state")


# ---------------------------------------------------------------------------------------------
# the files a death at each step leaves, built on disk
# ---------------------------------------------------------------------------------------------
def _episodes(n, seed=0, prefix="ep", first=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = int(rng.integers(1, 12))
        out.append(
            Episode(
                id=f"{prefix}-{i}" if i % 2 else first + i,
                observations=rng.standard_normal((length + 1, 3)).astype(np.float32),
                actions=rng.integers(0, 4, length),
                rewards=rng.standard_normal(length),
                terminated=bool(i % 3 == 0),
                truncated=bool(i % 3 == 1),
                extras={"logp": rng.standard_normal(length).astype(np.float32)},
            )
        )
    return out


def _two_states(tmp_path):
    """``path`` committed with state A; B's complete save, written elsewhere."""
    buf = EpisodeReplayBuffer(120, seed=1)
    buf.add(_episodes(12))
    a = _state(buf)
    path = buf.save(tmp_path / "ckpt")
    buf.add(_episodes(9, seed=1, prefix="more", first=1000))
    b = _state(buf)
    other = buf.save(tmp_path / "other")
    gen_a = json.loads((path / "manifest.json").read_text())["generation"]
    gen_b = json.loads((other / "manifest.json").read_text())["generation"]
    return path, other, a, b, gen_a, gen_b


def _loaded(path):
    buf = EpisodeReplayBuffer(120)
    buf.load(path)
    return _state(buf)


@pytest.mark.parametrize(
    "moment", ["writing_arrays", "array_files_written", "manifest_written", "after_commit"]
)
def test_every_crash_state_loads_the_committed_one_and_is_cleaned(tmp_path, moment):
    path, other, a, b, _gen_a, gen_b = _two_states(tmp_path)
    shutil.copytree(other / gen_b, path / gen_b)
    if moment == "writing_arrays":  # died inside np.save of the largest array
        f = max((path / gen_b).iterdir(), key=lambda p: p.stat().st_size)
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    if moment == "manifest_written":  # the new manifest under its temporary name, not renamed
        shutil.copy(other / "manifest.json", path / f".manifest.json.{gen_b}.tmp")
    if moment == "after_commit":  # renamed in; the old generation not yet deleted
        shutil.copy(other / "manifest.json", path / "manifest.json")
    committed = b if moment == "after_commit" else a
    _assert_same_state(_loaded(path), committed)
    # the load cleaned what no one holds: the dead save's generation, or the old one
    assert _clean_listing(path), _listing(path)
    _assert_same_state(_loaded(path), committed)


def test_leftovers_are_cleaned_by_the_next_save(tmp_path):
    path, other, _a, _b, gen_a, gen_b = _two_states(tmp_path)
    shutil.copytree(other / gen_b, path / gen_b)
    shutil.copy(other / "manifest.json", path / f".manifest.json.{gen_b}.tmp")
    buf = EpisodeReplayBuffer(120, seed=1)
    buf.add(_episodes(3, seed=5, prefix="x", first=2000))
    buf.save(path)
    assert _clean_listing(path) and gen_a not in _listing(path) and gen_b not in _listing(path)
    _assert_same_state(_loaded(path), _state(buf))


def test_first_save_that_died_is_no_checkpoint_and_is_replaced(tmp_path):
    _, other, _, _b, _, gen_b = _two_states(tmp_path)
    path = tmp_path / "fresh"
    path.mkdir()
    (path / ".lock").touch()
    shutil.copytree(other / gen_b, path / gen_b)
    with pytest.raises(DecodeError, match="incomplete") as e:
        EpisodeReplayBuffer(120).load(path)
    assert e.value.where.file == str(path / "manifest.json")
    buf = EpisodeReplayBuffer(120, seed=1)
    buf.add(_episodes(4))
    buf.save(path)  # leftovers of a first save: not refused as "not a checkpoint"
    assert _clean_listing(path) and gen_b not in _listing(path)
    _assert_same_state(_loaded(path), _state(buf))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "a0000.npy").write_bytes(b"user data")
    with pytest.raises(ConfigError, match="not a checkpoint"):
        buf.save(tmp_path / "mine")
    with pytest.raises(DecodeError):
        EpisodeReplayBuffer(120).load(tmp_path / "mine")
    assert _listing(tmp_path / "mine") == ["a0000.npy"]  # a folder not ours is never touched


def test_version_1_checkpoint_loads_and_is_replaced_cleanly(tmp_path):
    path, _, a, _, gen_a, _ = _two_states(tmp_path)
    m = json.loads((path / "manifest.json").read_text())
    for entry in m["arrays"].values():
        name = entry["file"].split("/")[1]
        (path / entry["file"]).rename(path / name)
        entry["file"] = name
    (path / gen_a).rmdir()
    (path / ".lock").unlink()
    m["format"] = "offline_prelearner.replay_checkpoint/1"
    del m["generation"]
    (path / "manifest.json").write_text(json.dumps(m))
    _assert_same_state(_loaded(path), a)
    buf = EpisodeReplayBuffer(120)
    buf.load(path)
    buf.save(path)
    assert _clean_listing(path), _listing(path)
    _assert_same_state(_loaded(path), a)


HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("held", flush=True)
    time.sleep(600)
    """
)


def test_a_live_save_of_another_process_is_never_cleaned(tmp_path):
    """A generation whose save still runs (another process holds its lock) survives saves and
    loads of this process; once that process is gone, the next save removes it."""
    path, other, a, _, _, gen_b = _two_states(tmp_path)
    shutil.copytree(other / gen_b, path / gen_b)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path / gen_b)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        _assert_same_state(_loaded(path), a)
        buf = EpisodeReplayBuffer(120)
        buf.load(path)
        buf.save(path)
        assert gen_b in _listing(path)  # live: kept
    finally:
        holder.kill()
        holder.wait()
    buf.save(path)
    assert _clean_listing(path) and gen_b not in _listing(path)


SAVER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from offline_prelearner.episodes.episode import Episode
    from offline_prelearner.replay import EpisodeReplayBuffer
    path, who, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    buf = EpisodeReplayBuffer(20_000, seed=who)
    rng = np.random.default_rng(who)
    for k in range(n):
        buf.add([Episode(id=f"{who}-{k}", observations=rng.standard_normal((201, 8)),
                         actions=np.zeros(200, np.int64), rewards=np.zeros(200), terminated=True)])
        buf.save(path)
    """
)


def test_two_processes_saving_while_a_third_loads(tmp_path):
    """Two processes save into one path in a loop while this one loads: every load succeeds (one
    of the saved states), and when they are done the path holds one generation."""
    path = tmp_path / "ckpt"
    EpisodeReplayBuffer(20_000).save(path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen([sys.executable, "-c", SAVER, str(path), str(w), "25"], env=env)
        for w in (1, 2)
    ]
    loads = 0
    try:
        while any(p.poll() is None for p in procs):
            buf = EpisodeReplayBuffer(20_000)
            buf.load(path)
            ids = {str(e.id).split("-")[0] for e in buf.storage.episodes()}
            assert len(ids) <= 1  # one saver's state, never a mix
            loads += 1
    finally:
        for p in procs:
            p.wait(timeout=120)
    assert [p.returncode for p in procs] == [0, 0] and loads > 0
    EpisodeReplayBuffer(20_000).load(path)
    assert _clean_listing(path), _listing(path)


# ---------------------------------------------------------------------------------------------
# tampered manifests
# ---------------------------------------------------------------------------------------------
def _base(tmp_path, kind="per"):
    if kind == "per":
        buf = PER(120, Prioritized(), NStep(2, 0.9), seed=3)
    else:
        buf = EpisodeReplayBuffer(120, unit=Transition(), seed=3, eviction=Reservoir(seed=1))
    eps = _episodes(30)
    buf.add(eps[:25])  # wrapped: evictions happened
    if kind == "per":
        s = buf.sample(16)
        buf.update_priorities(s["indices"], np.linspace(0.1, 3.0, 16))
    return buf, buf.save(tmp_path / "base")


def _edit(path, field, value):
    """Sets manifest ``meta`` field (dotted) or array (``name``) to ``value``, keeping the
    manifest's sizes and checksums right (so only the invariant is broken)."""
    mpath = path / "manifest.json"
    m = json.loads(mpath.read_text())
    if field.startswith("meta."):
        node, keys = m["meta"], field.split(".")[1:]
        for key in keys[:-1]:
            node = node[key]
        if value is _DELETE:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    else:
        entry = m["arrays"][field]
        arr = np.asarray(value)
        f = path / entry["file"]
        with open(f, "wb") as out:
            np.save(out, arr, allow_pickle=False)
        data = f.read_bytes()
        entry.update(
            sha256=hashlib.sha256(data).hexdigest(),
            bytes=len(data),
            dtype=arr.dtype.str,
            shape=list(arr.shape),
        )
    mpath.write_text(json.dumps(m))


_DELETE = object()


def _arrays(path):
    m = json.loads((path / "manifest.json").read_text())
    return {k: np.load(path / e["file"]) for k, e in m["arrays"].items()}, m["meta"]


def _case(name, arrays, meta, pick):
    """``(manifest field or array, new value, field the error must name)`` of tamper ``name``."""
    cap = meta["storage"]["capacity"]
    head = meta["storage"]["head"]
    start, length = arrays["tab/start"], arrays["tab/length"]
    n = len(start)
    r = pick % n
    leaves = arrays.get("sampler/leaves")
    if name == "head_beyond_capacity":
        return "meta.storage.head", cap + 1 + pick % 1000, "storage.head"
    if name == "head_negative":
        return "meta.storage.head", -1 - pick % 10, "storage.head"
    if name == "head_not_after_newest":
        return "meta.storage.head", (head + 1 + pick % (cap - 1)) % (cap + 1), "storage.head"
    if name == "head_not_int":
        return "meta.storage.head", str(head), "storage.head"
    if name == "first_serial":
        return "meta.storage.first_serial", [-1, 2**31, 1.5][pick % 3], "storage.first_serial"
    if name == "counter_negative":
        return "meta.storage.counters.episodes_added", -1, "storage.counters"
    if name == "extra_names":
        return "meta.storage.extra_names", ["logp", "logp"], "storage.extra_names"
    if name == "start_beyond_capacity":
        s = start.copy()
        s[r] = cap + pick % 50
        return "tab/start", s, "tab/start"
    if name == "start_negative":
        s = start.copy()
        s[r] = -1
        return "tab/start", s, "tab/start"
    if name == "starts_overlap":
        s = start.copy()
        r = max(1, r)
        s[r] = s[r - 1] + length[r - 1]  # one slot into the previous episode
        return "tab/start", s, "tab/start"
    if name == "length_leaves_ring":
        L = length.copy()
        L[r] = cap - start[r] + pick % 5
        return "tab/length", L, "tab/length"
    if name == "length_negative":
        L = length.copy()
        L[r] = -1
        return "tab/length", L, "tab/length"
    if name == "table_lengths_differ":
        return "tab/terminated", arrays["tab/terminated"][:-1], "tab/terminated"
    if name == "table_dtype":
        return "tab/alive", arrays["tab/alive"].astype(np.float64), "tab/alive"
    if name == "duplicate_live_id":
        ints, alive = arrays["tab/ids_int"].copy(), arrays["tab/alive"]
        kinds = arrays["tab/ids_kind"]
        live = np.flatnonzero(alive & (kinds == 0))
        ints[live[-1]] = ints[live[0]]
        return "tab/ids_int", ints, "tab/ids"
    if name == "ids_kind":
        k = arrays["tab/ids_kind"].copy()
        k[np.flatnonzero(arrays["tab/alive"])[0]] = [2, 7][pick % 2]
        return "tab/ids_kind", k, "tab/ids_kind"
    if name == "column_rows":
        return "col/actions", arrays["col/actions"][:-1], "col/actions"
    if name == "padding_not_zero":
        c = arrays["col/rewards"].copy()
        c[cap] = 1.0
        return "col/rewards", c, "col/rewards"
    if name == "column_missing_extra":
        return "meta.storage.extra_names", ["logp", "entropy"], "storage columns"
    if name == "samples_drawn":
        return "meta.samples_drawn", -5, "samples_drawn"
    if name == "rng":
        return "meta.rng", "not a state", "rng"
    if name == "rng_missing":
        return "meta.rng", _DELETE, "rng"
    if name == "leaf_negative":
        v = leaves.copy()
        v[np.flatnonzero(v > 0)[pick % int((v > 0).sum())]] = -1.0
        return "sampler/leaves", v, "sum_tree"
    if name == "leaf_nan":
        v = leaves.copy()
        v[np.flatnonzero(v > 0)[0]] = [np.nan, np.inf][pick % 2]
        return "sampler/leaves", v, "sum_tree"
    if name == "leaf_at_invalid_slot":  # an episode's last slot holds only its final obs
        v = leaves.copy()
        v[start[r] + length[r]] = 1.0
        return "sampler/leaves", v, "sampler/leaves"
    if name == "leaves_size":
        return "sampler/leaves", leaves[:-1], "sampler/leaves"
    if name == "max_priority":
        return "sampler/max_priority", np.float64(-1.0), "sampler"
    raise AssertionError(name)


CASES = [
    "head_beyond_capacity",
    "head_negative",
    "head_not_after_newest",
    "head_not_int",
    "first_serial",
    "counter_negative",
    "extra_names",
    "start_beyond_capacity",
    "start_negative",
    "starts_overlap",
    "length_leaves_ring",
    "length_negative",
    "table_lengths_differ",
    "table_dtype",
    "duplicate_live_id",
    "ids_kind",
    "column_rows",
    "padding_not_zero",
    "column_missing_extra",
    "samples_drawn",
    "rng",
    "rng_missing",
    "leaf_negative",
    "leaf_nan",
    "leaf_at_invalid_slot",
    "leaves_size",
    "max_priority",
]


@pytest.fixture(scope="module")
def base_ckpt(tmp_path_factory):
    buf, path = _base(tmp_path_factory.mktemp("base"))
    return buf, path


@pytest.mark.parametrize("name", CASES)
@settings(
    max_examples=int(os.environ.get("OFFLINE_PRELEARNER_TAMPER_EXAMPLES", "4")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(pick=st.integers(0, 10**6))
def test_each_broken_invariant_is_refused_naming_the_field(base_ckpt, tmp_path, name, pick):
    _buf, base = base_ckpt
    path = tmp_path / f"t-{name}-{uuid.uuid4().hex}"  # examples may repeat a pick
    shutil.copytree(base, path)
    arrays, meta = _arrays(path)
    field, value, named = _case(name, arrays, meta, pick)
    _edit(path, field, value)
    target = PER(120, Prioritized(), NStep(2, 0.9), seed=0)
    target.add(_episodes(3, seed=9, prefix="before", first=3000))
    before = _state(target)
    with pytest.raises(DataError) as e:
        target.load(path)
    err = e.value
    assert err.where.file == str(path / "manifest.json"), err
    assert err.where.column == named, err
    assert "\n" not in str(err)
    _assert_same_state(_state(target), before)  # a failed load changes nothing


def test_head_beyond_capacity_was_loaded_and_lost_episodes(tmp_path):
    """The case of the issue: a storage position beyond capacity loaded, and the next add
    silently dropped the loaded episodes. Now it is refused before anything changes."""
    _buf, path = _base(tmp_path)
    _edit(path, "meta.storage.head", 500)
    with pytest.raises(DataError, match=r"storage\.head is 500") as e:
        PER(120, Prioritized(), NStep(2, 0.9)).load(path)
    assert e.value.where.column == "storage.head"


def test_reservoir_invariants(tmp_path):
    _buf, base = _base(tmp_path, kind="reservoir")
    for field, value, named in [
        ("meta.storage.reservoir.threshold", 1.5, "threshold"),
        ("meta.storage.reservoir.threshold", 0.0, "threshold"),
    ]:
        path = tmp_path / f"r{value}"
        shutil.copytree(base, path)
        _edit(path, field, value)
        with pytest.raises(DataError) as e:
            EpisodeReplayBuffer(120, unit=Transition(), eviction=Reservoir(seed=1)).load(path)
        assert e.value.where.column == named and e.value.where.file == str(path / "manifest.json")


@st.composite
def histories(draw):
    """A buffer kind and a history of adds (whole episodes, fragments that continue one, re-sent
    duplicates), samples and priority updates."""
    kind = draw(st.sampled_from(["fifo", "per", "reservoir", "mixin"]))
    cap = draw(st.integers(30, 90))
    steps = []
    for _ in range(draw(st.integers(1, 25))):
        steps.append(
            (
                draw(st.sampled_from(["new", "new", "fragment", "again", "sample"])),
                draw(st.integers(0, 12)),
                draw(st.integers(0, 2**31)),
            )
        )
    return kind, cap, steps


def _make(kind, cap, seed=0):
    if kind == "per":
        return PER(cap, Prioritized(), NStep(2, 0.9), seed=seed)
    if kind == "reservoir":
        return EpisodeReplayBuffer(cap, seed=seed, eviction=Reservoir(seed=2, headroom=0.2))
    if kind == "mixin":
        return MixInReplayBuffer(cap, replay_ratio=0.5, seed=seed)
    return EpisodeReplayBuffer(cap, unit=NStep(3, 0.9), seed=seed)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_an_untampered_checkpoint_of_any_history_loads(tmp_path_factory, history):
    kind, cap, steps = history
    buf = _make(kind, cap)
    open_ep: dict[str, int] = {}  # id -> t of its end, for fragments
    last = None
    for i, (what, length, seed) in enumerate(steps):
        rng = np.random.default_rng(seed)
        if what == "sample":
            try:
                s = buf.sample() if kind == "mixin" else buf.sample(4)
            except EmptyBufferError:
                continue
            if kind == "per":
                buf.update_priorities(s["indices"], rng.random(len(s["indices"])) * 3)
            continue
        if what == "again" and last is not None:
            ep = last
        elif what == "fragment" and open_ep:
            eid, (t, obs) = next(iter(open_ep.items()))
            obs_new = np.concatenate([obs[None], rng.standard_normal((length, 3))]).astype(
                np.float32
            )
            ep = Episode(
                id=eid,
                observations=obs_new,
                actions=rng.integers(0, 3, length),
                rewards=np.zeros(length),
                t_started=t,
                terminated=length % 2 == 0,
            )
        else:
            ep = Episode(
                id=f"e{i}",
                observations=rng.standard_normal((length + 1, 3)).astype(np.float32),
                actions=rng.integers(0, 3, length),
                rewards=np.zeros(length),
                terminated=False,
            )
        try:
            buf.add([ep])
        except DataError:
            continue
        last = ep
        if ep.is_done:
            open_ep.pop(ep.id, None)
        else:
            open_ep[ep.id] = (ep.t_started + len(ep), ep.observations[-1])
    path = tmp_path_factory.mktemp("h") / "c"
    buf.save(path)
    other = _make(kind, cap, seed=99)
    other.load(path)
    _assert_same_state(_state(other), _state(buf))


def test_kill_test_child_locks_are_released_on_death(tmp_path):
    """The clean-up relies on this: a SIGKILLed process's flock is gone at once."""
    d = tmp_path / ("g-" + "0" * 32)
    d.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(d)], stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip() == b"held"
    fd = os.open(d, os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
