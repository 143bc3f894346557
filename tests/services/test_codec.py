"""The wire codec: round trips, and every malformed input rejected with a countable reason."""

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privbandit.services import codec
from privbandit.services.codec import DecodeError, decode, encode, packed


def _reports(n=5, m=5000):
    return codec.ReportsMsg(run="r1", task=0, round=3, m=m, user_ids=np.arange(n, dtype="<u4"),
                            values=packed(np.arange(n) % m, m))


SAMPLES = [
    _reports(),
    codec.PlanMsg(run="r1", task=1, round=2, batch=3, arm=4, first_user=10, cohort=8, collect=True,
                  params=codec.Params(n=8, g=3, tau=40, m=105, sigma=1.5, h=2.0)),
    codec.ReleaseMsg(run="r1", task=0, round=3, n_reports=8, value=77),
    codec.ReleaseMsg(run="r1", task=0, round=3, n_reports=3, reports=np.array([0.5, 1.0, 0.0])),
    codec.TruthMsg(run="r1", task=0, round=1, block=0, first_user=0, size=4, gap=0.1, realized_regret=0.3,
                   realized_at=np.array([0.1, 0.2]), reward_sum=2.0, noise_sum=-3),
    codec.RecordMsg(run="r1", task=0, round=1, batch=1, arm=0, params=codec.Params(n=2), release=1.0,
                    estimate=1.2, wrapped=False, central_noise=0.2, reports=2, epsilon=1.0),
    codec.SecAggMsg(run="r1", task=0, round=3, step="shares", shard=1, shards=2, chunk=0, final=True,
                    ids=np.array([5, 6], dtype="<u8"), peers=np.array([6, 5], dtype="<u8"), records=b"x" * 240),
    codec.StatusMsg(run="r1", party="users-1", state="ready"),
    codec.ControlMsg(run="r1", action="task", task=0, body={"index": 0}),
    # the shuffle-model linear bandits (d = 2, D = 5 labels)
    codec.LinearPlanMsg(run="r1", task=0, round=7, first_user=140, cohort=20, collect=True,
                        theta=np.array([0.1, -0.2]), v_inv=np.eye(2).reshape(-1), beta=1.5),
    codec.LinearReportsMsg(run="r1", task=0, round=7, width=5, user_ids=np.arange(140, 143, dtype="<u4"),
                           values=np.arange(15, dtype="|u1")),
    codec.LinearReleaseMsg(run="r1", task=0, round=7, n_reports=20, width=5, values=np.arange(5, dtype="<i8")),
    codec.LinearTruthMsg(run="r1", task=0, round=7, first_user=140, gap=0.05,
                         realized=np.array([1, 0, -1], dtype="|i1"), entries_sum=np.ones(5)),
    codec.LinearRecordMsg(run="r1", task=0, round=7, estimate=np.ones(5), theta=np.zeros(2), lambda_min=0.5),
]
LINEAR = {m.kind: m for m in SAMPLES if m.kind.startswith("linear-")}


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: m.kind)
def test_round_trip(msg):
    back = decode(encode(msg))
    assert type(back) is type(msg)
    for name in type(msg).model_fields:
        a, b = getattr(msg, name), getattr(back, name)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        else:
            assert a == b


@pytest.mark.parametrize("m, dtype", [(256, "uint8"), (257, "uint16"), (2**16 + 1, "uint32"), (2**33, "uint64"),
                                      (None, "float64")])
def test_residues_travel_in_the_narrowest_type(m, dtype):
    assert packed(np.array([0, 1]), m).dtype == np.dtype(dtype)


def test_report_bytes_per_user_are_the_ids_and_values_plus_a_constant():
    small, big = len(encode(_reports(10))), len(encode(_reports(10_010)))
    # u4 ids and u2 residues (m = 5000); msgpack's bin headers grow by a few bytes with the length.
    assert 10_000 * (4 + 2) <= big - small <= 10_000 * (4 + 2) + 16


