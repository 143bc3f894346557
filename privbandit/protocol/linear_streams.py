"""Where the shuffle-model linear bandits draw their randomness: one layout for both transports.

The in-process engine steps all R runs of an algorithm at once; over MQTT one task is one run, its
users live in fleets and its shuffler is a process of its own. Both draw from the streams below, so
a distributed run reproduces the in-process run exactly (tests/services/test_linear_distributed.py).

- User t of run r (0-based) gets the common random number U_t = draw t of
  ``(seed, "linear-users", r)`` (:func:`user_uniforms`; rewards are 1{U_t < μ_a}).
- The batched shuffle protocols (SDP-Amp, SDP-Vec) randomize per run and per *noise block* of
  ``batches_per_block(B)`` consecutive batches (about :data:`NOISE_BLOCK_USERS` users): block k of run r
  draws from ``(seed, "linear-user-noise", label, r, k)``: the randomizer's draws for the whole
  block at once, shape (batches, B, D), batch m taking its row (:class:`BlockStreams`). A fleet
  hosts whole blocks (:func:`fleet_of`), so sharding never changes what a user draws, and a
  restarted fleet draws the block again.
- SDP-Amp's shuffler permutes with ``(shuffler key(r, label), "linear-shuffle", k)`` per block, the
  same way: only the shuffler holds that key (:func:`privbandit.protocol.primitives.seeding.shuffler_master_key`).
- The per-round baselines (LinUCB, JDP, LDP) keep one stream per party for all runs stacked,
  ``(seed, <party>, label)``: they cannot batch over users, and drawing per run would cost them a
  Python call per run per round. They run in-process only.

Drawing per (run, block) instead of for all runs at once costs the in-process engine one draw call
per run per block and one stack per block (benchmarks/bench_linear.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from privbandit.protocol.primitives.seeding import derive_key, shuffler_master_key, stream

# A noise block is the batches of about this many users: one stream and one draw call per
# (run, block) keeps the Python overhead negligible, the block's draws small (runs × 512 × D numbers
# in-process), and a block is what a fleet hosts.
NOISE_BLOCK_USERS = 512
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
    """A party's draws for one run, a noise block at a time.

    ``draw(rng, shape)`` is the party's ``draw`` (a randomizer's or a shuffler's): what it draws
    depends only on the shape, so drawing the whole block, (batches_per_block, B, D), in one call is
    both cheap (one call per block instead of one per batch) and the definition of what batch m gets:
    row m − k·batches_per_block of block k. Any party asking for any batch, in any order (a restarted
    fleet), gets the same numbers.
    """

    def __init__(self, root: Callable[[int], np.random.Generator], batch: int, width: int,
                 draw: Callable[[np.random.Generator, tuple], object]):
        self.root = root
        self.per_block = batches_per_block(batch)
        self.shape = (self.per_block, batch, width)
        self.draw = draw
        self.block = -1
        self.noise = None

    def for_block(self, k: int):
        if k != self.block:
            self.block, self.noise = k, self.draw(self.root(k), self.shape)
        return self.noise

    def for_batch(self, m: int):
        k = m // self.per_block
        return _row(self.for_block(k), m - k * self.per_block, axis=0)


class StackedStreams:
    """Every run's :class:`BlockStreams`, as the in-process engine uses them: block k's draws of all
    runs stacked once, (R, batches_per_block, B, D), and batch m's (R, B, D) a view into them."""

    def __init__(self, runs: list[BlockStreams]):
        self.runs = runs
        self.per_block = runs[0].per_block
        self.block = -1
        self.noise = None

    def for_batch(self, m: int):
        k = m // self.per_block
        if k != self.block:
            draws = [s.for_block(k) for s in self.runs]
            self.block, self.noise = k, _stack(draws)
        return _row(self.noise, m - k * self.per_block, axis=1)


def _stack(draws: list):
    if draws[0] is None:
        return None
    if isinstance(draws[0], tuple):
        return tuple(np.stack(parts) for parts in zip(*draws))
    return np.stack(draws)


def _row(noise, i: int, axis: int):
    """Batch i's part of a block's draws (an array, a tuple of arrays, or None)."""
    if noise is None:
        return None
    if isinstance(noise, tuple):
        return tuple(np.take(part, i, axis=axis) for part in noise)
    return np.take(noise, i, axis=axis)


def user_noise(seed: int, label: str, run: int, batch: int, randomizer, width: int) -> BlockStreams:
    """Run ``run``'s users' randomizer draws (see the module docstring)."""
    return BlockStreams(lambda k: stream(seed, "linear-user-noise", label, run, k), batch, width,
                        lambda rng, shape: randomizer.draw(shape, rng))


def shuffler_noise(shuffle_key: int, label: str, run: int, batch: int, shuffler, width: int) -> BlockStreams:
    """The shuffler's permutations for one run, from the shuffler's own master key."""
    key = derive_key(shuffle_key, run, label)
    return BlockStreams(lambda k: stream(key, "linear-shuffle", k), batch, width,
                        lambda rng, shape: shuffler.draw(shape, rng))


def engine_streams(seed: int, label: str, kind: str, runs: range | list[int], batch: int, protocol, width: int):
    """What the in-process engine draws from for the runs ``runs``: per-run :class:`BlockStreams`,
    stacked, for the batched shuffle protocols, else one generator per party for all runs
    (``(users, shuffler, analyzer)``)."""
    analyzer = stream(seed, "analyzer", label)
    if kind not in BATCHED:
        return stream(seed, "linear-user-noise", label), stream(seed, "shuffler", label), analyzer
    users = StackedStreams([user_noise(seed, label, r, batch, protocol.randomizer, width) for r in runs])
    master = shuffler_master_key(seed)
    shufflers = StackedStreams([shuffler_noise(master, label, r, batch, protocol.intermediary, width) for r in runs])
    return users, shufflers, analyzer
