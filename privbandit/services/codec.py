"""The wire format: pydantic models encoded with msgpack.

Every message is a msgpack map carrying ``v`` (the format version), ``run`` (the run id: the topic
namespace), ``kind`` and, where it has one, the task and round it belongs to. Numeric arrays travel
as typed binary blocks ``{"dtype", "shape", "data"}`` rather than lists of Python ints, so a report
of n users costs n·itemsize bytes plus a constant.

Decoding never raises anything but :class:`DecodeError`, whose ``reason`` is a short key the
services count (``rejected.<reason>`` in the results). Limits are named constants with their reason.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

import msgpack
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, PlainValidator, ValidationError, model_validator

WIRE_VERSION = 1

# One message carries at most one block of users (seeding.USER_BLOCK = 65,536) of 8-byte ids and
# 8-byte values, about 1 MiB; 8 MiB leaves room for any legitimate message and refuses floods.
MAX_MESSAGE_BYTES = 8 * 2**20
MAX_ARRAY_ELEMENTS = 2**20
# Only fixed-width little-endian numeric types: no object arrays, nothing pickled.
ALLOWED_DTYPES = frozenset({"|u1", "<u2", "<u4", "<u8", "|i1", "<i8", "<f8", "|b1"})
RUN_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


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
    if not (isinstance(shape, list) and len(shape) == 1 and isinstance(shape[0], int) and shape[0] >= 0):
        raise ValueError("array shape must be [length]")
    if shape[0] > MAX_ARRAY_ELEMENTS:
        raise ValueError(f"array of {shape[0]} elements exceeds {MAX_ARRAY_ELEMENTS}")
    if not isinstance(data, bytes) or len(data) != shape[0] * np.dtype(dtype).itemsize:
        raise ValueError("array data length does not match dtype and shape")
    return np.frombuffer(data, dtype=dtype)


def _array_to_wire(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a)
    dtype = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    return {"dtype": dtype.str, "shape": [int(a.size)], "data": a.astype(dtype, copy=False).tobytes()}


Array = Annotated[np.ndarray, PlainValidator(_array_from_wire), PlainSerializer(_array_to_wire)]
RunId = Annotated[str, Field(pattern=RUN_ID_PATTERN)]
NonNeg = Annotated[int, Field(ge=0)]


def packed(values: np.ndarray, m: int | None) -> np.ndarray:
    """The narrowest unsigned type holding residues of Z_m (raw rewards stay float64)."""
    if m is None:
        return np.asarray(values, dtype="<f8")
    for dt, bound in (("|u1", 2**8), ("<u2", 2**16), ("<u4", 2**32)):
        if m <= bound:
            return np.asarray(values).astype(dt)
    return np.asarray(values).astype("<u8")


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    v: Literal[1] = WIRE_VERSION
    run: RunId


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    n: Annotated[int, Field(ge=1)]
    g: NonNeg | None = None
    tau: NonNeg | None = None
    m: Annotated[int, Field(ge=2, le=2**62)] | None = None
    sigma: float = 0.0
    h: float = 0.0
    noise_n: Annotated[int, Field(ge=1)] | None = None


def params_of(q) -> Params:
    """A RoundParams on the wire."""
    return Params(n=q.n, g=q.g, tau=q.tau, m=q.m, sigma=q.sigma, h=q.h, noise_n=q.noise_n)


class PlanMsg(_Msg):
    kind: Literal["plan"] = "plan"
    task: NonNeg
    round: NonNeg
    batch: Annotated[int, Field(ge=1)]
    arm: NonNeg
    first_user: NonNeg
    cohort: Annotated[int, Field(ge=1)]
    collect: bool
    params: Params


class ReportsMsg(_Msg):
    kind: Literal["reports"] = "reports"
    task: NonNeg
    round: NonNeg
    m: Annotated[int, Field(ge=2)] | None  # the modulus the users encoded with (None: raw rewards)
    user_ids: Array
    values: Array
    # Which block of the cohort this message closes (fleets send one message per block): once
    # every block has reported, the missing users are dropouts, not late.
    block: NonNeg | None = None
    # One per record: the user's one-time MAC over its report (protocol/report_auth.py), so a
    # report under another user's id is rejected as ``bad-tag`` (``missing-tag`` when absent).
    tags: Array | None = None


class ReleaseMsg(_Msg):
    kind: Literal["release"] = "release"
    task: NonNeg
    round: NonNeg
    n_reports: NonNeg
    value: int | float | None = None  # the modular sum (or a raw sum)
    reports: Array | None = None  # the local model's attributable reports


SECAGG_STEPS = ("advertise", "directory", "shares", "delivery", "masked", "survivors", "unmask")


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
    step: Literal[SECAGG_STEPS]  # type: ignore[valid-type]
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
    # (protocol/report_auth.py); the aggregator refuses a missing or wrong one (``secagg-bad-tag``).
    tag: bytes = b""


class ResendMsg(_Msg):
    """Intermediary → fleets (on ``relay/<intermediary>``): serve round ``round`` again.

    Sent by an intermediary that may have lost reports it had acknowledged: it restarted from a
    checkpoint (which holds closed rounds, not open ones) or lost the broker. Records are
    idempotent, so the fleets' second copies are counted once."""

    kind: Literal["resend"] = "resend"
    task: NonNeg
    round: NonNeg


