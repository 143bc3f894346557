"""Issue #31: ``experiments/linear_authors_paired.py`` pairs privbandit's ``paper-code`` with the authors'
code on the authors' instances. The generator ``authors-main`` is their ``__main__``'s draw bit for bit;
the script's pairing and printing are checked on a stand-in module with the authors' interface whose
regrets are known, so no authors' code is needed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from privbandit.families.shuffle_linear_bandits.world import instances

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("linear_authors_paired",
                                               ROOT / "experiments" / "linear_authors_paired.py")
script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(script)

LABELS = ("LinUCB", "LinUCB-JDP", "LinUCB-SDP-Amp", "LinUCB-SDP-Vec", "LinUCB-LDP")


def test_authors_main_is_their_main_draw():
    # LinBanditPrivate.py lines 389 and 414-429, transcribed: the reference the generator must equal
    np.random.seed(2)
    d, k = 5, 100
    ref = []
    for _ in range(6):
        basis = np.eye(d)
        basis[:, -1] = 1
        x = np.random.randn(k, d - 1)
        x /= np.sqrt(np.square(x).sum(axis=1))[:, np.newaxis]
        x = np.hstack((x, np.ones((k, 1))))
        x[: basis.shape[0], :] = basis
        theta = np.random.randn(d - 1)
        theta *= 0.5 / np.sqrt(np.square(theta).sum())
        ref.append((x, np.append(theta, [0.5])))
    got = instances("authors-main", k, d, 2, [5, 0, 3])  # any runs, any order: run r is their r-th
    for i, r in enumerate([5, 0, 3]):
        assert np.array_equal(got.arms[i], ref[r][0]) and np.array_equal(got.theta[i], ref[r][1])
    with pytest.raises(ValueError, match="seed=-1"):
        instances("authors-main", k, d, -1, [0])


# The authors' interface; every round's realized regret is 1 and its expected regret 0.25, so their
# side's finals are T and T/4 in every run; what the script hands their LinBandit is checked.
FAKE = '''
import numpy as np
d = None
class LinBandit:
    def __init__(self, X, theta, epsilon, delta, BatchSize, noise="normal", sigma=0.5, seed=None):
        assert noise == "bernoulli" and X.shape == (100, 5) and np.all(X[:5, -1] == 1), (noise, X.shape)
        assert (epsilon, delta) == (1, 0.1) and BatchSize in (1, 20) and seed in (0, 1, 2), (epsilon, BatchSize, seed)
    def reset_random(self):
        pass
    def randomize(self):
        pass
    def reward(self, arm):
        return 0.0
    def regret(self, arm):
        return 1.0
    def pregret(self, arm):
        return 0.25
def evaluate_one(Alg, params, env, n, period_size):
    assert d == 5, d
    regret = np.zeros(n)
    for t in range(n):
        regret[t] = env.regret(0)
    return regret, None
LinUCB = LDPLinUCB = JDPLinUCB = SDPLinUCBPAmp = SDPLinUCBPVec = object
'''


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "linear_authors_paired.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_pairs_privbandit_with_the_stand_in_run_by_run(tmp_path):
    (tmp_path / "LinBanditPrivate.py").write_text(FAKE)
    horizon = 200
    out = _run("--authors-code", str(tmp_path), "--runs", "3", "--horizon", str(horizon), "--jobs", "1")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("final ")]
    # the side-by-side table, then privbandit's fresh tree − its reused draws (issue #31 item 2)
    assert [lines[i].split()[1] for i in starts] == ["pseudo", "realized"] * 2
    assert "fresh − reused" in lines[starts[2]]
    for start, theirs in zip(starts, (horizon / 4, horizon)):
        rows = {line.split()[0]: line.split()[1:] for line in lines[start + 2:start + 3 + len(LABELS)]}
        assert set(rows) == set(LABELS) | {"LinUCB-JDP+reuse"}  # their JDP's runs paired with the reused draws'
        assert rows["LinUCB-JDP+reuse"][0] != rows["LinUCB-JDP"][0]
        for label, cells in rows.items():
            ours, their_mean, their_se = float(cells[0]), float(cells[3]), float(cells[5])
            assert their_mean == theirs and their_se == 0.0  # the stand-in's known regret, every run
            diff, t, won = float(cells[6]), float(cells[9]), cells[10]
            assert abs(diff - (ours - theirs)) <= 0.1 + 1e-9, (label, cells)  # mean of differences
            pb, au = map(int, won.split("/"))
            assert pb + au <= 3
            # both printed to 0.1: the difference's rounding (≤ 0.05) moves the percentage by 5/theirs
            assert abs(float(cells[11].rstrip("%")) - 100 * diff / theirs) <= 5 / theirs + 0.05 + 1e-9, (label, cells)
            assert np.sign(t) == np.sign(diff) or diff == 0


def test_table_is_the_paired_difference():
    ours = {"A": {"pseudo": [10.0, 12.0, 14.0], "realized": [1.0, 2.0, 3.0]}}
    theirs = {"A": {"pseudo": [9.0, 10.0, 11.0], "realized": [1.0, 3.0, 3.0]}}
    lines = script.table(["A"], ours, theirs)
    pseudo = lines[2].split()  # differences 1, 2, 3: mean 2, se 1/√3, t 2√3, privbandit won none
    assert pseudo[0] == "A" and pseudo[7:12] == ["+2.0", "±", "0.6", "3.46", "0/3"] and pseudo[12] == "+20.0%"
    realized = lines[5].split()  # differences 0, −1, 0: one run won by privbandit, two ties
    assert realized[7:12] == ["-0.3", "±", "0.3", "-1.00", "1/0"]


def test_missing_or_wrong_arguments_fail_loudly(tmp_path):
    out = _run("--runs", "3")
    assert out.returncode != 0 and "--authors-code" in out.stderr
    out = _run("--authors-code", str(tmp_path))
    assert out.returncode != 0 and "no LinBanditPrivate.py there" in out.stderr
    (tmp_path / "LinBanditPrivate.py").write_text(FAKE)
    out = _run("--authors-code", str(tmp_path), "--runs", "51")
    assert out.returncode != 0 and "--runs must be in [2, 50]" in out.stderr


def test_fresh_tree_draws_one_noise_per_node_of_the_binary_tree():
    class TheirJDP:  # their interface: get_arm sums the first ⌊ln(1 + t)⌋ + 1 columns
        def __init__(self, env, n, params):
            self.d, self.noise = 2, 1.0
            self.noiseVecAll, self.noiseMatAll = np.zeros((2, 3)), np.zeros((2, 2, 3))

        def get_arm(self, t):
            count = int(np.floor(np.log(1 + t))) + 1
            return self.noiseVecAll[:, :count].sum(axis=1), self.noiseMatAll[:, :, :count].sum(axis=2)

    alg = script.fresh_tree(type("Module", (), {"JDPLinUCB": TheirJDP}))(None, 8, {})
    np.random.seed(0)
    noise = [alg.get_arm(t) for t in range(8)]
    node = {key: value[0] for key, value in alg.nodes.items()}
    # t < 8 observations open the nodes [0], [0,1], [2], [0..3], [4], [4,5], [6]: one per t ≥ 1
    assert sorted(node) == [(0, 1), (0, 3), (0, 5), (0, 7), (1, 1), (1, 3), (2, 1)]
    assert np.array_equal(noise[0][0], np.zeros(2))
    assert np.array_equal(noise[4][0], node[2, 1])  # prefix 0..3: one node
    assert np.allclose(noise[7][0], node[2, 1] + node[1, 3] + node[0, 7])  # 0..3, 4..5, 6
    assert np.allclose(noise[6][0] - noise[5][0], node[1, 3] - node[0, 5])  # a node closes, a parent opens
    assert np.allclose(noise[7][1], sum(alg.nodes[k][1] for k in [(2, 1), (1, 3), (0, 7)]))


def test_integer_b_sets_the_bits_numpy_draws():
    # the defect the switch names: numpy's legacy binomial truncates a float n, so their b = 61.22 draws 61 bits
    np.random.seed(7)
    floated = np.random.binomial(61.2157, 0.25, size=10_000)
    np.random.seed(7)
    assert np.array_equal(floated, np.random.binomial(61, 0.25, size=10_000))

    class TheirVec:
        def __init__(self, env, n, params):
            self.g, self.b = 8.944, 61.2157

    alg = script.integer_b(type("Module", (), {"SDPLinUCBPVec": TheirVec}))(None, 20_000, {})
    assert (alg.g, alg.b) == (8.944, 61)  # the analyzer now subtracts what was drawn; g untouched


def test_ceil_gb_takes_privbandit_paper_code_integers():
    class TheirVec:  # Fig. 1(b): B = 20, d = 5, ε = 1, δ = 0.1, L = √2
        def __init__(self, env, n, params):
            self.BatchSize, self.d, self.epsilon, self.delta, self.L = 20, 5, 1.0, 0.1, np.sqrt(2)
            self.g, self.b = 8.944, 61.2157

    alg = script.ceil_gb(type("Module", (), {"SDPLinUCBPVec": TheirVec}))(None, 20_000, {})
    assert (alg.g, alg.b) == (9, 62)  # ⌈8.94⌉ and ⌈81·ln²50/20⌉ = ⌈61.98⌉


def test_watch_vm_counts_releases_below_the_floor_and_not_pd():
    class TheirVec:  # V_m = Gram + 2Γ·I with Gram = −(t/2)·I: λ_min = 2 − t/2 at Γ = 1
        BatchSize, d, Gamma = 2, 2, 1.0

        def __init__(self, env, n, params):
            self.Gram = np.zeros((2, 2))

        def get_arm(self, t):
            self.Gram = -t / 2 * np.eye(2)
            return 0

    alg = script.watch_vm(TheirVec)(None, 8, {})
    for t in range(7):  # releases at t = 2, 4, 6: λ_min 1 (at the floor, not below), 0, −1
        alg.get_arm(t)
    assert (alg.below_floor, alg.not_pd) == (2, 2)


def test_only_and_switch_run_the_chosen_algorithm_and_its_switch(tmp_path):
    (tmp_path / "LinBanditPrivate.py").write_text(FAKE)
    out = _run("--authors-code", str(tmp_path), "--runs", "3", "--horizon", "200", "--jobs", "1",
               "--only", "LinUCB-SDP-Vec", "--switch", "integer-b")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    heads = [line for line in lines if line.startswith("final ")]
    assert heads == ["final pseudo regret: privbandit − authors, paired by instance",
                     "final realized regret: privbandit − authors, paired by instance",
                     "final pseudo regret: integer-b − authors, paired by instance",
                     "final realized regret: integer-b − authors, paired by instance",
                     "final pseudo regret: privbandit − integer-b, paired by instance",
                     "final realized regret: privbandit − integer-b, paired by instance"]
    rows = [line.split() for line in lines if line.startswith("  LinUCB")]
    assert {row[0] for row in rows} == {"LinUCB-SDP-Vec"} and len(rows) == 6
    # the switched stand-in's known regret (T/4 pseudo, T realized), on both sides of its tables
    assert [row[1] for row in rows[2:4]] == [row[4] for row in rows[2:4]] == ["50.0", "200.0"]
    assert [row[4] for row in rows[4:6]] == ["50.0", "200.0"]
    out = _run("--authors-code", str(tmp_path), "--runs", "3", "--only", "LinUCB-SDP-Vec", "--switch", "fresh-tree")
    assert out.returncode != 0 and "--switch fresh-tree switches LinUCB-JDP, which --only leaves out" in out.stderr
    out = _run("--authors-code", str(tmp_path), "--runs", "3", "--only", "LinUCB-Vec")
    assert out.returncode != 0 and "--only: LinUCB-Vec is not one of" in out.stderr
