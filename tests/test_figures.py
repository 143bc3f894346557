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


# --- the figures' own defects (issue #35), on synthetic results directories ----------------------

import csv  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import matplotlib  # noqa: E402

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parent.parent


def _script(path: str):
    """A script of experiments/ or benchmarks/ (not packages) as a module."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _results(out: Path, stem: str, labels: list[str], horizon: int, scale: float = 1.0, **summary) -> None:
    """A results directory as far as the figures read it: summary.json and curves.csv."""
    t = np.unique(np.geomspace(1, horizon, 60).astype(int))
    (out / stem).mkdir(parents=True)
    (out / stem / "summary.json").write_text(json.dumps({"epsilon": 0.5, "runs": 20, "horizon": horizon, "dim": 5,
                                                         "algorithms": dict.fromkeys(labels, {}), **summary}))
    with open(out / stem / "curves.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t"] + [f"{label}.{k}" for label in labels for k in ("pseudo_mean", "pseudo_stderr")])
        for x in t:
            w.writerow([x] + [v for i, _ in enumerate(labels) for v in (scale * (i + 1) * np.sqrt(x), 0.1 * np.sqrt(x))])


def test_fig1_colours_an_algorithm_alike_in_every_panel_titles_what_it_shows_and_fills_no_band(tmp_path):
    reproduce = _script("experiments/reproduce.py")
    _results(tmp_path, "fig2_easy_eps0.1", ["Dist-DP-SE", "Dist-RDP-SE", "Dist-RDP-SE-s100", "DP-SE"], 10**6)
    _results(tmp_path, "fig1_mslr_eps1", ["Dist-DP-SE", "Dist-RDP-SE", "DP-SE"], 10**7)
    fig = reproduce.figure(1, ["fig2_easy_eps0.1", "fig1_mslr_eps1"], tmp_path)
    colours = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                colours.setdefault(line.get_label(), set()).add(matplotlib.colors.to_hex(line.get_color()))
        assert not ax.collections, "a translucent band: overlapping ones mix into a colour no curve has"
    assert all(len(c) == 1 for c in colours.values()), colours  # DP-SE was red above and green below
    assert len({next(iter(c)) for c in colours.values()}) == len(colours)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[0].startswith("(a) easy instance: ε = 0.5") and titles[1].startswith("(b) K = 50")
    assert not any("fig2_" in t or "mslr_" in t for t in titles)


def _crowded(ax, gap_px: float = 4.0) -> list[tuple[str, str]]:
    """Neighbouring x tick labels (those drawn: inside the axis' limits) less than ``gap_px`` apart
    (at 100 dpi, about a space of the tick font): labels that read as one number."""
    lo, hi = sorted(ax.get_xlim())
    shown = [t for t, x in zip(ax.get_xticklabels(), ax.get_xticks()) if lo <= x <= hi and t.get_text()]
    boxes = [(t.get_text(), t.get_window_extent()) for t in shown]
    return [(a, b) for (a, x), (b, y) in zip(boxes, boxes[1:]) if x.x1 + gap_px > y.x0]


def test_linear_fig1s_x_tick_labels_do_not_run_into_each_other(tmp_path):
    linear = _script("experiments/reproduce_linear.py")
    stems = ["a", "b", "c"]
    for stem in stems:
        _results(tmp_path, stem, linear.ORDER, 20_000, scale=100)
    fig = linear.figure(stems, tmp_path, lambda s: f"d = {s['dim']}, ε = {s['epsilon']:g}")
    fig.canvas.draw()
    for ax in fig.axes:
        assert len([t for t in ax.get_xticklabels() if t.get_text()]) >= 3
        assert _crowded(ax) == []  # the default put 0, 2500, …, 20000 edge to edge


def test_secagg_costs_sampled_label_is_inside_its_panel(tmp_path):
    bench = _script("benchmarks/bench_secagg.py")
    rows = [{"mode": mode, "n": n, "user_ms": n * (1 if mode == "complete" else 0.01), "length": 10,
             "user_bytes": 100 * n, "sampled": 8 if n == 10_000 and mode == "complete" else None}
            for mode in ("complete", "sparse") for n in (100, 1000, 10_000)]
    fig = bench.plot(rows, str(tmp_path / "secagg_cost.png"))
    fig.canvas.draw()
    notes = [(ax.bbox, t) for ax in fig.axes for t in ax.texts if t.get_text() == "sampled"]
    assert len(notes) == 2
    for inside, note in notes:  # it was drawn across the right spine, into the next panel or off the figure
        box = note.get_window_extent()
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1, box


def test_the_summary_table_has_a_legend_for_each_column_it_prints(capsys, tmp_path):
    """#35: the demo's table named pseudo-regret, Reg/T, bits/user against wire B/user and
    '(pure)' without saying what they are; the legend below it says, for the columns it shows."""
    from privbandit.cli.run import _print_summary

    summary = {"experiment": "demo", "horizon": 1000, "runs": 2, "elapsed_s": 1.0, "transport": "mqtt",
               "algorithms": {"A": {"regret_final_mean": 5.0, "regret_final_stderr": 1.0, "users_per_s": 10.0}},
               "privacy": {"A": {"guarantee": "proven", "epsilon_pure": 0.5}},
               "communication": {"A": {"bits_per_user_protocol": 20.0, "bytes_per_user_wire": 90.0}}}
    _print_summary(summary, tmp_path)
    mqtt = " ".join(capsys.readouterr().out.split())
    _print_summary({**summary, "transport": "inproc"}, tmp_path)
    inproc = " ".join(capsys.readouterr().out.split())
    for text in (mqtt, inproc):
        assert "0.5 (pure)" in text and "regret: pseudo-regret Reg(T)" in text and "Reg/T: the same, per user" in text
        assert '"(pure)" ε-DP with δ = 0' in text and "bits/user: protocol bits" in text and "users/s:" in text
    assert "wire B/user: bytes a reporting user's reports took on the wire" in mqtt
    assert "wire B/user" not in inproc  # no column, no legend line


def test_secagg_rows_from_the_docs_table():
    """`bench_secagg.py --from-table` reads the rows the figure is drawn from out of the docs' table."""
    bench = _script("benchmarks/bench_secagg.py")
    rows = bench.rows_from_table(str(ROOT / "docs" / "secagg-performance.md"))
    assert len(rows) == 6 and {r["mode"] for r in rows} == {"complete", "sparse"}
    big = next(r for r in rows if r["n"] == 10_000 and r["mode"] == "complete")
    assert big["sampled"] == 8 and big["user_ms"] == 5887.0 and big["user_bytes"] == 1_800_110.0
