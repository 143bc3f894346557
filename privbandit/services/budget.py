"""A connection's publish budget as a token bucket (:class:`acl.PublishBudget`, issue #32 item 3).

The embedded broker spends one per connection of a budgeted account before it reads a PUBLISH's
body, holding the sender back (:mod:`privbandit.services.embedded_broker`); Mosquitto's plugin keeps
the same buckets in C and drops what does not fit (``acl/budget_plugin.c``). An honest fleet paces
its own publishes with one (:class:`~privbandit.services.bus.Bus`), a little under its account's
budget, so that neither broker has to: a fleet at T = 10⁸ sends a 2²⁵-user round's reports as fast
as it can, and on Mosquitto what passed the budget was dropped and asked for again, round after
round (a 10⁸-user session with two fleets took 208.6 s and sent 202 bytes per user; paced, 27.6 s
and 11.75). What a reconnecting party sends first (the outbox an earlier connection left,
``Bus.flush``) is paced on the new connection the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

from privbandit.services import acl

log = logging.getLogger("privbandit.budget")

LOG_EVERY_S = 5.0  # one line per connection per this long, with the time waited so far
# An honest client's share of its account's budget: under the brokers' buckets by this much, so
# that the moments its bucket and the broker's start and the bytes each counts (the client counts
# the whole PUBLISH packet, Mosquitto's plugin its payload and topic) never put it over.
PACE_SHARE = 0.9


class PublishBucket:
    """One connection's :class:`acl.PublishBudget`: bytes and messages, refilled at their rates up
    to their bursts. A PUBLISH takes its share (the balance may go below zero by one packet), then
    waits until the balance is back to zero. ``what`` says in the log what the waiting is."""

    __slots__ = ("budget", "bytes", "messages", "at", "waited", "logged_at", "who", "what")

    def __init__(self, budget: acl.PublishBudget, who: str, what: str = "held back"):
        self.budget, self.who, self.what = budget, who, what
        self.bytes, self.messages = float(budget.burst_bytes), float(budget.burst_messages)
        self.at = time.monotonic()
        self.waited, self.logged_at = 0.0, -LOG_EVERY_S

    @classmethod
    def pacing(cls, budget: acl.PublishBudget, who: str) -> PublishBucket:
        """An honest client's bucket: :data:`PACE_SHARE` of ``budget``'s rates and bursts (a byte
        burst of at least one packet, which a PUBLISH cannot exceed)."""
        share = dataclasses.replace(budget, bytes_per_s=budget.bytes_per_s * PACE_SHARE,
                                    burst_bytes=max(acl.MAX_PACKET_BYTES, int(budget.burst_bytes * PACE_SHARE)),
                                    messages_per_s=budget.messages_per_s * PACE_SHARE,
                                    burst_messages=max(1, int(budget.burst_messages * PACE_SHARE)))
        return cls(share, who, "paced")

    async def spend(self, size: int) -> None:
        b = self.budget
        now = time.monotonic()
        elapsed, self.at = now - self.at, now
        self.bytes = min(b.burst_bytes, self.bytes + elapsed * b.bytes_per_s) - size
        self.messages = min(b.burst_messages, self.messages + elapsed * b.messages_per_s) - 1
        wait = max(-self.bytes / b.bytes_per_s, -self.messages / b.messages_per_s, 0.0)
        if wait > 0:
            self.waited += wait
            if now - self.logged_at >= LOG_EVERY_S:
                self.logged_at = now
                # A broker holding a sender back is news; an honest client pacing itself is not.
                log.log(logging.INFO if self.what == "paced" else logging.WARNING,
                        "%s publishes past its account's budget (%.0f B/s, %.0f messages/s): %s %.1f s so far",
                        self.who, b.bytes_per_s, b.messages_per_s, self.what, self.waited)
            await asyncio.sleep(wait)
