"""The concurrent-shuffle counter (Algorithms 2 and 3), sans-I/O and vectorized over runs.

- :class:`CounterSpec`: the public description of one counter: its tree
  (:mod:`.tree`), each level's mechanism (:mod:`.mechanisms`), the budget split.
- :func:`user_reports`: what users first … last − 1 send to level i's shuffler (count-encoded, one
  integer each), drawn from ``(seed, "cs-user-noise", label, run, level, chunk)`` in chunks of
  :data:`~.world.CHUNK` users: a fleet's block and the vectorized counter draw the same numbers.
- :class:`CounterServer`: the server of Alg. 1/3. It turns each executed node's release (the sum of
  its users' counts, or of their split-and-mix shares mod M) into S_v and answers Ŝ_t = Σ_{v∈V_t} S_v. **It uses no randomness** in the
  shuffle modes (Alg. 1: "the server is assumed deterministic"); only the central tree's trusted
  server adds Lap_Z noise, from its own key.
- :func:`simulate`: a whole counter run for R runs at once: every level's reports, the node sums a
  shuffler releases, the server's estimates at every t0 = s_1, 2s_1, … (no Python loop over users or
  times). The spine's family (:mod:`.parties`) drives the same functions one plan at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from privbandit.families.concurrent_shuffle import mechanisms as mech
from privbandit.families.concurrent_shuffle import world
from privbandit.families.concurrent_shuffle.tree import SHUFFLE_MODES, Tree, prefix_estimates, tree_for
from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.privacy import Ledger
from privbandit.protocol.spine.errors import ProtocolError

CHUNK = world.CHUNK


@dataclass(frozen=True)
class CounterSpec:
    mode: str
    protocol: str
    epsilon: float
    delta: float
    tree: Tree
    level_epsilon: float
    level_delta: float
    mechanisms: tuple

    @property
    def n(self) -> int:
        return self.tree.n

    @property
    def k(self) -> int:
        return self.tree.k

    @property
    def trust(self) -> str:
        return self.mechanisms[0].trust

    def describe(self) -> dict:
        return {**self.tree.describe(), "protocol": self.protocol if self.mode in SHUFFLE_MODES else None,
                "epsilon": self.epsilon, "delta": self.delta, "level_epsilon": self.level_epsilon,
                "level_delta": self.level_delta, "trust": self.trust,
                "levels": [m.describe() for m in self.mechanisms],
                "bits_per_user_theory": [m.bits_per_user() for m in self.mechanisms]}


def counter_spec(mode: str, n: int, k: int | None, epsilon: float, delta: float, protocol: str = "split-mix",
                 d_low: int | None = None, degree: int | None = None, vec_scale: float | None = None) -> CounterSpec:
    tree = tree_for(mode, n, k, d_low, degree)
    eps_l, delta_l = mech.level_budget(mode, epsilon, delta, tree.k, n)
    mechanisms = tuple(mech.level_mechanism(mode, protocol, s, eps_l, delta_l, vec_scale, n) for s in tree.sizes)
    return CounterSpec(mode, protocol, epsilon, delta, tree, eps_l, delta_l, mechanisms)


def ledger(spec: CounterSpec, users: int | None = None) -> Ledger:
    """An empty ledger for one run: the trust model, the target ε and δ (for n users)."""
    delta = spec.delta if spec.mode != "ldp" else min(spec.delta, 0.5)
    return Ledger(spec.trust, spec.epsilon, delta, users=users or spec.n)


def record_levels(spec: CounterSpec, book: Ledger) -> None:
    """Every node's event, in lane ``level-i``: one level's nodes reach disjoint users (parallel),
    the levels compose sequentially, so a user pays one node per level."""
    for level, m in enumerate(spec.mechanisms, start=1):
        nodes = spec.tree.nodes(level)
        if nodes:
            book.record(m.event(), f"level-{level}", None, releases=nodes)


# --- the users' side ---------------------------------------------------------------------------

def user_noise(spec: CounterSpec, level: int, seed: int, label: str, run: int, first: int, last: int):
    """Level ``level``'s randomizer draws of users first … last − 1 (0-based)."""
    m = spec.mechanisms[level - 1]
    lo, hi = first // CHUNK, -(-last // CHUNK)
    parts = [m.draw((CHUNK,), stream(seed, "cs-user-noise", label, run, level, c)) for c in range(lo, hi)]
    a, b = first - lo * CHUNK, last - lo * CHUNK
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(p, axis=0)[a:b] for p in zip(*parts))
    return np.concatenate(parts)[a:b]


