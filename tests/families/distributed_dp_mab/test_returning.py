"""Returning users in the MAB family (Chowdhury & Zhou App. I; returning.py)."""

from __future__ import annotations

import math

import pytest

from privbandit.families.distributed_dp_mab.returning import advanced_ledger, advanced_targets, appendix_split, b_fold
from privbandit.protocol.privacy import PureDP, SkellamRDP
from privbandit.protocol.privacy.events import advanced_epsilon
from privbandit.runner import run_file


@pytest.mark.parametrize("b", [2, 8, 32])
def test_the_advanced_route_spends_exactly_the_target(b):
    eps, delta = 1.0, 1e-7
    eps_i, delta_i, slack = advanced_targets(eps, delta, b)
    assert (delta_i, slack) == (delta / (2 * b), delta / 2)
    composed, total_delta = advanced_epsilon(eps_i, delta_i, b, slack)
    assert 0.999 * eps < composed <= eps and total_delta <= delta
    assert appendix_split(eps, delta, b)[0] < eps_i  # App. I's closed form spends less than it may
    assert advanced_ledger(eps_i, b, delta, 1000).summary()["epsilon_at_delta"] == pytest.approx(composed)


def test_b_fold_charges_b_times_the_worst_release():
    """Every release in B lanes: a user of B batches pays B times the worst of them, whatever the
    others; pure ε adds up, Rényi curves add up before the one conversion."""
    ledger = b_fold([PureDP(0.1), PureDP(0.3), PureDP(0.2)], 4, 1e-6, 100)
    assert ledger.summary()["epsilon_pure"] == pytest.approx(1.2)
    sk = SkellamRDP(sensitivity=10, variance=400.0)
    one, four = (b_fold([sk], k, 1e-6, 100).summary()["epsilon_at_delta"] for k in (1, 4))
    assert one < four < 4 * one  # RDP composition: better than B times the (ε, δ) of one


def _experiment(tmp_path, calibrate: bool, returning: int):
    path = tmp_path / "ret.toml"
    path.write_text(f"""
family = "distributed-dp-mab"
horizon = 100000
seed = 4
epsilon = 1.0
runs = 2
calibrate = {str(calibrate).lower()}
returning = {returning}
[environment]
arms = 4
[algorithms.rdp]
algorithm = "dist-rdp-se"
[algorithms.advanced]
algorithm = "dist-rdp-se"
composition = "advanced"
[algorithms.pure]
algorithm = "dist-dp-se"
[algorithms.vb]
algorithm = "vb-sdp-ae"
composition = "advanced"
""")
    return run_file(path).summary


def test_calibrated_returning_users_meet_the_target_by_either_route(tmp_path):
    s = _experiment(tmp_path, calibrate=True, returning=6)
    for label, p in s["privacy"].items():
        assert p["returning"] == 6 and 0.99 <= p["epsilon_at_delta"] <= 1.0 + 1e-9, (label, p)
        assert p["unique_users"]["epsilon_at_delta"] < p["epsilon_at_delta"]
    eps = {label: a["parameters"]["epsilon"] for label, a in s["algorithms"].items()}
    assert eps["advanced"] < eps["rdp"]  # the RDP route needs less noise per round (App. I)
    assert eps["pure"] == pytest.approx(1 / 6)  # B rounds of pure ε/B


def test_without_calibration_the_ledger_charges_b_releases(tmp_path):
    """The same noise as for unique users, but each user in 3 batches: the ledger says what that
    costs (a ledger that ignored returning would print the unique users' ε)."""
    s = _experiment(tmp_path, calibrate=False, returning=3)
    pure = s["privacy"]["pure"]
    assert pure["epsilon_pure"] == pytest.approx(3.0) and pure["unique_users"]["epsilon_pure"] == pytest.approx(1.0)
    rdp = s["privacy"]["rdp"]
    assert rdp["epsilon_at_delta"] > rdp["unique_users"]["epsilon_at_delta"] * math.sqrt(3) * 0.8


def test_returning_users_are_refused_where_not_built(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("""
family = "distributed-dp-mab"
horizon = 1000
epsilon = 1.0
returning = 2
[algorithms.vb]
algorithm = "vb-sdp-ae"
""")
    with pytest.raises(Exception, match="composition = 'advanced'"):
        run_file(path)