class TruthMsg(_Msg):
    """Users → observer: a BlockTruth."""

    kind: Literal["truth"] = "truth"
    task: NonNeg
    round: NonNeg
    block: NonNeg
    first_user: NonNeg
    size: Annotated[int, Field(ge=1)]
    gap: float
    realized_regret: float
    realized_at: Array
    reward_sum: float
    noise_sum: int
    attackers: NonNeg = 0  # the block's adversarial reporters (ground truth, observer only)


class RecordMsg(_Msg):
    """Analyzer → observer: a RoundRecord."""

    kind: Literal["record"] = "record"
    task: NonNeg
    round: NonNeg
    batch: Annotated[int, Field(ge=1)]
    arm: NonNeg
    params: Params
    release: float
    estimate: float
    wrapped: bool
    central_noise: float
    reports: NonNeg
    epsilon: float | None = None


# --- the shuffle-model linear bandits (Chowdhury & Zhou 2022; services/linear.py) ---------------
# A report has D = d + d(d+1)/2 labels; d ≤ 64 (the family's limit) gives D ≤ 2144.
MAX_LINEAR_DIM = 64
MAX_LINEAR_WIDTH = MAX_LINEAR_DIM + MAX_LINEAR_DIM * (MAX_LINEAR_DIM + 1) // 2
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)


class LinearPlanMsg(_Msg):
    """Analyzer → users: batch ``round`` of Algorithm 1 (users first_user … first_user + cohort − 1)
    acts on the broadcast model (θ̂, V⁻¹, β) (line 4). ``collect`` is False for a trailing partial
    batch, which is served but never aggregated."""

    kind: Literal["linear-plan"] = "linear-plan"
    task: NonNeg
    round: NonNeg
    first_user: NonNeg
    cohort: Annotated[int, Field(ge=1)]
    collect: bool
    theta: Array
    v_inv: Array
    beta: FiniteFloat

    @model_validator(mode="after")
    def _model(self):
        d = self.theta.size
        _require(self.theta.dtype == np.float64 and self.v_inv.dtype == np.float64, "theta and v_inv must be <f8")
        _require(1 <= d <= MAX_LINEAR_DIM, f"theta must have 1..{MAX_LINEAR_DIM} entries")
        _require(self.v_inv.size == d * d, "v_inv must have d² entries")
        _require(bool(np.isfinite(self.theta).all() and np.isfinite(self.v_inv).all()), "theta and v_inv must be finite")
        return self


class LinearReportsMsg(_Msg):
    """Users → shuffler: one record per user, ``width`` labels each (row-major ``values``): P_Vec's
    per-label counts of 1-bits (unsigned), or P_Amp's Gaussian-randomized entries (<f8)."""

    kind: Literal["linear-reports"] = "linear-reports"
    task: NonNeg
    round: NonNeg
    width: Annotated[int, Field(ge=1, le=MAX_LINEAR_WIDTH)]
    user_ids: Array
    values: Array

    @model_validator(mode="after")
    def _records(self):
        _require(self.user_ids.dtype.kind == "u", "user_ids must be unsigned")
        _require(self.values.size == self.user_ids.size * self.width, "values must hold width entries per user")
        return self


class LinearReleaseMsg(_Msg):
    """Shuffler → analyzer: P_Vec's per-label totals (``width`` values), or P_Amp's uniformly permuted
    list of ``n_reports`` reports (n_reports·width values). No sender ids, no arrival order."""

    kind: Literal["linear-release"] = "linear-release"
    task: NonNeg
    round: NonNeg
    n_reports: Annotated[int, Field(ge=1)]
    width: Annotated[int, Field(ge=1, le=MAX_LINEAR_WIDTH)]
    values: Array

    @model_validator(mode="after")
    def _shape(self):
        _require(self.values.size in (self.width, self.n_reports * self.width),
                 "values must be width totals or n_reports·width entries")
        return self


