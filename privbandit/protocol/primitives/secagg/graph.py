"""Who masks with whom: the complete graph (Bonawitz et al. 2017) or a sparse random Harary graph
(SecAgg+, Bell et al. 2020, §3 "the communication graph").

Each user u pairs masks with its neighbours N(u) and Shamir-shares its secrets among its
*holders* N(u) ∪ {u}; keeping a share for itself is what lets a surviving user's own share count
towards the threshold, as in Bonawitz et al. (shares for every v ∈ U₁, u included).

Sparse mode (Bell et al. 2020): the Harary graph H(n, k) — position i is joined to positions
i ± 1, …, i ± k/2 (mod n) — under a uniformly random relabelling of the users, drawn from public
randomness (the ``seed`` argument) so every party computes the same graph. The degree k (even, so
H(n, k) is k-regular) and the threshold t come from a threat model (:mod:`.parameters`: the
corrupt fraction, the dropout rate, the security and failure targets); the round's plan carries
them, and without one the defaults of :class:`~.parameters.ThreatModel` apply. Once k ≥ n − 1
the graph is complete.

Complete mode keeps ``t = ⌊2n/3⌋ + 1``: the t > 2n/3 bound of Bonawitz et al. 2017 for an active
server colluding with fewer than n/3 users, conservative for the semi-honest rounds implemented
here; :func:`~.parameters.check_complete` checks it against a threat model. A caller may pass an
explicit ``threshold`` (and, in sparse mode, ``degree``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np

from privbandit.protocol.primitives.secagg.parameters import ThreatModel, derive

MAX_USER_ID = 2**31 - 3  # Shamir x = id + 1 must be < 2³¹ − 1


def default_threshold(holders: int) -> int:
    """t = ⌊2h/3⌋ + 1, the complete graph's threshold (see the module docstring)."""
    return (2 * holders) // 3 + 1


