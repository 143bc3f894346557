"""The wire codec: round trips of every kind (and of the spine's events through them), the narrowest
wire types, and every malformed input rejected with a countable reason, a cross-field error naming
the kind and the invariant it breaks."""

import msgpack
import numpy as np
from pydantic import BaseModel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privbandit.protocol.spine.events import Join, Plan, Record, Release, Round, Truth
from privbandit.services import codec
from privbandit.services.codec import DecodeError, decode, encode, packed


def _reports(n=5, m=5000, runs=1, run_of_ids=False):
    """A report message; its ids have gaps (a block with dropouts: ids on the wire as an array)
    unless ``run_of_ids`` (a block without dropouts: one run of ids)."""
    values = packed(np.arange(runs * n).reshape(runs, n, 1) % m, m)
    ids = np.arange(n, dtype="<u4") * (1 if run_of_ids else 2)
    return codec.ReportsMsg(run="r1", task=0, round=3, plan=2, user_ids=ids, values=values,
                            block=0, tags=np.arange(n, dtype="<u4"), block_tag=b"t" * 28)


ROUND = codec.RoundSpec(id=3, intermediary="shuffler-1", rule="shuffle", expected=8, width=5, m=105, threshold=6,
                        groups=[2, 3], window=(0, 40))
PLAN = codec.PlanMsg(run="r1", task=1, plan=2, first_user=10, cohort=8,
                     body={"arm": 4, "theta": np.array([[0.1, -0.2]]), "params": {"n": 8, "sigma": 1.5, "tags": ["a"]},
                           "collect": True, "h": None},
                     opens=[ROUND, codec.RoundSpec(id=4, intermediary="aggregator", rule="sum", expected=8,
                                                   m=2**40 + 15, secagg="complete"),
                            codec.RoundSpec(id=5, intermediary="shuffler", rule="shuffle", expected=8, width=2,
                                            integer=False, segment=4)],
                     joins=[codec.JoinSpec(round=3, first=10, count=8, reports=8),
                            codec.JoinSpec(round=4, first=10, count=8, reports=3,
                                           users=np.array([10, 13, 17], dtype="<u4"))])
TRUTH = codec.TruthMsg(run="r1", task=0, plan=1, block=0, first_user=0, size=4, pseudo=np.array([0.1]),
                       realized=np.array([0.3]), pseudo_at=np.array([[0.05, 0.1]]), realized_at=np.array([[0.1, 0.2]]),
                       extras={"reward_sum": 2.0, "noise_sum": -3, "true": np.array([[1, 2]], dtype="<i8")},
                       tag=b"x" * 16)

SAMPLES = [
    _reports(),
    PLAN,
    codec.ReleaseMsg(run="r1", task=0, round=3, n_reports=8, values=np.array([[77]], dtype="<i8")),
    codec.ReleaseMsg(run="r1", task=0, round=3, n_reports=3, values=np.array([[[0.5], [1.0], [0.0]]])),
    codec.ReleaseMsg(run="r1", task=0, round=3, n_reports=2, values=np.array([[[1, 2], [3, 4]]], dtype="|u1"),
                     user_ids=np.array([5, 9], dtype="<u8")),
    TRUTH,
    codec.RecordMsg(run="r1", task=0, round=1, n_reports=2, epsilon=1.0,
                    body={"batch": 1, "arm": 0, "estimate": 1.2, "wrapped": False}),
    codec.SecAggMsg(run="r1", task=0, round=3, step="shares", shard=1, shards=2, chunk=0, final=True,
                    ids=np.array([5, 6], dtype="<u8"), peers=np.array([6, 5], dtype="<u8"), records=b"x" * 240,
                    tag=b"s" * 16),
    codec.CloseMsg(run="r1", task=0, rounds=[7, 9]),
    codec.ResendMsg(run="r1", task=0, round=9),
    codec.StatusMsg(run="r1", party="users-1", state="ready"),
    codec.ControlMsg(run="r1", action="task", task=0,
                     body=codec.TaskSpec(index=0, runs=[0], label="A", family="distributed-dp-mab",
                                         public={"horizon": 10}, session="ab12").model_dump()),
]
BY_KIND = {m.kind: m for m in SAMPLES}