class LinearTruthMsg(_Msg):
    """Users → observer: ground truth of one batch: the served arm's gap μ* − μ_a, every user's
    realized regret 1{U < μ*} − 1{U < μ_a} (int8), and on diagnostic batches Σ entries."""

    kind: Literal["linear-truth"] = "linear-truth"
    task: NonNeg
    round: NonNeg
    first_user: NonNeg
    gap: FiniteFloat
    realized: Array
    entries_sum: Array | None = None

    @model_validator(mode="after")
    def _sizes(self):
        _require(self.realized.dtype == np.int8 and 1 <= self.realized.size, "realized must be int8, ≥ 1 user")
        return self


class LinearRecordMsg(_Msg):
    """Analyzer → observer, on diagnostic batches: its estimate of the batch sum, θ̂ and λ_min(V_m)."""

    kind: Literal["linear-record"] = "linear-record"
    task: NonNeg
    round: NonNeg
    estimate: Array
    theta: Array
    lambda_min: float


class StatusMsg(_Msg):
    """Any party → observer: ready, task finished (with its counters), or a failure."""

    kind: Literal["status"] = "status"
    party: Annotated[str, Field(pattern=r"^[a-z]+(-[0-9]+)?$")]
    state: Literal["ready", "task-done", "error", "stats"]
    task: NonNeg | None = None
    body: dict = {}


class TaskSpec(BaseModel):
    """The public description of one task (one run of one algorithm), carried by ControlMsg."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    index: NonNeg
    run: NonNeg
    label: Annotated[str, Field(min_length=1, max_length=200)]
    algorithm: dict
    horizon: Annotated[int, Field(ge=2)]
    arms: Annotated[int, Field(ge=2)]
    delta: Annotated[float, Field(gt=0, lt=1)]
    # The observer's session nonce: a checkpoint taken in another session (same run id, same
    # experiment, a new start) does not match this spec's fingerprint and is refused.
    session: Annotated[str, Field(pattern=r"^[0-9a-f]{1,64}$")] | None = None
    family: Literal["distributed-dp-mab", "shuffle-linear-bandits"] = "distributed-dp-mab"


class ControlMsg(_Msg):
    """Coordinator → everyone: start a task (with its public spec), shut down, or ``resync``: send
    the running task's metrics again (some were lost with a broker that died before delivering)."""

    kind: Literal["control"] = "control"
    action: Literal["task", "shutdown", "resync"]
    task: NonNeg | None = None
    body: dict = {}


Message = Annotated[
    Union[PlanMsg, ReportsMsg, ReleaseMsg, SecAggMsg, ResendMsg, TruthMsg, RecordMsg, StatusMsg, ControlMsg,
          LinearPlanMsg, LinearReportsMsg, LinearReleaseMsg, LinearTruthMsg, LinearRecordMsg],
    Field(discriminator="kind"),
]
KINDS = ("plan", "reports", "release", "secagg", "resend", "truth", "record", "status", "control",
         "linear-plan", "linear-reports", "linear-release", "linear-truth", "linear-record")


class _Wire(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    msg: Message


def encode(msg: _Msg) -> bytes:
    return msgpack.packb(msg.model_dump(), use_bin_type=True)


def decode(data: bytes) -> _Msg:
    """Bytes → a validated message, or :class:`DecodeError` with a countable reason."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise DecodeError("too-large", f"{len(data)} bytes > {MAX_MESSAGE_BYTES}")
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=MAX_MESSAGE_BYTES)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise DecodeError("not-msgpack", type(exc).__name__) from None
    if not isinstance(obj, dict):
        raise DecodeError("not-a-map", type(obj).__name__)
    if obj.get("v") != WIRE_VERSION:
        raise DecodeError("bad-version", f"v={obj.get('v')!r}, expected {WIRE_VERSION}")
    if obj.get("kind") not in KINDS:
        raise DecodeError("unknown-kind", repr(obj.get("kind"))[:40])
    try:
        return _Wire.model_validate({"msg": obj}).msg
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"][2:])
        raise DecodeError("schema", f"{obj['kind']}.{where}: {first['msg']}") from None
