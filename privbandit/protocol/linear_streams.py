"""Where the shuffle-model linear bandits draw their randomness: one layout for both transports.

The in-process engine steps all R runs of an algorithm at once; over MQTT one task is one run, its
users live in fleets and its shuffler is a process of its own. Both draw from the streams below, so
a distributed run reproduces the in-process run exactly (tests/services/test_linear_distributed.py).

- User t of run r (0-based) gets the common random number U_t = draw t of
  ``(seed, "linear-users", r)`` (:func:`user_uniforms`; rewards are 1{U_t < μ_a}).
- The batched shuffle protocols (SDP-Amp, SDP-Vec) randomize per run and per *noise block* of
  ``batches_per_block(B)`` consecutive batches (about :data:`NOISE_BLOCK_USERS` users): block k of run r
  draws from ``(seed, "linear-user-noise", label, r, k)``, one batch after the other, each batch's
  randomizer drawing for its (n, D) entries (:class:`BlockStreams`). A fleet hosts whole blocks
  (:func:`fleet_of`), so sharding never changes what a user draws, and a restarted fleet re-draws
  the batches of its block it already served to catch up.
- SDP-Amp's shuffler permutes with ``(shuffler key(r, label), "linear-shuffle", k)`` per block, the
  same way: only the shuffler holds that key (:func:`privbandit.protocol.seeding.shuffler_master_key`).
- The per-round baselines (LinUCB, JDP, LDP) keep one stream per party for all runs stacked,
  ``(seed, <party>, label)``: they cannot batch over users, and drawing per run would cost them a
  Python call per run per round. They run in-process only.

Drawing per (run, block) instead of for all runs at once costs the in-process engine one small
Python loop over runs per batch (benchmarks/bench_linear.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from privbandit.protocol.seeding import derive_key, shuffler_master_key, stream

# A noise block is the batches of about this many users: one stream per (run, block) keeps stream
# creation (~20 µs) negligible, and a block is what a fleet hosts.
NOISE_BLOCK_USERS = 1024
BATCHED = ("linucb-sdp-amp", "linucb-sdp-vec")  # the protocols with per-run streams (and MQTT runs)


def batches_per_block(batch: int) -> int:
    return max(1, NOISE_BLOCK_USERS // batch)


def block_of(batch_index: int, batch: int) -> int:
    return batch_index // batches_per_block(batch)


def fleet_of(batch_index: int, batch: int, shards: int) -> int:
    """The fleet hosting the users of batch ``batch_index``: block k lives on fleet k mod N."""
    return block_of(batch_index, batch) % shards


def user_uniforms(seed: int, run: int, first: int, n: int) -> np.ndarray:
    """U_t for users first … first + n − 1 of run ``run`` (one 64-bit draw each, so PCG64 jumps)."""
    rng = stream(seed, "linear-users", run)
    rng.bit_generator.advance(first)
    return rng.random(n)


class BlockStreams:
    """One generator per noise block, handed out batch by batch in order.

    ``draw(rng)`` replays one batch's draws (the party's ``draw`` for the batch's shape: what a
    randomizer or shuffler draws depends only on the shape), so asking for a later batch of the same block catches
    up; asking for an earlier one restarts the block. Either way batch m always gets the same numbers.
    """

    def __init__(self, root: Callable[[int], np.random.Generator], batch: int,
                 draw: Callable[[np.random.Generator], object]):
        self.root = root
        self.per_block = batches_per_block(batch)
        self.draw = draw
        self.block = -1
        self.next = 0  # the batch the current generator is positioned at
        self.rng: np.random.Generator | None = None

    def for_batch(self, m: int) -> np.random.Generator:
        k = m // self.per_block
        if k != self.block or m < self.next:
            self.block, self.next, self.rng = k, k * self.per_block, self.root(k)
        while self.next < m:  # batches of this block we did not serve (a restart): same draws
            self.draw(self.rng)
            self.next += 1
        self.next += 1
        return self.rng


def user_noise(seed: int, label: str, run: int, batch: int, randomizer, width: int) -> BlockStreams:
    """Run ``run``'s users' randomizer streams (see the module docstring)."""
    return BlockStreams(lambda k: stream(seed, "linear-user-noise", label, run, k), batch,
                        lambda rng: randomizer.draw((batch, width), rng))


def shuffler_noise(shuffle_key: int, label: str, run: int, batch: int, shuffler, width: int) -> BlockStreams:
    """The shuffler's permutation streams for one run, from the shuffler's own master key."""
    key = derive_key(shuffle_key, run, label)
    return BlockStreams(lambda k: stream(key, "linear-shuffle", k), batch,
                        lambda rng: shuffler.draw((batch, width), rng))


def engine_streams(seed: int, label: str, kind: str, runs: range | list[int], batch: int, protocol, width: int):
    """What the in-process engine draws from for the runs ``runs``: per-run :class:`BlockStreams` for
    the batched shuffle protocols, else one generator per party for all runs (``(users, shuffler,
    analyzer)``)."""
    analyzer = stream(seed, "analyzer", label)
    if kind not in BATCHED:
        return stream(seed, "linear-user-noise", label), stream(seed, "shuffler", label), analyzer
    users = [user_noise(seed, label, r, batch, protocol.randomizer, width) for r in runs]
    master = shuffler_master_key(seed)
    shufflers = [shuffler_noise(master, label, r, batch, protocol.intermediary, width) for r in runs]
    return users, shufflers, analyzer
