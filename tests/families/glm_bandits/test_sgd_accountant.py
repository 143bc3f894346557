"""DP-SGD's accountant (issue #31): the per-order minimum of the amplified (sampling without
replacement, Wang, Balle & Kasiviswanathan 2019 Thm 27) and the unamplified Gaussian Rényi curves.

The unamplified value is checked against the closed form here (steps·α/(2z²), converted by
Asoodeh et al.'s bound, dp-accounting's), so a change to either side can fail the tests."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privbandit.families.glm_bandits import mechanisms as m

# (n, batch, steps): Table 2's late calls (n just above the batch of 2048, 15 epochs of 2 or 3
# steps), a mid-sized one, and a small batch (q ≈ 0.03), where amplification wins at small z.
SHAPES = [(2100, 2048, 30), (5000, 2048, 45), (2000, 64, 480)]
DELTAS = [1e-6, 1e-3]
ZS = [0.5, 2.0, 8.0, 64.0]


def closed_form_gaussian_epsilon(steps: int, z: float, delta: float) -> float:
    """ε of ``steps`` Gaussians of multiplier z at δ on the same orders: min over α of
    ρα + log(1 − 1/α) − log(δα)/(α − 1), ρ = steps/(2z²) (Asoodeh et al. 2020 / Canonne et al. 2020)."""
    best = math.inf
    for a in m._sgd_orders():
        if a <= 1.01:
            continue
        best = min(best, steps * a / (2 * z**2) + math.log1p(-1 / a) - math.log(delta * a) / (a - 1))
    return max(0.0, best)


@pytest.mark.parametrize("n,batch,steps", SHAPES)
@pytest.mark.parametrize("delta", DELTAS)
def test_the_min_bound_is_at_most_either_bound(n, batch, steps, delta):
    for z in ZS:
        new = m.sgd_epsilon(n, batch, steps, z, delta)
        amplified = m.sgd_epsilon(n, batch, steps, z, delta, bound="amplified")
        unamplified = m.sgd_epsilon(n, batch, steps, z, delta, bound="unamplified")
        assert new <= amplified + 1e-12 and new <= unamplified + 1e-12, (z, new, amplified, unamplified)
        assert unamplified == pytest.approx(closed_form_gaussian_epsilon(steps, z, delta), rel=1e-9)


def test_the_per_order_min_is_never_looser_than_the_smaller_epsilon():
    """Taking the minimum per order before converting is never looser than min(ε_amp, ε_gauss) (on
    this grid it equals it: the curves do not cross near the optimal order)."""
    for n, batch, steps in SHAPES:
        for z in ZS:
            new = m.sgd_epsilon(n, batch, steps, z, 1e-6)
            pair = min(m.sgd_epsilon(n, batch, steps, z, 1e-6, bound=b) for b in ("amplified", "unamplified"))
            assert new <= pair + 1e-12


@pytest.mark.parametrize("steps", [1, 15, 45])
@pytest.mark.parametrize("delta", DELTAS)
def test_a_full_batch_is_the_unamplified_gaussian(steps, delta):
    for z in [0.3, 1.0, 5.0, 50.0]:
        got = m.sgd_epsilon(700, 700, steps, z, delta)
        assert got == m.sgd_epsilon(700, 700, steps, z, delta, bound="unamplified")
        assert got == pytest.approx(closed_form_gaussian_epsilon(steps, z, delta), rel=1e-9)


@pytest.mark.parametrize("n,batch,steps,epsilon,delta", [
    (500, 100, 50, 0.5, 1e-3),
    (5000, 2048, 45, 0.0685, 3.6e-5),  # Table 2's θ̂_o per-call budget, at n above one batch
    (2100, 2048, 30, 0.1, 1e-6),       # below the amplified bound's floor: unreachable before
    (2000, 64, 480, 0.05, 1e-6),
])
def test_the_noise_multiplier_meets_the_budget_and_is_near_minimal(n, batch, steps, epsilon, delta):
    z = m.sgd_noise_multiplier(n, batch, steps, epsilon, delta)
    assert m.sgd_epsilon(n, batch, steps, z, delta) <= epsilon
    assert m.sgd_epsilon(n, batch, steps, z / 1.02, delta) > epsilon


def test_the_amplified_bound_alone_floors_and_the_min_does_not():
    """The defect fixed: at δ = 10⁻⁶ the amplified bound alone stays above 0.25 however large z is,
    so no noise reaches ε = 0.1; the minimum falls like the Gaussian's √(2·steps·log(1/δ))/z."""
    n, batch, steps, delta = 2100, 2048, 30, 1e-6
    assert min(m.sgd_epsilon(n, batch, steps, z, delta, bound="amplified") for z in (1e2, 1e3, 1e4)) > 0.25
    zs = np.geomspace(0.5, 1e4, 25)
    eps = np.array([m.sgd_epsilon(n, batch, steps, float(z), delta) for z in zs])
    unamp = np.array([m.sgd_epsilon(n, batch, steps, float(z), delta, bound="unamplified") for z in zs])
    assert np.all(np.diff(eps) <= 1e-12), eps   # non-increasing in z
    assert np.all(eps <= unamp + 1e-12)        # no floor above the unamplified bound's
    assert eps[-1] < 2e-3                      # and that bound goes to 0


