"""Drive a whole round in-process, with dropouts injected between steps."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from privbandit.protocol.primitives.secagg import (
    MaskingGraph,
    RoundConfig,
    SecAggServer,
    SecAggUser,
)

_IDENTITIES: dict[int, Ed25519PrivateKey] = {}


def identity(u: int) -> Ed25519PrivateKey:
    # Long-term identity keys are reused across rounds, as a PKI would be; also keeps tests fast.
    if u not in _IDENTITIES:
        _IDENTITIES[u] = Ed25519PrivateKey.generate()
    return _IDENTITIES[u]


@dataclass
class Drops:
    after_advertise: set[int] = field(default_factory=set)  # in U₁, not U₂
    after_share: set[int] = field(default_factory=set)  # in U₂, not U₃
    after_masked: set[int] = field(default_factory=set)  # in U₃, never answers round 4


def make_round(ids, mode, m, *, length=3, round_id=0, threshold=None, degree=None):
    pki = {u: identity(u).public_key() for u in ids}
    cfg = RoundConfig(run_id=b"test-run", round_id=round_id, m=m, length=length)
    graph = MaskingGraph(ids, mode, seed=round_id.to_bytes(8, "big"), threshold=threshold, degree=degree)
    users = {u: SecAggUser(u, identity(u), pki, cfg, graph) for u in ids}
    return users, SecAggServer(cfg, graph)


def run_until_masked(users, server, inputs, drops: Drops):
    dirs = server.key_directories(users[u].advertise() for u in users)
    shares = [users[u].share_keys(dirs[u]) for u in dirs if u not in drops.after_advertise]
    delivery = server.route_shares(shares)
    masked = [users[u].masked_input(delivery[u], inputs[u]) for u in delivery if u not in drops.after_share]
    return masked


def run_round(users, server, inputs, drops: Drops | None = None):
    drops = drops or Drops()
    request = server.unmask_request(run_until_masked(users, server, inputs, drops))
    responses = [users[u].unmask(request) for u in sorted(request.survivors) if u not in drops.after_masked]
    return server.finalize(responses)


def random_inputs(ids, m, length, rng):
    return {u: rng.integers(0, m, size=length, dtype=np.int64) for u in ids}


def expected_sum(inputs, survivors, m):
    total = np.zeros_like(next(iter(inputs.values())), dtype=object)
    for u in survivors:
        total = total + inputs[u].astype(object)
    return np.asarray(total % m, dtype=np.int64)
