"""Run one whole secure-aggregation round in-process, for the in-process engine."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from privbandit.protocol.primitives.secagg.graph import MaskingGraph
from privbandit.protocol.primitives.secagg.protocol import RoundConfig, SecAggServer, SecAggUser


def secure_sum(user_ids: Sequence[int], values: np.ndarray, m: int, *, mode: str = "sparse",
               run_id: bytes = b"privbandit", round_id: int = 0, dropped: Sequence[int] = (),
               degree: int | None = None, threshold: int | None = None) -> np.ndarray:
    """``Σ values mod m`` over the users not in ``dropped``, by a real SecAgg round among ``user_ids``:
    one sum per column of ``values`` (n,) or (n, L), each user's row its input of L residues.

    Each value is read only by its own :class:`SecAggUser`, which masks it; the
    :class:`SecAggServer` sees masked inputs and encrypted shares, and releases the sum. Users in
    ``dropped`` advertise keys and share secrets, then vanish before round 2 (their values are
    never read). ``degree`` and ``threshold``: the graph's (k, t), as the round's plan carries
    them (:mod:`.parameters`); None: :class:`~.graph.MaskingGraph`'s defaults. Identity keys are drawn afresh, as if every user had just enrolled.
    Raises :class:`~privbandit.protocol.primitives.secagg.errors.SecAggAbort` when recovery is impossible.
    """
    ids = [int(u) for u in user_ids]
    gone = {int(u) for u in dropped}
    values = np.asarray(values, dtype=np.int64).reshape(len(ids), -1)
    cfg = RoundConfig(run_id=run_id, round_id=round_id, m=m, length=values.shape[1])
    graph = MaskingGraph(ids, mode, seed=round_id.to_bytes(8, "big"), degree=degree, threshold=threshold)
    identities = {u: Ed25519PrivateKey.generate() for u in ids}
    pki = {u: key.public_key() for u, key in identities.items()}
    users = {u: SecAggUser(u, identities[u], pki, cfg, graph) for u in ids}
    server = SecAggServer(cfg, graph)
    directories = server.key_directories(users[u].advertise() for u in ids)
    delivery = server.route_shares(users[u].share_keys(directories[u]) for u in ids)
    masked = [users[u].masked_input(delivery[u], v) for u, v in zip(ids, values) if u not in gone]
    request = server.unmask_request(masked)
    result = server.finalize(users[u].unmask(request) for u in sorted(request.survivors))
    return np.asarray(result.value, dtype=np.int64)
