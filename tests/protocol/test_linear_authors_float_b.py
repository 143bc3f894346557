"""Issue #31: ``vec_bits = "authors-float"`` puts the authors' float g and b into P_Vec (``paper-code``,
LinUCB-SDP-Vec only): ⌊b⌋ noise bits drawn (numpy's binomial truncates their float b), p·b·B
subtracted by Algorithm 7, so every estimated entry drifts by −(span/g)·p·(b − ⌊b⌋)·B per batch.
The default ``"integer"`` (g = ⌈g⌉, b = ⌈b⌉) subtracts exactly the bits it draws."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from privbandit.families.shuffle_linear_bandits import mechanisms as slb
from privbandit.families.shuffle_linear_bandits import params as lp
from privbandit.runner import config as experiment_files

ROOT = Path(__file__).resolve().parents[2]
L = math.sqrt(2)  # the authors' instances: ‖φ‖ ≤ √2


def _vec(bits: str = "integer") -> slb.VecParams:  # Fig. 1(b): B = 20, d = 5, ε = 1, δ = 0.1
    return lp.vec_params("paper-code", lp.batch_budget(1.0, 0.1, 1), 20, 5, L, L, None, "delta", bits)


def test_authors_float_draws_floor_b_and_subtracts_b():
    g = max(2 * math.sqrt(20), 5, 4)
    b = g**2 * math.log(5 / 0.1) ** 2 / 20
    floated, integer = _vec("authors-float"), _vec()
    assert (floated.g, floated.b, floated.debias_bits) == (g, 61, b)  # 8.94, 61 drawn, 61.22 subtracted
    assert (integer.g, integer.b, integer.debias_bits) == (9, 62, 62)


@pytest.mark.parametrize("bits", ["authors-float", "integer"])
def test_the_analyzers_mean_error_is_the_drift_and_nothing_else(bits):
    vec = _vec(bits)
    drift = -vec.scale * vec.p * (vec.debias_bits - vec.b) * 20  # −0.1705 for authors-float, 0 for integer
    rng = np.random.default_rng(31)
    entries = rng.uniform(-1, 1, size=(4000, 20, 3))  # 4000 batches of 20 users, 3 labels
    totals = slb.LabelCountShuffler().release(slb.BitSumRandomizer(vec).randomize(entries, rng))
    error = slb.BitSumAnalyzer(vec).analyze(totals, 20) - entries.sum(axis=-2)
    se = error.std() / math.sqrt(error.size)  # ≈ 0.022; the drift is 7.7 of it
    assert abs(error.mean() - drift) < 4 * se, (bits, error.mean(), drift, se)


@pytest.mark.parametrize("overrides", [['preset="theory"'], ['algorithms.LinUCB-SDP-Amp.vec_bits="authors-float"']])
def test_authors_float_is_paper_code_sdp_vec_only(overrides):
    if "vec_bits" not in overrides[0]:
        overrides = [*overrides, 'algorithms.LinUCB-SDP-Vec.vec_bits="authors-float"']
    with pytest.raises((ValueError, SystemExit), match="vec_bits"):
        experiment_files.load(ROOT / "experiments" / "linear_fig1b_eps1.toml", overrides)
