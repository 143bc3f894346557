"""The ledger's RDP → (ε, δ) conversion is dp-accounting's ``compute_epsilon``, to the bit, without
importing it (issue #33: the library loads scipy.signal and scipy.stats in every process).

dp-accounting stays the reference here: the two are compared on many curves of every shape the
ledger composes (Gaussian-like, Skellam's, sums of them, pure-DP curves, curves with infinite
orders, curves below δ² where the total-variation clause decides, slightly negative ones) at δ from
10⁻¹² to 0.5. Tolerance: none (the same double).
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from dp_accounting.rdp import compute_epsilon

from privbandit.protocol.privacy import PureDP, SkellamRDP
from privbandit.protocol.privacy.events import ORDERS
from privbandit.protocol.privacy.ledger import rdp_to_dp


def reference(rdp: np.ndarray, delta: float, orders: np.ndarray = ORDERS) -> float:
    """dp-accounting's conversion of the curve's finite orders, as the ledger called it before."""
    finite = np.isfinite(rdp)
    if not finite.any():
        return math.inf
    eps, _ = compute_epsilon(orders[finite].tolist(), rdp[finite].tolist(), delta)
    return float(eps)


def curves(rng: np.random.Generator, count: int):
    """Random curves of the shapes the ledger meets, each with a δ."""
    for _ in range(count):
        delta = float(10 ** rng.uniform(-12, math.log10(0.5)))
        kind = rng.integers(7)
        if kind == 0:  # Gaussian: α/(2σ²), summed over k releases
            curve = rng.integers(1, 200) * ORDERS / (2 * rng.uniform(0.05, 50) ** 2)
        elif kind == 1:  # Skellam's bound
            curve = np.asarray(SkellamRDP(sensitivity=int(rng.integers(1, 5000)),
                                          variance=float(10 ** rng.uniform(2, 12))).rdp(ORDERS))
        elif kind == 2:  # pure ε's curve
            curve = np.asarray(PureDP(float(10 ** rng.uniform(-3, 1))).rdp(ORDERS))
        elif kind == 3:  # so small that the total-variation clause decides at some orders
            curve = ORDERS * delta**2 * rng.uniform(0.01, 3)
        elif kind == 4:  # infinite above some order
            curve = ORDERS / (2 * rng.uniform(0.5, 20) ** 2)
            curve[rng.integers(1, ORDERS.size):] = math.inf
        elif kind == 5:  # a little negative at low orders (numerical noise of extreme events)
            curve = ORDERS / (2 * rng.uniform(0.5, 20) ** 2) - rng.uniform(0, 0.05)
        else:  # any nonnegative curve
            curve = np.sort(rng.exponential(rng.uniform(0.01, 10), ORDERS.size))
        yield np.asarray(curve, dtype=np.float64), delta


def test_the_conversion_is_dp_accountings_to_the_bit():
    rng = np.random.default_rng(33)
    checked = 0
    for curve, delta in curves(rng, 3000):
        assert rdp_to_dp(curve, delta) == reference(curve, delta), (curve[:5], delta)
        checked += 1
    assert checked == 3000


def test_the_edges_agree_too():
    """No finite order; zeros; one finite order; orders that are not the ledger's (near 1, where the
    bound is not used)."""
    assert rdp_to_dp(np.full(ORDERS.size, math.inf), 1e-6) == math.inf
    assert rdp_to_dp(np.zeros(ORDERS.size), 1e-6) == reference(np.zeros(ORDERS.size), 1e-6) == 0.0
    one = np.full(ORDERS.size, math.inf)
    one[17] = 0.3
    assert rdp_to_dp(one, 1e-5) == reference(one, 1e-5)
    orders = np.array([1.0, 1.005, 1.5, 2.0, 10.0, 100.0])
    for delta in (1e-9, 1e-3, 0.3):
        curve = 0.05 * orders
        assert rdp_to_dp(curve, delta, orders) == reference(curve, delta, orders)
    near_one = np.array([1.0, 1.005])
    assert rdp_to_dp(np.array([0.5, 0.5]), 1e-6, near_one) == reference(np.array([0.5, 0.5]), 1e-6, near_one) == math.inf


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-3])
def test_a_delta_outside_the_unit_interval_is_refused(delta):
    with pytest.raises(ValueError, match=r"delta=.* must lie in \(0, 1\)"):
        rdp_to_dp(np.ones(ORDERS.size), delta)


def test_a_ledger_summary_imports_neither_dp_accounting_nor_scipy_stats():
    """The conversion every run's ledger makes, in a fresh process: what it imports."""
    code = (
        "import sys\n"
        "from privbandit.protocol.privacy import Ledger, SkellamRDP, PureDP\n"
        "led = Ledger('distributed', 1.0, 1e-7, users=10**6)\n"
        "led.record(SkellamRDP(sensitivity=100, variance=1e6))\n"
        "led.record(PureDP(0.5), lane='other')\n"
        "s = led.summary()\n"
        "assert s['epsilon_at_delta'] > 0, s\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dp_accounting', 'scipy')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = eval(out)  # a printed list of module names
    assert not [m for m in loaded if m.startswith("dp_accounting")], loaded
    assert not [m for m in loaded if m.startswith(("scipy.stats", "scipy.signal"))], loaded
