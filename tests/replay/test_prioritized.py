"""Prioritized sampler and PrioritizedEpisodeReplayBuffer.

Sampling frequencies against ``p_i / sum p`` (chi-square at a fixed seed), importance weights
against the textbook formula computed in a loop, stale updates, stratification, max priority for
new steps, unsampleable slots, and a Hypothesis model check of every priority against a
plain-Python model keyed by (episode id, t) through adds, evictions and (partly stale) updates.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import partial

import numpy as np
import pytest
from backends import BACKENDS
from buffer_helpers import make_episode as _make_episode
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import ConfigError, DataError, EmptyBufferError
from offline_prelearner.replay import EpisodeReplayBuffer
from offline_prelearner.replay.prioritized import PrioritizedEpisodeReplayBuffer
from offline_prelearner.replay.samplers import kernels
from offline_prelearner.replay.samplers.prioritized import Prioritized
from offline_prelearner.replay.samplers.uniform import Uniform
from offline_prelearner.replay.units import NStep, Transition


# Every test here runs on both backends: numba's compiled loops and the numpy fallback.
@pytest.fixture(autouse=True, scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    with kernels.use(request.param):
        yield request.param


make_episode = partial(_make_episode, seed=None, obs_shape=(3,), n_actions=4)


def make_buffer(lengths, *, capacity=None, sampler=None, unit=None, seed=0):
    cap = capacity or sum(n + 1 for n in lengths) + 5
    buf = PrioritizedEpisodeReplayBuffer(cap, sampler or Prioritized(), unit, seed=seed)
    buf.add([make_episode(i, n) for i, n in enumerate(lengths)])
    return buf


def all_handles(buf):
    """Handles of every valid start, and their slots."""
    slots = buf.valid_starts().slots()
    return buf.storage.handles(slots, buf.storage.rows_of(slots)), slots


def leaves(buf, slots):
    return buf.sampler.sum_tree.get(slots)


def chi2_critical(df: int, z: float = 3.719) -> float:
    """Upper quantile of chi-square (Wilson-Hilferty); z = 3.719 is the 1e-4 normal quantile."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


# -- distribution ------------------------------------------------------------------------------


