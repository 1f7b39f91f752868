"""Units (Transition, NStep, Sequence, FrameStack) against the plain-loop references.

Every valid start of every stored episode is expanded at once with the vectorized unit and each
row is compared with the reference computed one step at a time.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from buffer_helpers import make_episode as _make_episode
from buffer_helpers import ref
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.errors import ConfigError
from offline_prelearner.replay import EpisodeReplayBuffer
from offline_prelearner.replay.batch import MultiAgentBatch, SampleBatch
from offline_prelearner.replay.units import FrameStack, NStep, Sequence, Transition

SETTINGS = settings(max_examples=40, deadline=None)


make_episode = partial(_make_episode, n_actions=5, logp=np.float32)


episode_specs = st.lists(
    st.tuples(st.integers(1, 12), st.sampled_from(["terminated", "truncated", "ongoing"])),
    min_size=1,
    max_size=6,
)


def expand_all(unit, episodes, capacity=None):
    """Adds episodes, expands every valid start; returns (batch, {eps_id: episode})."""
    cap = capacity or sum(len(e) + 1 for e in episodes) + 3
    buf = EpisodeReplayBuffer(cap, unit=unit, seed=0)
    buf.add(episodes)
    slots = buf.valid_starts().slots()
    rows = buf.storage.rows_of(slots)
    batch = unit.expand(slots, rows, buf.storage, buf.rng)
    return batch, {e.id: e for e in episodes}, buf


def build(specs, offset=0):
    return [
        make_episode(f"e{i + offset}", n, end, seed=i + offset) for i, (n, end) in enumerate(specs)
    ]


# ---------------------------------------------------------------------- transitions / n-step
def check_nstep_rows(batch, by_id, n_lo, n_hi, gamma, frames=None):
    for i in range(len(batch)):
        ep = by_id[batch["eps_id"][i]]
        k = int(batch["t"][i]) - ep.t_started
        m = int(batch["n_step"][i])
        remaining = len(ep) - k
        assert min(n_lo, remaining) <= m <= min(n_hi, remaining)
        want = ref.nstep(ep, k, m, gamma)
        assert batch["rewards"][i] == pytest.approx(want["rewards"], rel=1e-6, abs=1e-9)
        assert bool(batch["terminateds"][i]) == want["terminateds"]
        assert bool(batch["truncateds"][i]) == want["truncateds"]
        assert batch["actions"][i] == want["actions"]
        assert batch["logp"][i] == ep.extras["logp"][k]
        if frames is None:
            np.testing.assert_array_equal(batch["obs"][i], want["obs"])
            np.testing.assert_array_equal(batch["new_obs"][i], want["new_obs"])
        else:
            np.testing.assert_array_equal(batch["obs"][i], ref.frames(ep, k, frames))
            np.testing.assert_array_equal(batch["new_obs"][i], ref.frames(ep, k + m, frames))


@SETTINGS
@given(specs=episode_specs)
def test_transition_matches_reference(specs):
    batch, by_id, _ = expand_all(Transition(), build(specs))
    assert len(batch) == sum(n for n, _ in specs)  # every step, done or not
    check_nstep_rows(batch, by_id, 1, 1, 1.0)
    assert (batch["n_step"] == 1).all()


@SETTINGS
@given(specs=episode_specs, n=st.integers(1, 14), gamma=st.sampled_from([0.0, 0.5, 0.99, 1.0]))
def test_nstep_matches_reference(specs, n, gamma):
    eps = build(specs)
    batch, by_id, _ = expand_all(NStep(n, gamma), eps)
    want = sum(ref.valid_count(len(e), e.is_done, n) for e in eps)
    assert len(batch) == want
    check_nstep_rows(batch, by_id, n, n, gamma)


@SETTINGS
@given(specs=episode_specs, lo=st.integers(1, 4), span=st.integers(0, 4))
def test_nstep_range_matches_reference(specs, lo, span):
    eps = build(specs)
    batch, by_id, _ = expand_all(NStep((lo, lo + span), 0.9), eps)
    assert len(batch) == sum(ref.valid_count(len(e), e.is_done, lo + span) for e in eps)
    check_nstep_rows(batch, by_id, lo, lo + span, 0.9)


@SETTINGS
@given(specs=episode_specs, k=st.integers(1, 5), n=st.integers(1, 4))
def test_frame_stack_matches_reference(specs, k, n):
    for unit, lo_hi in ((FrameStack(k), (1, 1)), (FrameStack(k, NStep(n, 0.9)), (n, n))):
        batch, by_id, _ = expand_all(unit, build(specs))
        assert batch["obs"].shape[1:] == (k, 2)
        check_nstep_rows(batch, by_id, *lo_hi, 0.9, frames=k)


# ---------------------------------------------------------------------- sequences
def check_sequence_rows(batch, by_id, length, burn_in, frames=None):
    for i in range(len(batch)):
        ep = by_id[batch["eps_id"][i]]
        mask = batch["loss_mask"][i]
        # The first loss step is the sampled start; t is 0 in padding.
        p0 = int(np.argmax(mask))
        k = int(batch["t"][i][p0]) - ep.t_started
        want = ref.sequence(ep, k, length, burn_in)
        assert int(batch["seq_lens"][i]) == want["seq_lens"]
        for col in ("actions", "rewards", "terminateds", "truncateds", "t", "loss_mask"):
            np.testing.assert_array_equal(batch[col][i], want[col], err_msg=col)
        if frames is None:
            np.testing.assert_array_equal(batch["obs"][i], want["obs"])
            np.testing.assert_array_equal(batch["new_obs"][i], want["new_obs"])
        else:
            for p in range(want["seq_lens"]):
                s = k - (p0 - p)
                np.testing.assert_array_equal(batch["obs"][i][p], ref.frames(ep, s, frames))
                np.testing.assert_array_equal(batch["new_obs"][i][p], ref.frames(ep, s + 1, frames))
            assert not batch["obs"][i][want["seq_lens"] :].any()


@SETTINGS
@given(specs=episode_specs, length=st.integers(1, 8), burn_in=st.integers(0, 4))
def test_sequence_matches_reference(specs, length, burn_in):
    eps = build(specs)
    batch, by_id, _ = expand_all(Sequence(length, burn_in), eps)
    assert len(batch) == sum(ref.valid_count(len(e), e.is_done, length) for e in eps)
    assert batch["obs"].shape[1] == length + burn_in
    check_sequence_rows(batch, by_id, length, burn_in)


@SETTINGS
@given(
    specs=episode_specs, length=st.integers(1, 5), burn_in=st.integers(0, 3), k=st.integers(2, 4)
)
def test_sequence_frame_stack_matches_reference(specs, length, burn_in, k):
    batch, by_id, _ = expand_all(FrameStack(k, Sequence(length, burn_in)), build(specs))
    assert batch["obs"].shape[1:] == (length + burn_in, k, 2)
    check_sequence_rows(batch, by_id, length, burn_in, frames=k)


# ---------------------------------------------------------------------- the edges, by name
@pytest.mark.parametrize("end", ["terminated", "truncated"])
@pytest.mark.parametrize("length,n", [(1, 1), (1, 3), (3, 3), (3, 5), (5, 3), (7, 7)])
def test_nstep_edges(end, length, n):
    ep = make_episode("a", length, end)
    batch, _, _ = expand_all(NStep(n, 0.5), [ep])
    assert len(batch) == length
    order = np.argsort(batch["t"])
    steps = batch["n_step"][order]
    np.testing.assert_array_equal(steps, [min(n, length - k) for k in range(length)])
    # Every window that reaches the end carries the episode's flag; the others none.
    reaches = np.array([k + min(n, length - k) == length for k in range(length)])
    flag, other = (
        ("terminateds", "truncateds") if end == "terminated" else ("truncateds", "terminateds")
    )
    np.testing.assert_array_equal(batch[flag][order], reaches)
    assert not batch[other].any()
    np.testing.assert_array_equal(batch["new_obs"][order][-1], ep.observations[-1])


def test_regression_rllib_terminal_window_flags():
    """RLlib 2.60 reports terminated=False and n_step=n for windows running past a terminal end."""
    ep = make_episode("a", 5, "terminated")
    batch, _, _ = expand_all(NStep(3, 0.9), [ep])
    last = batch["t"] == 4
    assert batch["terminateds"][last].all() and (batch["n_step"][last] == 1).all()
    assert batch["rewards"][last][0] == pytest.approx(ep.rewards[4])


@pytest.mark.timeout(20)
def test_regression_rllib_n_equal_to_episode_length_does_not_hang():
    buf = EpisodeReplayBuffer(100, unit=NStep(4, 0.9), seed=1)
    buf.add(make_episode("a", 4, "terminated"))
    batch = buf.sample(500)
    assert set(batch["n_step"].tolist()) == {1, 2, 3, 4}
    assert batch["terminateds"].all()  # every window of n = L reaches the terminal end


def test_regression_rllib_range_upper_bound_is_inclusive():
    buf = EpisodeReplayBuffer(1000, unit=NStep((1, 3), 0.9), seed=2)
    buf.add(make_episode("a", 200, "terminated"))
    steps = buf.sample(3000)["n_step"]
    counts = np.bincount(steps, minlength=4)[1:]
    assert (counts > 800).all(), counts  # 1, 2 and 3 each about a third


def test_unfinished_episode_offers_only_complete_windows():
    ep = make_episode("a", 6, "ongoing")
    for unit, window in (
        (Transition(), 1),
        (NStep(3, 0.9), 3),
        (NStep((2, 4), 0.9), 4),
        (Sequence(4, 2), 4),
        (FrameStack(3, NStep(2, 0.9)), 2),
    ):
        batch, _, buf = expand_all(unit, [ep])
        assert len(batch) == 6 - window + 1, unit
        t = batch["t"] if batch["t"].ndim == 1 else batch["t"][:, 0]
        assert t.max() + window <= 6
        assert not batch["terminateds"].any() and not batch["truncateds"].any()
        # Ending the episode (a zero-step fragment that says so) makes every step valid.
        buf.add(
            Episode(
                id="a",
                observations=ep.observations[-1:],
                actions=ep.actions[:0],
                rewards=ep.rewards[:0],
                truncated=True,
                t_started=6,
                extras={"logp": ep.extras["logp"][:0]},
            )
        )
        assert buf.valid_starts().total == 6


def test_sequence_padding_and_masks_by_hand():
    ep = make_episode("a", 3, "terminated")
    batch, _, _ = expand_all(Sequence(4, burn_in=2), [ep])
    row = int(
        np.flatnonzero(batch["t"][:, 0] == 0)[
            np.argmax(batch["loss_mask"][batch["t"][:, 0] == 0][:, 0])
        ]
    )
    # Start at step 0: no burn-in available, 3 loss steps, then zeros.
    assert batch["seq_lens"][row] == 3
    np.testing.assert_array_equal(batch["loss_mask"][row], [1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(batch["terminateds"][row], [0, 0, 1, 0, 0, 0])
    assert not batch["obs"][row][3:].any() and not batch["rewards"][row][3:].any()


@pytest.mark.parametrize(
    "make",
    [
        lambda: NStep(0),
        lambda: NStep((3, 2)),
        lambda: NStep((1, 2, 3)),
        lambda: NStep(2, 1.5),
        lambda: NStep(2.5),
        lambda: Sequence(0),
        lambda: Sequence(3, -1),
        lambda: FrameStack(0),
        lambda: FrameStack(2, unit="x"),
    ],
)
def test_bad_unit_arguments(make):
    with pytest.raises(ConfigError):
        make()


# ---------------------------------------------------------------------- SampleBatch
def test_sample_batch_basics():
    b = SampleBatch(obs=np.zeros((4, 2)), rewards=np.arange(4.0))
    assert len(b) == 4 and set(b.keys()) == {"obs", "rewards"} and "obs" in b
    s = b[1:3]
    assert len(s) == 2 and np.shares_memory(s["obs"], b["obs"])
    c = SampleBatch.concat([b, s])
    np.testing.assert_array_equal(c["rewards"], [0, 1, 2, 3, 1, 2])
    with pytest.raises(ValueError, match="rows"):
        b["x"] = np.zeros(3)
    with pytest.raises(ValueError, match="columns"):
        SampleBatch.concat([b, SampleBatch(obs=np.zeros((1, 2)))])
    assert "rewards=float64[4]" in repr(b)
    ma = MultiAgentBatch({"p0": b, "p1": s}, env_steps=5)
    assert ma.agent_steps() == 6 and ma["p1"] is s and len(ma) == 2
