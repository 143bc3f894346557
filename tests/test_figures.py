"""What a reader sees in the figures: a curve drawn exactly over another is named in the legend."""

import numpy as np
from hypothesis import given, settings, strategies as st

from privbandit.runner.results import coincident_labels


def test_a_curve_on_an_earlier_one_says_so_and_distinct_curves_do_not():
    t = np.linspace(1, 10, 50)
    curves = {"Dist-DP-SE": t, "CDP-SE": t + 0.05, "LDP-SE": 3 * t, "DP-SE": 3 * t}
    assert coincident_labels(curves) == {"Dist-DP-SE": "Dist-DP-SE", "CDP-SE": "CDP-SE (on Dist-DP-SE)",
                                         "LDP-SE": "LDP-SE", "DP-SE": "DP-SE (on LDP-SE)"}
    # One point apart by more than 1 % of the panel's range is enough to be seen.
    apart = t.copy()
    apart[25] += 0.02 * np.ptp(3 * t)
    assert coincident_labels({"a": t, "b": apart, "c": 3 * t})["b"] == "b"


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=30), st.floats(0.02, 10))
def test_labels_keep_their_order_and_a_shifted_copy_is_told_apart(ys, shift):
    y = np.array(ys)
    span = max(np.ptp(y), 1.0)
    got = coincident_labels({"a": y, "b": y + shift * span, "c": y.copy()})
    assert list(got) == ["a", "b", "c"] and got["a"] == "a" and got["c"] == "c (on a)"
    assert got["b"] == "b"  # a copy shifted by ≥ 2 % of its own range is visible
