"""LETOR files (MSLR-WEB10K) → K-means arms for the paper's real-data bandit.

Chowdhury & Zhou (2023), Section 7 / Fig. 1 (d–f). Tags: [P] stated by the paper, [I] our choice.

* [P] Data: MSLR-WEB10K, 1,200,192 query–document rows, 136 features, relevance label in {0..4}.
* [P] K-means with 50 clusters on the 136 features; every cluster is an arm and the arm's mean is
  the empirical mean of the labels of the cluster's rows.
* [I] Features are z-scored per column before clustering (raw MSLR columns range from 0/1
  indicators and ratios to large counts and scores, so unscaled Euclidean K-means would cluster on
  a handful of columns). Constant columns (max == min, zero variance) are left at 0.
* [I] K-means is ``scipy.cluster.vq.kmeans2(z, k, iter=10, minit="++")`` seeded with
  ``numpy.random.default_rng(seed)``; scipy's default 10 Lloyd iterations, no restarts. Arms keep
  kmeans2's cluster order (arm i = cluster label i).
* [I] Empty clusters: kmeans2 runs with ``missing="warn"`` (an empty cluster keeps its old centroid
  during Lloyd's iterations, the standard treatment); if a cluster is still empty in the final
  assignment we raise :class:`EmptyClusterError` — we never drop an arm silently. Try a smaller k or
  another seed.
* [I] Rewards are ``label / max_label`` (max_label = 4), i.e. levels {0, 1/4, 1/2, 3/4, 1}. The
  paper does not say how a pull's reward is drawn; :class:`ArmMeans` keeps both the mean (for
  Bernoulli or Gaussian rewards) and the arm's empirical label distribution over the levels (for
  drawing a label of a random document of the cluster, i.e. a categorical reward).

The parser reads LETOR text lines ``<label> qid:<id> <idx>:<value> ... [# comment]``. Indices are
1-based, strictly increasing and at most ``n_features`` (136); missing indices are 0 (sparse rows).
Chunks of dense lines (all indices 1..F, as in MSLR) are checked and parsed in bulk with numpy; a
chunk that fails any check (sparse rows, blank lines, any error) is re-parsed line by line, which is
what produces the :class:`LetorFormatError` naming file, line and problem. The bulk path accepts a
subset of what the line parser accepts and gives identical arrays: values are parsed as float64
(as Python's ``float`` does) and stored as float32.
Files ending in ``.gz`` are read through gzip.
"""

from __future__ import annotations

import gzip
import inspect
import json
import math
import os
import time
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.cluster.vq import kmeans2

FORMAT_TAG = "privbandit-arm-means/1"
N_FEATURES = 136  # [P] MSLR-WEB10K
MAX_LABEL = 4  # [P] labels 0..4

_CHUNK_BYTES = 4 << 20  # lines are read in ~4 MB batches
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[[9, 10, 11, 12, 13, 32]] = True  # what bytes.split() and numpy treat as whitespace
_MAX_EXACT = float(2**53)
_F32_LIMIT = 2.0**128 - 2.0**103  # doubles at or above this round to inf in float32
# scipy ≥ 1.15 names kmeans2's generator argument ``rng`` (``seed`` is its deprecated alias)
_KMEANS_RNG = "rng" if "rng" in inspect.signature(kmeans2).parameters else "seed"


class LetorFormatError(ValueError):
    """A malformed LETOR file: the message names the file, the line (1-based) and the problem."""

    def __init__(self, path, lineno: int | None, problem: str):
        self.path = str(path)
        self.lineno = lineno
        self.problem = problem
        where = f"{self.path}, line {lineno}" if lineno is not None else self.path
        super().__init__(f"{where}: {problem}")

    def __reduce__(self):  # picklable across processes
        return type(self), (self.path, self.lineno, self.problem)


class EmptyClusterError(ValueError):
    """K-means left a cluster without rows; no arm is dropped silently."""


# ----------------------------------------------------------------------------------------- parser


