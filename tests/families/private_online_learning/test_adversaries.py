"""The private-online-learning family's adversaries (issue #32 item 8): poisoning users and
colluders, declared by the family as the MAB family declares its own, in-process here (the wire:
tests/services/test_online_attacks_e2e.py).

Before, the family's config refused ``adversary`` and ``traffic_adversaries``; these tests fail on
that code at the first load."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from privbandit.cli import app
from privbandit.families.distributed_dp_mab.adversaries import MaxShift as MabMaxShift
from privbandit.families.private_online_learning import adversaries
from privbandit.families.private_online_learning.mechanisms import DistributedArraySum, DistributedNoisyMax
from privbandit.protocol.primitives.encoding import modular_sum
from privbandit.protocol.primitives.seeding import stream
from privbandit.protocol.spine.adversaries import Block
from privbandit.protocol.spine.events import Join, Plan, Round
from privbandit.runner import config as experiment_files, tasks
from privbandit.runner.config import ConfigError

SETTING2 = {"setting": 2}  # K = 5, best arm 0


def _config(algorithms: dict, horizon: int = 20_000, runs: int = 1, **top):
    data = {"family": "private-online-learning", "horizon": horizon, "seed": 3, "epsilon": 1.0, "runs": runs,
            "environment": SETTING2, "algorithms": algorithms, **top}
    return experiment_files.load_data(data)


def _run(algorithm: dict, adversary: dict | None = None, horizon: int = 20_000):
    table = dict(algorithm) | ({"adversary": adversary} if adversary else {})
    fam, config = _config({"a": table}, horizon)
    (task,) = tasks.tasks_of(fam, config)
    return tasks.execute(task)[2]


LAZY_D = {"algorithm": "anytime-lazy-ucb", "trust": "distributed"}
LAZY_C = {"algorithm": "anytime-lazy-ucb"}
FTNL_D = {"algorithm": "ftnl", "trust": "distributed", "argmax_at": "analyzer"}
FTNL_C = {"algorithm": "ftnl"}
DPSE_D = {"algorithm": "dp-se", "trust": "distributed"}


def test_the_family_declares_its_adversaries_and_the_catalogue_lists_them():
    from privbandit.cli import adversary_catalogue
    from privbandit.registry import family

    fam = family("private-online-learning")
    assert set(fam.adversaries) == {"max-shift", "out-of-range", "window-edge", "colluders"}
    where = adversary_catalogue()
    assert all({"private-online-learning", "distributed-dp-mab"} <= set(where[k][0].split(", ")) for k in fam.adversaries)


@pytest.mark.parametrize("algorithm, kind", [(LAZY_D, "window-edge"), (LAZY_D, "max-shift"), (LAZY_D, "out-of-range"),
                                             (FTNL_D, "max-shift"), (FTNL_D, "window-edge"), (DPSE_D, "max-shift"),
                                             (LAZY_C, "window-edge")])
def test_poisoning_users_raise_regret_where_nobody_can_check_them(algorithm, kind):
    """5 % poisoners who know the best arm: under distributed noise (secure aggregation's ideal
    sum) and for the central model's in-range liars, regret grows; the analyzer's ledger is
    unchanged (poisoning is not a privacy attack)."""
    honest = _run(algorithm)
    attacked = _run(algorithm, {"kind": kind, "fraction": 0.05})
    assert attacked.pseudo[0, -1] > 1.3 * honest.pseudo[0, -1] + 100, (honest.pseudo[0, -1], attacked.pseudo[0, -1])
    assert attacked.privacy["epsilon_pure"] == honest.privacy["epsilon_pure"]


@pytest.mark.parametrize("algorithm", [LAZY_C, FTNL_C])
def test_out_of_window_raw_rewards_are_refused_and_their_users_are_dropouts(algorithm):
    """The central model's rounds check raw rewards against [0, 1]: max-shift's ±10¹² are refused
    (``out-of-range``), the round is released over the others (⌊2n/3⌋ + 1 at least), and the run
    goes on instead of stalling on an array that never completes."""
    attacked = _run(algorithm, {"kind": "max-shift", "fraction": 0.05})
    assert attacked.rejected.get("out-of-range", 0) > 0
    assert any(r["reports"] < r["n"] for r in attacked.rounds)


def test_max_shift_sets_an_epochs_sums_to_the_window_edges():
    """One FTNL epoch, K residues per user, two blocks each with attackers: after the attack each
    column's modular sum is n·g + τ (the bad arms, pushed up) or −τ (the best arm), exactly."""
    k, n, block = 5, 2 * 65_536, 65_536
    rnm = DistributedNoisyMax(1.0, 1e-6)
    q = rnm.params(n)
    rnd = Round(3, "aggregator", "sum", n, width=k, m=q.m)
    plan = Plan(0, 0, n, {"kind": "epoch", "t0": 1, "action": 0, "epoch": 3, "n": n}, (rnd,), (Join(3, 0, n, n),))
    adv = adversaries.MaxShift(0.01, rnm, seed=1, best_arm=2)
    sums = np.zeros(k, dtype=object)
    for b in range(2):
        x = stream(5, "x", b).random((block, k)).round()
        messages, encoded = rnm.randomized(x, q, stream(5, "r", b))
        mask = adv.members(plan, b, block)
        out = adv.tamper(Block(plan, rnd, b, b * block, messages[None], encoded, mask))[0]
        assert np.array_equal(out[~mask], messages[~mask])  # honest users untouched
        sums += np.array([modular_sum(out[:, c], q.m) for c in range(k)], dtype=object)
    got = [int(s) % q.m for s in sums]
    assert got == [(q.n * q.g + q.tau) % q.m if c != 2 else -q.tau % q.m for c in range(k)]


