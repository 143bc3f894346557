"""LETOR parser, K-means arms and their JSON (privbandit.datasets.letor)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.cluster.vq import kmeans2

from privbandit.datasets import letor
from privbandit.datasets.letor import (
    ArmMeans,
    EmptyClusterError,
    LetorFormatError,
    cluster_arms,
    read_letor,
    zscore,
)

F = 136


def _value_text(rng) -> tuple[str, float]:
    """A feature value as MSLR writes them (ints, short decimals, negatives) and its float32 value."""
    kind = rng.integers(4)
    if kind == 0:
        x = float(rng.integers(0, 500))
        s = str(int(x))
    elif kind == 1:
        s = f"{rng.random():.6f}"
    elif kind == 2:
        s = f"{-300 + 60 * rng.normal():.4f}"
    else:
        s = repr(float(np.float32(rng.normal() * 1e3)))
    return s, float(np.float32(float(s)))


def _make_file(path, rows=300, *, sparse=True, comments=True, seed=0):
    """Write a LETOR file; return (labels, qids, features float32) as written."""
    rng = np.random.default_rng(seed)
    labels = rng.choice(5, size=rows, p=[0.5, 0.3, 0.13, 0.05, 0.02])
    qids = np.repeat(np.arange(10, 10 + rows // 30 + 1) * 7, 30)[:rows]
    feats = np.zeros((rows, F), dtype=np.float32)
    lines = ["# synthetic LETOR test file", ""] if comments else []
    for i in range(rows):
        cols = np.sort(rng.choice(F, size=rng.integers(1, 40), replace=False)) if sparse else np.arange(F)
        toks = []
        for c in cols:
            s, v = _value_text(rng)
            if c < 3:  # a few columns carry the label, so clusters differ in mean label
                v = float(labels[i]) * 2.0 + float(rng.integers(0, 2))
                s = str(int(v))
            feats[i, c] = v
            toks.append(f"{c + 1}:{s}")
        line = f"{labels[i]} qid:{qids[i]} " + " ".join(toks)
        if comments and i % 3 == 0:
            line += f" #docid = GX{i:06d} inc = 1 prob = 0.5"
        lines.append(line)
    path.write_text("\n".join(lines) + "\n")
    return labels, qids, feats


@pytest.fixture(scope="module")
def sparse_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("letor") / "sparse.txt"
    return path, _make_file(path)


@pytest.fixture(scope="module")
def dense_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("letor") / "dense.txt"
    return path, _make_file(path, rows=400, sparse=False, comments=False, seed=1)


# ------------------------------------------------------------------------------------------ parse


def test_parse_round_trips_sparse_file_with_comments(sparse_file):
    path, (labels, qids, feats) = sparse_file
    lab, qid, X = read_letor(path)
    assert X.dtype == np.float32 and X.shape == (300, F)
    assert qid.dtype == np.int64 and np.issubdtype(lab.dtype, np.integer)
    np.testing.assert_array_equal(lab, labels)
    np.testing.assert_array_equal(qid, qids)
    np.testing.assert_array_equal(X, feats)
    assert len(np.unique(qid)) == 10


def test_dense_bulk_path_matches_line_by_line_path(dense_file):
    path, (labels, qids, feats) = dense_file
    lab, qid, X = read_letor(path)
    np.testing.assert_array_equal(lab, labels)
    np.testing.assert_array_equal(qid, qids)
    np.testing.assert_array_equal(X, feats)
    lines = path.read_bytes().splitlines(keepends=True)
    parser = letor._ChunkParser(str(path), F, 4)
    fast = parser._fast(lines)
    assert fast is not None, "a dense, well-formed chunk should take the bulk path"
    slow = parser._slow(lines, 1, None)
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_dense_lines_with_comments_take_the_bulk_path(tmp_path):
    path = tmp_path / "c.txt"
    labels, qids, feats = _make_file(path, rows=20, sparse=False, comments=False, seed=5)
    text = "".join(line + " # docid = X\n" for line in path.read_text().splitlines())
    path.write_text(text)
    parser = letor._ChunkParser(str(path), F, 4)
    fast = parser._fast(path.read_bytes().splitlines(keepends=True))
    assert fast is not None
    np.testing.assert_array_equal(fast[2], feats)


def test_max_rows(sparse_file, dense_file):
    for path, (labels, _, feats) in (sparse_file, dense_file):
        lab, _, X = read_letor(path, max_rows=17)
        np.testing.assert_array_equal(lab, labels[:17])
        np.testing.assert_array_equal(X, feats[:17])


GOOD = "2 qid:5 1:0.5 3:2 136:-1.25"


@pytest.mark.parametrize(
    "bad, words",
    [
        ("7 qid:5 1:0.5", "bad label"),
        ("x qid:5 1:0.5", "bad label"),
        ("2.5 qid:5 1:0.5", "bad label"),
        ("-1 qid:5 1:0.5", "bad label"),
        ("2 1:0.5 2:0.1", "missing qid"),
        ("2", "missing qid"),
        ("2 qid:abc 1:0.5", "bad qid"),
        ("2 qid:5 1-0.5", "bad token"),
        ("2 qid:5 a:0.5", "bad token"),
        ("2 qid:5 1.0:0.5", "bad token"),
        ("2 qid:5 1:abc", "bad token"),
        ("2 qid:5 1:", "bad token"),
        ("2 qid:5 1:0.5:3", "bad token"),
        ("2 qid:5 1:nan", "not finite"),
        ("2 qid:5 1:1e39", "float32"),
        ("2 qid:5 0:0.5", "out of range"),
        ("2 qid:5 137:0.5", "out of range"),
        ("2 qid:5 3:0.5 2:0.1", "strictly increasing"),
        ("2 qid:5 3:0.5 3:0.1", "strictly increasing"),
    ],
)
def test_malformed_line_names_file_line_and_problem(tmp_path, bad, words):
    path = tmp_path / "bad.txt"
    path.write_text("\n".join([GOOD, "# comment", GOOD, bad, GOOD]) + "\n")
    with pytest.raises(LetorFormatError) as info:
        read_letor(path)
    msg = str(info.value)
    assert "line 4" in msg and str(path) in msg and words in msg, msg
    assert info.value.lineno == 4


def test_error_deep_in_a_dense_file_reports_its_line(tmp_path, dense_file):
    path, _ = dense_file
    lines = path.read_text().splitlines()
    lines[250] = lines[250].replace(" 77:", " 78:", 1)  # 78 twice: not increasing
    bad = tmp_path / "deep.txt"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(LetorFormatError, match=r"line 251: feature indices must be strictly increasing"):
        read_letor(bad)
    # ... unless max_rows stops before it
    assert read_letor(bad, max_rows=250)[0].size == 250


def test_empty_and_comment_only_files(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(LetorFormatError, match="empty") as info:
        read_letor(empty)
    assert str(empty) in str(info.value)
    only = tmp_path / "comments.txt"
    only.write_text("# nothing\n\n# here\n")
    with pytest.raises(LetorFormatError, match="no data rows in 3 line"):
        read_letor(only)


def test_gzip_input(tmp_path, sparse_file):
    import gzip

    path, (labels, _, feats) = sparse_file
    gz = tmp_path / "x.txt.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    lab, _, X = read_letor(gz)
    np.testing.assert_array_equal(lab, labels)
    np.testing.assert_array_equal(X, feats)


@pytest.mark.parametrize("gz", [False, True])
def test_many_small_chunks_and_array_growth(tmp_path, sparse_file, dense_file, monkeypatch, gz):
    """Chunk boundaries, the row-count estimate (plain) and growing the arrays (gzip) are invisible."""
    import gzip

    monkeypatch.setattr(letor, "_CHUNK_BYTES", 2500)
    for i, (path, (labels, qids, feats)) in enumerate((sparse_file, dense_file)):
        if gz:
            path = tmp_path / f"f{i}.txt.gz"
            path.write_bytes(gzip.compress((sparse_file, dense_file)[i][0].read_bytes()))
        lab, qid, X = read_letor(path)
        np.testing.assert_array_equal(lab, labels)
        np.testing.assert_array_equal(qid, qids)
        np.testing.assert_array_equal(X, feats)
        lab, _, X = read_letor(path, max_rows=101)
        np.testing.assert_array_equal(X, feats[:101])


# ------------------------------------------------------------------------------------- clustering


def test_zscore_matches_naive_and_zeroes_constant_columns():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 6)).astype(np.float32) * [1, 10, 100, 1, 1, 1]
    X[:, 3] = 0.1  # constant, not exactly representable: must still become 0
    X[:, 4] = 0.0
    z = zscore(X)
    with np.errstate(invalid="ignore", divide="ignore"):
        naive = (X.astype(np.float64) - X.mean(axis=0, dtype=np.float64)) / X.astype(np.float64).std(axis=0)
    keep = [0, 1, 2, 5]
    np.testing.assert_allclose(z[:, keep], naive[:, keep], rtol=1e-9, atol=1e-12)
    assert np.all(z[:, [3, 4]] == 0.0)


def test_cluster_means_are_the_cluster_label_means(sparse_file):
    path, _ = sparse_file
    labels, _, X = read_letor(path)
    k, seed = 6, 3
    arms, assign = cluster_arms(labels, X, k, seed, return_assignment=True)
    # the assignment is kmeans2's, reproduced independently with the same seed
    _, expect = kmeans2(zscore(X), k, minit="++", missing="warn", **{letor._KMEANS_RNG: np.random.default_rng(seed)})
    np.testing.assert_array_equal(assign, expect)
    assert arms.k == k == len(arms.means) and arms.seed == seed
    assert sum(arms.counts) == labels.size
    for i in range(k):
        rows = labels[assign == i]
        assert arms.counts[i] == rows.size > 0
        assert arms.means[i] == pytest.approx(rows.mean() / 4, abs=1e-12)
        hist = np.bincount(rows, minlength=5) / rows.size
        np.testing.assert_allclose(arms.probabilities[i], hist, atol=1e-15)
        assert sum(arms.probabilities[i]) == pytest.approx(1.0, abs=1e-12)
    assert arms.levels == (0.0, 0.25, 0.5, 0.75, 1.0)
    assert all(0.0 <= m <= 1.0 for m in arms.means)
    assert max(arms.means) - min(arms.means) > 0.1  # the label-carrying columns separate clusters
    # deterministic given the seed
    assert cluster_arms(labels, X, k, seed) == arms


def test_empty_cluster_raises():
    X = np.repeat(np.array([[0.0, 1.0], [5.0, 2.0]], dtype=np.float32), 10, axis=0)
    labels = np.arange(20) % 5
    with pytest.raises(EmptyClusterError, match="smaller k"):
        cluster_arms(labels, X, 5, 0)


def test_cluster_input_checks():
    X = np.zeros((4, 3), dtype=np.float32)
    with pytest.raises(ValueError, match="labels"):
        cluster_arms(np.array([0, 1, 5, 2]), X, 2, 0)
    with pytest.raises(ValueError, match="k"):
        cluster_arms(np.array([0, 1, 2, 2]), X, 5, 0)
    with pytest.raises(ValueError, match="features"):
        cluster_arms(np.array([0, 1, 2]), X, 2, 0)


# ------------------------------------------------------------------------------------------- JSON


@pytest.fixture(scope="module")
def arms(sparse_file):
    path, _ = sparse_file
    labels, _, X = read_letor(path)
    return cluster_arms(labels, X, 5, 0, source="unit test")


def test_json_round_trip(arms, tmp_path):
    out = tmp_path / "arms.json"
    arms.to_json(out)
    data = json.loads(out.read_text())
    assert data["format"] == "privbandit-arm-means/1"
    assert set(data) == {"format", "source", "k", "seed", "label_scale", "means", "counts", "levels", "probabilities"}
    back = ArmMeans.from_json(out)
    assert back == arms
    assert back.means == arms.means  # exact floats


@pytest.mark.parametrize(
    "tamper, field",
    [
        (lambda d: d.update(format="privbandit-arm-means/0"), "format"),
        (lambda d: d["means"].__setitem__(0, 1.5), "means"),
        (lambda d: d["means"].__setitem__(0, -0.1), "means"),
        (lambda d: d["means"].__setitem__(1, d["means"][1] + 1e-6), "means"),
        (lambda d: d["counts"].pop(), "counts"),
        (lambda d: d.update(k=7), "means"),
        (lambda d: d["probabilities"][2].__setitem__(0, d["probabilities"][2][0] + 0.01), "probabilities"),
        (lambda d: d["levels"].__setitem__(1, 0.3), "levels"),
        (lambda d: d.pop("seed"), "seed"),
    ],
)
def test_from_json_rejects_tampered_files(arms, tmp_path, tamper, field):
    data = arms.to_dict()
    tamper(data)
    out = tmp_path / "bad.json"
    out.write_text(json.dumps(data))
    with pytest.raises(ValueError) as info:
        ArmMeans.from_json(out)
    assert field in str(info.value), str(info.value)


# -------------------------------------------------------------------------------------------- CLI


def test_main_writes_json_and_summarises(sparse_file, tmp_path, capsys):
    path, (labels, _, _) = sparse_file
    out = tmp_path / "means.json"
    from typer.testing import CliRunner

    from privbandit.cli import app

    result = CliRunner().invoke(app, ["letor-arms", str(path), "--arms", "4", "--seed", "1", "--out", str(out),
                                      "--max-rows", "200"])
    assert result.exit_code == 0, result.output
    arms = ArmMeans.from_json(out)
    assert arms.k == 4 and arms.seed == 1 and sum(arms.counts) == 200
    text = result.output
    assert "200 rows" in text and "rows/s" in text and "min" in text and "max" in text


def test_main_reports_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text(GOOD + "\n2 qid:5 0:1\n")
    from typer.testing import CliRunner

    from privbandit.cli import app

    result = CliRunner().invoke(app, ["letor-arms", str(bad), "--out", str(tmp_path / "x.json")])
    assert result.exit_code == 2
    assert "line 2" in " ".join(result.output.split())
    with pytest.raises(LetorFormatError, match="line 2"):
        letor.write_arm_file(bad, tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


# ------------------------------------------------------------------- bulk path is sound (property)

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_DENSE3 = ["1 qid:7 1:0.5 2:-3 3:12", "0 qid:8 1:1e-3 2:0 3:4.25", "4 qid:8 1:2 2:7 3:0.125 # c"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    line=st.integers(0, 2),
    pos=st.integers(0, 40),
    cut=st.integers(0, 3),
    insert=st.text(alphabet="0123456789.:-+eqid #\t_", max_size=4),
)
def test_bulk_path_never_accepts_what_the_line_parser_rejects(line, pos, cut, insert):
    """Mutate a well-formed 3-feature chunk; the bulk path must either decline or agree exactly."""
    lines = list(_DENSE3)
    s = lines[line]
    pos = min(pos, len(s))
    lines[line] = s[:pos] + insert + s[pos + cut :]
    raw = [(x + "\n").encode() for x in lines]
    parser = letor._ChunkParser("mutant", 3, 4)
    fast = parser._fast(raw)
    try:
        slow = parser._slow(raw, 1, None)
    except LetorFormatError:
        assert fast is None, f"bulk path accepted {lines[line]!r}"
        return
    if fast is not None:
        for a, b in zip(fast, slow):
            np.testing.assert_array_equal(a, b)


def test_privbandit_letor_arms_then_an_experiment_on_its_means(sparse_file, tmp_path):
    """The whole real-data path as a user runs it: cluster a LETOR file into arms with the CLI,
    then run a K-arm experiment whose rewards are drawn from each arm's label distribution."""
    import subprocess
    import sys

    means = tmp_path / "arms.json"
    cli = [sys.executable, "-m", "privbandit"]
    letor_path = sparse_file[0]
    proc = subprocess.run(cli + ["letor-arms", str(letor_path), "--arms", "4", "--out", str(means)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    exp = tmp_path / "exp.toml"
    exp.write_text(
        'name = "letor"\nhorizon = 20000\nepsilon = 1.0\nruns = 2\n'
        '[environment]\nkind = "means-file"\npath = "arms.json"\nreward = "categorical"\n'
        "[algorithms.Dist-DP-SE]\n"
    )
    out = tmp_path / "res"
    proc = subprocess.run(cli + ["run", str(exp), "--out", str(out), "--jobs", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algorithms"]["Dist-DP-SE"]["runs"] == 2
    proc = subprocess.run(cli + ["letor-arms", str(tmp_path / "missing.txt"), "--out", str(means)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "missing.txt" in (proc.stderr + proc.stdout)
