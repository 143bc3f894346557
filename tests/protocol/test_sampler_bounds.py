"""#31 item 5: what the double-precision samplers guarantee. The bounds of ``sampler_bounds`` are
derived from the code numpy runs, so these tests first hold the installed numpy (and numba) to that
code, bit for bit; then the caps, the exact search-branch distance, the numbers the docstrings and
the README state, and the law by chi-square at fixed seeds (α = 10⁻³, tests/stats.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit
from scipy import stats

from privbandit.protocol.primitives.noise import discrete_laplace_pmf, sample_discrete_laplace
from privbandit.protocol.primitives.noise import sampler_bounds as sb
from privbandit.protocol.primitives.noise.grid_gaussian import GAUSSIAN_GRID
from privbandit.protocol.primitives.noise.grid_laplace import grid_laplace_delta, grid_laplace_scale, grid_step_delta
from tests.stats import P_MIN, chi_square_pvalue

U_MAX = 1.0 - 2.0**-53  # the largest uniform numpy's next_double returns


def _search(u: float, p: float, limit: int = 10_000) -> int | None:
    """numpy's random_geometric_search for one uniform, in doubles (None: the loop would not end)."""
    x, s, prod, q = 1, p, p, 1.0 - p
    while u > s:
        prod *= q
        s += prod
        x += 1
        if x > limit:
            return None
    return x


@pytest.mark.parametrize("p", [0.5, 0.4, 0.9])
def test_numpys_geometric_search_is_the_loop_the_bounds_replay(p):
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    assert np.array_equal(a.geometric(p, 20_000), [_search(u, p) for u in b.random(20_000)])


@pytest.mark.parametrize("p", [0.3, 0.01, 1e-6])
def test_numpys_geometric_inversion_is_the_ceiling_of_its_exponential(p):
    a, b = np.random.default_rng(4), np.random.default_rng(4)
    expected = np.ceil(-b.standard_exponential(1_000_000) / math.log1p(-p)).astype(np.int64)
    assert np.array_equal(a.geometric(p, 1_000_000), expected)


def test_numbas_exponential_is_numpys_to_the_bit():
    """The grid Gaussian's compiled sampler draws numba's exponentials: the same lattice."""

    @njit
    def draw(rng, n):
        out = np.empty(n)
        for i in range(n):
            out[i] = rng.standard_exponential()
        return out

    ours, numpys = draw(np.random.default_rng(5), 500_000), np.random.default_rng(5).standard_exponential(500_000)
    assert np.array_equal(ours, numpys)


def test_the_exponentials_largest_value_and_the_caps_it_sets():
    assert sb.EXPONENTIAL_MAX == sb.ZIGGURAT_EXP_R + 53 * math.log(2) == pytest.approx(44.4339180398, abs=1e-9)
    assert np.random.default_rng(6).standard_exponential(5_000_000).max() < sb.EXPONENTIAL_MAX
    for b in (3.0, 300.0, grid_laplace_scale(1.0, 1.0), 2.0**20):
        p = float(-np.expm1(-1 / b))
        cap = sb.discrete_laplace_cap(b)
        # the inversion at the largest exponential; 0 is the smallest geometric (E = 0 exactly)
        assert cap == math.ceil(-sb.EXPONENTIAL_MAX / math.log1p(-p))
        assert sb.EXPONENTIAL_MAX - 1e-9 < cap / b < sb.EXPONENTIAL_MAX + 1 / b  # ≈ 44.4 scales
    assert sb.discrete_laplace_cap(grid_laplace_scale(1.0, 1.0)) == 46_592_385  # grid_laplace's docstring
    for b in (0.3, 1.0, 2.2):  # the search: its cap is where the loop stops at the largest uniform
        p = float(-np.expm1(-1 / b))
        assert sb.geometric_hang(p) == 0.0 and sb.discrete_laplace_cap(b) == _search(U_MAX, p) - 1
        assert 33 < sb.discrete_laplace_cap(b) / b < 37


def test_the_search_that_never_ends():
    """At b = 2 numpy's double partial sums stop below 1 − 2⁻⁵³: the uniforms above them never end
    the loop (probability 2⁻⁵², as computed)."""
    p = float(-np.expm1(-1 / 2.0))
    assert _search(U_MAX, p) is None
    assert sb.geometric_hang(p) == 2.0**-52
    # The module docstring's numbers, at b = 2.4's p rounded correctly. The hang turns on p's last
    # bit, and libm's expm1 need not round correctly: this machine's gave one ulp less (2⁻⁵²) where
    # another gave the correctly rounded p, so the test names the double, not the call.
    p_24 = float.fromhex("0x1.5cf0063460efbp-2")  # −expm1(−1/2.4) = 0.340759369799556266 rounded to nearest
    assert sb.geometric_hang(p_24) == 2.0**-51
    assert sb.geometric_hang(np.nextafter(p_24, 0.0)) == 2.0**-52
    assert sb.geometric_hang(float(-np.expm1(-1 / 1.0))) == 0.0