@pytest.mark.parametrize("stratified", [True, False])
@pytest.mark.parametrize("alpha", [0.6, 1.0])
def test_sampling_frequencies_match_priorities_chi_square(stratified, alpha):
    buf = make_buffer([7, 12, 5, 9], sampler=Prioritized(alpha=alpha, stratified=stratified))
    handles, slots = all_handles(buf)
    pr = np.random.default_rng(1).uniform(0.05, 3.0, len(slots))
    pr[::7] = 0.0  # td error 0: priority eps, almost never drawn but still valid
    assert buf.update_priorities(handles, pr) == len(slots)

    expected_p = [(abs(x) + 1e-6) ** alpha for x in pr]  # loop formula, not the tree
    total = sum(expected_p)
    draws, batch = 400_000, 1000
    counts = dict.fromkeys(slots.tolist(), 0)
    for _ in range(draws // batch):
        got, _ = buf.sampler.sample(buf.storage, batch, buf.rng, buf.valid_starts())
        for s, c in zip(*np.unique(got, return_counts=True), strict=True):
            counts[int(s)] += int(c)  # KeyError if a non-valid slot is ever drawn
    chi2, df = 0.0, -1
    pooled_obs = pooled_exp = 0.0  # cells expecting < 5 draws are pooled into one (classic rule)
    for s, p in zip(slots.tolist(), expected_p, strict=True):
        exp = draws * p / total
        if exp >= 5:
            chi2 += (counts[s] - exp) ** 2 / exp
            df += 1
        else:
            pooled_obs, pooled_exp = pooled_obs + counts[s], pooled_exp + exp
    if pooled_exp > 0:
        chi2 += (pooled_obs - pooled_exp) ** 2 / max(pooled_exp, 5.0)
        df += 1
    assert chi2 < chi2_critical(df), (chi2, df)


def test_probabilities_are_p_alpha_over_sum():
    buf = make_buffer([4, 6], sampler=Prioritized(alpha=0.5))
    handles, slots = all_handles(buf)
    pr = np.arange(1, len(slots) + 1, dtype=float)
    buf.update_priorities(handles, pr)
    want = [(x + 1e-6) ** 0.5 for x in pr]
    got = buf.sampler.probabilities(slots)
    assert got == pytest.approx([w / sum(want) for w in want], rel=1e-12)
    assert buf.sampler.probabilities([buf.storage.pad_slot - 1]).tolist() == [0.0]


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_importance_weights_match_plain_formula(beta):
    buf = make_buffer([6, 3, 8], sampler=Prioritized(alpha=0.7, beta=beta))
    handles, slots = all_handles(buf)
    pr = np.random.default_rng(2).uniform(0.0, 5.0, len(slots))
    buf.update_priorities(handles, pr)
    batch = buf.sample(64)
    got_slots = buf.storage.resolve(batch["indices"])[0]

    # (N * P(i)) ** -beta / max_j (N * P(j)) ** -beta, with a loop over every valid step.
    p_alpha = {int(s): (abs(x) + 1e-6) ** 0.7 for s, x in zip(slots, pr, strict=True)}
    n, total = len(p_alpha), sum(p_alpha.values())
    max_w = max((n * v / total) ** -beta for v in p_alpha.values())
    want = [(n * p_alpha[int(s)] / total) ** -beta / max_w for s in got_slots]
    assert batch["weights"].dtype == np.float32
    assert batch["weights"] == pytest.approx(want, rel=1e-6)


def test_beta_can_be_annealed_between_samples():
    buf = make_buffer([10])
    handles, _ = all_handles(buf)
    buf.update_priorities(handles, np.linspace(0, 2, len(handles)))
    buf.sampler.beta = 0.0
    assert (buf.sample(16)["weights"] == 1.0).all()
    buf.sampler.beta = 1.0
    assert (buf.sample(16)["weights"] <= 1.0).all()
    with pytest.raises(ConfigError, match="beta"):
        buf.sampler.beta = -0.1


# -- stratification ---------------------------------------------------------------------------


def test_stratified_batch_covers_every_segment():
    buf = make_buffer([9, 14, 6])
    handles, slots = all_handles(buf)
    buf.update_priorities(handles, np.random.default_rng(3).uniform(0.1, 4.0, len(slots)))
    tree = buf.sampler.sum_tree
    lo, hi, running = {}, {}, 0.0  # each slot's interval of the cumulative mass, by a loop
    for s in sorted(slots.tolist()):
        lo[s] = running
        running += float(tree.get([s])[0])
        hi[s] = running
    total = tree.total()
    for batch_size in (1, 7, 32, 100):
        got, _ = buf.sampler.sample(buf.storage, batch_size, buf.rng, buf.valid_starts())
        seg = total / batch_size
        for k, s in enumerate(got.tolist()):  # draw k lies in segment k
            assert lo[s] < (k + 1) * seg + 1e-9 and hi[s] > k * seg - 1e-9


def test_stratified_with_equal_priorities_draws_each_step_once():
    buf = make_buffer([5, 8, 4])
    _, slots = all_handles(buf)
    got, _ = buf.sampler.sample(buf.storage, len(slots), buf.rng, buf.valid_starts())
    assert sorted(got.tolist()) == sorted(slots.tolist())


# -- priorities: new, stale, evicted, unsampleable ----------------------------------------------


def test_new_steps_enter_at_max_priority_seen():
    buf = make_buffer([5, 5], sampler=Prioritized(alpha=0.5))
    handles, slots = all_handles(buf)
    assert leaves(buf, slots) == pytest.approx(1.0)  # max priority starts at 1
    pr = np.full(len(slots), 0.5)
    pr[3] = 9.0
    buf.update_priorities(handles, pr)
    buf.update_priorities(handles[:2], [0.1, 0.2])  # lower than the max: the max stays
    buf.add(make_episode(10, 4))
    new = buf.valid_starts().slots()[-4:]
    assert leaves(buf, new) == pytest.approx((9.0 + 1e-6) ** 0.5)
    assert buf.sampler.max_priority == pytest.approx(9.0 + 1e-6)


def test_stale_update_after_eviction_is_ignored():
    buf = make_buffer([6, 6], capacity=14)  # full: the next episode evicts the oldest
    batch = buf.sample(32)
    buf.add(make_episode(5, 6))  # lands in episode 0's slots
    assert buf.stats()["episodes_evicted"] == 1
    _, slots = all_handles(buf)
    before = leaves(buf, slots)
    eps = batch["eps_id"]
    applied = buf.update_priorities(batch["indices"], np.full(32, 50.0))
    assert applied == int((eps == 1).sum())  # only episode 1 is still held
    after = leaves(buf, slots)
    ep1 = buf.storage.rows_of(slots) == buf.storage.row_of_id(1)
    assert (after[~ep1] == before[~ep1]).all()  # the newcomer in the reused slots is untouched
    stats = buf.stats()
    assert stats["priority_updates"] == applied
    assert stats["priority_updates_stale"] == 32 - applied


def test_stale_update_after_move_is_ignored():
    # Streaming: episode 0 is not at the head when its next fragment arrives, so it moves.
    buf = PrioritizedEpisodeReplayBuffer(40, seed=0)
    first = make_episode(0, 10, done=False)
    buf.add([first, make_episode(1, 3)])
    batch = buf.sample(16)
    obs = np.concatenate([first.observations[-1:], np.ones((3, 3), np.float32)])
    cont = Episode(
        id=0,
        observations=obs,
        actions=np.zeros(3, np.int64),
        rewards=np.zeros(3),
        terminated=True,
        t_started=10,
    )
    buf.add(cont)
    assert buf.stats()["episodes_moved"] == 1
    applied = buf.update_priorities(batch["indices"], np.full(16, 7.0))
    assert applied == int((batch["eps_id"] == 1).sum())


def test_evicted_slots_are_zeroed_and_never_drawn():
    buf = make_buffer([6, 6, 6], capacity=22)
    old = buf.valid_starts().slots()
    buf.add(make_episode(7, 10))  # evicts episodes 0 and 1 (14 slots), reuses 11 of them
    valid = set(buf.valid_starts().slots().tolist())
    gone = [s for s in old.tolist() if s not in valid]
    assert gone and (leaves(buf, gone) == 0).all()
    assert (buf.sampler.min_tree.get(gone) == np.inf).all()
    got = buf.sample(2000)
    assert set(buf.storage.resolve(got["indices"])[0].tolist()) <= valid


def test_unfinished_windows_get_priority_when_complete():
    unit = NStep(3, 0.9)
    buf = PrioritizedEpisodeReplayBuffer(60, unit=unit, seed=0)
    first = make_episode(0, 8, done=False)
    buf.add(first)
    start = buf.storage.starts[0]
    assert leaves(buf, start + np.arange(6)) == pytest.approx(1.0)
    assert (leaves(buf, start + np.arange(6, 9)) == 0).all()  # window not stored yet
    got = buf.storage.resolve(buf.sample(3000)["indices"])[0]
    assert got.max() < start + 6
    handles, _ = all_handles(buf)
    buf.update_priorities(handles, np.full(len(handles), 0.25))
    obs = np.concatenate([first.observations[-1:], np.ones((2, 3), np.float32)])
    cont = Episode(
        id=0,
        observations=obs,
        actions=np.zeros(2, np.int64),
        rewards=np.zeros(2),
        terminated=True,
        t_started=8,
    )
    buf.add(cont)  # appended in place: old steps keep 0.25, the completed ones enter at max
    assert buf.stats()["fragments_appended"] == 1
    assert leaves(buf, start + np.arange(6)) == pytest.approx((0.25 + 1e-6) ** 0.6)
    assert leaves(buf, start + np.arange(6, 10)) == pytest.approx(1.0)
    assert leaves(buf, [start + 10]) == 0  # the final observation's slot


def test_duplicate_handles_last_wins():
    buf = make_buffer([4], sampler=Prioritized(alpha=1.0))
    handles, slots = all_handles(buf)
    buf.update_priorities([handles[1], handles[1], handles[1]], [3.0, -5.0, 2.0])
    assert leaves(buf, [slots[1]]) == pytest.approx(2.0 + 1e-6)
    buf.update_priorities([handles[2]], [-5.0])  # td errors may be negative: |x| + eps
    assert leaves(buf, [slots[2]]) == pytest.approx(5.0 + 1e-6)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_priorities_are_rejected_and_nothing_applied(bad):
    buf = make_buffer([5])
    handles, slots = all_handles(buf)
    before = leaves(buf, slots)
    with pytest.raises(ValueError, match="not finite"):
        buf.update_priorities(handles, [1.0, 2.0, bad, 3.0, 4.0])
    assert (leaves(buf, slots) == before).all()


def test_priority_overflow_with_large_alpha_is_rejected():
    buf = make_buffer([3], sampler=Prioritized(alpha=3.0))
    handles, _ = all_handles(buf)
    with pytest.raises(ValueError, match="overflows"):
        buf.update_priorities(handles, [1.0, 1e120, 1.0])


def test_handles_must_be_integers():
    buf = make_buffer([5])
    batch = buf.sample(4)
    with pytest.raises(TypeError, match="int64 handles"):
        buf.update_priorities(batch["weights"], [1.0] * 4)


def test_length_mismatch_and_empty_update():
    buf = make_buffer([5])
    handles, _ = all_handles(buf)
    with pytest.raises(ValueError, match="5 indices but 2 priorities"):
        buf.update_priorities(handles, [1.0, 2.0])
    assert buf.update_priorities([], []) == 0


def test_forged_handles_cannot_make_padding_sampleable():
    buf = make_buffer([5, 5])
    handles, slots = all_handles(buf)
    serial = handles[0] >> 32
    final_obs_slot = slots[4] + 1  # current serial, but not a valid start
    forged = np.array([(serial << 32) | final_obs_slot, (serial << 32) | (1 << 31)])
    assert buf.update_priorities(forged, [5.0, 5.0]) == 0
    assert leaves(buf, [final_obs_slot]) == 0


# -- model check ---------------------------------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 9)),
        st.tuples(st.just("sample"), st.integers(1, 12)),
        st.tuples(st.just("update"), st.integers(0, 5), st.floats(-20, 20)),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops, st.integers(12, 40), st.sampled_from([0.0, 0.5, 1.0]))
