"""The report's streaming statistics against plain references computed on the whole data."""

from __future__ import annotations

import io
import math

import gymnasium as gym
import numpy as np
import pytest
from conftest import make_episode
from hypothesis import given, settings
from hypothesis import strategies as st

from offline_prelearner.episodes.episode import Episode
from offline_prelearner.episodes.episode_columns import EpisodeColumns
from offline_prelearner.report.anomalies import anomalies
from offline_prelearner.report.collect import Collector, chunks
from offline_prelearner.report.drift import ALPHA, drift, ranks
from offline_prelearner.report.frames import to_png
from offline_prelearner.report.numbers import human, round_sig, round_to_step
from offline_prelearner.report.stats import Moments, OutOfBounds, Sample, histogram, thin

VALUES = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1.0]),
)


@st.composite
def chunked(draw: st.DrawFn) -> tuple[np.ndarray, list[int]]:
    """A ``[n, d]`` array and cut points splitting it into chunks (empty ones included)."""
    d = draw(st.integers(1, 3))
    n = draw(st.integers(1, 40))
    x = np.array(draw(st.lists(VALUES, min_size=n * d, max_size=n * d))).reshape(n, d)
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=5)))
    return x, cuts


def _reference(x: np.ndarray) -> dict[str, list[float]]:
    """Per column, a plain loop over the values: finite ones' moments, the others counted."""
    out: dict[str, list[float]] = {k: [] for k in ("count", "mean", "std", "min", "max", "nan")}
    out["inf"] = []
    for col in x.T.tolist():
        fin = [v for v in col if math.isfinite(v)]
        mean = sum(fin) / len(fin) if fin else 0.0
        var = sum((v - mean) ** 2 for v in fin) / len(fin) if fin else math.nan
        out["count"].append(len(fin))
        out["mean"].append(mean)
        out["std"].append(math.sqrt(var))
        out["min"].append(min(fin) if fin else math.inf)
        out["max"].append(max(fin) if fin else -math.inf)
        out["nan"].append(sum(1 for v in col if math.isnan(v)))
        out["inf"].append(sum(1 for v in col if math.isinf(v)))
    return out


@settings(max_examples=150, deadline=None)
@given(chunked())
def test_moments_over_any_chunks_equal_a_loop_over_the_whole(case: tuple) -> None:
    x, cuts = case
    m = Moments()
    for part in np.split(x, cuts):
        m.update(part)
    ref = _reference(x)
    assert m.count.tolist() == ref["count"]
    np.testing.assert_allclose(m.mean, ref["mean"], rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(m.std, ref["std"], rtol=1e-7, atol=1e-4)
    assert m.min.tolist() == ref["min"] and m.max.tolist() == ref["max"]
    assert m.nan.tolist() == ref["nan"]
    assert (m.posinf + m.neginf).tolist() == ref["inf"]


@settings(max_examples=60, deadline=None)
@given(chunked(), chunked())
def test_merging_moments_equals_one_pass(a: tuple, b: tuple) -> None:
    xa, xb = a[0], b[0]
    if xa.shape[1] != xb.shape[1]:
        xb = np.resize(xb, (len(xb), xa.shape[1]))
    left, right, whole = Moments(), Moments(), Moments()
    left.update(xa)
    right.update(xb)
    left.merge(right)
    whole.update(np.concatenate([xa, xb]))
    for field in ("count", "nan", "posinf", "neginf", "min", "max"):
        assert getattr(left, field).tolist() == getattr(whole, field).tolist(), field
    np.testing.assert_allclose(left.mean, whole.mean, rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(left.m2, whole.m2, rtol=1e-7, atol=1e-3)


def test_constant_dimensions() -> None:
    x = np.stack([np.full(50, 3.0), np.arange(50.0), np.full(50, 1.0)], axis=1)
    x[7, 2] = np.nan  # constant where finite, but not every value is
    m = Moments()
    m.update(x[:20])
    m.update(x[20:])
    assert m.constant.tolist() == [True, False, False]


def test_a_chunk_of_other_dimensions_is_refused() -> None:
    m = Moments()
    m.update(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="3 dimensions after 2"):
        m.update(np.zeros((3, 3)))


def test_sample_holds_everything_until_full_then_k_rows_of_the_data() -> None:
    s = Sample(k=10, seed=1)
    s.update(np.arange(6))
    assert s.values.tolist() == list(range(6))
    for lo in range(6, 1000, 37):
        s.update(np.arange(lo, min(lo + 37, 1000)))
    assert s.seen == 1000 and len(s.values) == 10 and len(set(s.values.tolist())) == 10
    again = Sample(k=10, seed=1)
    again.update(np.arange(6))
    for lo in range(6, 1000, 37):
        again.update(np.arange(lo, min(lo + 37, 1000)))
    assert again.values.tolist() == s.values.tolist()  # seeded: the same sample


def test_sample_is_uniform() -> None:
    # Every row is held with probability k / n, whatever the chunking.
    n, k, trials = 60, 6, 3000
    held = np.zeros(n)
    for seed in range(trials):
        s = Sample(k=k, seed=seed)
        for part in np.split(np.arange(n), [5, 17, 40]):
            s.update(part)
        held[s.values] += 1
    freq = held / trials
    assert np.all(np.abs(freq - k / n) < 0.035), freq


def test_out_of_bounds_counts_like_a_loop() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3)) * 2
    low, high = np.array([-1.0, -2.0, -3.0]), np.array([1.0, 2.0, 3.0])
    oob = OutOfBounds(low, high)
    oob.update(x[:77])
    oob.update(x[77:])
    ref = [sum(1 for v in x[:, d] if v < low[d] or v > high[d]) for d in range(3)]
    assert oob.count is not None and oob.count.tolist() == ref


