"""Write a synthetic LETOR file shaped like MSLR-WEB10K, then cluster it with the real loader.

This is a STAND-IN for MSLR-WEB10K (which cannot be downloaded here), NOT the data set. It copies
the shape: 136 features named after MSLR's groups (5 streams each of covered terms, stream length,
IDF, TF statistics, BM25, LMIR, …, then URL/link/PageRank/quality/click columns), queries of
100–120 documents, labels 0..4 with MSLR-WEB10K's approximate marginal, and features that carry
signal about the label, so K-means clusters differ in mean label.

Generative model (all from one seed):
  * per query: an effect u_q ~ N(0, 0.6²), a query length L_q ∈ 1..5, query-level factors;
  * per document: relevance r = u_q + N(0, 1), which the features see, and a grade
    r + N(0, 1), which they do not (judges are noisy); label = the bin of the grade under
    thresholds at the quantiles of its marginal that reproduce TARGET_MARGINAL;
  * per document: 4 more standard-normal factors, three of which columns use (length,
    quality/popularity, click propensity);
  * every feature = loadings · latents + noise, transformed per column kind (counts, ratios,
    floats, booleans, heavy-tailed popularity, mostly-zero click counts). Which columns carry r
    and how strongly is fixed by the seed.

Then it runs ``privbandit.datasets.letor.write_arm_file`` (what ``privbandit letor-arms`` runs) (read_letor + cluster_arms, k = 50, seed = 0) on the
file, exactly as for the real data, and writes experiments/data/mslr_standin_k50.json.

    python experiments/data/make_letor_standin.py            # rows=200000, seed=0
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.special import expit, ndtri

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # run from a checkout without installing

from privbandit.datasets import letor  # noqa: E402

# Approximate published label marginal of MSLR-WEB10K (share of the 1,200,192 rows per label
# 0..4: about 51.7%, 32.5%, 13.4%, 1.7%, 0.7%); approximate figures, renormalised to sum to 1.
TARGET_MARGINAL = np.array([0.517, 0.325, 0.134, 0.017, 0.007])
TARGET_MARGINAL = TARGET_MARGINAL / TARGET_MARGINAL.sum()

N_FEATURES = 136
QUERY_SIZE = (100, 120)
U_SD = 0.6  # sd of the per-query relevance effect; per-document noise has sd 1
SIGNAL = (0.1, 0.5)  # range of the relevance loading of text-match columns (drawn per column)
LABEL_NOISE_SD = 1.0  # noise on the graded relevance that no feature sees
NOISE = 1.0  # sd of each column's own noise, on the scale of the standardised latents


def _column_kinds() -> list[str]:
    """One kind per MSLR column (1-based feature j is entry j - 1), following MSLR's feature list."""
    kinds = []
    kinds += ["covered"] * 5  # 1-5 covered query term number
    kinds += ["covered_ratio"] * 5  # 6-10 covered query term ratio
    kinds += ["length"] * 5  # 11-15 stream length
    kinds += ["idf"] * 5  # 16-20 IDF (query level)
    kinds += ["count"] * 5  # 21-25 sum of term frequency
    kinds += ["count"] * 15  # 26-40 min / max / mean TF
    kinds += ["float"] * 5  # 41-45 variance of TF
    kinds += ["ratio"] * 25  # 46-70 stream-length-normalised TF stats
    kinds += ["float"] * 25  # 71-95 tf*idf stats
    kinds += ["boolean"] * 5  # 96-100 boolean model
    kinds += ["ratio"] * 5  # 101-105 vector space model
    kinds += ["float"] * 5  # 106-110 BM25
    kinds += ["lmir"] * 15  # 111-125 LMIR.ABS / DIR / JM (negative)
    kinds += ["length", "length"]  # 126-127 number of slashes, URL length
    kinds += ["heavy", "heavy"]  # 128-129 inlinks, outlinks
    kinds += ["heavy", "heavy"]  # 130-131 PageRank, SiteRank
    kinds += ["quality", "quality"]  # 132-133 QualityScore, QualityScore2
    kinds += ["clicks", "clicks", "clicks"]  # 134-136 query-url clicks, url clicks, dwell time
    assert len(kinds) == N_FEATURES
    return kinds