def user_reports(spec: CounterSpec, level: int, bits: np.ndarray, seed: int, label: str, runs: list[int],
                 first: int) -> np.ndarray:
    """What users first … first + w − 1 (bits (R, w)) send level ``level``'s shuffler: (R, w) int64.
    The central tree's users send their raw bits (a trusted server)."""
    m = spec.mechanisms[level - 1]
    if spec.mode == "central_tree":
        return bits.astype(np.int64)
    last = first + bits.shape[1]
    noise = [user_noise(spec, level, seed, label, r, first, last) for r in runs]
    if isinstance(noise[0], tuple):
        noise = tuple(np.stack(p) for p in zip(*noise))
    else:
        noise = np.stack(noise)
    return m.encode(bits, noise)


# --- the server's side -------------------------------------------------------------------------

def central_noise(spec: CounterSpec, level: int, key: int, first_node: int, last_node: int) -> np.ndarray:
    """The trusted server's Lap_Z draws for nodes first_node … last_node − 1 of a level (its own key)."""
    m = spec.mechanisms[level - 1]
    lo, hi = first_node // CHUNK, -(-last_node // CHUNK)
    parts = [m.noise((CHUNK,), stream(key, "cs-central", level, c)) for c in range(lo, hi)]
    return np.concatenate(parts)[first_node - lo * CHUNK:last_node - lo * CHUNK]