def test_histogram_bins() -> None:
    v = np.array([0.0, 0.5, 1.0, 1.0, np.nan, 10.0])
    bins = histogram(v, 0.0, 10.0, bins=10)
    assert sum(c for _, _, c in bins) == 5  # NaN left out, every finite value in a bin
    assert bins[0] == (0.0, 1.0, 2) and bins[-1] == (9.0, 10.0, 1)
    # Integers: one bin per value, empty bins left out.
    ints = histogram(np.array([1, 1, 3, 7]), 1, 7, integer=True)
    assert ints == [(0.5, 1.5, 2), (2.5, 3.5, 1), (6.5, 7.5, 1)]
    assert histogram(np.full(4, 2.5), 2.5, 2.5) == [(2.0, 3.0, 4)]  # constant: one bin
    assert histogram(np.zeros(0), 0, 1) == []


@given(st.lists(st.floats(-100, 100), min_size=0, max_size=300), st.integers(1, 50))
def test_thin_is_means_of_equal_runs(ys: list[float], n: int) -> None:
    x, y = thin(np.array(ys), n)
    assert len(y) <= n and len(x) == len(y)
    if len(ys) <= n:
        assert y.tolist() == ys
        return
    run = -(-len(ys) // n)
    ref = [sum(ys[i : i + run]) / len(ys[i : i + run]) for i in range(0, len(ys), run)]
    np.testing.assert_allclose(y, ref, rtol=1e-9, atol=1e-9)


def test_drift() -> None:
    down = drift(np.linspace(180, 20, 200))
    assert down.found and (down.first, down.last) == pytest.approx((172.4, 27.6), abs=0.1)
    assert not drift(np.random.default_rng(0).normal(100, 10, 500)).found
    assert drift(np.linspace(180, 20, 50)).found  # 50 episodes: judged too
    assert down.power() is None  # 200 episodes: no caveat


def test_drift_is_judged_for_few_episodes_and_says_what_the_test_can_see() -> None:
    # Issue 35: 40 episodes whose returns go from 20 to 500.
    rng = np.random.default_rng(1)
    rising = drift(np.linspace(20, 500, 40) + rng.normal(0, 30, 40))
    assert rising.found and rising.rho > 0.9 and rising.p < 0.001 and rising.ends == 10
    assert rising.sentence().startswith("returns drift from ")
    assert "40 episodes" in rising.sentence()
    # D4RL's human sets have 25 episodes: judged; noise is not a drift; the power in words.
    noise = drift(rng.normal(100, 30, 25))
    assert noise.judged and not noise.found and noise.ends == 8
    power = noise.power()
    assert power is not None and power.startswith("With 25 episodes")
    assert f"{noise.critical:.2f}" in power and "may go unseen" in power
    assert 0.3 < noise.critical < 0.5  # a rank correlation of 0.4 is what 25 episodes can see
    # 5 episodes: only a steady rise can be told from chance (p = 2/5! exactly).
    five = drift(np.array([1.0, 2, 3, 4, 5]))
    assert five.found and five.p == pytest.approx(2 / 120) and five.critical == pytest.approx(1)
    four = drift(np.array([1.0, 2, 3, 40]))  # 4: no order reaches 5 %, not judged
    assert not four.judged and not four.found and "too few" in (four.power() or "")
    assert "not judged" in four.verdict()
    # A significant but tiny trend over many episodes is not reported.
    big = drift(rng.normal(100, 10, 5000) + np.linspace(0, 2, 5000))
    assert big.p < ALPHA and not big.found
    assert not drift(np.full(30, 7.0)).found  # constant: no order at all


def test_drift_p_values_against_the_exact_permutation_distribution() -> None:
    """The sampled null of 8 episodes gives the p-value that every one of the 8! orders gives
    (Spearman's rho is the correlation of ranks, computed for each of the 40,320 orders)."""
    import itertools

    v = np.array([3.0, 1, 4, 1, 5, 9, 2, 6])
    r = ranks(v)
    assert r.tolist() == [4.0, 1.5, 5.0, 1.5, 6.0, 8.0, 3.0, 7.0]
    x = np.arange(8.0)
    rho = np.corrcoef(r, x)[0, 1]
    orders = r[np.array(list(itertools.permutations(range(8))))]  # every order, one a row
    dev = orders - orders.mean(axis=1, keepdims=True)
    every = dev @ (x - x.mean()) / (np.linalg.norm(dev, axis=1) * np.linalg.norm(x - x.mean()))
    exact = np.mean(np.abs(every) >= abs(rho) - 1e-12)
    got = drift(v)
    assert got.rho == pytest.approx(rho)
    assert got.p == pytest.approx(exact, abs=0.02)  # 2,000 seeded orders


def test_numbers_are_rounded_as_a_person_writes_them() -> None:
    assert human(5000 / 222) == "22.52"
    assert human(7971) == "7,971" and human(12345.6) == "12,346" and human(4.0) == "4"
    assert human(2 / 3) == "0.6667" and human(-0.5) == "-0.5" and human(1.5e-7) == "1.500e-07"
    assert human(float("nan")) == "NaN" and human(True) == "yes" and human(None) == "-"
    assert round_sig(22.52252252252252) == 22.52 and round_sig(0.0) == 0.0
    edges = np.linspace(0.1, 0.1 + 1e-3, 31)  # narrow bins keep the decimals that part them
    rounded = [round_to_step(e, edges[1] - edges[0]) for e in edges]
    assert rounded == sorted(set(rounded))


def _summary(**kw: object) -> dict:
    d = {"not_done": 0, "rejected": {}, "rejected_episodes": {}, "duplicates": 0,
         "duplicate_rows": 0, "files_unreadable": [], "rows_balance": True, "rows": 10,
         "episodes": 1}  # fmt: skip
    d.update(kw)
    return d


def _collect(eps: list[Episode], obs_space: object = None, act_space: object = None) -> Collector:
    c = Collector(len(eps), obs_space, act_space)  # type: ignore[arg-type]
    for chunk in chunks(EpisodeColumns.from_episodes(eps)):
        c.add(chunk)
    return c


def test_anomalies_in_words() -> None:
    eps = []
    for i in range(120):  # returns drift down; obs[1] constant; obs[2] NaN once; action 3 unused
        e = make_episode(5, id=i, seed=i, obs_shape=(3,))
        obs = e.observations.copy()
        obs[:, 1] = 2.0
        if i == 7:
            obs[2, 2] = np.nan
        eps.append(
            Episode(
                id=i,
                observations=obs,
                actions=np.arange(5) % 3,
                rewards=np.full(5, (200 - 1.5 * i) / 5),
                terminated=True,
            )
        )
    box = gym.spaces.Box(-5.0, 5.0, (3,), np.float32)
    c = _collect(eps, box, gym.spaces.Discrete(4))
    found = anomalies(
        _summary(not_done=12, rejected={"nan": 30}, rejected_episodes={"nan": 3}),
        c,
        [drift(c.episode_returns), drift(c.episode_lengths, "episode lengths")],
    )
    words = [f.text for f in found]
    assert words[0] == "12 episodes end without a done flag"
    assert "30 rows rejected: nan (3 episodes)" in words
    assert "obs[1] is constant (2)" in words
    assert "obs[2] holds 1 NaN" in words
    assert "1 action of the declared space never taken: 3" in words
    assert any(w.startswith("returns drift from 191.8 to 29.75 over the recording") for w in words)
    assert not any("lengths drift" in w for w in words)  # every episode has 5 steps
    assert any(w.startswith("obs[0]:") and "outside the declared space [-5, 5]" in w for w in words)
    cells = {cell for f in found for cell in f.cells}
    assert {"obs[0]", "obs[1]", "obs[2]"} <= cells  # the table rows they explain


def test_nothing_odd_says_nothing() -> None:
    eps = [make_episode(6, id=i, seed=i) for i in range(8)]
    c = _collect(eps)
    assert anomalies(_summary(), c, [drift(c.episode_returns)]) == []


def test_every_constant_image_channel_is_listed() -> None:
    """Issue 35: a constant channel was highlighted in the table but not listed."""
    eps = []
    for i in range(3):
        frames = np.random.default_rng(i).integers(0, 256, (5, 8, 8, 3), dtype=np.uint8)
        frames[..., 2] = 0  # the blue channel is always 0
        eps.append(
            Episode(
                id=i,
                observations=frames,
                actions=np.arange(4) % 2,
                rewards=np.ones(4) * i,
                terminated=True,
            )
        )
    found = anomalies(_summary(), _collect(eps))
    assert [f.text for f in found] == ["obs[channel 2] is constant (0) in every frame"]
    assert found[0].cells == ("obs[channel 2]",)


def test_discounted_returns_equal_a_loop_over_each_episode() -> None:
    eps = [make_episode(n, id=i, seed=i) for i, n in enumerate([1, 7, 2, 30, 0])]
    for gamma in (0.0, 0.9, 1.0):
        c = Collector(len(eps), gamma=gamma)
        for chunk in chunks(EpisodeColumns.from_episodes(eps)):
            c.add(chunk)
        loop = [sum(gamma**t * float(r) for t, r in enumerate(e.rewards)) for e in eps]
        np.testing.assert_allclose(c.episode_discounted_returns, loop, rtol=1e-12)
    np.testing.assert_allclose(c.episode_discounted_returns, c.episode_returns)  # gamma 1


def test_chunks_cover_every_episode_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    from offline_prelearner.report import collect

    monkeypatch.setattr(collect, "CHUNK_BYTES", 200)  # 3 float32 dims: 16 observations a chunk
    eps = [make_episode(n, id=i) for i, n in enumerate([1, 20, 3, 3, 3, 40, 2])]
    parts = list(chunks(EpisodeColumns.from_episodes(eps)))
    assert [i for p in parts for i in p.ids] == list(range(7))
    assert len(parts) > 3 and all(len(p) for p in parts)


def test_collector_equals_plain_numpy_over_the_episodes() -> None:
    eps = [make_episode(n, id=i, seed=i, obs_shape=(2, 2)) for i, n in enumerate([3, 9, 1, 14])]
    c = _collect(eps)
    obs = np.concatenate([e.observations for e in eps]).reshape(-1, 4)
    leaf = c.leaves["obs"]
    np.testing.assert_allclose(leaf.moments.mean, obs.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(leaf.moments.std, obs.std(axis=0), rtol=1e-5)
    assert c.episode_lengths.tolist() == [3, 9, 1, 14]
    np.testing.assert_allclose(c.episode_returns, [e.rewards.sum() for e in eps])
    acts = np.concatenate([e.actions for e in eps])
    assert c.discrete_actions == {int(a): int((acts == a).sum()) for a in np.unique(acts)}


def test_frames_are_pngs_of_the_frame() -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for frame in (
        rng.integers(0, 256, (9, 12, 3), dtype=np.uint8),
        rng.integers(0, 256, (9, 12), dtype=np.uint8),
        rng.integers(0, 256, (9, 12, 4), dtype=np.uint8),
    ):
        back = np.asarray(Image.open(io.BytesIO(to_png(frame))))
        assert np.array_equal(back, frame)


def test_modules_keep_their_codes_across_chunks() -> None:
    c = Collector(4)
    c.add(EpisodeColumns.from_episodes([make_episode(3, id=0), make_episode(3, id=1)]))
    c.add(
        EpisodeColumns.from_episodes([make_episode(3, id=2, agent_id="a1"), make_episode(3, id=3)])
    )
    names = c.group_names
    assert [names[k] for k in c.episode_groups.tolist()] == ["default", "default", "a1", "default"]


def test_returns_equal_each_episodes_sum() -> None:
    eps = [make_episode(n, id=i, seed=i) for i, n in enumerate([1, 7, 2, 30])]
    c = _collect(eps)
    np.testing.assert_allclose(c.episode_returns, [e.total_reward for e in eps], rtol=1e-12)


@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 2)), min_size=1, max_size=80),
    st.booleans(),
)
def test_grouped_histogram_counts_like_a_loop(pairs: list[tuple[int, int]], integer: bool) -> None:
    from offline_prelearner.report.stats import grouped_histogram

    v = np.array([p[0] for p in pairs], np.float64)
    g = np.array([p[1] for p in pairs])
    cells = grouped_histogram(v, g, v.min(), v.max(), bins=7, integer=integer)
    for left, right, count, k in cells:
        last = right == max(c[1] for c in cells)  # the last bin holds its right edge
        held = [
            x for x, c in pairs if c == k and left <= x and (x < right or (last and x == right))
        ]
        assert count == len(held) > 0
    assert sum(c[2] for c in cells) == len(pairs)
    # Summed over groups: the plain histogram.
    plain = {(a, b): n for a, b, n in histogram(v, v.min(), v.max(), bins=7, integer=integer)}
    summed: dict[tuple[float, float], int] = {}
    for a, b, n, _ in cells:
        summed[(a, b)] = summed.get((a, b), 0) + n
    assert summed == plain
