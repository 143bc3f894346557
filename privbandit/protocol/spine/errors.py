"""The one error type of the protocol. As in h11, an error has a defined consequence: the message
that caused it is refused and counted under ``reason`` (``rejected.<reason>`` in the results), and
the party goes on; nothing it had accepted is lost."""


class ProtocolError(Exception):
    """A message the protocol cannot accept. ``reason`` is a short, countable key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