def test_the_search_branch_distance_is_exact_and_tiny_and_the_inversion_bound_grows_with_the_scale():
    for b in np.linspace(0.05, 2.466, 60):
        p = float(-np.expm1(-1 / b))
        assert p >= 1 / 3 and 0 < sb.geometric_tv_bound(p) < 2e-15
        assert sb.discrete_laplace_tv_bound(float(b)) < 4e-15  # polya's docstring
    # exactness: at p = 1/2 every partial sum is a dyadic the doubles hold exactly, so the only
    # difference is the mass the cap cuts off (2⁻⁵³ at the last value, the ideal beyond it).
    g = sb.geometric_cap(0.5)
    assert g == 53 and sb.geometric_tv_bound(0.5) == pytest.approx(2.0**-53, rel=1e-12)
    bounds = [sb.discrete_laplace_tv_bound(b) for b in (3.0, 300.0, 3e4, 3e6)]
    assert bounds == sorted(bounds) and bounds[-1] / bounds[-2] == pytest.approx(100, rel=0.02)


def test_the_numbers_the_docs_state():
    assert grid_laplace_delta(1.0, 1.0) == pytest.approx(2.8e-8, rel=0.02)  # grid_laplace, README
    assert grid_laplace_delta(1.0, 0.1) == pytest.approx(1.6e-7, rel=0.03)
    assert sb.discrete_laplace_tv_bound(2.0**20) == pytest.approx(7.5e-9, rel=0.01)
    assert grid_step_delta(1000.0) == pytest.approx((1 + math.exp(1e-3)) * sb.discrete_laplace_tv_bound(2.0**20))
    assert sb.discrete_gaussian_fast_tv_bound(1.9 / GAUSSIAN_GRID) == pytest.approx(1.9e-8, rel=0.03)
    assert sb.approx_dp_delta(0.0, 1e-9) == 2e-9
    with pytest.raises(ValueError, match="epsilon"):
        sb.approx_dp_delta(-1.0, 1e-9)
    with pytest.raises(ValueError, match="geometric p"):
        sb.geometric_cap(1.0)
    with pytest.raises(ValueError, match="scale b"):
        sb.discrete_laplace_cap(0.0)


@pytest.mark.parametrize("b", [2.0, 2.5])
def test_the_sampler_on_both_sides_of_numpys_branch_point_has_the_laplace_law(b):
    x = sample_discrete_laplace(b, 400_000, np.random.default_rng(12))
    assert chi_square_pvalue(x, lambda k: discrete_laplace_pmf(k, b)) > P_MIN
    assert np.abs(x).max() <= sb.discrete_laplace_cap(b)
    # the same test rejects a Laplace 5 % wider: it can fail
    assert chi_square_pvalue(x, lambda k: discrete_laplace_pmf(k, 1.05 * b)) < P_MIN


def test_the_sampler_at_the_grid_scale_has_the_laplace_law_in_its_tails():
    """b ≈ 10⁶ steps (Δ = 1, ε = 1): |L| binned by multiples of b out to 12 scales, against the
    ideal P(|L| ≥ k·b); a law cut at a few scales, or a wrong scale, fails."""
    b = grid_laplace_scale(1.0, 1.0)
    x = np.abs(sample_discrete_laplace(b, 2_000_000, np.random.default_rng(13)))
    edges = np.arange(0, 13) * b
    observed = np.histogram(x, bins=np.append(edges, np.inf))[0]
    beta = math.exp(-1 / b)
    # P(|L| ≥ m) = 2β^m/(1 + β) for m ≥ 1 (Definition 4), and 1 at m = 0
    tail = np.array([1.0] + [2 * beta ** math.ceil(e) / (1 + beta) for e in edges[1:]] + [0.0])
    expected = -np.diff(tail) * x.size
    assert stats.chisquare(observed, expected).pvalue > P_MIN
    assert x.max() <= sb.discrete_laplace_cap(b)


def test_the_linear_summary_states_the_gaussian_samplers_distance_beside_the_ledger():
    """The linear family's ledger is the ideal discrete Gaussian's; ``mechanism.sampler_tv_per_entry``
    gives the sampler's distance from it, and the basis says the figure excludes it."""
    from privbandit.runner import config as experiment_files

    fam, config = experiment_files.load("experiments/linear_fig1b_eps1.toml", ["runs=1", "horizon=200"])
    for label in ("LinUCB-LDP", "LinUCB-SDP-Amp", "LinUCB-JDP"):
        described = fam.setup(config, label).describe()
        sigma = described["sigma"]
        assert described["sampler_tv_per_entry"] == sb.discrete_gaussian_fast_tv_bound(sigma / GAUSSIAN_GRID)
        assert 0 < described["sampler_tv_per_entry"] < 1e-6
        assert "not the sampler" in described["accountant"]
    assert "sampler_tv_per_entry" not in fam.setup(config, "LinUCB-SDP-Vec").describe()
