"""One run seed fans out to every party and round through ``numpy.random.SeedSequence``.

A stream is named by a path such as ``(run, algorithm, "users", round_id, block)``. The same path
gives the same numbers whichever process draws them, so an MQTT run can reproduce an in-process run
exactly. Strings in a path are hashed with CRC-32 (stable across processes, unlike ``hash``).

The seed is in every experiment file and results directory, so nothing that must stay secret
derives from it: the keys that authenticate users and fleets (report MACs, block tags, truth and
status MACs, chunk keys, the users' signing identities) are the session's own
(:class:`~privbandit.protocol.primitives.report_auth.SessionKeys`, issue #32). What derives from
it here is randomness a run must reproduce: the analyzer's and the shufflers' draws.
"""

from __future__ import annotations

import zlib

import numpy as np

# Users draw their randomness per block of this many consecutive members of a cohort. A fleet
# hosting a shard of users owns whole blocks, so sharding never changes what any user draws, while
# one block is still a large vectorized batch.
USER_BLOCK = 65_536


def _key(part: int | str) -> int:
    if isinstance(part, str):
        return zlib.crc32(part.encode())
    if part < 0:
        raise ValueError(f"stream path parts must be non-negative, got {part}")
    return int(part)


def stream(seed: int, *path: int | str) -> np.random.Generator:
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence(seed, spawn_key=tuple(_key(p) for p in path)))
    )


def _wide_key(seq: np.random.SeedSequence) -> int:
    return int.from_bytes(seq.generate_state(8, np.uint32).tobytes(), "little")


def analyzer_master_key(seed: int) -> int:
    """The analyzer's own 256-bit master key, derived from the run seed by the launcher.

    The analyzer process is handed this key, never the run seed, from which the world (arm means,
    rewards) could be recomputed; its per-task keys come from :func:`derive_key`.
    """
    return _wide_key(np.random.SeedSequence(seed, spawn_key=(_key("analyzer"),)))


def shuffler_master_key(seed: int, name: str = "shuffler") -> int:
    """Intermediary ``name``'s master key for reproducible permutations, handed to it alone. Each
    of the concurrent-shuffle family's shufflers (``shuffler-1`` … ``shuffler-k``) has its own, so
    one that is compromised cannot undo another's permutations; ``shuffler`` keeps the key it had
    before instances existed (the same numbers)."""
    path = (_key("shuffler"),) if name == "shuffler" else (_key("shuffler"), _key(name))
    return _wide_key(np.random.SeedSequence(seed, spawn_key=path))


def derive_key(master: int, *path: int | str) -> int:
    """A 256-bit key for one task (or round), derived from a party's master key."""
    return _wide_key(np.random.SeedSequence(master, spawn_key=tuple(_key(p) for p in path)))