def test_out_of_range_keeps_the_attackers_noise_share():
    """An array's attackers swap their encoding for 2g (up) and keep their own Pólya share: the
    residue moves by exactly 2g − x̂."""
    mech = DistributedArraySum(1.0, 1e-6)
    n = 64
    q = mech.params(n)
    rnd = Round(9, "aggregator", "sum", n, m=q.m)
    plan = Plan(0, 0, n, {"kind": "lazy", "round_of_arm": np.array([4, 9, 5]), "array_size": np.array([1, n, 2])},
                (rnd,), (Join(9, 0, n, n),))
    rewards = stream(1, "x").random(n).round()
    messages, encoded = mech.randomized(rewards, q, stream(1, "r"))
    adv = adversaries.OutOfRange(0.25, mech, seed=2, best_arm=0, magnitude=1.0)
    mask = adv.members(plan, 0, n)
    out = adv.tamper(Block(plan, rnd, 0, 0, messages.reshape(1, -1, 1), encoded.reshape(-1, 1), mask))[0, :, 0]
    assert mask.sum() == 16
    assert np.array_equal((out[mask] - messages[mask]) % q.m, (2 * q.g - encoded[mask]) % q.m)  # arm 1 != best 0
    assert np.array_equal(out[~mask], messages[~mask])


def test_colluders_change_no_number_and_the_ledger_states_the_coalitions_epsilon():
    """FTNL's K sums released to the analyzer (Kε/c) with 10 % colluders: regret and every row as
    in the honest run, bit for bit; against the coalition each epoch's ε is K times the Pólya
    sum's ε over the epoch's n − c honest shares, above the ledger's 5."""
    honest = _run(FTNL_D)
    colluded = _run(FTNL_D, {"kind": "colluders", "fraction": 0.1})
    assert np.array_equal(honest.pseudo, colluded.pseudo) and np.array_equal(honest.realized, colluded.realized)
    coalition = colluded.privacy["coalition"]
    assert colluded.privacy["epsilon_pure"] == honest.privacy["epsilon_pure"] == 5.0
    assert coalition["colluders"] == sum(r["attackers"] for r in colluded.rounds) > 0
    mech = DistributedNoisyMax(1.0, 1 / 20_000, 1.0, "analyzer").mechanism
    for row in colluded.rounds:
        per = mech.privacy_event(mech.params(row["n"]), row["reports"] - row["attackers"]).pure_epsilon
        assert row["epsilon_coalition"] == pytest.approx(5 * per)
    assert coalition["epsilon_pure"] == pytest.approx(max(r["epsilon_coalition"] for r in colluded.rounds))
    assert coalition["epsilon_pure"] > 5.0


def test_dp_se_takes_the_mab_familys_adversaries():
    """DP-SE's batches are the MAB family's rounds: the MAB's own max-shift acts on them."""
    fam, config = _config({"a": DPSE_D | {"adversary": {"kind": "max-shift", "fraction": 0.05}}})
    assert isinstance(fam.adversary(config, "a", 0), MabMaxShift)


@pytest.mark.parametrize("table, message", [
    ({"algorithm": "hybrid-ucb", "adversary": {"kind": "window-edge"}}, "hybrid-ucb takes none"),
    (LAZY_D | {"adversary": {"kind": "colluders"}}, "colluders on anytime-lazy-ucb are not built"),
    (FTNL_D | {"intermediary": "secagg", "adversary": {"kind": "colluders", "fraction": 0.1}}, "corrupt_fraction"),
    (LAZY_D | {"adversary": {"kind": "sybil"}}, "adversary.kind"),
])
def test_refusals_name_the_field_and_the_reason(table, message):
    with pytest.raises(ConfigError, match=message):
        _config({"a": table})


def test_the_file_takes_traffic_adversaries_once_each():
    _, config = _config({"a": LAZY_D}, traffic_adversaries=["replay", "sybil"])
    assert config.traffic_adversaries == ["replay", "sybil"]
    with pytest.raises(ConfigError, match="replay listed more than once"):
        _config({"a": LAZY_D}, traffic_adversaries=["replay", "replay"])


def test_privbandit_attack_runs_an_online_file(tmp_path):
    path = tmp_path / "online.toml"
    path.write_text('family = "private-online-learning"\nhorizon = 20000\nseed = 3\n[environment]\nsetting = 2\n'
                    '[algorithms."lazy@distributed"]\nalgorithm = "anytime-lazy-ucb"\ntrust = "distributed"\n')
    res = CliRunner().invoke(app, ["attack", "window-edge", str(path), "--fraction", "0.05",
                                   "--out", str(tmp_path / "a"), "--jobs", "1"])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "a" / "attack.json").read_text())
    row = report["algorithms"]["lazy@distributed"]
    assert report["family"] == "private-online-learning" and row["regret_attacked"] > row["regret_honest"]
