"""The parties as sans-I/O objects. Drivers (the in-process engine, the MQTT services) move their
events; the objects never touch a socket."""

from privbandit.protocol.parties.analyzer import Analyzer, RoundRecord
from privbandit.protocol.parties.intermediary import Intermediary, ProtocolError
from privbandit.protocol.parties.secure_aggregator import SecureAggregator
from privbandit.protocol.parties.shuffler import Shuffler, shuffle_rng
from privbandit.protocol.parties.users import UserPopulation

__all__ = ["Analyzer", "Intermediary", "ProtocolError", "RoundRecord", "SecureAggregator", "Shuffler", "UserPopulation", "shuffle_rng"]