def test_bad_bound_names_the_field():
    with pytest.raises(ValueError, match="bound must be one of"):
        m.sgd_epsilon(100, 10, 5, 1.0, 1e-3, bound="gaussian")


def test_the_ledger_states_what_the_calibration_meets(tmp_path):
    """A Private-GLM call's ledger event is (ε_o, δ_o) on the basis the calibration used, and the noise
    :func:`dp_sgd` draws meets that ε at that δ (a call above one batch, where both curves count)."""
    from privbandit.families.glm_bandits import parties as gp
    from privbandit.families.glm_bandits.config import GLMExperiment
    from privbandit.families.glm_bandits.family import FAMILY
    from privbandit.runner.config import validate_experiment

    p = tmp_path / "g.toml"
    p.write_text('family = "glm-bandits"\nhorizon = 3000\nseed = 5\nepsilon = 8.0\ndelta = 0.02\nruns = 2\n'
                 'preset = "paper-code"\n[environment]\nlink = "probit"\ndim = 3\narms = 20\nnorm = 2.0\n'
                 '[algorithms.private-glm]\n')
    config = validate_experiment(GLMExperiment, p)[0]
    s = gp.setup(FAMILY.public_task(config, "private-glm", [0, 1]))
    event = gp.dp_sgd_event(s, "tau")
    eps, delta = event.approx
    assert event.basis == gp.SGD_BASIS and "unamplified" in event.basis and "Thm 27" in event.basis
    rng = np.random.default_rng(3)
    n = 2100
    x = rng.standard_normal((n, 3))
    x /= np.maximum(1, np.linalg.norm(x, axis=1))[:, None]
    r = (rng.random(n) < 0.5).astype(float)
    settings = m.SGDSettings(epochs=2, burn_in=1)
    _, z = m.dp_sgd("probit", x, r, 1.0, 2.0, eps, delta, settings, rng)
    steps = settings.epochs * math.ceil(n / settings.batch)
    assert m.sgd_epsilon(n, settings.batch, steps, z, delta) <= eps
    # and the amplified bound alone would have needed more noise for this call (q = 2048/2100)
    assert m.sgd_epsilon(n, settings.batch, steps, z, delta, bound="amplified") > eps


@pytest.mark.parametrize("n, steps", [(2100, 30), (5000, 45), (15000, 120)])
@pytest.mark.parametrize("z", [0.8, 2.0, 8.0, 64.0, 1e3])
def test_the_short_order_list_never_understates(n, steps, z):
    """sgd_epsilon's "min" tries the amplified curve without orders 128 and 256 first: its ε is never
    below the full computation's (the curve is pointwise no lower), and equal where the optimum is low."""
    from dp_accounting.rdp import compute_epsilon

    orders, amp, unamp = m.sgd_rdp_curves(n, 2048, steps, z)
    full, order = compute_epsilon(orders, np.minimum(amp, unamp), 1e-6)
    fast = m.sgd_epsilon.__wrapped__(n, 2048, steps, z, 1e-6)
    assert fast >= full - 1e-12
    if order < 64:
        assert fast == pytest.approx(full, rel=1e-9)