@dataclass
class CounterServer:
    """The server of Alg. 3 for R runs: node estimates S_v as nodes execute, Ŝ_t on demand.

    ``keys``: the central tree's per-run keys (its trusted server's noise); None in the other modes,
    where the server is deterministic: same releases, same estimates (Alg. 1)."""

    spec: CounterSpec
    runs: int
    keys: list[int] | None = None
    nodes: list[np.ndarray] = field(default_factory=list)  # per level (R, nodes), NaN until executed
    done: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.spec.mode == "central_tree" and self.keys is None:
            raise ValueError("the central tree's trusted server needs its keys")
        for level in range(1, self.spec.k + 1):
            self.nodes.append(np.full((self.runs, self.spec.tree.nodes(level)), np.nan))
            self.done.append(np.zeros(self.spec.tree.nodes(level), bool))

    def decode(self, level: int, j: np.ndarray | int, totals: np.ndarray) -> np.ndarray:
        """S_v of level ``level``'s nodes j (array) from their released totals (R, len(j))."""
        m = self.spec.mechanisms[level - 1]
        s = self.spec.tree.sizes[level - 1]
        if self.spec.mode == "central_tree":
            j = np.atleast_1d(j)
            lo, hi = int(j.min()), int(j.max()) + 1
            noise = np.stack([central_noise(self.spec, level, key, lo, hi) for key in self.keys])
            return totals + noise[:, j - lo]
        return m.analyze(totals.astype(np.float64), s)

    def on_node(self, level: int, j: int, totals: np.ndarray) -> np.ndarray:
        """Level ``level``'s node j has executed with these released totals (R,): store S_v."""
        if not 1 <= level <= self.spec.k or not 0 <= j < self.done[level - 1].size:
            raise ProtocolError("unknown-node", f"no node {j} at level {level}")
        if self.done[level - 1][j]:
            raise ProtocolError("duplicate-node", f"node {j} of level {level} was already executed")
        est = self.decode(level, np.array([j]), np.asarray(totals).reshape(self.runs, 1))[:, 0]
        self.nodes[level - 1][:, j] = est
        self.done[level - 1][j] = True
        return est

    def ready(self, t: int) -> bool:
        """Have all nodes of V_t executed (Alg. 1 step 3 before step 4)?"""
        t0 = self.spec.tree.sizes[0] * (t // self.spec.tree.sizes[0])
        for level in range(1, self.spec.k + 1):
            lo, hi = self.spec.tree.digits(t0, level)
            if not self.done[level - 1][int(lo):int(hi)].all():
                return False
        return True

    def estimate(self, t: int) -> np.ndarray:
        """Ŝ_t (R,) = Σ_{v∈V_t} S_v (Alg. 3 step 5), O(k) node ranges."""
        if not self.ready(t):
            raise ProtocolError("not-ready", f"V_{t} has nodes that have not executed")
        t0 = self.spec.tree.sizes[0] * (t // self.spec.tree.sizes[0])
        out = np.zeros(self.runs)
        for level in range(1, self.spec.k + 1):
            lo, hi = self.spec.tree.digits(t0, level)
            out += self.nodes[level - 1][:, int(lo):int(hi)].sum(axis=1)
        return out

    def estimates(self) -> np.ndarray:
        """Ŝ at every t0 = s_1, 2s_1, … (R, covered/s_1), once every node has executed."""
        if not all(d.all() for d in self.done):
            raise ProtocolError("not-ready", "some nodes have not executed")
        return prefix_estimates(self.spec.tree, self.nodes)


# --- a whole run, vectorized -------------------------------------------------------------------

@dataclass
class CounterRun:
    spec: CounterSpec
    bits: np.ndarray  # (R, n) int8
    totals: list[np.ndarray]  # per level (R, nodes): what each shuffler released
    node_estimates: list[np.ndarray]
    node_truth: list[np.ndarray]
    estimates: np.ndarray  # (R, covered/s_1): Ŝ at t0 = s_1, 2s_1, …


def stream_bits(kind: str, p: float, spec: CounterSpec, seed: int, runs: list[int], epsilon: float | None = None):
    """Every run's input bits (R, n)."""
    eps = spec.epsilon if epsilon is None else epsilon
    return np.stack([world.bits(kind, p, spec.n, spec.k, eps, seed, r, 0, spec.n) for r in runs])


def simulate(spec: CounterSpec, bits: np.ndarray, seed: int, label: str, runs: list[int],
             keys: list[int] | None = None) -> CounterRun:
    """One counter run per row of ``bits``: the users' reports to each level's shuffler, each
    shuffler's releases (one total per node), the server's node estimates and Ŝ at every t0.
    Split-and-mix nodes: the total of the residues, which the server reduces mod M as it does the
    sum of the shuffled shares (the same number: the shares add up to the residues), so the
    shares themselves are not drawn here."""
    R = len(runs)
    server = CounterServer(spec, R, keys)
    totals, truths = [], []
    for level, s in enumerate(spec.tree.sizes, start=1):
        nodes = spec.tree.nodes(level)
        used = bits[:, :nodes * s]
        reports = user_reports(spec, level, used, seed, label, runs, 0)
        total = reports.reshape(R, nodes, s).sum(axis=2)
        totals.append(total)
        truths.append(used.reshape(R, nodes, s).sum(axis=2, dtype=np.int64))
        server.nodes[level - 1] = server.decode(level, np.arange(nodes), total)
        server.done[level - 1][:] = True
    return CounterRun(spec, bits, totals, server.nodes, truths, server.estimates())


def metrics(run: CounterRun) -> list[dict]:
    """Per run (spec §7): max_t |Ŝ_t − S_t| over every t, the RMSE, the split into inter-batch
    noise Ŝ_t − S_{t0} and intra-batch bias S_{t0} − S_t, |V_t| and the staleness t − t0."""
    spec, n, s1 = run.spec, run.spec.n, run.spec.tree.sizes[0]
    t = np.arange(1, n + 1)
    t0 = s1 * (t // s1)
    truth = np.cumsum(run.bits, axis=1, dtype=np.int64)  # S_t at t = 1…n
    est = np.concatenate([np.zeros((run.bits.shape[0], 1)), run.estimates], axis=1)[:, t // s1]
    truth0 = np.concatenate([np.zeros((run.bits.shape[0], 1), np.int64), truth], axis=1)[:, t0]
    err = est - truth
    inter = est - truth0
    intra = truth0 - truth
    vt = spec.tree.node_count(t0)
    out = []
    for r in range(run.bits.shape[0]):
        out.append({"max_abs_error": float(np.abs(err[r]).max()), "rmse": float(np.sqrt(np.mean(err[r] ** 2))),
                    "max_abs_inter": float(np.abs(inter[r]).max()), "max_intra_bias": float(np.abs(intra[r]).max()),
                    "final_error": float(err[r, -1])})
    for o in out:
        o.update(max_nodes=int(vt.max()), mean_nodes=float(vt.mean()), max_staleness=int((t - t0).max()))
    return out


def node_noise_variance(run: CounterRun) -> list[dict]:
    """Per level: the empirical variance of S_v − Σ_{u∈v} b_u over nodes and runs, against the law's."""
    out = []
    for level, (est, truth) in enumerate(zip(run.node_estimates, run.node_truth), start=1):
        noise = est - truth
        m = run.spec.mechanisms[level - 1]
        out.append({"level": level, "size": run.spec.tree.sizes[level - 1], "nodes": int(noise.shape[1]),
                    "empirical": float(noise.var()) if noise.size > 1 else math.nan,
                    "mean": float(noise.mean()) if noise.size else math.nan, "law": float(m.variance())})
    return out
