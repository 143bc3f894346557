"""The wire format: pydantic models encoded with msgpack, the same messages for every family.

Every message is a msgpack map carrying ``v`` (the format version), ``run`` (the run id: the topic
namespace), ``kind`` and, where it has one, the task, plan and round it belongs to. Numeric arrays
travel as typed binary blocks ``{"dtype", "shape", "data"}`` rather than lists of Python ints, so a
report of n users costs n·itemsize bytes plus a constant.

A family's public plan body, its truth extras and its record body are *wire values* (``None``,
``bool``, ``int``, ``float``, ``str``, typed arrays, and lists and maps of those, at most
:data:`MAX_BODY_DEPTH` deep); the family's own pydantic models then check their fields
(:meth:`~privbandit.protocol.spine.family.Family.check`).

Decoding never raises anything but :class:`DecodeError`, whose ``reason`` is a short key the
services count (``rejected.<reason>`` in the results). Every cross-field invariant of a message
(array lengths, shapes, dtypes, ranges) is checked here, so a party never indexes one array with
a mask sized to another. Limits are named constants with their reason.

Decoding is bounded in CPU as well as in bytes (issue #32 item 2): whoever holds a broker account
chooses what a party decodes, and msgpack and pydantic spend time per item, not per byte (a map of
500,000 keys in 3.4 MB cost 2.3 s; four million nested empty lists 1.9 s). So the unpacker refuses
a map or array longer than :data:`MAX_CONTAINER_ITEMS` when it reads its header and stops once the
message holds more than :data:`MAX_ITEMS` items in all; the message's kind must be one its topic
carries (:data:`TOPIC_KINDS`); and its keys, and its nested models' keys, must be the schema's,
counted before pydantic could build one error per key. What is left is proportional to the bytes:
``benchmarks/bench_decode_bombs.py`` measures the worst messages.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Union

import msgpack
import numpy as np
from pydantic import (BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, PrivateAttr,
                      ValidationError, model_serializer, model_validator)

from privbandit.protocol.primitives.report_auth import NONCE_MAC_BYTES
from privbandit.protocol.spine.events import RULES, Join, Plan, Record, Release, Reports, Round, Truth

WIRE_VERSION = 2

# One message carries at most one block of users (seeding.USER_BLOCK = 65,536) of 8-byte ids and
# 8-byte values, about 1 MiB; 8 MiB leaves room for any legitimate message and refuses floods.
MAX_MESSAGE_BYTES = 8 * 2**20
MAX_ARRAY_ELEMENTS = 2**20
MAX_DIMS = 3  # (runs, users, width) is the widest array the protocol sends
# Only fixed-width little-endian numeric types: no object arrays, nothing pickled.
ALLOWED_DTYPES = frozenset({"|u1", "<u2", "<u4", "<u8", "|i1", "<i8", "<f8", "|b1"})
RUN_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
NAME_PATTERN = r"^[a-z][a-z0-9]*(-[0-9]+)?$"  # a party: analyzer, aggregator, shuffler-3, users-0
# A family's bodies are small maps of parameters and per-run arrays: a few levels and items.
MAX_BODY_DEPTH = 8
MAX_BODY_ITEMS = 4096
MAX_KEY_CHARS = 64
# The widest report: the linear bandits' d + d(d+1)/2 entries at d = 64.
MAX_WIDTH = 2144
MAX_ROUNDS_PER_PLAN = 1024
# Bounds on what the unpacker builds (module docstring). No map or list of the schema holds more
# than 4096 items (a body's maps and lists, a close message's rounds, a plan's 1024 rounds), so one
# longer is refused at its header, before any item is built. In all, a message holds at most
# MAX_ITEMS items (map entries and list elements, each container counting one more) in at most
# MAX_CONTAINERS maps and lists (each costs a call of body_from_wire, ~0.6 µs, where a scalar
# costs ~30 ns). The largest honest message is a plan opening MAX_ROUNDS_PER_PLAN rounds with every
# field set and each join naming its users: 41,000 items in 6,200 containers (the families' own
# plans in tests/services/test_families_e2e.py: at most 3,344 items in 388 containers).
MAX_CONTAINER_ITEMS = 4096
MAX_ITEMS = 2**16
MAX_CONTAINERS = 2**13
MAX_STR_BYTES = 4096  # a body string (body_from_wire's limit), a key, a label, a reason


class DecodeError(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def _array_from_wire(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if not isinstance(value, dict) or set(value) != {"dtype", "shape", "data"}:
        raise ValueError("array must be a map with exactly dtype, shape, data")
    dtype, shape, data = value["dtype"], value["shape"], value["data"]
    if dtype not in ALLOWED_DTYPES:
        raise ValueError(f"array dtype {dtype!r} not allowed")
    if not (isinstance(shape, list) and len(shape) <= MAX_DIMS
            and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)):
        raise ValueError(f"array shape must be a list of at most {MAX_DIMS} non-negative ints")
    size = math.prod(shape)
    if size > MAX_ARRAY_ELEMENTS:
        raise ValueError(f"array of {size} elements exceeds {MAX_ARRAY_ELEMENTS}")
    if not isinstance(data, bytes) or len(data) != size * np.dtype(dtype).itemsize:
        raise ValueError("array data length does not match dtype and shape")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _array_to_wire(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a)
    dtype = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    return {"dtype": dtype.str, "shape": list(a.shape), "data": a.astype(dtype, copy=False).tobytes()}


Array = Annotated[np.ndarray, PlainValidator(_array_from_wire), PlainSerializer(_array_to_wire)]


def _ids_from_wire(value: Any) -> np.ndarray:
    """User ids: an array, or ``{"first", "count"}`` for the consecutive ids a fleet's block sends."""
    if isinstance(value, dict) and set(value) == {"first", "count"}:
        first, count = value["first"], value["count"]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (first, count)):
            raise ValueError("an id run's first and count must be non-negative ints")
        if count > MAX_ARRAY_ELEMENTS or first + count > 2**63:
            raise ValueError(f"an id run of {count} ids from {first} is out of bounds")
        return np.arange(first, first + count, dtype="<u4" if first + count <= 2**32 else "<u8")
    return _array_from_wire(value)


