"""Paired comparisons: the statistic is scipy's paired t, wins are counted per run, and pairing
finds a shift that unpaired standard errors hide."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from privbandit.runner.paired import paired


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-1e3, 1e3), st.floats(-1e3, 1e3)), min_size=2, max_size=40))
def test_t_is_scipys_paired_t(pairs):
    a, b = map(np.array, zip(*pairs))
    p = paired(a, b)
    assert p.a_won + p.b_won + p.ties == len(pairs)
    assert p.a_won == int((a < b).sum()) and p.b_won == int((a > b).sum())
    d = a - b
    if np.ptp(d) > 1e-9 * (1 + np.abs(d).max()):
        assert p.t == pytest.approx(stats.ttest_rel(a, b).statistic, rel=1e-6, abs=1e-9)


def test_pairing_sees_a_shift_hidden_by_instance_variance():
    rng = np.random.default_rng(7)
    instance = rng.normal(0, 100, 20)  # runs differ a lot by instance
    a = instance + 1.0 + rng.normal(0, 0.3, 20)
    b = instance + rng.normal(0, 0.3, 20)
    p = paired(a, b)
    unpaired_se = np.sqrt(a.var(ddof=1) / 20 + b.var(ddof=1) / 20)
    assert p.t > 5 and p.b_won >= 18 and p.verdict() == "a worse"
    assert abs(a.mean() - b.mean()) / unpaired_se < 1  # what unpaired errors would have concluded


def test_refuses_unpaired_samples():
    with pytest.raises(ValueError, match="same ≥ 2 runs"):
        paired(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="same ≥ 2 runs"):
        paired(np.ones(1), np.ones(1))
    assert paired(np.ones(3), np.ones(3)).verdict() == "equal in every run"