def test_priorities_match_plain_model(ops, capacity, alpha):
    eps = 1e-3
    buf = PrioritizedEpisodeReplayBuffer(capacity, Prioritized(alpha=alpha, eps=eps), seed=0)
    model: dict[tuple[int, int], float] = {}  # (episode id, t) -> priority, valid steps only
    max_seen, next_id = 1.0, 0
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # sampled (handles, eps, t)
    for op in ops:
        if op[0] == "add":
            buf.add(make_episode(next_id, min(op[1], capacity - 1)))
            for t in range(min(op[1], capacity - 1)):
                model[(next_id, t)] = max_seen
            next_id += 1
            held = set(buf.storage.ids[buf.storage.alive].tolist())
            model = {k: v for k, v in model.items() if k[0] in held}
        elif op[0] == "sample" and model:
            b = buf.sample(op[1])
            pending.append((b["indices"], b["eps_id"], b["t"]))
        elif op[0] == "update" and pending:
            handles, eids, ts = pending[op[1] % len(pending)]
            values = np.full(len(handles), op[2])
            values[::2] *= 0.5
            applied = buf.update_priorities(handles, values)
            held = set(buf.storage.ids[buf.storage.alive].tolist())
            n = 0
            for eid, t, x in zip(eids.tolist(), ts.tolist(), values.tolist(), strict=True):
                if eid in held:  # whole episodes with fresh ids: stale means evicted
                    model[(eid, t)] = abs(x) + eps
                    max_seen = max(max_seen, abs(x) + eps)
                    n += 1
            assert applied == n
        # Compare every slot: valid starts hold p ** alpha, everything else 0.
        slots = buf.valid_starts().slots()
        if not len(slots):
            assert not model
            continue
        rows = buf.storage.rows_of(slots)
        keys = zip(
            buf.storage.ids[rows].tolist(),
            (buf.storage.t_started[rows] + slots - buf.storage.starts[rows]).tolist(),
            strict=True,
        )
        want = [model[k] ** alpha for k in keys]
        assert len(want) == len(model)
        tree = buf.sampler.sum_tree
        if tree is None:
            continue
        got = tree.values()
        assert got[slots] == pytest.approx(want, rel=1e-12)
        others = np.ones(tree.capacity, bool)
        others[slots] = False
        assert (got[others] == 0).all()
        mins = buf.sampler.min_tree.values()
        assert (mins[slots] == got[slots]).all() and (mins[others] == np.inf).all()
        assert buf.sampler.min_tree.min() == pytest.approx(min(want), rel=1e-12)
        assert buf.sampler.max_priority == pytest.approx(max_seen)