def same(a, b) -> bool:
    """Deep equality of wire values: arrays by dtype and contents."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and np.array_equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, BaseModel) and isinstance(b, BaseModel):  # a nested model may hold arrays
        return type(a) is type(b) and same(dict(a), dict(b))
    return type(a) is type(b) and a == b


def test_the_samples_cover_every_kind():
    assert set(BY_KIND) == set(codec.KINDS)


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: m.kind)
def test_round_trip(msg):
    back = decode(encode(msg))
    assert type(back) is type(msg)
    for name in type(msg).model_fields:
        assert same(getattr(msg, name), getattr(back, name)), name
    assert encode(back) == encode(msg)


def test_the_spine_events_cross_the_wire_unchanged():
    plan = Plan(2, 10, 8, {"arm": 1, "theta": np.array([[0.5, -1.0]])},
                (Round(3, "aggregator", "sum", 8, m=2**31 - 1, threshold=5),
                 Round(4, "shuffler", "shuffle", 4, width=3, groups=(1, 2), integer=False, low=0.0, high=1.0)),
                (Join(3, 10, 8, 8), Join(4, 12, 4, 2, users=(12, 15))))
    back = decode(encode(codec.plan_msg("r1", 1, plan))).to_plan()
    assert back.opens == plan.opens and back.joins == plan.joins and back.joins[1].users == (12, 15)
    assert (back.id, back.first_user, back.cohort) == (2, 10, 8) and same(back.body, plan.body)

    truth = Truth(2, 1, 65536, 7, np.array([0.5]), np.array([1.0]), np.array([[0.25]]), np.array([[0.5]]),
                  {"attackers": 2, "noise": np.array([[3]], dtype=np.int64)})
    t = codec.truth_of(decode(encode(codec.truth_msg("r1", 0, truth))))
    assert all(same(getattr(t, f), getattr(truth, f)) for f in truth.__dataclass_fields__)

    record = Record(3, 8, 0.25, {"expected": 8, "bits": 31, "arm": 1})
    assert codec.record_of(decode(encode(codec.record_msg("r1", 0, record)))) == record

    rnd = Round(5, "shuffler", "shuffle", 3, m=300)
    release = Release(5, 3, np.array([[[299], [0], [17]]], dtype=np.int64))
    msg = decode(encode(codec.release_msg("r1", 0, release, rnd)))
    assert msg.values.dtype == np.dtype("<u2")  # residues of Z_300 travel in two bytes
    back = codec.release_of(msg)
    assert back.values.dtype == np.int64 and np.array_equal(back.values, release.values) and back.user_ids is None

    rep = codec.reports_of(decode(encode(_reports(4, m=7, runs=2))))
    assert rep.user_ids.dtype == np.int64 and rep.values.dtype == np.int64 and rep.values.shape == (2, 4, 1)
    assert (rep.round_id, rep.plan_id) == (3, 2)


@pytest.mark.parametrize("kwargs, dtype", [
    ({"m": 256}, "uint8"), ({"m": 257}, "uint16"), ({"m": 2**16 + 1}, "uint32"), ({"m": 2**33}, "uint64"),
    ({"m": None, "high": 255}, "uint8"), ({"m": None, "high": 256}, "uint16"),
    ({"m": None}, "int64"), ({"m": None, "integer": False}, "float64"),
])
def test_reports_travel_in_the_narrowest_type(kwargs, dtype):
    assert packed(np.array([0, 1]), **kwargs).dtype == np.dtype(dtype)
    assert codec.as_values(packed(np.array([0, 1]), **kwargs)).dtype in (np.int64, np.float64)


def test_report_bytes_per_user_are_the_ids_and_values_plus_a_constant():
    def size(n):  # a message's records without the per-user tags (measured apart below)
        return len(encode(_reports(n).model_copy(update={"tags": None})))

    small, big = size(10), size(10_010)
    # u4 ids and u2 residues (m = 5000); msgpack's bin headers grow by a few bytes with the length.
    assert 10_000 * (4 + 2) <= big - small <= 10_000 * (4 + 2) + 16
    # a user's MAC tag is 4 more bytes
    assert 10_000 * (4 + 2 + 4) <= len(encode(_reports(10_010))) - len(encode(_reports(10))) <= 10_000 * 10 + 24
    # a block without dropouts sends its ids as one run: the residues and tags alone grow
    whole = [len(encode(_reports(n, run_of_ids=True))) for n in (10, 10_010)]
    assert 10_000 * (2 + 4) <= whole[1] - whole[0] <= 10_000 * (2 + 4) + 24


@pytest.mark.parametrize("ids", [np.arange(7, 7 + 65_536, dtype="<u4"), np.arange(2**32 - 3, 2**32 + 3, dtype="<u8"),
                                 np.array([4, 5], dtype="<u4")])
def test_a_run_of_ids_goes_as_first_and_count_and_comes_back_as_it_was(ids):
    msg = _reports(ids.size).model_copy(update={"user_ids": ids, "tags": None})
    wire = msgpack.unpackb(encode(msg), raw=False)["user_ids"]
    assert wire == {"first": int(ids[0]), "count": ids.size}
    back = decode(encode(msg))
    assert same(back.user_ids, ids) and encode(back) == encode(msg)


@pytest.mark.parametrize(("ids", "why"), [
    ({"first": -1, "count": 3}, "non-negative"),
    ({"first": 0, "count": True}, "non-negative"),
    ({"first": 0, "count": 2.0}, "non-negative"),
    ({"first": 0, "count": codec.MAX_ARRAY_ELEMENTS + 1}, "out of bounds"),
    ({"first": 2**63, "count": 5}, "out of bounds"),
    ({"first": 0, "count": 5, "step": 2}, "exactly dtype, shape, data"),
])
def test_a_bad_run_of_ids_is_refused(ids, why):
    with pytest.raises(DecodeError, match=why):
        decode(_mutate(_reports(5, run_of_ids=True), {"user_ids": ids}))


def _mutate(msg, changes: dict) -> bytes:
    """The encoded message with fields replaced; a key is a path (tuple) into the msgpack map."""
    obj = msgpack.unpackb(encode(msg), raw=False)
    for path, value in changes.items():
        node = obj
        *parents, leaf = path if isinstance(path, tuple) else (path,)
        for p in parents:
            node = node[p]
        if value is _DELETE:
            del node[leaf]
        else:
            node[leaf] = value
    return msgpack.packb(obj, use_bin_type=True)


_DELETE = object()


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"\xc1garbage", "not-msgpack"),
        (msgpack.packb([1, 2, 3]), "not-a-map"),
        (_mutate(_reports(), {"v": 1}), "bad-version"),
        (_mutate(_reports(), {"v": _DELETE}), "bad-version"),
        (_mutate(_reports(), {"kind": "telnet"}), "unknown-kind"),
        (_mutate(_reports(), {"round": -1}), "schema"),
        (_mutate(_reports(), {"plan": _DELETE}), "schema"),
        (_mutate(_reports(), {"run": "../etc"}), "schema"),
        (_mutate(_reports(), {"extra": 1}), "schema"),
        (_mutate(_reports(), {("values", "dtype"): "|O"}), "schema"),
        (_mutate(_reports(), {("values", "dtype"): ">u2"}), "schema"),  # big-endian: not a wire type
        (_mutate(_reports(), {("values", "shape"): [1, 6, 1]}), "schema"),
        (_mutate(_reports(), {("values", "shape"): [1, 5, 1, 1]}), "schema"),
        (_mutate(_reports(), {("values", "shape"): [1, -5, -1]}), "schema"),
        (_mutate(_reports(), {("values", "data"): b"\x00"}), "schema"),
        (_mutate(_reports(), {("values", "extra"): 1}), "schema"),
        (b"\x00" * (codec.MAX_MESSAGE_BYTES + 1), "too-large"),
    ],
)
def test_malformed_messages_are_rejected_with_a_reason(data, reason):
    with pytest.raises(DecodeError) as exc:
        decode(data)
    assert exc.value.reason == reason


NAN = np.array([np.nan]).tobytes()


@pytest.mark.parametrize(
    "kind, changes, where",
    [
        # reports: one row per user id, unsigned ids, a tag per record, a 16-byte block MAC
        ("reports", {("values", "shape"): [1, 4, 1], ("values", "data"): b"\x00" * 8}, "one row per user id"),
        ("reports", {("values", "shape"): [5, 1], ("values", "data"): b"\x00" * 10}, "one row per user id"),
        ("reports", {("user_ids", "dtype"): "<i8", ("user_ids", "data"): b"\x00" * 40}, "unsigned"),
        ("reports", {("values", "shape"): [1, 5, 0], ("values", "data"): b""}, "bad runs or width"),
        ("reports", {("values", "dtype"): "|b1", ("values", "shape"): [1, 5, 1], ("values", "data"): b"\x00" * 5},
         "numeric"),
        ("reports", {("tags", "shape"): [4], ("tags", "data"): b"\x00" * 16}, "one <u4 per user id"),
        ("reports", {"block_tag": b"short"}, "28 bytes"),
        # plans: rounds consistent, joins inside the cohort, bodies of wire values only
        ("plan", {("joins", 0, "first"): 9}, "outside the cohort"),
        ("plan", {("joins", 0, "reports"): 9}, "more reports than users"),
        ("plan", {("opens", 0, "threshold"): 9}, "threshold must be"),
        ("plan", {("opens", 0, "groups"): [2, 2]}, "do not add up"),
        ("plan", {("opens", 0, "integer"): False}, "modulus needs integer"),
        ("plan", {("opens", 0, "rule"): "median"}, "opens.0.rule"),
        ("plan", {("opens", 0, "intermediary"): "Evil/#"}, "opens.0.intermediary"),
        ("plan", {("opens", 1, "rule"): "shuffle"}, "secure aggregation computes a modular sum"),
        ("plan", {("opens", 0, "width"): codec.MAX_WIDTH + 1}, "opens.0.width"),
        ("plan", {("body", "h"): float("nan")}, "finite"),
        ("plan", {("body", "h"): {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": 1}}}}}}}}}}, "deeper than"),
        ("plan", {("body", "theta", "__array__", "dtype"): "|O"}, "not allowed"),
        ("plan", {"cohort": 0}, "plan.cohort"),
        ("plan", {"opens": [msgpack.unpackb(msgpack.packb(ROUND.model_dump()))] * (codec.MAX_ROUNDS_PER_PLAN + 1)},
         "plan.opens"),
        # releases: a multiset holds n_reports rows, each named when attributable
        ("release", {"n_reports": 4}, "n_reports rows"),
        ("release", {("values", "shape"): [2], ("values", "data"): b"\x00" * 2}, "(runs, width)"),
        ("release", {("user_ids", "shape"): [1], ("user_ids", "data"): b"\x00" * 8}, "name each of the n_reports"),
        # truths: one finite total per run, one value per checkpoint
        ("truth", {("pseudo", "data"): NAN}, "pseudo must be finite"),
        ("truth", {("pseudo_at", "shape"): [2, 1]}, "(runs, checkpoints)"),
        ("truth", {("realized", "dtype"): "<i8"}, "realized must be finite <f8"),
        ("truth", {("pseudo", "shape"): [], ("pseudo", "data"): NAN}, "one total per run"),
        # the rest
        ("record", {"epsilon": -1.0}, "record.epsilon"),
        ("record", {"epsilon": float("inf")}, "record.epsilon"),
        ("secagg", {("ids", "shape"): [1, 2]}, "ids must be 1-D"),
        ("secagg", {"step": "steal"}, "secagg.step"),
        ("secagg", {"shards": 0}, "secagg.shards"),
        ("close", {"rounds": [-1]}, "close.rounds"),
        ("status", {"party": "Observer; rm"}, "status.party"),
        ("control", {"action": "reboot"}, "control.action"),
    ],
)
def test_malformed_messages_are_schema_errors_naming_kind_and_invariant(kind, changes, where):
    with pytest.raises(DecodeError) as exc:
        decode(_mutate(BY_KIND[kind], changes))
    assert exc.value.reason == "schema" and exc.value.detail.startswith(f"{kind}.") and where in str(exc.value)


@pytest.mark.parametrize("change", [{"runs": []}, {"runs": [0, 1]}, {"runs": [-1]}, {"family": "Bad Family"},
                                    {"label": ""}, {"session": "not-hex"}, {"extra": 1}, {"public": [1]}])
def test_a_task_spec_is_one_run_of_one_labelled_algorithm_of_a_named_family(change):
    good = dict(index=0, runs=[0], label="A", family="distributed-dp-mab", public={}, session="ab")
    codec.TaskSpec.model_validate(good)
    with pytest.raises(ValueError):
        codec.TaskSpec.model_validate({**good, **change})


@pytest.mark.parametrize("kind, changes, bound", [
    ("plan", {("body", "h"): "x" * 5000}, "max_str_len"),
    ("close", {"rounds": list(range(4097))}, "max_array_len"),
])
def test_lengths_past_the_schemas_are_refused_by_the_unpacker(kind, changes, bound):
    """Issue #32 item 2: a string or list longer than any the schema allows is refused when the
    unpacker reads its header (``over-limit``), before it is built."""
    with pytest.raises(DecodeError) as exc:
        decode(_mutate(BY_KIND[kind], changes))
    assert exc.value.reason == "over-limit" and bound in exc.value.detail


def test_oversized_arrays_are_refused_before_allocation():
    data = _mutate(_reports(), {("user_ids", "shape"): [codec.MAX_ARRAY_ELEMENTS + 1]})
    with pytest.raises(DecodeError, match="exceeds"):
        decode(data)
    data = _mutate(_reports(), {("values", "shape"): [2**21, 2**21, 2**21]})  # 2**63 elements, 0 bytes sent
    with pytest.raises(DecodeError, match="exceeds"):
        decode(data)


def test_bodies_refuse_what_is_not_a_wire_value():
    for bad in ({"f": object()}, {"s": {1, 2}}, {"a": np.array(["x"])}):
        with pytest.raises((TypeError, ValueError)):
            codec.body_from_wire(codec.body_to_wire(bad))
    with pytest.raises(ValueError, match="key"):
        codec.body_from_wire({"": 1})
    assert same(codec.body_from_wire(codec.body_to_wire({"x": (1, np.float64(2.5))})), {"x": [1, 2.5]})


def _item_by_item(value, depth=0):
    """body_to_wire as it was defined before its one-pass copies (issue #32): the oracle."""
    if depth > codec.MAX_BODY_DEPTH:
        raise ValueError("too deep")
    if isinstance(value, np.ndarray):
        return {codec.ARRAY_KEY: codec._array_to_wire(value)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _item_by_item(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_item_by_item(v, depth + 1) for v in value]
    return value


def _typed(value):
    """A wire value with its types spelled out (1 == 1.0 == True for ==)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value if value == value else "nan")


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(), st.text(max_size=3),
                     st.integers(-5, 5).map(np.int64), st.floats(-1, 1).map(np.float64))
_BODIES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.lists(inner, max_size=3).map(tuple), st.lists(st.just([]), max_size=3),
    st.dictionaries(st.one_of(st.text(min_size=1, max_size=3), st.integers(0, 9)), inner, max_size=3)),
    max_leaves=30)


def _nested(depth, inner):
    for _ in range(depth):
        inner = [inner]
    return inner


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_BODIES)
def test_a_body_copied_in_one_pass_is_what_item_by_item_gave(body):
    """body_to_wire copies a map or list of plain scalars, or a list of empty lists, in one pass
    (the observer re-encodes what the users' account sent to check its MAC: issue #32); the result,
    types included, and the depth limit are those of the item-by-item definition."""
    try:
        want = _typed(_item_by_item(body))
    except ValueError:
        with pytest.raises(ValueError, match="nests deeper"):
            codec.body_to_wire(body)
        return
    assert _typed(codec.body_to_wire(body)) == want


@pytest.mark.parametrize("inner, deepest", [(1, codec.MAX_BODY_DEPTH), ([], codec.MAX_BODY_DEPTH),
                                            ({"a": 1}, codec.MAX_BODY_DEPTH - 1), ([[], []], codec.MAX_BODY_DEPTH - 1)])
def test_the_one_pass_copies_keep_the_depth_limit(inner, deepest):
    """A value ``deepest`` lists down is encoded, one more level is refused, copied in one pass or
    not; and decoding a list of empty lists, which is also copied in one pass now, keeps its limit."""
    codec.body_to_wire(_nested(deepest, inner))
    for too_deep in (_nested(deepest + 1, inner), {"x": _nested(deepest, inner)}):
        with pytest.raises(ValueError, match="nests deeper"):
            codec.body_to_wire(too_deep)
    if inner == [[], []]:
        assert codec.body_from_wire(_nested(deepest, inner)) == _nested(deepest, inner)
        with pytest.raises(ValueError, match="nests deeper"):
            codec.body_from_wire(_nested(deepest + 1, inner))


REASONS = {"not-msgpack", "not-a-map", "bad-version", "unknown-kind", "schema", "too-large", "over-limit", "wrong-topic"}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_only_ever_raise_decode_error(data):
    try:
        decode(data)
    except DecodeError as exc:
        assert exc.reason in REASONS


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
        assert exc.reason in REASONS


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["v", "run", "kind", "task", "round", "plan", "block", "user_ids", "values",
                                        "tags", "block_tag", "body", "x"]),
                       st.one_of(st.integers(-2**63, 2**64 - 1), st.text(max_size=5), st.none(), st.binary(max_size=8),
                                 st.lists(st.integers(-2**63, 2**64 - 1), max_size=3), st.booleans(), st.floats(),
                                 st.sampled_from(["reports", "plan", "truth", "release"]))))
def test_fuzz_structured_maps(obj):
    try:
        decode(msgpack.packb(obj, use_bin_type=True))
    except DecodeError as exc:
        assert exc.reason in REASONS


@pytest.mark.parametrize(("users", "why"), [
    ([10, 13], "names its reports' users"),  # 2 names for 3 reports
    ([13, 10, 17], "increasing ids inside its range"),
    ([10, 13, 13], "increasing ids inside its range"),
    ([9, 13, 17], "increasing ids inside its range"),
    ([10, 13, 18], "increasing ids inside its range"),
])
def test_a_join_naming_users_it_cannot_have_is_refused(users, why):
    """A secure round's join names its reporters (Anytime-Lazy-UCB's arrays): the names must be the
    join's ``reports`` distinct ids of its range, increasing, or the plan is refused on decoding,
    and the event refuses them too."""
    named = {"dtype": "<u4", "shape": [len(users)], "data": np.array(users, dtype="<u4").tobytes()}
    with pytest.raises(DecodeError, match=why) as exc:
        decode(_mutate(PLAN, {("joins", 1, "users"): named}))
    assert exc.value.reason == "schema"
    with pytest.raises(ValueError, match="increasing ids in"):
        Join(4, 10, 8, 3, users=tuple(users))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_BODIES, st.binary(max_size=40), st.sampled_from(["status", "truth"]))
def test_a_tag_is_checked_over_the_bytes_received_which_are_what_the_sender_maced(body, tag, kind):
    """``tag_payload`` of a decoded status or truth (the received bytes, the tag's value emptied)
    is byte for byte the sender's MAC input, the message encoded with an empty tag; a copy, or a
    message built here, is encoded again; and any other byte received gives another input."""
    try:
        wire_body = codec.body_from_wire(codec.body_to_wire({"x": body}))
    except ValueError:  # not a wire body (a NaN, say): nothing to send
        return
    built = (codec.StatusMsg(run="r1", party="users-1", state="stats", body=wire_body) if kind == "status"
             else TRUTH.model_copy(update={"extras": wire_body}))
    sent = encode(built.model_copy(update={"tag": tag}))
    received = decode(sent)
    maced = encode(built.model_copy(update={"tag": b""}))
    assert codec.tag_payload(received) == maced
    assert codec.tag_payload(received.model_copy()) == maced == codec.tag_payload(built)
    # A byte changed outside the tag (here: the run id) changes what the MAC is checked over.
    other = decode(sent.replace(b"r1", b"r2", 1))
    assert codec.tag_payload(other) != maced


def test_a_tag_sent_with_a_non_canonical_encoding_is_checked_over_those_bytes():
    """The MAC covers what was received: the same fields packed another way (a map of the same
    entries, in another order) decode to an equal message, yet give another MAC input, as a
    forgery would (before, the observer re-encoded what it decoded, and so ignored the packing)."""
    built = codec.StatusMsg(run="r1", party="users-1", state="stats", body={"a": 1}, tag=b"t" * 32)
    fields = msgpack.unpackb(encode(built))
    reordered = msgpack.packb(dict(reversed(list(fields.items()))), use_bin_type=True)
    assert decode(reordered) == built
    assert codec.tag_payload(decode(reordered)) != codec.tag_payload(decode(encode(built)))