def _mutate(msg, **changes):
    obj = msgpack.unpackb(encode(msg), raw=False)
    for path, value in changes.items():
        node = obj
        *parents, leaf = path.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return msgpack.packb(obj, use_bin_type=True)


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"\xc1garbage", "not-msgpack"),
        (msgpack.packb([1, 2, 3]), "not-a-map"),
        (_mutate(_reports(), v=2), "bad-version"),
        (_mutate(_reports(), kind="telnet"), "unknown-kind"),
        (_mutate(_reports(), round=-1), "schema"),
        (_mutate(_reports(), run="../etc"), "schema"),
        (_mutate(_reports(), extra=1), "schema"),
        (_mutate(_reports(), values__dtype="|O"), "schema"),
        (_mutate(_reports(), values__shape=[6]), "schema"),
        (_mutate(_reports(), values__shape=[2, 3]), "schema"),
        (_mutate(_reports(), values__data=b"\x00"), "schema"),
        (b"\x00" * (codec.MAX_MESSAGE_BYTES + 1), "too-large"),
    ],
)
def test_malformed_messages_are_rejected_with_a_reason(data, reason):
    with pytest.raises(DecodeError) as exc:
        decode(data)
    assert exc.value.reason == reason


@pytest.mark.parametrize(
    "kind, changes, where",
    [
        ("linear-plan", {"theta__dtype": "<i8"}, "theta and v_inv must be <f8"),
        ("linear-plan", {"v_inv__shape": [3], "v_inv__data": b"\x00" * 24}, "d² entries"),
        ("linear-plan", {"theta__data": np.array([np.nan, 0.0]).tobytes()}, "finite"),
        ("linear-plan", {"beta": float("inf")}, "beta"),
        ("linear-plan", {"cohort": 0}, "cohort"),
        ("linear-reports", {"width": 4}, "width entries per user"),
        ("linear-reports", {"width": codec.MAX_LINEAR_WIDTH + 1}, "width"),
        ("linear-reports", {"user_ids__dtype": "<i8", "user_ids__data": b"\x00" * 24}, "unsigned"),
        ("linear-release", {"n_reports": 0}, "n_reports"),
        ("linear-release", {"values__shape": [4], "values__data": b"\x00" * 32}, "width totals"),
        ("linear-truth", {"realized__dtype": "|u1"}, "int8"),
        ("linear-truth", {"gap": float("nan")}, "gap"),
        ("linear-record", {"lambda_min": "small"}, "lambda_min"),
    ],
)
def test_malformed_linear_messages_are_schema_errors_naming_the_field(kind, changes, where):
    with pytest.raises(DecodeError) as exc:
        decode(_mutate(LINEAR[kind], **changes))
    assert exc.value.reason == "schema" and kind in str(exc.value) and where in str(exc.value)


def test_oversized_arrays_are_refused_before_allocation():
    data = _mutate(_reports(), user_ids__shape=[codec.MAX_ARRAY_ELEMENTS + 1])
    with pytest.raises(DecodeError, match="exceeds"):
        decode(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_only_ever_raise_decode_error(data):
    try:
        decode(data)
    except DecodeError as exc:
        assert exc.reason in {"not-msgpack", "not-a-map", "bad-version", "unknown-kind", "schema", "too-large"}


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([encode(m) for m in SAMPLES]), st.data())
def test_fuzz_mutated_valid_messages(blob, data):
    """Flip, drop or insert bytes in valid messages: either a valid message or a DecodeError."""
    b = bytearray(blob)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "drop", "insert"]))
        i = data.draw(st.integers(0, len(b) - 1)) if b else 0
        if op == "flip" and b:
            b[i] ^= data.draw(st.integers(1, 255))
        elif op == "drop" and b:
            del b[i]
        else:
            b.insert(i, data.draw(st.integers(0, 255)))
    try:
        decode(bytes(b))
    except DecodeError as exc:
        assert exc.reason


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["v", "run", "kind", "task", "round", "m", "user_ids", "values", "x"]),
                       st.one_of(st.integers(-2**63, 2**64 - 1), st.text(max_size=5), st.none(), st.binary(max_size=8),
                                 st.lists(st.integers(-2**63, 2**64 - 1), max_size=3), st.booleans(), st.floats())))
def test_fuzz_structured_maps(obj):
    try:
        decode(msgpack.packb(obj, use_bin_type=True))
    except DecodeError as exc:
        assert exc.reason