# -- state and checkpoints ------------------------------------------------------------------------


def test_checkpoint_round_trip_gives_identical_next_samples(tmp_path):
    buf = make_buffer([30, 17, 25], sampler=Prioritized(alpha=0.6, beta=0.4))
    for _ in range(5):
        b = buf.sample(32)
        buf.update_priorities(b["indices"], np.abs(b["rewards"]) * 3)
    buf.sampler.beta = 0.7
    buf.save(tmp_path / "ckpt")
    other = PrioritizedEpisodeReplayBuffer(buf.capacity, Prioritized(alpha=0.6), seed=123)
    other.load(tmp_path / "ckpt")
    assert other.sampler.beta == 0.7
    for _ in range(3):
        a, b = buf.sample(64), other.sample(64)
        assert a == b
        td = np.abs(a["rewards"]) + 0.5
        assert buf.update_priorities(a["indices"], td) == other.update_priorities(b["indices"], td)
    assert (buf.sampler.sum_tree.values() == other.sampler.sum_tree.values()).all()
    assert buf.stats() == other.stats()


def test_state_of_an_empty_sampler_round_trips():
    sampler = Prioritized()
    other = Prioritized()
    other.set_state(sampler.state())
    assert other.sum_tree is None


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda s: s.pop("leaves"), "malformed"),
        (lambda s: s.__setitem__("alpha", np.asarray(0.9)), "alpha=0.9"),
        (lambda s: s["leaves"].__setitem__(0, -1.0), "finite and >= 0"),
        (lambda s: s.__setitem__("max_priority", np.asarray(np.nan)), "max_priority"),
        (lambda s: s.__setitem__("counters", np.zeros(3, np.int64)), "malformed"),
    ],
)
def test_tampered_sampler_state_is_an_error(mutate, match):
    buf = make_buffer([5, 5])
    state = {k: np.array(v) for k, v in buf.sampler.state().items()}
    mutate(state)
    with pytest.raises(DataError, match=match):
        Prioritized().set_state(state)