class MaskingGraph:
    """The public masking/sharing graph of one round."""

    def __init__(self, user_ids: Sequence[int], mode: str = "complete", *, seed: bytes = b"",
                 threshold: int | None = None, degree: int | None = None):
        ids = sorted(int(u) for u in user_ids)
        if len(ids) < 2 or len(set(ids)) != len(ids):
            raise ValueError("need at least two distinct user ids")
        if ids[0] < 0 or ids[-1] > MAX_USER_ID:
            raise ValueError(f"user ids must lie in [0, {MAX_USER_ID}]")
        if mode not in ("complete", "sparse"):
            raise ValueError(f"unknown graph mode {mode!r}")
        self.user_ids = tuple(ids)
        self.n = len(ids)
        if mode == "complete":
            k = self.n - 1
        elif degree is None:
            derived = derive(self.n, ThreatModel())
            k, threshold = derived.k, derived.t if threshold is None else threshold
        else:
            k = int(degree)
        if not 1 <= k or (k < self.n - 1 and k % 2):
            raise ValueError(f"sparse degree {k} must be even and ≥ 2 (or ≥ n − 1 = {self.n - 1}: complete)")
        self.complete = k >= self.n - 1
        self.mode = mode
        self.degree = self.n - 1 if self.complete else k
        self.threshold = default_threshold(self.degree + 1) if threshold is None else int(threshold)
        if not 1 <= self.threshold <= self.degree + 1:
            raise ValueError(f"threshold {self.threshold} outside [1, {self.degree + 1}]")
        if not self.complete:
            # Public randomness → a random relabelling of the Harary graph's positions.
            rng = np.random.default_rng(int.from_bytes(hashlib.sha256(b"privbandit/secagg/graph" + seed).digest(), "big"))
            self._order = np.asarray(ids, dtype=np.int64)[rng.permutation(self.n)]
            self._position = {int(u): p for p, u in enumerate(self._order)}
        self._connected_memo: dict[frozenset[int], bool] = {}
        self._neighbour_memo: dict[int, tuple[int, ...]] = {}

    def neighbours(self, u: int) -> tuple[int, ...]:
        if self.complete:
            return tuple(v for v in self.user_ids if v != u)
        # Memoized (sparse only; O(k) each): the server's holder checks ask for every user at
        # every step. The graph is public and fixed for the round, so caching leaks nothing.
        if u not in self._neighbour_memo:
            p = self._position[u]
            half = self.degree // 2
            offsets = [o for o in range(-half, half + 1) if o]
            self._neighbour_memo[u] = tuple(sorted(int(self._order[(p + o) % self.n]) for o in offsets))
        return self._neighbour_memo[u]

    def positions(self, users) -> np.ndarray:
        """Each user's place on the graph's ring (sparse: the Harary graph's position, so
        neighbours are within k/2 places, mod n; complete: its rank among the ids, as every pair
        is an edge anyway). Public: what :func:`contiguous_hosts` splits."""
        users = np.asarray(users, dtype=np.int64).reshape(-1)
        if self.complete:
            return np.searchsorted(np.asarray(self.user_ids, dtype=np.int64), users)
        return np.asarray([self._position[int(u)] for u in users.tolist()], dtype=np.int64)

    def holders(self, u: int) -> tuple[int, ...]:
        """Who holds shares of u's secrets: N(u) ∪ {u}, sorted."""
        return tuple(sorted((*self.neighbours(u), u)))

    def live_holders(self, live: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, h)``: the users of ``live``, sorted, and how many of each one's holders
        N(u) ∪ {u} are in ``live``. One vector pass per ring offset (the server checks every live
        user at every step: a Python count per user was O(n·k) interpreted steps per check)."""
        ids = np.asarray(sorted(int(u) for u in live), dtype=np.int64)
        if self.complete:
            return ids, np.full(ids.size, ids.size, dtype=np.int64)
        pos = np.asarray([self._position[int(u)] for u in ids], dtype=np.int64)
        alive = np.zeros(self.n, dtype=bool)
        alive[pos] = True
        count = np.ones(ids.size, dtype=np.int64)  # u itself
        half = self.degree // 2
        for o in range(1, half + 1):
            count += alive[(pos + o) % self.n]
            count += alive[(pos - o) % self.n]
        return ids, count

    def connected(self, survivors: Iterable[int]) -> bool:
        """Is the graph induced on ``survivors`` connected?

        After unmasking, the server can sum masked inputs over any connected component of the
        survivors' graph and see that component's partial sum; a connected survivor graph is what
        makes the total the *only* thing it learns (Bell et al. 2020, §3). Memoized: every user
        of a round checks the same announced set.
        """
        s = frozenset(survivors)
        if self.complete or len(s) <= 1:
            return True
        if s not in self._connected_memo:
            idx = {u: i for i, u in enumerate(sorted(s))}
            rows, cols = [], []
            for u in s:
                for v in self.neighbours(u):
                    if v in idx:
                        rows.append(idx[u])
                        cols.append(idx[v])
            from scipy.sparse import csr_matrix  # here: scipy costs every party ~0.4 s of start-up
            from scipy.sparse.csgraph import connected_components

            adj = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(s), len(s)))
            self._connected_memo[s] = connected_components(adj, directed=False)[0] == 1
        return self._connected_memo[s]


def contiguous_hosts(graph: MaskingGraph, users, shards: int) -> np.ndarray:
    """Which of ``shards`` processes runs each user of ``users``: the ring cut into ``shards``
    contiguous arcs of ⌊n/shards⌋ or ⌈n/shards⌉ places (place p on ⌊p·shards/n⌋). Every edge
    within an arc joins two users of one process, so with k ≪ n/shards all but the
    ``shards·(k/2)(k/2 + 1)/2`` edges that cross an arc's two ends are (:func:`intra_fraction`).
    Public, as the graph is: every fleet and the aggregator compute the same split."""
    if shards < 1:
        raise ValueError(f"shards must be ≥ 1, got {shards}")
    return graph.positions(users) * shards // graph.n


def intra_fraction(graph: MaskingGraph, hosts: dict[int, int]) -> float:
    """The fraction of the graph's edges whose two ends ``hosts`` (user → process) puts on one
    process: the pairs whose key agreement one process can do once for both ends."""
    same = total = 0
    for u in graph.user_ids:
        for v in graph.neighbours(u):
            if v > u:
                total += 1
                same += hosts[u] == hosts[v]
    return same / total if total else 1.0
