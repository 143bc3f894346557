"""#13 item 6: under ``paper-code`` LinUCB-SDP-Vec encodes as the authors' code does (Alg. 5 as
printed, ``vec_span = "delta"``), and the ledger then says that no proof covers it; ``theory``
keeps the provable ``2delta`` encoding and its guarantee."""

from __future__ import annotations

import pytest

from privbandit.runner import run_file

EXPERIMENT = """
family = "shuffle-linear-bandits"
name = "presets"
horizon = 200
seed = 3
epsilon = 1
delta = 0.1
runs = 1
preset = "{preset}"
[environment]
arms = 10
dim = 3
[algorithms.LinUCB-SDP-Vec]
batch = 20
[algorithms.explicit]
algorithm = "linucb-sdp-vec"
batch = 20
vec_span = "2delta"
"""


@pytest.mark.parametrize("preset, span", [("paper-code", "delta"), ("theory", "2delta")])
def test_the_preset_sets_the_span_and_the_ledger_says_what_it_costs(tmp_path, preset, span):
    path = tmp_path / "p.toml"
    path.write_text(EXPERIMENT.format(preset=preset))
    summary = run_file(path).summary
    default, explicit = summary["privacy"]["LinUCB-SDP-Vec"], summary["privacy"]["explicit"]
    assert summary["algorithms"]["LinUCB-SDP-Vec"]["parameters"]["vec_span"] == span
    # A table that names its span keeps it, whatever the preset.
    assert summary["algorithms"]["explicit"]["parameters"]["vec_span"] == "2delta"
    if preset == "theory":
        assert default["guarantee"] == explicit["guarantee"] == "proven"
        assert default["epsilon_at_delta"] <= 1.0
    else:  # the authors' constants: no proof either way, and the span is one of the reasons given
        assert default["guarantee"] == explicit["guarantee"] == "none proven"
        assert any("span = Δ" in reason for reason in default["basis"])
        assert not any("span = Δ" in reason for reason in explicit["basis"])


def test_exact_sizes_p_vec_by_the_count_accountant_and_says_so(tmp_path):
    """#30 item 4: under ``exact`` P_Vec draws fair noise bits, b is the fewest for which the exact
    accountant of the D label counts gives the batch's (ε, δ), and the ledger states the ε that
    accountant computes (never above the target) and names it; ``theory`` names Thm C.1."""
    from privbandit.families.shuffle_linear_bandits import mechanisms as slb
    from privbandit.families.shuffle_linear_bandits import params as lp
    from privbandit.protocol.privacy import counts

    path = tmp_path / "p.toml"
    path.write_text(EXPERIMENT.format(preset="exact"))
    summary = run_file(path).summary
    mech = summary["algorithms"]["LinUCB-SDP-Vec"]["mechanism"]
    g = 9  # Thm C.1: max{2√B, d, 4} at B = 20, d = 3
    assert (mech["p"], mech["g"], mech["span"]) == (0.5, g, 2.0)
    assert mech["b"] == counts.fewest_noise_bits(20, g, slb.n_entries(3), 1.0, 0.1)
    assert counts.count_epsilon(20 * (mech["b"] - 1), g, slb.n_entries(3), 0.1) > 1.0  # one bit fewer misses
    p = summary["privacy"]["LinUCB-SDP-Vec"]
    assert p["guarantee"] == "proven" and p["epsilon_at_delta"] <= 1.0 and p["basis"] == [counts.BASIS]
    path.write_text(EXPERIMENT.format(preset="theory"))
    assert run_file(path).summary["privacy"]["LinUCB-SDP-Vec"]["basis"] == [lp.VEC_BASIS]


@pytest.mark.parametrize("line, field", [("vec_scale = 10.0", "vec_scale"), ('vec_span = "delta"', "vec_span")])
def test_exact_refuses_what_its_accountant_does_not_cover(tmp_path, line, field):
    from privbandit.runner.config import ConfigError

    path = tmp_path / "p.toml"
    path.write_text(EXPERIMENT.format(preset="exact").replace('vec_span = "2delta"', line))
    with pytest.raises(ConfigError, match=rf"algorithms\.explicit\.{field}"):
        run_file(path)