# -- configuration ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"alpha": -0.1}, "alpha"),
        ({"alpha": math.nan}, "alpha"),
        ({"beta": -1}, "beta"),
        ({"eps": 0.0}, "eps must be a finite number > 0"),
        ({"eps": "1e-6"}, "eps must be a number"),
        ({"stratified": 1}, "stratified"),
        ({"alpha": 10.0, "eps": 1e-40}, "underflows"),
        ({"alpha": 200.0}, "alpha"),
    ],
)
def test_bad_configuration(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Prioritized(**kwargs)


def test_buffer_needs_an_updatable_sampler():
    with pytest.raises(ConfigError, match="update_priorities"):
        PrioritizedEpisodeReplayBuffer(100, Uniform())  # type: ignore[arg-type]


def test_empty_buffer_cannot_sample():
    buf = PrioritizedEpisodeReplayBuffer(100)
    with pytest.raises(EmptyBufferError):
        buf.sample(4)
    assert buf.update_priorities([1, 2], [1.0, 1.0]) == 0


def test_one_sampler_cannot_serve_two_capacities():
    sampler = Prioritized()
    PrioritizedEpisodeReplayBuffer(50, sampler).add(make_episode(0, 5))
    with pytest.raises(ConfigError, match="capacity 50"):
        EpisodeReplayBuffer(60, sampler, Transition()).add(make_episode(0, 5))


def test_a_prioritized_buffer_makes_its_trees_when_it_is_built():
    sampler = Prioritized()
    buf = PrioritizedEpisodeReplayBuffer(50, sampler)
    assert sampler.sum_tree is not None and sampler.sum_tree.capacity == 50
    assert sampler.sum_tree.total() == 0.0 and sampler.min_tree.min() == math.inf
    with pytest.raises(ConfigError, match="capacity 50"):  # refused when built, not on an add
        PrioritizedEpisodeReplayBuffer(60, sampler)
    buf.add(make_episode(0, 5))
    assert sampler.sum_tree.total() == 5.0  # each new step at the first maximum priority, 1


def test_configuration_is_read_only_except_beta():
    sampler = Prioritized(alpha=0.5, beta=0.3, eps=0.01, stratified=False)
    assert (sampler.alpha, sampler.beta, sampler.eps, sampler.stratified) == (0.5, 0.3, 0.01, False)
    for name in ("alpha", "eps", "stratified"):
        with pytest.raises(AttributeError):
            setattr(sampler, name, 1.0)
    assert repr(sampler) == "Prioritized(alpha=0.5, eps=0.01, stratified=False)"
