"""The relay topics (``pb/<run>/relay/<intermediary>[/…]``: secure aggregation's key directory,
routed share ciphertexts, survivor sets and resend requests, intermediary → user fleets) under
the generated ACLs, proved by delivery against real brokers like tests/services/test_acl.py:

- only the intermediary that owns a relay topic writes it (not users, the analyzer, the observer,
  the launcher, nor the other intermediary);
- only user fleets read it: the analyzer and the observer receive nothing from it, whatever
  filter they subscribe with.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from privbandit.services.acl import Role, allowed
from tests.services.test_acl import RUN, SETTLE_S, _full, _subscribe, broker, connected  # noqa: F401

RELAYS = ("relay/aggregator", "relay/aggregator/users-0", "relay/shuffler")
OWNER = {"relay/aggregator": Role.AGGREGATOR, "relay/aggregator/users-0": Role.AGGREGATOR,
         "relay/shuffler": Role.SHUFFLER}


@pytest.mark.parametrize("key", RELAYS)
def test_relay_rules_written_out(key):
    topic = _full(key)
    for role in Role:
        assert allowed(role, "read", topic, RUN) is (role is Role.USERS), (role, key)
        assert allowed(role, "write", topic, RUN) is (role is OWNER[key]), (role, key)
    for role in (Role.ANALYZER, Role.OBSERVER):
        for wildcard in ("relay/#", "relay/+", "relay/aggregator/#", "+/aggregator", "#"):
            assert not allowed(role, "read", _full(wildcard), RUN), (role, wildcard)


# (forbidden reader, its filter, relay topic published by its owner)
READ_DENIALS = [
    (Role.ANALYZER, "relay/aggregator", "relay/aggregator"),
    (Role.ANALYZER, "relay/#", "relay/aggregator/users-0"),
    (Role.OBSERVER, "relay/aggregator", "relay/aggregator"),
    (Role.OBSERVER, "relay/aggregator/+", "relay/aggregator/users-0"),
    (Role.OBSERVER, "relay/#", "relay/shuffler"),
    (Role.AGGREGATOR, "relay/shuffler", "relay/shuffler"),  # an intermediary does not read another's relay
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("reader", "topic_filter", "topic"), READ_DENIALS,
                         ids=[f"{r.value}-reads-{f}" for r, f, _ in READ_DENIALS])
async def test_relay_read_denied(broker, reader, topic_filter, topic):  # noqa: F811
    topic_filter, owner, topic = _full(topic_filter), OWNER[topic], _full(topic)
    payload = f"relay-{uuid.uuid4().hex}".encode()
    async with connected(broker, reader, Role.USERS, owner) as (forbidden, fleet, sender):
        assert await _subscribe(fleet, topic) == [1]
        codes = await _subscribe(forbidden, topic_filter)
        assert codes == ([broker.refusal_code] if broker.refuses_subscribe else [1])
        await sender.client.publish(topic, payload, qos=1)
        await fleet.wait_for((topic, payload))  # routed to the fleets ...
        await asyncio.sleep(SETTLE_S)
        assert payload not in forbidden.payloads(), f"{reader.value} received {topic}"  # ... only


WRITE_DENIALS = [
    (Role.USERS, "relay/aggregator"),  # a fleet cannot forge the directory, deliveries or resend requests
    (Role.USERS, "relay/aggregator/users-0"),
    (Role.ANALYZER, "relay/aggregator"),
    (Role.OBSERVER, "relay/aggregator"),
    (Role.SHUFFLER, "relay/aggregator"),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("forger", "topic"), WRITE_DENIALS, ids=[f"{f.value}-writes-{t}" for f, t in WRITE_DENIALS])
async def test_relay_write_denied(broker, forger, topic):  # noqa: F811
    owner, topic = OWNER[topic], _full(topic)
    forged, genuine = f"forged-{uuid.uuid4().hex}".encode(), f"genuine-{uuid.uuid4().hex}".encode()
    async with connected(broker, Role.USERS, forger, owner) as (fleet, bad, good):
        assert await _subscribe(fleet, topic) == [1]
        await bad.client.publish(topic, forged, qos=1)
        await good.client.publish(topic, genuine, qos=1)
        await fleet.wait_for((topic, genuine))
        await asyncio.sleep(SETTLE_S)
        assert forged not in fleet.payloads(), f"{forger.value}'s forged message on {topic} was delivered"
