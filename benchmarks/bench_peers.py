"""Our replay buffers on the peer benchmark's workloads, run back to back with cpprb and Tianshou.

The peer benchmark (``$OFFLINE_PRELEARNER_SHARED/bench/peers``, default ``<repo>/../shared/bench/
peers``; see its README) defines the data (1M CartPole-like steps in whole episodes, seeded) and
the workloads; this script imports its ``data.py`` so both sides see the same bytes, measures

* ``W1.episode`` -- add every episode with one ``add`` call each (cpprb: ``add`` +
  ``on_episode_end`` per episode), transitions/s;
* ``W1.chunk`` -- add whole episodes in >= 10k-step chunks, one call per chunk, transitions/s;
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
../shared/bench/peers/setup.sh``) with ``PEERS_WAIT_BUDGET_S=0``. ``--rounds K`` alternates
ours and the peers K times; every figure is the median over rounds (each round's own figure a
median of timed blocks). Output: ``_common.py`` JSON lines (``impl`` = ``ours`` | ``cpprb`` |
``tianshou``; peers' lines converted) and ``impl: "ratio"`` lines ours / peer, each timed the
peer's way: cpprb takes the median latency of single calls (robust to preemption on a busy
machine), Tianshou the median of blocks of calls; we measure both (``latency_throughput`` and
``throughput``) and compare like with like.
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
    "W2": ("W2", "CASE_W2"),
    "W3": ("W3", "CASE_W3"),
    "W4": ("W4", "CASE_W4"),
    "W6": ("W6", "compressed: cpprb next_of + stack_compress"),
    "W6.add": ("W6", "compressed: cpprb next_of + stack_compress"),
}
#: cpprb's unit of each of our W6 lines (its W6 prints several units under one case).
W6_UNITS = {"W6": "samples/s", "W6.add": "add transitions/s"}
DEFAULT_ONLY = "W1.episode,W1.chunk,W2,W3,W4,W6"


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

    bufs: list[Any] = []
    for name, per_ep in (("W1.episode", True), ("W1.chunk", False)):
        if name not in only:
            continue

        def fill(per_ep: bool = per_ep) -> None:
            bufs.clear()
            buf = EpisodeReplayBuffer(cap, seed=0)
            bufs.append(buf)
            add_all(buf, per_ep)

        t = C.time_repeats(fill, repeats)
        assert len(bufs[0]) == d.n
        lines.append(
            C.record(
                name,
                "ours",
                n=d.n,
                timing=t,
                unit="transitions/s",
                n_calls=len(eps) if per_ep else len(chunks),
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
def run_peer(lib: str, only: set[str], D: ModuleType) -> list[dict[str, Any]]:
    python = peer_python(lib)
    if not os.access(python, os.X_OK):
        why = f"no {lib} interpreter at {python} (run the peers' setup.sh)"
        return [{"bench": b, "impl": lib, "skipped": why} for b in PAIRS]
    script = peers_dir() / f"bench_{lib}.py"
    args = [python, str(script)]
    if lib == "cpprb":
        args += ["--only", ",".join(sorted({PAIRS[b][0] for b in only if b in PAIRS}))]
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
    for x in out:  # cpprb's memory for the W6 buffer, next to its sample rate like ours
        if x["bench"] == "W6" and w6_mem is not None:
            x["mem_mib"] = w6_mem
            x["bytes_per_step"] = round(w6_mem * 2**20 / D.N_PIXEL_TRANSITIONS, 1)
            x["bytes_per_step_over_frame"] = round(x["bytes_per_step"] / (D.FRAME * D.FRAME), 4)
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


def ratios(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by = {(x["bench"], x["impl"]): x for x in lines}
    out = []
    for (bench, impl), ours in by.items():
        if impl != "ours":
            continue
        for lib in ("cpprb", "tianshou"):
            theirs = by.get((bench, lib))
            if theirs is None:
                continue
            # Each peer's own method: cpprb times single calls (median latency), Tianshou
            # blocks of calls (median block); W1 adds are whole fills on both sides.
            mine = ours["throughput"]
            method = "median of blocks" if bench.startswith("W") else ""
            if lib == "cpprb" and "latency_throughput" in ours:
                mine, method = ours["latency_throughput"], "median call latency"
            if bench.startswith("W1"):
                method = "median of fills"
            elif bench == "W6.add":
                method = "one fill per round, median of rounds"
            out.append(
                {
                    "bench": bench,
                    "impl": "ratio",
                    "peer": lib,
                    "ratio": round(mine / theirs["throughput"], 2),
                    "unit": ours["unit"],
                    "ours": mine,
                    "theirs": theirs["throughput"],
                    "method": method,
                }
            )
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
            got = run_ours(D, only, args.repeats) if who == "ours" else run_peer(who, only, D)
            for x in got:
                x["round"] = r + 1
            lines += got
        per_round.append(lines)
    final = medians(per_round)
    for x in final:
        C.emit(x)
    for x in ratios(final):
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
