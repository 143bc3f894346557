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