def generate(rows: int, seed: int):
    """Return (labels int64, qids int64, features float64 (rows, 136), kinds)."""
    rng = np.random.default_rng(seed)
    kinds = _column_kinds()
    # queries
    sizes = []
    while sum(sizes) < rows:
        sizes.append(int(rng.integers(QUERY_SIZE[0], QUERY_SIZE[1] + 1)))
    sizes[-1] -= sum(sizes) - rows  # the last query may be shorter
    sizes = np.array(sizes)
    nq = sizes.size
    qid_values = np.cumsum(rng.integers(1, 40, nq))  # MSLR qids are increasing, not contiguous
    qidx = np.repeat(np.arange(nq), sizes)
    qids = qid_values[qidx]
    # relevance the features can see (r) and the label's own noise they cannot (judges disagree)
    u = rng.normal(0.0, U_SD, nq)
    r = u[qidx] + rng.normal(0.0, 1.0, rows)
    sd_r = np.sqrt(1.0 + U_SD**2)
    grade = r + rng.normal(0.0, LABEL_NOISE_SD, rows)
    thresholds = np.hypot(sd_r, LABEL_NOISE_SD) * ndtri(np.cumsum(TARGET_MARGINAL)[:-1])
    labels = np.searchsorted(thresholds, grade).astype(np.int64)
    # latent factors, standardised: relevance, 4 document factors, 2 query factors
    doc = rng.normal(size=(rows, 4))
    qry = rng.normal(size=(nq, 2))[qidx]
    latent = np.column_stack([r / sd_r, doc, qry])  # (rows, 7)
    qlen = rng.integers(1, 6, nq)[qidx]
    X = np.empty((rows, N_FEATURES))
    for j, kind in enumerate(kinds):
        w = np.zeros(7)
        if kind in ("covered", "covered_ratio", "count", "ratio", "float", "boolean", "lmir"):
            w[0] = rng.uniform(*SIGNAL)  # text-match features: relevance signal
            w[1] = rng.uniform(-0.5, 0.5)  # document length
            w[5] = rng.uniform(-0.4, 0.4)  # query factor
        elif kind in ("length",):
            w[1] = rng.uniform(0.6, 1.0)
        elif kind in ("heavy", "quality"):
            w[0] = rng.uniform(0.1, 0.5)
            w[2] = rng.uniform(0.6, 1.0)  # document quality / popularity
        elif kind == "clicks":
            w[0] = rng.uniform(0.3, 0.8)
            w[3] = rng.uniform(0.4, 0.8)
        elif kind == "idf":
            w[5:] = rng.uniform(0.5, 1.0, 2)
        z = latent @ w + rng.normal(0.0, NOISE if kind != "idf" else 0.0, rows)
        if kind == "idf":
            z = z + 0.1 * rng.normal(size=nq)[qidx]  # constant within a query
        X[:, j] = _transform(kind, z, qlen, rng)
    return labels, qids, X, kinds


def _transform(kind: str, z: np.ndarray, qlen: np.ndarray, rng) -> np.ndarray:
    if kind == "covered":
        return np.floor(qlen * expit(z + 0.5) + 0.5)
    if kind == "covered_ratio":
        return np.round(np.floor(qlen * expit(z + 0.5) + 0.5) / qlen, 6)
    if kind == "length":
        return np.floor(np.exp(3.0 + 1.2 * z))
    if kind == "idf":
        return np.round(3.0 + 2.0 * z, 6)
    if kind == "count":
        return np.floor(np.exp(0.8 * z))
    if kind == "ratio":
        return np.round(expit(z - 1.0), 6)
    if kind == "float":
        return np.round(10.0 + 6.0 * z, 6)
    if kind == "boolean":
        return (z > 0.3).astype(np.float64)
    if kind == "lmir":
        return np.round(-300.0 + 60.0 * z, 6)
    if kind == "heavy":
        return np.floor(np.exp(2.0 + 2.0 * z))
    if kind == "quality":
        return np.floor(np.clip(50.0 + 20.0 * z, 0, 100))
    if kind == "clicks":
        return np.where(z > 1.8, np.floor(np.exp(z)), 0.0)  # mostly zero, like MSLR's click columns
    raise ValueError(kind)


def write_letor(path: Path, labels, qids, X, kinds) -> None:
    """Write MSLR-style lines: integers as integers, other values with up to 6 significant digits."""
    fmt = "%d qid:%d " + " ".join(
        f"{j + 1}:%d" if kind in ("covered", "length", "count", "boolean", "heavy", "quality", "clicks")
        else f"{j + 1}:%.6g"
        for j, kind in enumerate(kinds)
    ) + "\n"
    block = 20_000
    with open(path, "w", encoding="ascii") as fh:
        for start in range(0, labels.size, block):
            rows = np.column_stack([labels[start : start + block], qids[start : start + block], X[start : start + block]])
            fh.write("".join(fmt % tuple(row) for row in rows.tolist()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic data (K-means seed is --kmeans-seed)")
    ap.add_argument("--arms", type=int, default=50)
    ap.add_argument("--kmeans-seed", type=int, default=0)
    ap.add_argument("--out", default=str(HERE / "mslr_standin_k50.json"))
    ap.add_argument("--letor-out", default=None,
                    help="keep the generated LETOR text here (default: a temporary directory, deleted afterwards)")
    args = ap.parse_args(argv)

    tmpdir = None
    if args.letor_out is None:
        tmpdir = tempfile.mkdtemp(prefix="letor_standin_")
        letor_path = Path(tmpdir) / "standin.txt"
    else:
        letor_path = Path(args.letor_out)
    try:
        t0 = time.perf_counter()
        labels, qids, X, kinds = generate(args.rows, args.seed)
        write_letor(letor_path, labels, qids, X, kinds)
        share = np.bincount(labels, minlength=5) / labels.size
        print(f"wrote {labels.size:,} rows, {np.unique(qids).size:,} queries to {letor_path} "
              f"({os.path.getsize(letor_path) / 1e6:.0f} MB, {time.perf_counter() - t0:.1f} s)")
        print("label shares 0..4: " + ", ".join(f"{p:.3f}" for p in share)
              + "  (target " + ", ".join(f"{p:.3f}" for p in TARGET_MARGINAL) + ")")
        source = (f"SYNTHETIC stand-in for MSLR-WEB10K (not the real data): "
                  f"experiments/data/make_letor_standin.py --rows {args.rows} --seed {args.seed}; "
                  f"z-scored features, scipy kmeans2 minit='++' iter=10")
        for line in letor.write_arm_file(letor_path, args.out, args.arms, args.kmeans_seed, source=source):
            print(line)
        return 0
    finally:
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
