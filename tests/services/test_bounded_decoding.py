"""Issue #32 item 2: what a message costs to decode is bounded by its bytes, not chosen by its sender.

Timing belongs in ``benchmarks/bench_decode_bombs.py``; here the work is counted instead, which does
not depend on the machine's load: the memory the decoder allocates (tracemalloc's peak) and the
Python calls it makes (a profiler counting ``call`` events). Before the bounds, the issue's
500,000-key map allocated hundreds of MB and four million nested lists more; a body of 60,000
numbers cost one Python call per number.
"""

from __future__ import annotations

import sys
import tracemalloc

import msgpack
import numpy as np
import pytest

from privbandit.protocol.spine.events import Join, Plan, Round
from privbandit.services import codec
from privbandit.services.hostile import decoding_bombs

BOMBS = decoding_bombs("r1")


def _work(payload: bytes, kinds) -> tuple[str, int, int]:
    """Decode ``payload``: (outcome, peak bytes allocated, Python calls made)."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event == "call"

    tracemalloc.start()
    sys.setprofile(count)
    try:
        codec.decode(payload, kinds)
        outcome = "ok"
    except codec.DecodeError as exc:
        outcome = exc.reason
    finally:
        sys.setprofile(None)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return outcome, peak, calls


@pytest.mark.parametrize("name, where, payload", BOMBS, ids=[b[0] for b in BOMBS])
def test_the_worst_messages_cost_a_bounded_amount_of_work(name, where, payload):
    """Each of the costliest messages the users' account may send, under the packet cap: the
    decoder builds at most MAX_ITEMS items (a few MB, whatever the message's size) and makes a
    few Python calls per map or list it allows (MAX_CONTAINERS), none per scalar."""
    outcome, peak, calls = _work(payload, codec.TOPIC_KINDS[where])
    assert peak < 12 * 2**20, (outcome, peak)
    assert calls <= 3 * codec.MAX_CONTAINERS, (outcome, calls)


def test_the_bombs_are_refused_for_what_they_are():
    """The issue's two: refused when the unpacker reads the map's or list's header; lists of lists
    when the item budget runs out; keys the schema does not know, counted, not one error each."""
    got = {name: _work(payload, codec.TOPIC_KINDS[where])[0] for name, where, payload in BOMBS}
    assert got["500,000-key map"] == got["4 M nested empty lists"] == got["deepest nesting"] == "over-limit"
    assert got["lists of 4,096 empty lists"] == got["lists of 4,096 empty maps"] == "over-limit"
    with pytest.raises(codec.DecodeError, match="4000 unknown keys"):
        codec.decode(dict((n, p) for n, _, p in BOMBS)["4,000 unknown keys"])


def test_a_topic_carries_only_its_kinds():
    """The users' account may write reports; a plan sent there (the costliest kind to validate:
    a thousand rounds) is refused before its schema is checked (``wrong-topic``)."""
    rounds = tuple(Round(i, "aggregator", "sum", 4, width=8, m=2**40, window=(0, 5), threshold=3, groups=(2, 2, 2, 2))
                   for i in range(codec.MAX_ROUNDS_PER_PLAN))
    joins = tuple(Join(i, 0, 4096, 4, users=(0, 1, 2, 3)) for i in range(codec.MAX_ROUNDS_PER_PLAN))
    plan = codec.encode(codec.plan_msg("r1", 0, Plan(0, 0, 4096, {"theta": np.zeros((1, 64))}, rounds, joins)))
    with pytest.raises(codec.DecodeError) as refused:
        codec.decode(plan, codec.TOPIC_KINDS["report"])
    assert refused.value.reason == "wrong-topic"
    # On the plan topic, the largest plan the schema allows still decodes: the bounds leave room.
    assert len(codec.decode(plan, codec.TOPIC_KINDS["plan"]).opens) == codec.MAX_ROUNDS_PER_PLAN
    items = {"n": 0}

    def count(c):
        items["n"] += len(c) + 1
        return c

    msgpack.unpackb(plan, list_hook=count, object_hook=count)
    assert items["n"] <= codec.MAX_ITEMS // 1.5  # headroom above the largest honest message


@pytest.mark.parametrize("name, where, payload", [b for b in BOMBS if b[1] == "metrics"],
                         ids=[b[0] for b in BOMBS if b[1] == "metrics"])
def test_checking_the_mac_of_a_bomb_that_decodes_costs_no_call_per_item(name, where, payload):
    """The bodies that decode (a status's 60,000 numbers or 8,000 empty lists, a truth's extras) are
    refused by their MAC. The observer computes it over the bytes received, the tag emptied
    (``codec.tag_payload``: a C-level skip, a handful of calls); a fleet signing a status encodes it,
    and that encoding copies a list of scalars or of empty lists in one pass (before, one call per
    item: 60,000 calls and 63–69 ms for the status, the observer's share of a stream of bombs)."""
    msg = codec.decode(payload, codec.TOPIC_KINDS[where])
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        encoded = codec.encode(msg.model_copy(update={"tag": b""}))  # what a fleet MACs
    finally:
        sys.setprofile(None)
    assert calls <= 500, calls
    # What status_tag and check_truth MAC for a received message: the bomb as sent (it has no tag
    # to empty), and the bomb with a tag, whose value is emptied in the received bytes.
    tagged = msgpack.packb({**msgpack.unpackb(payload), "tag": bytes(32)}, use_bin_type=True)
    for received, maced in ((payload, payload), (tagged, encoded)):
        received = codec.decode(received, codec.TOPIC_KINDS[where])
        calls = 0
        sys.setprofile(count)
        try:
            checked = codec.tag_payload(received)
        finally:
            sys.setprofile(None)
        assert calls <= 100 and checked == maced, calls  # 4 and 37: none per item


# A stream of them next to a session: tests/services/test_broker_budgets.py, with the volley.