def _ids_to_wire(a: np.ndarray) -> dict:
    # A fleet's block without a dropout is one run of ids: 16 bytes instead of 4 per user (a
    # quarter of a report's wire bytes). Decoding gives the same dtype back (ids_on_wire's).
    n = a.size
    if (n > 1 and a.ndim == 1 and a.dtype == np.dtype("<u4" if int(a[-1]) < 2**32 else "<u8")
            and int(a[-1]) - int(a[0]) == n - 1 and bool(np.all(a[1:] > a[:-1]))):
        return {"first": int(a[0]), "count": n}
    return _array_to_wire(a)


# The user ids of a report message: on the wire as a run when they are one.
Ids = Annotated[np.ndarray, PlainValidator(_ids_from_wire), PlainSerializer(_ids_to_wire)]
RunId = Annotated[str, Field(pattern=RUN_ID_PATTERN)]
NonNeg = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


# --- wire values: a family's bodies ------------------------------------------------------------

ARRAY_KEY = "__array__"


# Values body_to_wire returns as they are: a map or list holding only these (exact types, so no
# numpy scalar or subclass) is copied by one C-level pass instead of one call per item.
_WIRE_SCALARS = frozenset({type(None), bool, int, float, str})


def body_to_wire(value: Any, depth: int = 0) -> Any:
    """A family's body as msgpack-able data: numpy arrays become typed blocks.

    A map or list of plain scalars is copied whole, and so is a list of empty lists; the result is
    the same as item by item. (The observer once encoded each received status or truth again to
    check its MAC, running this on what the users' account sent: a status body of 60,000 numbers
    cost 60,000 calls, 63–69 ms; issue #32 item 2. It checks the bytes received now,
    :func:`tag_payload`, and a fleet encodes what it signs.)"""
    if depth > MAX_BODY_DEPTH:
        raise ValueError(f"a body nests deeper than {MAX_BODY_DEPTH} levels")
    if isinstance(value, np.ndarray):
        return {ARRAY_KEY: _array_to_wire(value)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        if (depth < MAX_BODY_DEPTH or not value) and set(map(type, value)) <= {str} \
                and set(map(type, value.values())) <= _WIRE_SCALARS:
            return dict(value)
        return {str(k): body_to_wire(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if depth < MAX_BODY_DEPTH or not value:  # else an item is too deep: the loop below raises
            types = set(map(type, value))
            if types <= _WIRE_SCALARS:
                return list(value)
            if _only_empty_lists(value, types):
                return [[] for _ in value]
        return [body_to_wire(v, depth + 1) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a body cannot carry a {type(value).__name__}")


_EXACT = frozenset({type(None), bool, int})  # wire scalars that need no further check
_NUMBERS = frozenset({bool, int, float})


def _only_empty_lists(values: list, types: set | None = None) -> bool:
    """Whether ``values`` holds only empty lists (``types``: its items' types, if known), by
    C-level passes: both directions copy such a list whole."""
    return (set(map(type, values)) if types is None else types) == {list} and not any(values)


def _scalars_only(values) -> bool:
    """Whether ``values`` are all wire scalars (``None``, ``bool``, ``int``, finite ``float``, a
    string of at most 4096 characters), found by C-level passes instead of one call per item: a
    body's list of 4096 numbers costs microseconds, not a millisecond (issue #32 item 2). False
    means "look item by item", which also names what is wrong."""
    types = set(map(type, values))
    if types <= _EXACT:
        return True
    if types <= _NUMBERS:
        return all(map(math.isfinite, values))
    return types == {str} and max(map(len, values)) <= 4096


def body_from_wire(value: Any, depth: int = 0) -> Any:
    """The inverse of :func:`body_to_wire`, refusing anything but wire values (ValueError)."""
    if depth > MAX_BODY_DEPTH:
        raise ValueError(f"a body nests deeper than {MAX_BODY_DEPTH} levels")
    if isinstance(value, np.ndarray):  # built in this process: checked as the wire would check it
        return _array_from_wire(_array_to_wire(value))
    if isinstance(value, dict):
        if set(value) == {ARRAY_KEY}:
            return _array_from_wire(value[ARRAY_KEY])
        if len(value) > MAX_BODY_ITEMS:
            raise ValueError(f"a body map of more than {MAX_BODY_ITEMS} items")
        for k in value:
            if not isinstance(k, str) or not 0 < len(k) <= MAX_KEY_CHARS:
                raise ValueError(f"a body key must be a string of 1..{MAX_KEY_CHARS} characters")
        if not value or _scalars_only(value.values()):
            return dict(value)
        return {k: body_from_wire(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        if len(value) > MAX_BODY_ITEMS:
            raise ValueError(f"a body list of more than {MAX_BODY_ITEMS} items")
        if not value or _scalars_only(value):
            return list(value)
        if depth < MAX_BODY_DEPTH and _only_empty_lists(value):
            return [[] for _ in value]  # one pass, not a call each (8,000 cost 3–15 ms)
        return [body_from_wire(v, depth + 1) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("a body number must be finite")
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, str) and len(value) > 4096:
            raise ValueError("a body string longer than 4096 characters")
        return value
    raise ValueError(f"a body cannot carry a {type(value).__name__}")


Body = Annotated[Any, PlainValidator(body_from_wire), PlainSerializer(body_to_wire)]


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)


def packed(values: np.ndarray, m: int | None, high: float | None = None, integer: bool = True) -> np.ndarray:
    """The narrowest wire type for a round's reports: unsigned for residues of Z_m (or for counts
    in [0, high]), little-endian int64 for other integers, float64 for the rest."""
    bound = m if m is not None else (int(high) + 1 if integer and high is not None else None)
    if not integer or values.dtype.kind == "f":
        return np.asarray(values, dtype="<f8")
    if bound is None:
        return np.asarray(values, dtype="<i8")
    for dt, top in (("|u1", 2**8), ("<u2", 2**16), ("<u4", 2**32)):
        if bound <= top:
            return np.asarray(values).astype(dt)
    return np.asarray(values).astype("<u8")


def as_values(a: np.ndarray) -> np.ndarray:
    """Wire integers back to int64 (residues and counts are compared and summed as int64)."""
    return a.astype(np.int64) if a.dtype.kind in "iu" and a.dtype != np.int64 else a


class _Received:
    """The bytes :func:`decode` made a message from (``data``; None for a message built here).
    Where a message came from is not part of its value: any two compare equal, so a decoded
    message equals the one its sender built."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | None = None):
        self.data = data

    def __eq__(self, other) -> bool:
        return isinstance(other, _Received)

    __hash__ = None


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    v: Literal[2] = WIRE_VERSION
    run: RunId
    # What its tag, if it has one, is checked over (:func:`tag_payload`), instead of encoding it again.
    _received: _Received = PrivateAttr(default_factory=_Received)

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False):
        copy = super().model_copy(update=update, deep=deep)
        copy._received = _Received()  # a copy, changed or not, is not what was received
        return copy


# --- the spine's events ------------------------------------------------------------------------

class RoundSpec(BaseModel):
    """A :class:`~privbandit.protocol.spine.events.Round` on the wire."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: NonNeg
    intermediary: Annotated[str, Field(pattern=NAME_PATTERN, max_length=32)]
    rule: Literal[RULES]  # type: ignore[valid-type]
    expected: Positive
    width: Annotated[int, Field(ge=1, le=MAX_WIDTH)] = 1
    integer: bool = True
    m: Annotated[int, Field(ge=2, le=2**62)] | None = None
    low: FiniteFloat | None = None
    high: FiniteFloat | None = None
    window: tuple[int, int] | None = None
    threshold: Positive | None = None
    groups: list[Positive] = []
    secagg: Literal["complete", "sparse"] | None = None
    decode: tuple[int, int] | None = None
    secagg_degree: Positive | None = None
    secagg_threshold: Positive | None = None
    segment: Positive | None = None
    messages: bool = False

    def to_round(self) -> Round:
        try:
            return Round(self.id, self.intermediary, self.rule, self.expected, self.width, self.integer, self.m,
                         self.low, self.high, self.window, self.threshold, tuple(self.groups), self.secagg,
                         self.decode, self.secagg_degree, self.secagg_threshold, self.segment, self.messages)
        except ValueError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _consistent(self):
        self.to_round()  # the Round's own checks: groups add up, a modulus needs integers, …
        _require(self.threshold is None or self.threshold <= self.expected, "threshold must be ≤ expected")
        _require(self.low is None or self.high is None or self.low <= self.high, "low must be ≤ high")
        return self


def round_spec(r: Round) -> RoundSpec:
    return RoundSpec(id=r.id, intermediary=r.intermediary, rule=r.rule, expected=r.expected, width=r.width,
                     integer=r.integer, m=r.m, low=r.low, high=r.high, window=r.window, threshold=r.threshold,
                     groups=list(r.groups), secagg=r.secagg, decode=r.decode, secagg_degree=r.secagg_degree,
                     secagg_threshold=r.secagg_threshold, segment=r.segment, messages=r.messages)


def ids_on_wire(ids: np.ndarray) -> np.ndarray:
    """User ids as the narrowest unsigned dtype that holds them (4 bytes each below 2³²)."""
    return ids.astype("<u4" if ids.size == 0 or ids[-1] < 2**32 else "<u8")


class JoinSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    round: NonNeg
    first: NonNeg
    count: Positive
    reports: NonNeg
    users: Array | None = None  # the named reporters of a secure round (Join.users)

    @model_serializer(mode="wrap")
    def _unnamed_joins_stay_as_they_were(self, handler):
        # A join naming nobody goes on the wire without the field, byte for byte as before it existed.
        out = handler(self)
        if self.users is None:
            out.pop("users")
        return out

    @model_validator(mode="after")
    def _quota(self):
        _require(self.reports <= self.count, "a join cannot promise more reports than users")
        if self.users is not None:
            u = self.users
            _require(u.ndim == 1 and u.dtype.kind == "u" and u.size == self.reports, "a join names its reports' users")
            _require(u.size == 0 or (int(u[0]) >= self.first and int(u[-1]) < self.first + self.count
                                     and bool(np.all(u[1:] > u[:-1]))),
                     "a join's users must be increasing ids inside its range")
        return self

    def to_join(self) -> Join:
        return Join(self.round, self.first, self.count, self.reports,
                    None if self.users is None else tuple(self.users.tolist()))


def join_spec(j: Join) -> JoinSpec:
    users = None if j.users is None else ids_on_wire(np.asarray(j.users, dtype=np.int64))
    return JoinSpec(round=j.round_id, first=j.first, count=j.count, reports=j.reports, users=users)


class PlanMsg(_Msg):
    """Analyzer → users and intermediaries: a :class:`~privbandit.protocol.spine.events.Plan`."""

    kind: Literal["plan"] = "plan"
    task: NonNeg
    plan: NonNeg
    first_user: NonNeg
    cohort: Positive
    body: Body = {}
    opens: Annotated[list[RoundSpec], Field(max_length=MAX_ROUNDS_PER_PLAN)] = []
    joins: Annotated[list[JoinSpec], Field(max_length=MAX_ROUNDS_PER_PLAN)] = []

    @model_validator(mode="after")
    def _joins_inside(self):
        end = self.first_user + self.cohort
        for j in self.joins:
            _require(self.first_user <= j.first and j.first + j.count <= end, "a join lies outside the cohort")
        return self

    def to_plan(self) -> Plan:
        return Plan(self.plan, self.first_user, self.cohort, self.body, tuple(r.to_round() for r in self.opens),
                    tuple(j.to_join() for j in self.joins))


def plan_msg(run: str, task: int, plan: Plan) -> PlanMsg:
    return PlanMsg(run=run, task=task, plan=plan.id, first_user=plan.first_user, cohort=plan.cohort,
                   body=body_from_wire(body_to_wire(plan.body)), opens=[round_spec(r) for r in plan.opens],
                   joins=[join_spec(j) for j in plan.joins])


class ReportsMsg(_Msg):
    """Users → intermediary: one record per user, ``values[r, i]`` user ``user_ids[i]``'s report in
    run r. ``block``: the block of the plan's cohort this message closes (a fleet sends one message
    per block and round; the intermediary learns who dropped out once every block is closed), proven
    by ``block_tag``, the fleet's MAC over the message, which only holders of the users' keys can make."""

    kind: Literal["reports"] = "reports"
    task: NonNeg
    round: NonNeg
    plan: NonNeg
    user_ids: Ids
    values: Array
    block: NonNeg | None = None
    # One per record: the user's one-time MAC over its report (protocol/primitives/report_auth.py),
    # so a report under another user's id is rejected as ``bad-tag`` (``missing-tag`` when absent).
    tags: Array | None = None
    block_tag: bytes = b""

    @model_validator(mode="after")
    def _records(self):
        ids, values = self.user_ids, self.values
        _require(ids.ndim == 1 and ids.dtype.kind == "u", "user_ids must be a 1-D unsigned array")
        _require(values.ndim == 3 and values.shape[1] == ids.size,
                 "values must be (runs, users, width) with one row per user id")
        _require(1 <= values.shape[0] and 1 <= values.shape[2] <= MAX_WIDTH, "values: bad runs or width")
        _require(values.dtype.kind in "uif", "values must be numeric")
        _require(self.tags is None or (self.tags.ndim == 1 and self.tags.size == ids.size
                                       and self.tags.dtype == np.dtype("<u4")),
                 "tags must be one <u4 per user id")
        _require(len(self.block_tag) in (0, NONCE_MAC_BYTES), f"block_tag must be {NONCE_MAC_BYTES} bytes")
        return self


class ReleaseMsg(_Msg):
    """Intermediary → analyzer: a :class:`~privbandit.protocol.spine.events.Release`."""

    kind: Literal["release"] = "release"
    task: NonNeg
    round: NonNeg
    n_reports: NonNeg
    values: Array
    user_ids: Array | None = None

    @model_validator(mode="after")
    def _shape(self):
        v = self.values
        _require(v.ndim in (2, 3), "values must be (runs, width) or (runs, reports, width)")
        _require(v.ndim == 2 or v.shape[1] == self.n_reports
                 or (self.n_reports > 0 and v.shape[2] == 1 and v.shape[1] % self.n_reports == 0
                     and self.user_ids is None),
                 "a multiset must hold n_reports rows, or n_reports × width messages of one entry")
        _require(self.user_ids is None or (v.ndim == 3 and self.user_ids.ndim == 1
                                           and self.user_ids.size == self.n_reports
                                           and self.user_ids.dtype.kind == "u"),
                 "user_ids must name each of the n_reports rows")
        return self


class SecAggMsg(_Msg):
    """One chunk of one secure-aggregation step between a user fleet and the aggregator.

    Fleets → aggregator: ``advertise`` (ids, records = adverts), ``shares`` (ids = senders,
    peers = recipients, records = ciphertexts), ``masked`` (ids, values), ``unmask`` (ids =
    responders, peers = owners, kinds, limbs). Aggregator → fleets: ``directory`` (like
    ``advertise``, to every fleet), ``delivery`` (like ``shares``, to fleet ``shard``),
    ``survivors`` (ids, to every fleet). ``final`` marks a fleet's (or the aggregator's) last
    chunk of the step; ``chunk`` numbers them, so a redelivered chunk counts once.
    """

    kind: Literal["secagg"] = "secagg"
    task: NonNeg
    round: NonNeg
    step: Literal["advertise", "directory", "shares", "delivery", "masked", "survivors", "unmask"]
    shard: NonNeg
    shards: Annotated[int, Field(ge=1, le=4096)]
    chunk: NonNeg
    final: bool
    ids: Array
    peers: Array | None = None
    values: Array | None = None
    kinds: Array | None = None
    limbs: Array | None = None
    records: bytes = b""
    # Fleet → aggregator: the fleet's HMAC over this chunk encoded with an empty tag
    # (protocol/primitives/report_auth.py); the aggregator refuses a missing or wrong one.
    tag: bytes = b""

    @model_validator(mode="after")
    def _flat(self):
        for name in ("ids", "peers", "values", "kinds", "limbs"):
            a = getattr(self, name)
            _require(a is None or a.ndim == 1, f"{name} must be 1-D")
        return self


SECAGG_STEPS = SecAggMsg.model_fields["step"].annotation.__args__


class CloseMsg(_Msg):
    """Analyzer → intermediaries (on the plan topic): the task is done, and these rounds it opened
    will never be released (an Anytime-Lazy-UCB array the horizon cut short): forget them."""

    kind: Literal["close"] = "close"
    task: NonNeg
    rounds: Annotated[list[NonNeg], Field(max_length=4096)]


class ResendMsg(_Msg):
    """Intermediary → fleets (on ``relay/<intermediary>``): serve round ``round`` again.

    Sent by an intermediary that may have lost reports it had acknowledged: it restarted from a
    checkpoint (which holds closed rounds, not open ones) or lost the broker. Records are
    idempotent, so the fleets' second copies are counted once."""

    kind: Literal["resend"] = "resend"
    task: NonNeg
    round: NonNeg


class TruthMsg(_Msg):
    """Users → observer: a :class:`~privbandit.protocol.spine.events.Truth`."""

    kind: Literal["truth"] = "truth"
    task: NonNeg
    plan: NonNeg
    block: NonNeg
    first_user: NonNeg
    size: NonNeg
    pseudo: Array
    realized: Array
    pseudo_at: Array
    realized_at: Array
    extras: Body = {}
    # The fleet's MAC over this message (encoded with an empty tag): only a holder of the users'
    # keys can tell the observer what the simulated world did.
    tag: bytes = b""

    @model_validator(mode="after")
    def _shapes(self):
        r = self.pseudo.shape[0] if self.pseudo.ndim == 1 else -1
        _require(r >= 1 and self.realized.shape == (r,), "pseudo and realized must be one total per run")
        _require(self.pseudo_at.ndim == 2 and self.pseudo_at.shape[0] == r
                 and self.realized_at.shape == self.pseudo_at.shape, "the *_at arrays must be (runs, checkpoints)")
        for name in ("pseudo", "realized", "pseudo_at", "realized_at"):
            a = getattr(self, name)
            _require(a.dtype == np.float64 and bool(np.isfinite(a).all()), f"{name} must be finite <f8")
        return self


def truth_msg(run: str, task: int, t: Truth) -> TruthMsg:
    return TruthMsg(run=run, task=task, plan=t.plan_id, block=t.block, first_user=t.first_user, size=t.size,
                    pseudo=np.asarray(t.pseudo, np.float64), realized=np.asarray(t.realized, np.float64),
                    pseudo_at=np.asarray(t.pseudo_at, np.float64), realized_at=np.asarray(t.realized_at, np.float64),
                    extras=body_from_wire(body_to_wire(t.extras)))


def truth_of(msg: TruthMsg) -> Truth:
    return Truth(msg.plan, msg.block, msg.first_user, msg.size, msg.pseudo, msg.realized, msg.pseudo_at,
                 msg.realized_at, msg.extras)


class RecordMsg(_Msg):
    """Analyzer → observer: a :class:`~privbandit.protocol.spine.events.Record`."""

    kind: Literal["record"] = "record"
    task: NonNeg
    round: NonNeg
    n_reports: NonNeg
    epsilon: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    body: Body = {}


def record_msg(run: str, task: int, r: Record) -> RecordMsg:
    return RecordMsg(run=run, task=task, round=r.round_id, n_reports=r.n_reports, epsilon=r.epsilon,
                     body=body_from_wire(body_to_wire(r.body)))


def record_of(msg: RecordMsg) -> Record:
    return Record(msg.round, msg.n_reports, msg.epsilon, msg.body)


def reports_of(msg: ReportsMsg) -> Reports:
    return Reports(msg.round, msg.plan, msg.user_ids.astype(np.int64), as_values(msg.values))


def release_msg(run: str, task: int, rel: Release, rnd: Round) -> ReleaseMsg:
    values = rel.values if rel.values.ndim == 2 else packed(rel.values, rnd.m, rnd.high, rnd.integer)
    ids = None if rel.user_ids is None else rel.user_ids.astype("<u8")
    return ReleaseMsg(run=run, task=task, round=rel.round_id, n_reports=rel.n_reports, values=values, user_ids=ids)


def release_of(msg: ReleaseMsg) -> Release:
    ids = None if msg.user_ids is None else msg.user_ids.astype(np.int64)
    return Release(msg.round, msg.n_reports, as_values(msg.values), ids)


class StatusMsg(_Msg):
    """Any party → observer, on the party's own metrics topic (``metrics/<party>``, which only its
    account may write): ready, task finished (with its counters), a failure, an intermediary's
    round counts (``rounds``: for the dashboard), or its final counters (``stats``)."""

    kind: Literal["status"] = "status"
    party: Annotated[str, Field(pattern=NAME_PATTERN, max_length=32)]
    state: Literal["ready", "task-done", "error", "stats", "rounds"]
    task: NonNeg | None = None
    body: Body = {}
    # A user fleet's MAC over this message (encoded with an empty tag): fleets share one broker
    # account, and so does anyone holding it, so the topic alone cannot tell a fleet's status from
    # a forgery (issue #20 item 2). Parties with their own accounts leave it empty.
    tag: bytes = b""


class TaskSpec(BaseModel):
    """The public description of one task (one run of one algorithm), carried by ControlMsg."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    index: NonNeg
    runs: Annotated[list[NonNeg], Field(min_length=1, max_length=1)]
    label: Annotated[str, Field(min_length=1, max_length=200)]
    family: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,63}$")]
    public: dict
    # The observer's session nonce: a checkpoint taken in another session (same run id, same
    # experiment, a new start) does not match this spec's fingerprint and is refused.
    session: Annotated[str, Field(pattern=r"^[0-9a-f]{1,64}$")] | None = None


class ControlMsg(_Msg):
    """Coordinator → everyone: start a task (with its public spec), shut down, or ``resync``: send
    the running task's metrics again (some were lost with a broker that died before delivering);
    a ``resync`` with no task, before the first, asks every party waiting for one to say "ready"."""

    kind: Literal["control"] = "control"
    action: Literal["task", "shutdown", "resync"]
    task: NonNeg | None = None
    body: Body = {}


Message = Annotated[
    Union[PlanMsg, ReportsMsg, ReleaseMsg, SecAggMsg, CloseMsg, ResendMsg, TruthMsg, RecordMsg, StatusMsg,
          ControlMsg],
    Field(discriminator="kind"),
]
KINDS = ("plan", "reports", "release", "secagg", "close", "resend", "truth", "record", "status", "control")


class _Wire(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    msg: Message


# The kinds each topic class carries (services/bus.py decodes by topic): a message of another kind
# there is refused before its schema is checked, so the users' account (which may write ``report``
# and ``metrics/users-i`` only) can make a party validate reports, secure-aggregation chunks,
# truths and statuses, never a plan of a thousand rounds.
TOPIC_KINDS: dict[str, frozenset[str]] = {
    "plan": frozenset({"plan", "close"}),
    "report": frozenset({"reports", "secagg"}),
    "release": frozenset({"release"}),
    "relay": frozenset({"secagg", "resend"}),
    "metrics": frozenset({"status", "truth", "record"}),
    "control": frozenset({"control"}),
}

_MODELS: dict[str, type[_Msg]] = {m.model_fields["kind"].default: m for m in (
    PlanMsg, ReportsMsg, ReleaseMsg, SecAggMsg, CloseMsg, ResendMsg, TruthMsg, RecordMsg, StatusMsg, ControlMsg)}


def _nested_models(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The fields of ``model`` that hold a list of models (a plan's rounds and joins)."""
    out = {}
    for name, f in model.model_fields.items():
        args = getattr(f.annotation, "__args__", ())
        if (getattr(f.annotation, "__origin__", None) is list and args and isinstance(args[0], type)
                and issubclass(args[0], BaseModel)):
            out[name] = args[0]
    return out


_NESTED = {kind: _nested_models(model) for kind, model in _MODELS.items()}
_FIELDS = {model: frozenset(model.model_fields) for model in (*_MODELS.values(), RoundSpec, JoinSpec)}


def _unknown_keys(kind: str, obj: dict) -> tuple[int, str]:
    """How many keys of the message, and of its nested models, its schema does not know, and the
    first one: counted here, so that pydantic never builds one error per key."""
    extra = [k for k in obj if k not in _FIELDS[_MODELS[kind]]]
    for name, sub in _NESTED[kind].items():
        items = obj.get(name)
        if isinstance(items, list):
            known = _FIELDS[sub]
            extra += [f"{name}.{k}" for item in items if isinstance(item, dict) for k in item if k not in known]
    return len(extra), (str(extra[0])[:40] if extra else "")


class _ItemBudget(Exception):
    pass


def _budget(items: int, containers: int):
    """The unpacker's hook for every map and list: it stops the unpacker once the message holds
    more than ``items`` items or ``containers`` maps and lists."""
    left, count = items, containers

    def hook(container):
        nonlocal left, count
        left -= len(container) + 1
        count -= 1
        if left < 0 or count < 0:
            raise _ItemBudget
        return container

    return hook


def encode(msg: _Msg) -> bytes:
    return msgpack.packb(msg.model_dump(), use_bin_type=True)


_EMPTY_BIN = msgpack.packb(b"", use_bin_type=True)
# The kinds whose tag is checked over the bytes received (tag_payload): a status's or truth's body
# is a tree of items, costly to walk again. A secagg chunk's and a reports message's arrays are
# bytes, cheap to encode again, and the aggregator holds many of them: they keep no second copy.
_CHECKED_OVER_RECEIVED = frozenset({"status", "truth"})


def _value_span(data: bytes, key: str) -> tuple[int, int] | None:
    """Where the value of the top-level map's first ``key`` lies in ``data`` (a message that
    :func:`unpack` accepted, so bounded), or None; msgpack skips the other values in C."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=len(data))
    unpacker.feed(data)
    for _ in range(unpacker.read_map_header()):
        found = unpacker.unpack() == key
        start = unpacker.tell()
        unpacker.skip()
        if found:
            return start, unpacker.tell()
    return None


def tag_payload(msg: _Msg) -> bytes:
    """What a message's ``tag`` is a MAC over: the message as its sender encoded it with an empty
    tag. For a message :func:`decode` made, that is the received bytes with the tag's value
    emptied: :func:`encode` writes the fields in schema order, so the sender's ``encode(msg with
    tag b"")`` and the sent ``encode(msg with tag T)`` differ in that value only. A bomb with a
    60,000-item body then costs its MAC check a C-level skip over the bytes, not a second walk of
    its items and an encoding (issue #32 item 2: 2.9 of its 8.1 ms). Bytes that are not what
    ``encode`` writes give another MAC input, so they fail the check as a forgery does: the MAC
    covers what was received; bytes without a tag are taken as they are. A message built here is
    encoded."""
    data = msg._received.data
    if data is None:
        return encode(msg.model_copy(update={"tag": b""}))
    span = _value_span(data, "tag")
    # Sent without a tag, it has none to empty (and its empty tag can match no MAC).
    return data if span is None else data[:span[0]] + _EMPTY_BIN + data[span[1]:]


def unpack(data: bytes) -> Any:
    """msgpack → Python objects within the module's bounds, or :class:`DecodeError`."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise DecodeError("too-large", f"{len(data)} bytes > {MAX_MESSAGE_BYTES}")
    hook = _budget(MAX_ITEMS, MAX_CONTAINERS)
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=MAX_MESSAGE_BYTES,
                               max_str_len=MAX_STR_BYTES, max_array_len=MAX_CONTAINER_ITEMS,
                               max_map_len=MAX_CONTAINER_ITEMS, max_ext_len=0, list_hook=hook, object_hook=hook)
    except _ItemBudget:
        raise DecodeError("over-limit", f"more than {MAX_ITEMS} map entries and list elements, or "
                                        f"{MAX_CONTAINERS} maps and lists") from None
    except msgpack.StackError:
        raise DecodeError("over-limit", "nested deeper than the unpacker's stack") from None
    except Exception as exc:  # msgpack raises several unrelated types on garbage, and on a bound
        if isinstance(exc, ValueError) and "exceeds max_" in str(exc):  # a map, list, string or bin too long
            raise DecodeError("over-limit", str(exc)[:80]) from None
        raise DecodeError("not-msgpack", f"{type(exc).__name__}: {str(exc)[:80]}") from None


def decode(data: bytes, kinds: frozenset[str] | None = None) -> _Msg:
    """Bytes → a validated message, or :class:`DecodeError` with a countable reason. ``kinds``: the
    kinds the topic it came on carries (:data:`TOPIC_KINDS`; None: any)."""
    obj = unpack(data)
    if not isinstance(obj, dict):
        raise DecodeError("not-a-map", type(obj).__name__)
    if obj.get("v") != WIRE_VERSION:
        raise DecodeError("bad-version", f"v={str(obj.get('v'))[:20]!r}, expected {WIRE_VERSION}")
    kind = obj.get("kind")
    if kind not in KINDS:
        raise DecodeError("unknown-kind", repr(kind)[:40])
    if kinds is not None and kind not in kinds:
        raise DecodeError("wrong-topic", f"a {kind} message on a topic that carries {', '.join(sorted(kinds))}")
    n, first = _unknown_keys(kind, obj)
    if n:
        raise DecodeError("schema", f"{kind}.{first}: not in the schema ({n} unknown key{'s' if n > 1 else ''})")
    try:
        msg = _Wire.model_validate({"msg": obj}).msg
    except ValidationError as exc:
        # The first error only; without their inputs, which pydantic would otherwise copy out.
        first = exc.errors(include_url=False, include_context=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"][2:])
        raise DecodeError("schema", f"{kind}.{where}: {first['msg']}"[:300]) from None
    except RecursionError:
        raise DecodeError("schema", f"{kind}: nested too deep") from None
    if kind in _CHECKED_OVER_RECEIVED:
        msg._received = _Received(bytes(data))
    return msg
