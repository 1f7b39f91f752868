"""The multi-agent index of :mod:`.multi_agent`: how an agent's episode is keyed inside a
module's storage (:func:`encode` / :func:`decode`), which (episode id, agent id) each placement
stands for (:class:`Names`), and the union of env steps that lockstep sampling draws from
(:func:`merge`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from .storage.ring import EpisodeStorage, normalize_id

__all__ = ["Names", "agent_key", "decode", "encode", "episode_code", "merge"]


class Names:
    """Per placement serial of one module's storage: the episode id, agent id and a 63-bit code
    of the episode id that its internal key stands for (a window of serials, like the table)."""

    def __init__(self) -> None:
        self.off = 0  # serial of position 0
        self.eps = np.empty(0, object)
        self.agents = np.empty(0, object)
        self.code = np.zeros(0, np.int64)
        self.compactions = 0

    def set(self, serial: int, first: int, eid: Any, agent: Any, code: int) -> None:
        """Records what placement ``serial`` stands for, growing or sliding the window.

        Args:
            serial: The placement serial (only grows from call to call).
            first: The storage's oldest serial still in its table; entries older than it may
                be dropped when the window slides.
            eid: The episode id as the user gave it.
            agent: The agent id, or None.
            code: :func:`episode_code` of the encoded episode id.
        """
        i = serial - self.off
        assert i >= 0, "placement serials only grow"
        if i >= len(self.eps):  # slide the window to start at `first`, and grow it
            start = max(first, self.off)
            lo, hi = start - self.off, len(self.eps)
            n = max(0, hi - lo)
            size = max(16, 2 * (serial - start + 1))
            eps, agents = np.empty(size, object), np.empty(size, object)
            codes = np.zeros(size, np.int64)
            if n:
                eps[:n], agents[:n], codes[:n] = self.eps[lo:], self.agents[lo:], self.code[lo:]
            self.eps, self.agents, self.code, self.off = eps, agents, codes, start
            i = serial - start
        self.eps[i], self.agents[i], self.code[i] = eid, agent, code

    def get(self, serials: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Episode ids and agent ids of ``serials``.

        Args:
            serials: int64 placement serials inside the window.

        Returns:
            Two object arrays of the shape of ``serials``: episode ids and agent ids.
        """
        i = serials - self.off
        return self.eps.take(i), self.agents.take(i)

    def codes(self, serials: np.ndarray) -> np.ndarray:
        """Episode-id codes of ``serials``.

        Args:
            serials: int64 placement serials inside the window.

        Returns:
            int64 codes, the shape of ``serials``.
        """
        return self.code.take(serials - self.off)

    def rebuild(self, st: EpisodeStorage) -> None:
        """Starts over from the live episodes of ``st`` (after a restore).

        Args:
            st: The module's storage, whose ids are keys made by :func:`encode`.
        """
        self.__init__()  # type: ignore[misc]
        first = st.table.base + st.table.lo
        for row in np.flatnonzero(st.alive).tolist():
            eid, agent = decode(st.ids[row])
            self.set(first + row, first, eid, agent, episode_code(encode(eid, None)))


def agent_key(agent: Any) -> int | str | None:
    """The agent id as stored: None stays None, any other id is normalized.

    Args:
        agent: An agent id (int, numpy integer, str, ...) or None.

    Returns:
        None, or the id as ``normalize_id`` keys it (``int`` or ``str``).
    """
    return None if agent is None else normalize_id(agent)


def _enc1(v: Any) -> str:
    if v is None:
        return "n"
    return ("i" if isinstance(v, int) else "s") + str(v)


def encode(eid: int | str, agent: int | str | None) -> str:
    """The key of an agent's episode inside a module: ``<len>:<episode><agent>``, each part
    tagged ``i`` (int), ``s`` (str) or ``n`` (none), so it decodes back exactly.

    Args:
        eid: The normalized episode id.
        agent: The normalized agent id, or None (an episode-level key).

    Returns:
        The key, e.g. ``"2:i7sa"`` for episode 7, agent ``"a"``.
    """
    e = _enc1(eid)
    return f"{len(e)}:{e}{_enc1(agent)}"


def _dec1(s: str) -> int | str | None:
    return None if s == "n" else int(s[1:]) if s[0] == "i" else s[1:]


def decode(sid: Any) -> tuple[Any, Any]:
    """``(episode id, agent id)`` of a key made by :func:`encode`.

    Args:
        sid: A key made by :func:`encode` (anything whose ``str`` is one).

    Returns:
        The episode id and the agent id (None where the key has none), ints or strs as
        encoded.
    """
    n, _, rest = str(sid).partition(":")
    return _dec1(rest[: int(n)]), _dec1(rest[int(n) :])


def episode_code(s: str) -> int:
    """A 63-bit non-negative code of an encoded episode id (blake2b), stable across processes.

    Args:
        s: An episode id encoded by :func:`encode` (with agent None).

    Returns:
        An int in ``[0, 2**63)``.
    """
    digest = hashlib.blake2b(s.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def merge(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """Union of intervals ``[lo, hi)`` keyed by code: ``(code, lo, size)`` of the disjoint
    merged intervals, sorted by code then lo.

    Args:
        parts: Per module, ``(code, lo, hi)`` int64 arrays of equal length: an episode's code
            and its sampleable env steps ``[lo, hi)`` (``0 <= lo``, ``hi < 2**32``); empty
            intervals are dropped.

    Returns:
        ``(code, lo, size)`` int64 arrays of the merged intervals.
    """
    if not parts:
        z = np.zeros(0, np.int64)
        return z, z, z
    code = np.concatenate([p[0] for p in parts])
    lo = np.concatenate([p[1] for p in parts])
    hi = np.concatenate([p[2] for p in parts])
    keep = hi > lo
    code, lo, hi = code[keep], lo[keep], hi[keep]
    if len(code) == 0:
        return code, lo, hi - lo
    order = np.lexsort((lo, code))
    code, lo, hi = code[order], lo[order], hi[order]
    new_group = np.empty(len(code), bool)
    new_group[0] = True
    np.not_equal(code[1:], code[:-1], out=new_group[1:])
    group = np.cumsum(new_group) - 1
    reach = np.maximum.accumulate((group << 32) | hi) & 0xFFFFFFFF  # running max hi per group
    starts = new_group.copy()
    starts[1:] |= lo[1:] > reach[:-1]
    first = np.flatnonzero(starts)
    m_hi = np.maximum.reduceat(hi, first)
    return code[first], lo[first], m_hi - lo[first]
