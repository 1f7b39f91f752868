"""Our replay buffers on the peer benchmark's workloads, run back to back with cpprb and Tianshou.

The peer benchmark (``$OFFLINE_PRELEARNER_SHARED/bench/peers``, default ``<repo>/../shared/bench/
peers``; see its README) defines the data (1M CartPole-like steps in whole episodes, seeded) and
the workloads; this script imports its ``data.py`` so both sides see the same bytes, measures

* ``W1.episode`` -- add every episode with one ``add`` call each (cpprb: ``add`` +
  ``on_episode_end`` per episode), transitions/s;
* ``W1.chunk`` -- add whole episodes in >= 10k-step chunks, one call per chunk, transitions/s;
* ``W1.per`` -- the same chunks into a prioritized buffer (alpha 0.6: every new step enters at
  the maximum priority; cpprb's ``PrioritizedReplayBuffer`` writes that priority into its sum and
  min trees per index), transitions/s, with the CPU time of both sides (``ratio_cpu``);
* ``W2`` -- uniform 1-step, B=256, samples/s;
* ``W3`` -- uniform 3-step (gamma 0.99), B=256, samples/s (Tianshou: ``sample`` +
  ``compute_nstep_return``; cpprb: n-step computed at add);
* ``W4`` -- prioritized sample + update of the priorities, B=256 (alpha 0.6, beta 0.4),
  samples/s;
* ``W6`` -- pixels (100k steps of 84x84 uint8 frames, ``data.make_pixel_dataset``): frame stacks
  of 4 for obs and new_obs, B=32, samples/s, against cpprb's ``next_of`` + ``stack_compress``
  buffer; the line also carries the memory (RSS growth while filling, and bytes per stored step
  against one 84x84 frame) and ``W6.add`` the add rate (one episode per ``add`` on both sides);

and runs the peers' own scripts (``bench_cpprb.py``, ``bench_tianshou.py``) under their venvs'
pythons (``$PEERS_CPPRB_PYTHON`` / ``$PEERS_TIANSHOU_PYTHON``, default
``$PEERS_ROOT/{cpprb,tianshou}/venv/bin/python``, ``PEERS_ROOT`` defaulting to
``<repo>/.bench/peers``; build them with ``PEERS_ROOT=.bench/peers bash
../shared/bench/peers/setup.sh``) with ``PEERS_WAIT_BUDGET_S=0``, except cpprb's W1.per and
W2-W4, which this script times itself under cpprb's python (:data:`CPPRB_BLOCKS`: the buffers
filled by ``bench_cpprb.py``'s own functions, then timed by the same rule as ours). ``--rounds K``
alternates ours and the peers K times. Output: ``_common.py`` JSON lines (``impl`` = ``ours`` |
``cpprb`` | ``tianshou``; each figure the median over rounds) and ``impl: "ratio"`` lines, ours /
peer: ``ratio`` is the median over rounds of the ratio *within* a round (``ratio_rounds``), with
``ratio_of_medians``, ``ratio_cpu`` (process CPU time, where both sides have it) and
``ratio_latency`` (median single-call latency) beside it.

**How it times, and why** (issue 24: this script's old rule gave uniform 3-step 0.85x cpprb
where an independent harness gave 1.29x). The issue names two differences; in both the old
rule was the wrong one:

* *Single-call latency vs blocks of calls.* The old rule compared ours with cpprb by the median
  latency of 200 single calls, because ``bench_cpprb.py`` reports only that. A median of single
  calls is a latency statistic: it drops every slow call, including those that are the library's
  own recurring cost (Python's garbage collector, the allocator handing memory back and faulting
  it in again), and the two libraries' latency distributions have different tails (a C++ loop vs
  numpy calls), so the ratio of medians is not the ratio of throughputs. What a training loop
  pays per sample is total time over many consecutive calls. Right: blocks of consecutive calls
  (median over 5 blocks of 200), the *same* timer on both sides -- so cpprb's sampling is now
  timed here, not read from its script -- and robustness to a busy machine from interleaved
  rounds and the median of per-round ratios (plus CPU time), not from discarding slow calls.
  Measured here on 2026-11-27 (2 shared cores, load 20-45): W3 1.88x by blocks vs 1.36x by
  latency in the same rounds; W2 1.30x vs 1.47x; W4 2.31x vs 3.16x -- the two rules disagree
  by up to 40% either way.
* *Warm vs cold heap* (W1 adds). cpprb's script frees the last fill and calls ``malloc_trim``
  before each fill, builds the buffer untimed, and times only the add calls, so its fills pay
  for faulting in fresh memory. Ours used to time construction plus adds with a warm heap (the
  previous, identical buffer's pages reused by the allocator), which is flattering: a program
  fills its buffer once, into fresh memory. Right: cold, as cpprb does; ours now does the same.

Each side also ran in its own process at a different moment (the VM flips between two
single-thread speeds within seconds), so only ratios paired within a round are quoted.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C

B = 256
CALLS = 200  # calls per timed block
BLOCKS = 5  # timed blocks per measurement (median)

#: (our bench name, peer workload, peer case) pairs that are the same measurement.
PAIRS = {
    "W1.episode": ("W1", "CASE_W1_EPISODE"),
    "W1.chunk": ("W1", "CASE_W1_CHUNK"),
    "W1.per": ("W1", "CASE_W1_PER"),
    "W2": ("W2", "CASE_W2"),
    "W3": ("W3", "CASE_W3"),
    "W4": ("W4", "CASE_W4"),
    "W6": ("W6", "compressed: cpprb next_of + stack_compress"),
    "W6.add": ("W6", "compressed: cpprb next_of + stack_compress"),
}
#: cpprb's unit of each of our W6 lines (its W6 prints several units under one case).
W6_UNITS = {"W6": "samples/s", "W6.add": "add transitions/s"}
DEFAULT_ONLY = "W1.episode,W1.chunk,W1.per,W2,W3,W4,W6"


def peers_dir() -> Path:
    shared = os.environ.get("OFFLINE_PRELEARNER_SHARED") or str(C.REPO.parent / "shared")
    return Path(shared) / "bench" / "peers"


def load_data_module() -> ModuleType:
    path = peers_dir() / "data.py"
    if not path.is_file():
        raise SystemExit(
            f"peer benchmark data.py not found at {path}: set OFFLINE_PRELEARNER_SHARED"
        )
    # Its timed blocks wait for a quiet machine unless told not to: measure at once, as the
    # peers' runs here do (their budget is read at import).
    os.environ.setdefault("PEERS_WAIT_BUDGET_S", "0")
    spec = importlib.util.spec_from_file_location("peers_data", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def peer_python(lib: str) -> str:
    env = os.environ.get(f"PEERS_{lib.upper()}_PYTHON")
    if env:
        return env
    root = os.environ.get("PEERS_ROOT") or str(C.REPO / ".bench" / "peers")
    return str(Path(root) / lib / "venv" / "bin" / "python")


# ----------------------------------------------------------------------------- our side
def episodes_of(D: ModuleType, d: Any) -> list[Any]:
    """The data set as our Episode objects (L + 1 observations: obs, then the last next_obs)."""
    from offline_prelearner.episodes.episode import Episode

    out = []
    for e, (a, n) in enumerate(zip(d.ep_starts.tolist(), d.ep_lengths.tolist(), strict=True)):
        b = a + n
        obs = np.concatenate([d.obs[a:b], d.next_obs[b - 1 : b]])
        out.append(
            Episode(
                id=e,
                observations=obs,
                actions=d.action[a:b],
                rewards=d.reward[a:b],
                terminated=bool(d.terminated[b - 1]),
                truncated=bool(d.truncated[b - 1]),
            )
        )
    return out


def blocks(fn: Any, calls: int = CALLS, n_blocks: int = BLOCKS) -> C.Timing:
    for _ in range(20):
        fn()
    times, cpus = [], []
    for _ in range(n_blocks):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            fn()
        times.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return C.Timing(tuple(times), tuple(cpus))


def run_ours(D: ModuleType, only: set[str], repeats: int) -> list[dict[str, Any]]:
    from offline_prelearner.replay.prioritized import PrioritizedEpisodeReplayBuffer
    from offline_prelearner.replay.replay_buffer import EpisodeReplayBuffer
    from offline_prelearner.replay.samplers.prioritized import Prioritized
    from offline_prelearner.replay.units import NStep

    d = D.make_vector_dataset()
    eps = episodes_of(D, d)
    cap = d.n + len(eps)  # slots: steps + one final observation per episode (nothing evicted)
    chunks = [(i, j) for i, j in _chunk_bounds(d.ep_lengths, 10_000)]
    lines: list[dict[str, Any]] = []
    extra = {"batch": B, "buffer_size": cap}

    def add_all(buf: EpisodeReplayBuffer, per_episode: bool) -> None:
        if per_episode:
            for ep in eps:
                buf.add(ep)
        else:
            for i, j in chunks:
                buf.add(eps[i:j])

    def fresh(name: str) -> EpisodeReplayBuffer:
        if name == "W1.per":
            return PrioritizedEpisodeReplayBuffer(cap, Prioritized(D.PER_ALPHA, D.PER_BETA), seed=0)
        return EpisodeReplayBuffer(cap, seed=0)

    bufs: list[Any] = []
    for name, per_ep in (("W1.episode", True), ("W1.chunk", False), ("W1.per", False)):
        if name not in only:
            continue

        def fill(name: str = name, per_ep: bool = per_ep) -> tuple[float, float]:
            # cpprb's rule (bench_cpprb.w1_add): a cold heap (the last fill's memory handed back
            # to the OS), the buffer built untimed, then only the add calls timed.
            bufs.clear()
            D.trim_memory()
            buf = fresh(name)
            bufs.append(buf)
            t0, c0 = time.perf_counter(), time.process_time()
            add_all(buf, per_ep)
            return time.perf_counter() - t0, time.process_time() - c0

        t = C.time_repeats(fill, repeats)
        assert len(bufs[0]) == d.n
        if name == "W1.per":  # untimed: every step sampleable, at the first priority (1)
            tree = bufs[0].sampler.sum_tree
            if tree is None or tree.total() != float(d.n):
                raise SystemExit(f"W1.per: the sum tree holds {tree and tree.total()}, not {d.n}")
        lines.append(
            C.record(
                name,
                "ours",
                n=d.n,
                timing=t,
                unit="transitions/s",
                n_calls=len(eps) if per_ep else len(chunks),
                heap="cold (malloc_trim before each fill), buffer built untimed",
            )
        )
        bufs.clear()

    def sampling(
        name: str, buf: Any, step: Any, batch: int = B, out: list[dict[str, Any]] | None = None
    ) -> None:
        t = blocks(step)
        # cpprb's own method too: the median latency of single calls (robust to preemption)
        med = D.median_latency(step, CALLS, n_warmup=20)[0]
        (lines if out is None else out).append(
            C.record(
                name,
                "ours",
                n=batch * CALLS,
                timing=t,
                unit="samples/s",
                latency_throughput=round(batch / med, 1),
                **{**extra, "batch": batch},
            )
        )

    if "W2" in only:
        buf = EpisodeReplayBuffer(cap, seed=0)
        add_all(buf, False)
        sampling("W2", buf, lambda: buf.sample(B))
        del buf
    if "W3" in only:
        buf3 = EpisodeReplayBuffer(cap, unit=NStep(D.N_STEP, D.GAMMA), seed=0)
        add_all(buf3, False)
        _check_nstep(D, d, buf3)
        sampling("W3", buf3, lambda: buf3.sample(B))
        del buf3
    if "W4" in only:
        pbuf = PrioritizedEpisodeReplayBuffer(cap, Prioritized(D.PER_ALPHA, D.PER_BETA), seed=0)
        add_all(pbuf, False)
        tds = D.td_errors(64, B)
        k = [0]

        def w4() -> None:
            batch = pbuf.sample(B)
            pbuf.update_priorities(batch["indices"], tds[k[0] % 64])
            k[0] += 1

        sampling("W4", pbuf, w4)
        del pbuf
    if "W6" in only or "W6.add" in only:
        lines += run_ours_pixels(D, sampling)
    return lines


def run_ours_pixels(D: ModuleType, sampling: Any) -> list[dict[str, Any]]:
    """W6: the pixel episodes (L + 1 single 84x84 frames each) added one episode per call into a
    buffer that stores each frame once and stacks at sample time (``FrameStack(4)``: obs and
    new_obs ``[32, 4, 84, 84]``, frames before an episode's start repeat its first)."""
    from offline_prelearner.episodes.episode import Episode
    from offline_prelearner.replay.replay_buffer import EpisodeReplayBuffer
    from offline_prelearner.replay.units import FrameStack

    p = D.make_pixel_dataset()
    eps = []
    for e, (a, n) in enumerate(zip(p.ep_starts.tolist(), p.ep_lengths.tolist(), strict=True)):
        f = int(p.frame_starts[e])
        eps.append(
            Episode(
                id=e,
                observations=p.frames[f : f + n + 1],
                actions=p.action[a : a + n],
                rewards=p.reward[a : a + n],
                terminated=bool(p.terminated[a + n - 1]),
                truncated=bool(p.truncated[a + n - 1]),
            )
        )
    D.trim_memory()
    base = D.rss_mib()
    buf = EpisodeReplayBuffer(p.n + len(eps), unit=FrameStack(D.STACK), seed=0)
    t0 = time.perf_counter()
    for ep in eps:
        buf.add(ep)
    add_s = time.perf_counter() - t0
    assert len(buf) == p.n
    D.trim_memory()
    mem_mib = D.rss_mib() - base  # the frames are views into p.frames: the buffer's own copy
    stored = buf.storage.nbytes()
    frame = p.frames[0].nbytes
    for _ in range(20):  # untimed: every stack a valid window, new_obs = obs advanced by one
        s = buf.sample(256)
        obs, new = (np.moveaxis(s[k], 1, -1) for k in ("obs", "new_obs"))
        if not D.check_pixel_sample(p, obs, new):
            raise SystemExit("W6: a sampled frame stack is not a window of one episode")
    lines = [
        {
            "bench": "W6.add",
            "impl": "ours",
            "throughput": round(p.n / add_s, 1),
            "unit": "transitions/s",
            "seconds": round(add_s, 6),
            "peak_mem_mb": None,
            "n": p.n,
            "n_calls": len(eps),
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
    ]
    mem = {
        "mem_mib": round(mem_mib, 1),
        "bytes_per_step": round(stored / p.n, 1),
        "bytes_per_step_over_frame": round(stored / p.n / frame, 4),
    }
    got: list[dict[str, Any]] = []
    sampling("W6", buf, lambda: buf.sample(32), batch=32, out=got)
    got[0].update(mem, buffer_size=p.n + len(eps))
    return lines + got


def _chunk_bounds(lengths: np.ndarray, target: int) -> list[tuple[int, int]]:
    """Episode index ranges of the peers' >= ``target``-step chunks (``data.episode_chunks``)."""
    out, a, acc = [], 0, 0
    for e, n in enumerate(lengths.tolist()):
        acc += n
        if acc >= target:
            out.append((a, e + 1))
            a, acc = e + 1, 0
    if a < len(lengths):
        out.append((a, len(lengths)))
    return out


def _check_nstep(D: ModuleType, d: Any, buf: Any) -> None:
    """Untimed: a large sample's n-step rewards and next observations equal the reference."""
    s = buf.sample(4096)
    idx = np.asarray(s["eps_id"], np.int64)
    idx = d.ep_starts[idx] + np.asarray(s["t"], np.int64)
    chk = D.nstep_check(d, idx, s["rewards"], s["new_obs"], s["terminateds"])
    if min(chk["reward_match"], chk["next_obs_match"], chk["terminal_match"]) < 1.0:
        raise SystemExit(f"W3 n-step check failed: {chk}")


# ----------------------------------------------------------------------------- the peers
def run_peer(lib: str, only: set[str], D: ModuleType, repeats: int) -> list[dict[str, Any]]:
    python = peer_python(lib)
    if not os.access(python, os.X_OK):
        why = f"no {lib} interpreter at {python} (run the peers' setup.sh)"
        return [{"bench": b, "impl": lib, "skipped": why} for b in PAIRS]
    script = peers_dir() / f"bench_{lib}.py"
    args = [python, str(script)]
    if lib == "cpprb":  # its sampling workloads are timed by run_cpprb_blocks instead
        todo = sorted({PAIRS[b][0] for b in only if b in PAIRS and b not in BLOCK_TIMED})
        if not todo:
            return run_cpprb_blocks(only, repeats)
        args += ["--only", ",".join(todo)]
    env = dict(os.environ, PEERS_WAIT_BUDGET_S="0")
    proc = subprocess.run(args, stdout=subprocess.PIPE, text=True, env=env, check=False)
    if proc.returncode != 0:
        return [{"bench": b, "impl": lib, "skipped": f"exit {proc.returncode}"} for b in PAIRS]
    cases = {getattr(D, case, case): bench for bench, (_, case) in PAIRS.items()}
    out = []
    w6_mem = None
    for raw in proc.stdout.splitlines():
        if not raw.startswith("{"):
            continue
        x = json.loads(raw)
        unit = x["unit"]
        bench = cases.get(x["params"].get("case"))
        if bench is not None and bench.startswith("W6"):
            if unit == "MiB (RSS delta)":
                w6_mem = round(float(x["value"]), 1)
                continue
            bench = next((b for b, u in W6_UNITS.items() if u == unit), None)
            unit = {"add transitions/s": "transitions/s"}.get(unit, unit)
        if bench is None or bench not in only or unit not in ("transitions/s", "samples/s"):
            continue
        if lib == "cpprb" and bench in BLOCK_TIMED:  # its W1 run fills a PER buffer too
            continue
        out.append(
            {
                "bench": bench,
                "impl": lib,
                "throughput": round(float(x["value"]), 1),
                "unit": unit,
                "seconds": None,
                "peak_mem_mb": None,
                "n": None,
                "loadavg_1m": round(os.getloadavg()[0], 2),
                "peer": x["params"],
            }
        )
    if lib == "cpprb":
        out += run_cpprb_blocks(only, repeats)
    for x in out:  # cpprb's memory for the W6 buffer, next to its sample rate like ours
        if x["bench"] == "W6" and w6_mem is not None:
            x["mem_mib"] = w6_mem
            x["bytes_per_step"] = round(w6_mem * 2**20 / D.N_PIXEL_TRANSITIONS, 1)
            x["bytes_per_step_over_frame"] = round(x["bytes_per_step"] / (D.FRAME * D.FRAME), 4)
    return out


#: cpprb's sampling workloads timed by this script's own rule (see the top of the file), run by
#: the cpprb venv's python: ``python -c CPPRB_BLOCKS <peers dir> <workloads> <calls> <blocks>
#: <fills>``. The buffers are filled as ``bench_cpprb.py`` fills them (its own functions), and
#: ``W1.per`` (PER add) is timed as its ``w1_add`` times it, plus the process's CPU time.
CPPRB_BLOCKS = """
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import cpprb, data as D, bench_cpprb as P
only, calls, n_blocks = set(sys.argv[2].split(",")), int(sys.argv[3]), int(sys.argv[4])
reps = int(sys.argv[5])
d = D.make_vector_dataset()
N, B = d.n, 256
def blocks(fn):
    for _ in range(20):
        fn()
    out, cpu = [], []
    for _ in range(n_blocks):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls)
        cpu.append((time.process_time() - c0) / calls)
    return float(np.median(out)), float(np.median(cpu))
def report(bench, fn):
    per_call, cpu = blocks(fn)
    lat = D.median_latency(fn, calls, n_warmup=20)[0]
    print(json.dumps({"bench": bench, "blocks_s": per_call, "cpu_s": cpu, "latency_s": lat}),
          flush=True)
np.random.seed(0)
if "W1.per" in only:  # bench_cpprb.w1_add's fill, with this process's CPU time as well
    chunks = D.episode_chunks(d.ep_lengths, 10_000)
    walls, cpus = [], []
    for rep in range(reps + 1):  # the first one untimed, as ours
        rb = None
        D.trim_memory()
        rb = cpprb.PrioritizedReplayBuffer(N, P.env_dict(), alpha=D.PER_ALPHA)
        t0, c0 = time.perf_counter(), time.process_time()
        for a, b in chunks:
            P.add_range(rb, d, a, b)
        if rep:
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
    assert rb.get_stored_size() == N
    del rb
    print(json.dumps({"bench": "W1.per", "fill_s": float(np.median(walls)),
                      "cpu_s": float(np.median(cpus)), "reps": reps, "n": N}), flush=True)
if "W2" in only:
    rb = P.fill(lambda: cpprb.ReplayBuffer(N, P.env_dict()), d,
                D.episode_chunks(d.ep_lengths, 10_000), False)[0]
    report("W2", lambda: rb.sample(B))
    del rb
if "W3" in only:
    nstep = {"size": D.N_STEP, "gamma": D.GAMMA, "rew": "rew", "next": "next_obs"}
    rb = P.fill(lambda: cpprb.ReplayBuffer(N, P.env_dict(), Nstep=nstep), d,
                D.episode_chunks(d.ep_lengths, None), True, copy_rew=True)[0]
    report("W3", lambda: rb.sample(B))
    del rb
if "W4" in only:
    rb = P.fill(lambda: cpprb.PrioritizedReplayBuffer(N, P.env_dict(), alpha=D.PER_ALPHA), d,
                D.episode_chunks(d.ep_lengths, 10_000), False)[0]
    tds = D.td_errors(64, B)
    k = [0]
    def step():
        s = rb.sample(B, beta=D.PER_BETA)
        rb.update_priorities(s["indexes"], tds[k[0] % 64])
        k[0] += 1
    report("W4", step)
"""
#: The workloads whose cpprb side CPPRB_BLOCKS times.
BLOCK_TIMED = ("W1.per", "W2", "W3", "W4")


def run_cpprb_blocks(only: set[str], repeats: int) -> list[dict[str, Any]]:
    """cpprb's W2-W4 timed in blocks of calls by :data:`CPPRB_BLOCKS`, as lines ``impl:
    "cpprb"`` with ``throughput`` (median block) and ``latency_throughput`` (median call), and
    its W1.per fill (``repeats`` timed fills: wall and CPU time)."""
    todo = [b for b in BLOCK_TIMED if b in only]
    python = peer_python("cpprb")
    if not todo or not os.access(python, os.X_OK):
        return []
    args = [python, "-c", CPPRB_BLOCKS, str(peers_dir()), ",".join(todo), str(CALLS)]
    args += [str(BLOCKS), str(repeats)]
    env = dict(os.environ, PEERS_WAIT_BUDGET_S="0")
    proc = subprocess.run(args, stdout=subprocess.PIPE, text=True, env=env, check=False)
    if proc.returncode != 0:
        return [{"bench": b, "impl": "cpprb", "skipped": f"exit {proc.returncode}"} for b in todo]
    out = []
    for raw in proc.stdout.splitlines():
        x = json.loads(raw)
        if x["bench"] == "W1.per":
            n = int(x["n"])
            out.append(
                {
                    "bench": "W1.per",
                    "impl": "cpprb",
                    "throughput": round(n / x["fill_s"], 1),
                    "cpu_throughput": round(n / x["cpu_s"], 1),
                    "unit": "transitions/s",
                    "seconds": round(x["fill_s"], 6),
                    "peak_mem_mb": None,
                    "n": n,
                    "repeats": x["reps"],
                    "loadavg_1m": round(os.getloadavg()[0], 2),
                    "timed_by": "bench_peers.py (bench_cpprb's fill, cold heap, add calls only)",
                }
            )
            continue
        out.append(
            {
                "bench": x["bench"],
                "impl": "cpprb",
                "throughput": round(B / x["blocks_s"], 1),
                "latency_throughput": round(B / x["latency_s"], 1),
                "cpu_throughput": round(B / x["cpu_s"], 1),
                "unit": "samples/s",
                "seconds": round(x["blocks_s"] * CALLS, 6),
                "peak_mem_mb": None,
                "n": B * CALLS,
                "loadavg_1m": round(os.getloadavg()[0], 2),
                "timed_by": "bench_peers.py (blocks of calls, as ours)",
            }
        )
    return out


def medians(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per (bench, impl): the round with the median throughput, with all rounds' figures."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for lines in rounds:
        for x in lines:
            if x.get("throughput") is not None:
                by.setdefault((x["bench"], x["impl"]), []).append(x)
    out = []
    for xs in by.values():
        xs = sorted(xs, key=lambda x: x["throughput"])
        mid = dict(xs[(len(xs) - 1) // 2])
        mid["throughput"] = round(statistics.median(x["throughput"] for x in xs), 1)
        if all(x.get("cpu_throughput") for x in xs):
            mid["cpu_throughput"] = round(statistics.median(x["cpu_throughput"] for x in xs), 1)
            mid["cpu_rounds"] = [x["cpu_throughput"] for x in xs]
        if all("latency_throughput" in x for x in xs):
            mid["latency_throughput"] = round(
                statistics.median(x["latency_throughput"] for x in xs), 1
            )
        mid["rounds"] = [x["throughput"] for x in xs]
        mid["loadavg_rounds"] = [x["loadavg_1m"] for x in xs]
        if all("mem_mib" in x for x in xs):
            mid["mem_mib_rounds"] = [x["mem_mib"] for x in xs]
        out.append(mid)
    return out


def ratios(lines: list[dict[str, Any]], rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Ours / each peer per bench: the median over rounds of the ratio within a round (both
    sides measured minutes apart at most), plus the ratio of the medians over rounds."""
    by = {(x["bench"], x["impl"]): x for x in lines}
    out = []
    for (bench, impl), ours in by.items():
        if impl != "ours":
            continue
        for lib in ("cpprb", "tianshou"):
            theirs = by.get((bench, lib))
            if theirs is None:
                continue
            method = "median of blocks (both sides timed by this script)"
            if lib == "tianshou":
                method = "median of blocks (Tianshou's script; ours the same way)"
            if bench.startswith("W1"):
                method = "median of fills, add calls only, cold heap (both sides)"
            elif bench == "W6.add":
                method = "one fill per round, median of rounds"
            elif bench == "W6":  # cpprb's script times only single calls here
                method = "median call latency (cpprb's script; ours the same way)"
            key = "latency_throughput" if bench == "W6" and lib == "cpprb" else "throughput"
            per_round = []
            for got in rounds:
                a = next((x for x in got if x["bench"] == bench and x["impl"] == "ours"), None)
                b = next((x for x in got if x["bench"] == bench and x["impl"] == lib), None)
                if a and b and a.get(key) and b.get("throughput"):
                    per_round.append(a[key] / b["throughput"])
            if not per_round:
                continue
            mine = ours.get(key) or ours["throughput"]
            line = {
                "bench": bench,
                "impl": "ratio",
                "peer": lib,
                "ratio": round(statistics.median(per_round), 2),
                "unit": ours["unit"],
                "ours": mine,
                "theirs": theirs["throughput"],
                "method": method,
                "ratio_rounds": [round(r, 2) for r in per_round],
                "ratio_of_medians": round(mine / theirs["throughput"], 2),
            }
            if ours.get("cpu_throughput") and theirs.get("cpu_throughput"):
                line["ratio_cpu"] = round(ours["cpu_throughput"] / theirs["cpu_throughput"], 2)
            if "latency_throughput" in ours and "latency_throughput" in theirs:
                line["ratio_latency"] = round(
                    ours["latency_throughput"] / theirs["latency_throughput"], 2
                )
            out.append(line)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=DEFAULT_ONLY, help="benches, e.g. W3,W4")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of ours and the peers")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats of each W1 add")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--peers", default="cpprb,tianshou")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if "W6" in only:  # one pixel fill gives both
        only.add("W6.add")
    D = load_data_module()
    libs = [] if args.no_peers else args.peers.split(",")
    per_round: list[list[dict[str, Any]]] = []
    for r in range(args.rounds):
        order = ["ours", *libs] if r % 2 == 0 else [*libs, "ours"]
        lines: list[dict[str, Any]] = []
        for who in order:
            C.log(f"round {r + 1}/{args.rounds}: {who} (load {os.getloadavg()[0]:.2f})")
            got = (
                run_ours(D, only, args.repeats)
                if who == "ours"
                else run_peer(who, only, D, args.repeats)
            )
            for x in got:
                x["round"] = r + 1
            lines += got
        per_round.append(lines)
    final = medians(per_round)
    for x in final:
        C.emit(x)
    for x in ratios(final, per_round):
        C.emit(x)
        C.log(
            f"{x['bench']:<11} ours/{x['peer']:<8} {x['ratio']:.2f}x ({x['ours']:,.0f} / "
            f"{x['theirs']:,.0f} {x['unit']})"
        )
    skipped = [x for lines in per_round for x in lines if "skipped" in x]
    for x in skipped[: len(PAIRS) * len(libs)]:
        C.emit(x)


if __name__ == "__main__":
    main()