def read_letor(
    path,
    max_rows: int | None = None,
    *,
    n_features: int = N_FEATURES,
    max_label: int = MAX_LABEL,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read a LETOR text file into ``(labels int8, qids int64, features float32 (rows, n_features))``.

    Blank and comment-only lines are skipped (but counted for line numbers). ``max_rows`` stops
    after that many data rows. Labels must be integers in ``0..max_label`` (a number with an
    integral value, e.g. ``2``), qids non-negative integers, feature tokens ``<int index>:<number>``
    (finite and within float32 range) with indices in ``1..n_features``, strictly increasing.
    Anything else raises :class:`LetorFormatError`; so does a file without data rows.
    """
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows must be ≥ 1, got {max_rows}")
    if not 1 <= max_label <= 127:
        raise ValueError(f"max_label must be in 1..127, got {max_label}")
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    parser = _ChunkParser(path, n_features, max_label)
    labels = np.empty(0, dtype=np.int8)
    qids = np.empty(0, dtype=np.int64)
    features = np.empty((0, n_features), dtype=np.float32)
    rows = 0
    lineno = 0  # lines consumed so far
    with opener(path, "rb") as fh:
        while max_rows is None or rows < max_rows:
            lines = fh.readlines(_CHUNK_BYTES)
            if not lines:
                break
            remaining = None if max_rows is None else max_rows - rows
            lab, qid, feat = parser.parse(lines, lineno + 1, remaining)
            lineno += len(lines)
            n = lab.size
            if rows + n > labels.size:
                if labels.size == 0:  # first chunk: size the arrays from the file size
                    capacity = _estimate_rows(path, lines, n, max_rows)
                else:
                    capacity = labels.size + max(labels.size // 2, n)
                capacity = max(capacity, rows + n)
                labels.resize(capacity, refcheck=False)
                qids.resize(capacity, refcheck=False)
                features.resize((capacity, n_features), refcheck=False)
            labels[rows : rows + n] = lab
            qids[rows : rows + n] = qid
            features[rows : rows + n] = feat
            rows += n
    if rows == 0:
        if lineno == 0:
            raise LetorFormatError(path, None, "file is empty (no lines, no data rows)")
        raise LetorFormatError(path, None, f"no data rows in {lineno} line(s) (only blank lines or comments)")
    if rows < labels.size:  # shrink in place (realloc), no second copy of the features
        labels.resize(rows, refcheck=False)
        qids.resize(rows, refcheck=False)
        features.resize((rows, n_features), refcheck=False)
    return labels, qids, features


def _estimate_rows(path: str, lines: list[bytes], n: int, max_rows: int | None) -> int:
    if path.endswith(".gz") or n == 0:
        guess = 4 * max(n, 1)
    else:
        per_row = sum(len(x) for x in lines) / n
        guess = int(os.path.getsize(path) / per_row * 1.02) + 16
    if max_rows is not None:
        guess = min(guess, max_rows)
    return guess


class _ChunkParser:
    def __init__(self, path: str, n_features: int, max_label: int):
        self.path = path
        self.F = n_features
        self.max_label = max_label
        prefixes = [b"qid:"] + [b"%d:" % j for j in range(1, n_features + 1)]
        self.prefix_bytes = np.frombuffer(b"".join(prefixes), dtype=np.uint8)  # of one dense line
        self.prefix_lengths = np.array([len(p) for p in prefixes])

    def parse(self, lines: list[bytes], first_lineno: int, limit: int | None):
        take = lines if limit is None else lines[:limit]
        fast = self._fast(take)
        if fast is not None:
            return fast
        return self._slow(lines, first_lineno, limit)

    def _fast(self, lines: list[bytes]):
        """Bulk parse of dense lines ``<label> qid:<q> 1:<v> 2:<v> … F:<v>``; None = "not sure".

        Accepts only what :meth:`_slow` accepts, with identical values. On the bytes of the chunk
        (comments cut): every line has exactly F + 2 whitespace-separated tokens and F + 1 colons,
        colon j sitting in token j + 1 (so the label has none and no token has two), never followed
        by whitespace; the bytes from each such token's start to its colon are exactly "qid:",
        "1:", …, "F:". Those prefixes are blanked and numpy must read the rest as exactly
        rows × (F + 2) finite numbers, labels and qids integral and in range.
        """
        n, F = len(lines), self.F
        F1, W = F + 1, F + 2
        if n == 0:
            return None
        text = b"".join(lines)
        if b"#" in text:
            text = b"".join(line.split(b"#", 1)[0].rstrip(b"\r\n") + b"\n" for line in lines)
        elif not text.endswith(b"\n"):
            text += b"\n"
        buf = np.frombuffer(text, dtype=np.uint8)
        ws = _WHITESPACE[buf]
        newlines = np.flatnonzero(buf == 10)
        colons = np.flatnonzero(buf == 58)
        if newlines.size != n or colons.size != n * F1:
            return None
        token_start = np.empty_like(ws)
        token_start[0] = not ws[0]
        np.greater(ws[:-1], ws[1:], out=token_start[1:])
        starts = np.flatnonzero(token_start)
        if starts.size != n * W:
            return None
        S, C = starts.reshape(n, W), colons.reshape(n, F1)
        prev_newline = np.concatenate(([-1], newlines[:-1]))
        if not (
            np.all(S[:, 0] > prev_newline)  # each line holds exactly its W tokens
            and np.all(S[:, -1] < newlines)
            and np.all(S[:, 1:] <= C)  # colon j lies in token j + 1
            and np.all(C[:, :-1] < S[:, 2:])
            and not np.any(ws[colons + 1])  # no empty value after a colon
            and np.array_equal(C - S[:, 1:] + 1, np.broadcast_to(self.prefix_lengths, (n, F1)))
        ):
            return None
        edges = np.zeros(buf.size + 1, dtype=np.int8)
        edges[S[:, 1:].ravel()] = 1
        edges[colons + 1] -= 1
        prefix = np.cumsum(edges[:-1], dtype=np.int8).view(bool)
        if not np.array_equal(buf[prefix], np.tile(self.prefix_bytes, n)):
            return None
        numbers = buf.copy()
        numbers[prefix] = 32  # b" "
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # numpy may warn instead of raising on junk
                arr = np.fromstring(numbers.tobytes(), dtype=np.float64, sep=" ")
        except ValueError:
            return None
        if arr.size != n * W:
            return None
        arr = arr.reshape(n, W)
        lab, qid, values = arr[:, 0], arr[:, 1], arr[:, 2:]
        if not (
            np.all(lab == np.round(lab))
            and np.all((lab >= 0) & (lab <= self.max_label))
            and np.all(qid == np.round(qid))
            and np.all((qid >= 0) & (qid < _MAX_EXACT))
            and np.all(np.abs(values) < _F32_LIMIT)  # finite, also as float32
        ):
            return None
        return lab.astype(np.int8), qid.astype(np.int64), values.astype(np.float32)

    def _slow(self, lines: list[bytes], first_lineno: int, limit: int | None):
        F = self.F
        out_lab, out_qid = [], []
        feats = np.zeros((len(lines) if limit is None else min(len(lines), limit), F), dtype=np.float32)
        for offset, raw in enumerate(lines):
            if limit is not None and len(out_lab) >= limit:
                break
            lineno = first_lineno + offset

            def fail(problem: str):
                raise LetorFormatError(self.path, lineno, problem) from None

            line = raw.split(b"#", 1)[0]
            toks = line.split()
            if not toks:
                continue
            if not line.isascii():
                fail("non-ASCII bytes outside a comment")
            if b"_" in line:
                fail("'_' is not allowed in numbers")
            label = _integral(toks[0])
            if label is None or not 0 <= label <= self.max_label:
                fail(f"bad label {_show(toks[0])}: expected an integer in 0..{self.max_label}")
            if len(toks) < 2 or not toks[1].startswith(b"qid:"):
                got = _show(toks[1]) if len(toks) > 1 else "end of line"
                fail(f"missing qid: the second token must be 'qid:<id>', got {got}")
            qid = _integral(toks[1][4:])
            if qid is None or not 0 <= qid < 2**53:
                fail(f"bad qid {_show(toks[1])}: expected 'qid:<non-negative integer>'")
            row = len(out_lab)
            prev = 0
            for tok in toks[2:]:
                idx_s, sep, val_s = tok.partition(b":")
                if not sep or not idx_s or not val_s:
                    fail(f"bad token {_show(tok)}: expected '<index>:<value>'")
                try:
                    idx = int(idx_s)
                except ValueError:
                    fail(f"bad token {_show(tok)}: feature index is not an integer")
                if not 1 <= idx <= F:
                    fail(f"feature index {idx} out of range 1..{F} in token {_show(tok)}")
                if idx <= prev:
                    fail(f"feature indices must be strictly increasing: {idx} after {prev} in token {_show(tok)}")
                try:
                    val = float(val_s)
                except ValueError:
                    fail(f"bad token {_show(tok)}: value is not a number")
                if not math.isfinite(val):
                    fail(f"bad token {_show(tok)}: value is not finite")
                if not abs(val) < _F32_LIMIT:
                    fail(f"bad token {_show(tok)}: value does not fit in float32")
                feats[row, idx - 1] = val
                prev = idx
            out_lab.append(label)
            out_qid.append(qid)
        n = len(out_lab)
        return np.array(out_lab, dtype=np.int8), np.array(out_qid, dtype=np.int64), feats[:n]


def _integral(tok: bytes) -> int | None:
    """An integer literal, or a number with an integral value (``2``, ``2.0``, ``2e0``); else None."""
    try:
        return int(tok)
    except ValueError:
        pass
    try:
        x = float(tok)
    except ValueError:
        return None
    if not math.isfinite(x) or x != math.floor(x):
        return None
    return int(x)


def _show(tok: bytes) -> str:
    s = tok.decode("ascii", errors="backslashreplace")
    return repr(s if len(s) <= 40 else s[:37] + "...")


# ------------------------------------------------------------------------------------- clustering


@dataclass(frozen=True)
class ArmMeans:
    """Bandit arms from clustered LETOR rows.

    ``means[i]`` is arm i's mean reward, ``counts[i]`` its number of rows, ``levels`` the reward
    levels ``j / label_scale`` and ``probabilities[i][j]`` the fraction of arm i's rows with label j.
    All sequences are tuples of Python numbers, so instances compare and hash by value.
    """

    means: tuple[float, ...]
    counts: tuple[int, ...]
    levels: tuple[float, ...]
    probabilities: tuple[tuple[float, ...], ...]
    source: str
    seed: int
    k: int
    label_scale: int = MAX_LABEL

    def __post_init__(self):
        object.__setattr__(self, "means", tuple(float(x) for x in self.means))
        object.__setattr__(self, "counts", tuple(_as_int(x, "counts") for x in self.counts))
        object.__setattr__(self, "levels", tuple(float(x) for x in self.levels))
        object.__setattr__(self, "probabilities", tuple(tuple(float(p) for p in row) for row in self.probabilities))
        object.__setattr__(self, "seed", _as_int(self.seed, "seed"))
        object.__setattr__(self, "k", _as_int(self.k, "k"))
        object.__setattr__(self, "label_scale", _as_int(self.label_scale, "label_scale"))
        if not isinstance(self.source, str):
            raise ValueError("source: must be a string")
        self._validate()

    def _validate(self):
        k = self.k
        if k < 1:
            raise ValueError(f"k: must be ≥ 1, got {k}")
        if self.label_scale < 1:
            raise ValueError(f"label_scale: must be ≥ 1, got {self.label_scale}")
        for name in ("means", "counts", "probabilities"):
            if len(getattr(self, name)) != k:
                raise ValueError(f"{name}: has {len(getattr(self, name))} entries, expected k = {k}")
        want_levels = tuple(j / self.label_scale for j in range(self.label_scale + 1))
        if len(self.levels) != len(want_levels) or any(
            abs(a - b) > 1e-12 for a, b in zip(self.levels, want_levels)
        ):
            raise ValueError(f"levels: expected {list(want_levels)} for label_scale {self.label_scale}")
        for i, m in enumerate(self.means):
            if not 0.0 <= m <= 1.0:  # also rejects NaN
                raise ValueError(f"means: arm {i} has mean {m}, outside [0, 1]")
        for i, c in enumerate(self.counts):
            if c < 1:
                raise ValueError(f"counts: arm {i} has count {c}, expected ≥ 1")
        for i, row in enumerate(self.probabilities):
            if len(row) != len(self.levels):
                raise ValueError(f"probabilities: row {i} has {len(row)} entries, expected {len(self.levels)}")
            if any(not 0.0 <= p <= 1.0 for p in row):
                raise ValueError(f"probabilities: row {i} has an entry outside [0, 1]")
            if abs(math.fsum(row) - 1.0) > 1e-9:
                raise ValueError(f"probabilities: row {i} sums to {math.fsum(row)!r}, not 1")
            implied = math.fsum(p * v for p, v in zip(row, self.levels))
            if abs(implied - self.means[i]) > 1e-9:
                raise ValueError(
                    f"means: arm {i} has mean {self.means[i]!r} but its probabilities imply {implied!r}"
                )

    @property
    def n_rows(self) -> int:
        return sum(self.counts)

    def to_dict(self) -> dict:
        return {
            "format": FORMAT_TAG,
            "source": self.source,
            "k": self.k,
            "seed": self.seed,
            "label_scale": self.label_scale,
            "means": list(self.means),
            "counts": list(self.counts),
            "levels": list(self.levels),
            "probabilities": [list(row) for row in self.probabilities],
        }

    def to_json(self, path) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=1)
            fh.write("\n")

    @classmethod
    def from_dict(cls, data: dict) -> "ArmMeans":
        if not isinstance(data, dict):
            raise ValueError("format: expected a JSON object")
        if data.get("format") != FORMAT_TAG:
            raise ValueError(f"format: expected {FORMAT_TAG!r}, got {data.get('format')!r}")
        fields = ("source", "k", "seed", "label_scale", "means", "counts", "levels", "probabilities")
        for name in fields:
            if name not in data:
                raise ValueError(f"{name}: missing")
        for name in ("means", "counts", "levels", "probabilities"):
            if not isinstance(data[name], list):
                raise ValueError(f"{name}: expected a list")
        for i, row in enumerate(data["probabilities"]):
            if not isinstance(row, list):
                raise ValueError(f"probabilities: row {i} is not a list")
        for name in ("means", "levels"):
            if not all(_is_number(x) for x in data[name]):
                raise ValueError(f"{name}: every entry must be a number")
        if not all(_is_number(p) for row in data["probabilities"] for p in row):
            raise ValueError("probabilities: every entry must be a number")
        return cls(**{name: data[name] for name in fields})

    @classmethod
    def from_json(cls, path) -> "ArmMeans":
        with open(path, encoding="utf-8") as fh:
            try:
                data = json.load(fh)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not valid JSON ({e})") from None
        try:
            return cls.from_dict(data)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None


def _as_int(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise ValueError(f"{name}: expected an integer, got {x!r}")
    return int(x)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def zscore(features: np.ndarray) -> np.ndarray:
    """Column-wise ``(x − mean) / std`` (population std) as a new float64 array.

    [I] Columns with zero variance (max == min) are set to 0 instead of dividing by 0.
    """
    z = np.array(features, dtype=np.float64)  # copy
    if z.ndim != 2:
        raise ValueError(f"features: expected a 2-D array, got shape {z.shape}")
    if not np.all(np.isfinite(z)):
        raise ValueError("features: contain NaN or infinite values")
    constant = z.max(axis=0) == z.min(axis=0)
    z -= z.mean(axis=0)
    std = np.sqrt(np.einsum("ij,ij->j", z, z) / z.shape[0])  # no full-size temporary
    std[constant] = 1.0
    z /= std
    z[:, constant] = 0.0
    return z


def _kmeans_assign(z: np.ndarray, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    with warnings.catch_warnings():
        # "One of the clusters is empty. Re-run kmeans with a different initialization." — handled
        # below on the final assignment; ++ seeding on < k distinct points divides by zero.
        warnings.simplefilter("ignore")
        _, assign = kmeans2(z, k, minit="++", missing="warn", **{_KMEANS_RNG: rng})
    return np.asarray(assign, dtype=np.int64)


def cluster_arms(
    labels: np.ndarray,
    features: np.ndarray,
    k: int,
    seed: int,
    max_label: int = MAX_LABEL,
    *,
    source: str = "",
    return_assignment: bool = False,
):
    """Cluster rows into ``k`` arms; see the module docstring for what is [P] and what is [I].

    Returns an :class:`ArmMeans` (or ``(ArmMeans, assignment)`` with ``return_assignment=True``,
    ``assignment[r]`` being row r's arm). Raises :class:`EmptyClusterError` if some cluster ends
    up with no rows.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels: expected a 1-D array, got shape {labels.shape}")
    n = labels.size
    features = np.asarray(features)
    if features.ndim != 2 or features.shape[0] != n:
        raise ValueError(f"features: expected shape ({n}, F), got {features.shape}")
    if not (np.issubdtype(labels.dtype, np.integer) and n > 0 and labels.min() >= 0 and labels.max() <= max_label):
        raise ValueError(f"labels: expected integers in 0..{max_label}")
    k = int(k)
    if not 1 <= k <= n:
        raise ValueError(f"k: need 1 ≤ k ≤ rows = {n}, got {k}")
    assign = _kmeans_assign(zscore(features), k, seed)
    counts = np.bincount(assign, minlength=k)
    if np.any(counts == 0):
        empty = np.flatnonzero(counts == 0).tolist()
        raise EmptyClusterError(
            f"K-means with k={k}, seed={seed} left cluster(s) {empty} without rows "
            f"(fewer than k distinct feature vectors, or a bad start); try a smaller k or another seed"
        )
    # per-arm histogram of labels → probabilities; means from the integer label sums
    levels = max_label + 1
    hist = np.bincount(assign * levels + labels, minlength=k * levels).reshape(k, levels)
    probabilities = hist / counts[:, None]
    label_sums = hist @ np.arange(levels)
    means = label_sums / (max_label * counts)
    arms = ArmMeans(
        means=tuple(means.tolist()),
        counts=tuple(counts.tolist()),
        levels=tuple(j / max_label for j in range(max_label + 1)),
        probabilities=tuple(tuple(row) for row in probabilities.tolist()),
        source=source,
        seed=seed,
        k=k,
        label_scale=max_label,
    )
    return (arms, assign) if return_assignment else arms


# ------------------------------------------------------------------------------- the arm-means file


def write_arm_file(letor_file: str | os.PathLike, out: str | os.PathLike, k: int = 50, seed: int = 0,
                   max_rows: int | None = None, source: str | None = None) -> list[str]:
    """Read a LETOR file, cluster it into ``k`` arms, write their means as JSON to ``out``; the
    lines of a summary (rows read and their rate, the clusters, the means). ``privbandit
    letor-arms`` is its command line. Raises :class:`LetorFormatError` (a ``ValueError``, naming the
    line) or ``OSError``; nothing is written then."""
    t0 = time.perf_counter()
    labels, _qids, features = read_letor(letor_file, max_rows=max_rows)
    t_read = time.perf_counter() - t0
    rows = labels.size
    if source is None:
        source = (f"{os.path.basename(letor_file)}: {rows} rows"
                  + (f" (--max-rows {max_rows})" if max_rows else "")
                  + "; z-scored features, scipy kmeans2 minit='++' iter=10")
    t1 = time.perf_counter()
    arms = cluster_arms(labels, features, k, seed, source=source)
    t_cluster = time.perf_counter() - t1
    arms.to_json(out)
    means = np.array(arms.means)
    return [
        f"read {rows:,} rows from {letor_file} in {t_read:.1f} s ({rows / max(t_read, 1e-9):,.0f} rows/s)",
        f"k-means: {arms.k} arms, seed {arms.seed}, {t_cluster:.1f} s; rows per arm {min(arms.counts):,}..{max(arms.counts):,}",
        f"arm means: min {means.min():.4f}  max {means.max():.4f}  mean {means.mean():.4f}  "
        f"(row-weighted {np.dot(means, arms.counts) / rows:.4f})",
        f"wrote {out}",
    ]
