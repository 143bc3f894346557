"""The experiment files, their validation, and ``privbandit run`` as a user runs it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from privbandit import registry
from privbandit.runner import config as experiment_files
from privbandit.runner.config import ConfigError
from privbandit.runner.results import summarize
from privbandit.runner.tasks import run_experiment

ROOT = Path(__file__).resolve().parent.parent
def _experiment_cases():
    return [pytest.param(path, id=path.name) for path in sorted((ROOT / "experiments").glob("*.toml"))]


def load_experiment(path, overrides=()):
    """An experiment file as ``privbandit run`` loads it: (config, family)."""
    family, config = experiment_files.load(path, list(overrides))
    return config, family


def resolve_algorithm(config, label):
    """An algorithm's table with every default filled in (the preset's, the experiment's ε)."""
    return registry.family(config.family).algorithm(config, label)


def run(config, jobs=1):
    """(results by label, compute seconds, wall time) of every run, in-process."""
    return run_experiment(registry.family(config.family), config, jobs=jobs)


def _write(tmp_path, text):
    p = tmp_path / "exp.toml"
    p.write_text(text)
    return p


BASE = """
name = "t"
horizon = 2000
seed = 1
epsilon = 0.5
[algorithms.Dist-DP-SE]
"""


@pytest.mark.parametrize("path", _experiment_cases())
def test_every_experiment_file_loads_and_takes_the_common_overrides(path):
    config, family = load_experiment(path, ["horizon=1000000", "seed=9", "epsilon=0.25"])
    assert family.name == config.family
    assert (config.horizon, config.seed, config.epsilon) == (1_000_000, 9, 0.25)
    for label in family.labels(config):  # the top-level ε reaches every algorithm that sets none of its own
        # (calibrate = true replaces a private algorithm's nominal ε by the one whose ledger reads ε)
        if getattr(config.algorithms[label], "epsilon", None) is None and not getattr(config, "calibrate", False):
            assert family.algorithm(config, label).epsilon == 0.25, label


@pytest.mark.parametrize(
    "text, overrides, field, allowed",
    [
        (BASE.replace("horizon = 2000", "horizon = 1"), [], "horizon", "greater than or equal to 2 (got 1)"),
        (BASE, ["epsilon=-1"], "epsilon", "greater than 0 (got -1)"),
        (BASE, ["epsilon=nan"], "epsilon", "finite number"),
        (BASE, ["runs=0"], "runs", "greater than or equal to 1 (got 0)"),
        (BASE, ["algorithms.Dist-DP-SE.s=0.5"], "algorithms.Dist-DP-SE.s", "greater than or equal to 1 (got 0.5)"),
        (BASE, ["algorithms.Dist-DP-SE.batch_growth=1"], "algorithms.Dist-DP-SE.batch_growth", "greater than 1"),
        (BASE, ["algorithms.Dist-DP-SE.p=2"], "algorithms.Dist-DP-SE.p", "less than or equal to 1 (got 2)"),
        (BASE, ["algorithms.Dist-DP-SE.colour=3"], "algorithms.Dist-DP-SE.colour", "Extra inputs are not permitted"),
        (BASE, ["horizn=5"], "horizn", "Extra inputs are not permitted"),
        (BASE, ["environment.low=0.9", "environment.high=0.1"], "environment", "low=0.9 must be < high=0.1"),
        (BASE, ["environment.reward=poisson"], "environment.reward", "'gaussian', 'bernoulli' or 'categorical'"),
        (BASE, ["nosuch.table.x=1"], "nosuch", "Extra inputs are not permitted"),
        (BASE, ["horizon"], "key=value", "--set horizon=1000000"),
        (BASE, ["horizon.x=1"], "horizon", "is a value, not a table"),
        (BASE + "[algorithms.Mine]\n", [], "algorithms.Mine.algorithm", "Field required"),
        (BASE.replace("[algorithms.Dist-DP-SE]", 'environment = "x"'), [], "environment", "valid dictionary"),
        ("horizon = [", [], "not valid TOML", "not valid TOML"),
        ('family = "private-online-learning"\nhorizon = 100\n[environment]\nmeans = [0.2, 0.8]\n'
         '[algorithms.x]\nalgorithm = "ucb"\n', [], "algorithms.x.algorithm",
         "'anytime-lazy-ucb', 'hybrid-ucb', 'dp-se', 'ftnl', 'naive-ftnl', 'ftl' or 'hedge' (got 'ucb')"),
    ],
)
def test_bad_files_and_overrides_name_the_field_and_what_it_allows(tmp_path, text, overrides, field, allowed):
    with pytest.raises(ConfigError) as exc:
        load_experiment(_write(tmp_path, text), overrides)
    lines = [line for line in str(exc.value).splitlines() if field in line]
    assert lines, str(exc.value)
    assert any(allowed in line for line in lines), str(exc.value)  # on the same line as the field


@pytest.mark.parametrize("argv, words", [
    (["run", "experiments/quickstart.toml", "--jobs", "0"], "--jobs 0: must be ≥ 1"),
    (["run", "experiments/quickstart.toml", "--transport", "tcp"], "--transport 'tcp': choose inproc or mqtt"),
    (["run", "experiments/quickstart.toml", "--transport", "mqtt", "--shards", "0"], "--shards 0: must be ≥ 1"),
    (["run", "experiments/quickstart.toml", "--transport", "mqtt", "--restart-on-crash", "-1"],
     "--restart-on-crash -1: must be ≥ 0"),
    (["run", "experiments/quickstart.toml", "--runs", "0"], "runs: Input should be greater than or equal to 1 (got 0)"),
    (["run", "experiments/quickstart.toml", "--set", "algorithms.DP-SE.p=0"],
     "algorithms.DP-SE.p: Input should be greater than 0 (got 0)"),
    (["run", "experiments/no-such.toml"], "no such experiment file"),
    (["demo", "--shards", "0"], "--shards 0: must be ≥ 1"),
    (["attack", "colluders", "experiments/attacks.toml", "--jobs", "0"], "--jobs 0: must be ≥ 1"),
    (["attack", "nope"], "adversary 'nope' is not one of max-shift"),
    (["attack", "flood", "--broker", "mqtt://127.0.0.1:1883", "--duration", "0"], "--duration 0.0: must be > 0"),
    (["users", "--shard", "x", "--experiment", "experiments/demo.toml"], "--shard 'x': expected i/N"),
    (["run", "experiments/demo.toml", "--insecure-broker"], "--insecure-broker: only with --transport mqtt"),
    (["run", "experiments/demo.toml", "--run-id", "r1"], "--run-id: only with --transport mqtt"),
    (["run", "experiments/demo.toml", "--secagg-step-deadline", "60"],
     "--secagg-step-deadline: only with --transport mqtt"),
    (["run", "experiments/demo.toml", "--transport", "mqtt", "--secagg-step-deadline", "0"],
     "--secagg-step-deadline 0.0: must be > 0 seconds"),
    (["run", "experiments/demo.toml", "--transport", "mqtt", "--run-id", "a b"],
     "--run-id must be 1-64 characters from [A-Za-z0-9_-]"),
    (["demo", "--credentials", "deploy/credentials.env"], "--credentials: only with --broker"),
    (["demo", "--ca-file", "ca.pem"], "--ca-file: only with --broker"),
    (["demo", "--broker", "mqtts://127.0.0.1:8883", "--credentials", "no/such.env"],
     "--credentials: credentials_file 'no/such.env': No such file or directory"),
])
def test_bad_command_line_options_are_refused_by_name_with_exit_2(tmp_path, monkeypatch, argv, words):
    from typer.testing import CliRunner

    from privbandit.cli import app

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("privbandit.runner.tasks.execute", lambda task: pytest.fail("a task ran"))
    monkeypatch.setattr("privbandit.services.launcher.launch", lambda *a, **k: pytest.fail("a session started"))
    out = ["--out", str(tmp_path / "o")] if argv[0] in ("run", "demo") else []
    result = CliRunner().invoke(app, [*argv, *out])
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert words in " ".join(result.stderr.split()), result.stderr
    assert not (tmp_path / "o").exists()  # refused before any work


def test_override_values_parse_as_toml(tmp_path):
    config, _ = load_experiment(_write(tmp_path, BASE), [
        "environment.kind=means", "environment.means=[0.1, 0.9]", 'name="quoted"', "preset=paper-code"])
    assert config.environment.means == [0.1, 0.9] and config.name == "quoted" and config.preset == "paper-code"
    assert resolve_algorithm(config, "Dist-DP-SE").p == 0.1


def test_override_keys_may_quote_a_label_as_the_experiment_files_do(tmp_path):
    # pol_secagg.toml writes [algorithms."anytime-lazy-ucb@secagg"]: --set must take the same key.
    config, _ = load_experiment(ROOT / "experiments" / "pol_secagg.toml",
                                ['algorithms."anytime-lazy-ucb@secagg".intermediary="auto"'])
    assert config.algorithms["anytime-lazy-ucb@secagg"].intermediary == "auto"
    # A quoted part is one part whatever it holds: dots, "=", spaces; single quotes as TOML allows.
    labelled = BASE + '[algorithms."v1.5 rho=0.2"]\nalgorithm = "dist-dp-se"\n'
    config, _ = load_experiment(_write(tmp_path, labelled), [
        'algorithms."v1.5 rho=0.2".p=0.25', "algorithms.'v1.5 rho=0.2'.s = 3"])
    assert (config.algorithms["v1.5 rho=0.2"].p, config.algorithms["v1.5 rho=0.2"].s) == (0.25, 3)
    # Unquoted, a key is split at its dots as before (a label with "@" needs no quotes).
    config, _ = load_experiment(ROOT / "experiments" / "pol_secagg.toml",
                                ["algorithms.anytime-lazy-ucb@secagg.intermediary=auto"])
    assert config.algorithms["anytime-lazy-ucb@secagg"].intermediary == "auto"
    with pytest.raises(ConfigError, match=r"expected key=value"):  # an unclosed quote holds the "="
        load_experiment(_write(tmp_path, BASE), ['algorithms."x.y=1'])
    with pytest.raises(ConfigError, match=r"--set algorithms\.\"x\"y\.p: not a valid dotted key"):
        load_experiment(_write(tmp_path, BASE), ['algorithms."x"y.p=1'])


def test_presets_fill_only_unset_fields(tmp_path):
    config, _ = load_experiment(_write(tmp_path, BASE + "batch_growth = 3\n"), ["preset=paper-code"])
    a = resolve_algorithm(config, "Dist-DP-SE")
    assert (a.batch_growth, a.p, a.tau_rule) == (3, 0.1, "log")
    config, _ = load_experiment(_write(tmp_path, BASE), [])
    a = resolve_algorithm(config, "Dist-DP-SE")
    assert (a.batch_growth, a.p, a.tau_rule) == (2, 1 / 2000, "sqrt-log")


def test_missing_means_file_fails_before_any_run(tmp_path):
    # Loading the file already builds run 0's world, so `privbandit run` stops before any task.
    with pytest.raises(ConfigError, match="algorithms.Dist-DP-SE: .*nope.json"):
        load_experiment(_write(tmp_path, BASE), ["environment.kind=means-file", 'environment.path="nope.json"'])


def test_results_do_not_depend_on_worker_count(tmp_path):
    config, _ = load_experiment(_write(tmp_path, BASE + "[algorithms.DP-SE]\n"), ["runs=3", "horizon=30000"])
    family = registry.family(config.family)
    one = summarize(family, config, *run(config, jobs=1))
    two = summarize(family, config, *run(config, jobs=2))
    for label in one["algorithms"]:
        for key in ("regret_final_mean", "regret_final_stderr", "realized_regret_final_mean", "wrap_arounds"):
            assert one["algorithms"][label][key] == two["algorithms"][label][key]
        assert one["privacy"][label] == two["privacy"][label]


def test_privbandit_run_end_to_end(tmp_path):
    out = tmp_path / "res"
    exp = ROOT / "experiments" / "quickstart.toml"
    proc = subprocess.run(
        [sys.executable, "-m", "privbandit", "run", str(exp), "--set", "horizon=20000", "--runs", "2",
         "--out", str(out), "--jobs", "2"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["horizon"] == 20000 and summary["transport"] == "inproc" and summary["elapsed_s"] > 0
    for label in ("SE", "DP-SE", "CDP-SE", "Dist-DP-SE", "Dist-RDP-SE", "Dist-CDP-SE", "LDP-SE"):
        a = summary["algorithms"][label]
        assert a["runs"] == 2 and a["regret_final_mean"] > 0 and a["regret_final_stderr"] >= 0
        assert label in summary["privacy"]
        assert summary["communication"][label]["bits_per_user_protocol"] > 0
    assert summary["privacy"]["Dist-DP-SE"]["epsilon_pure"] == 0.5
    assert summary["privacy"]["Dist-RDP-SE"]["epsilon_pure"] is None
    assert summary["privacy"]["Dist-RDP-SE"]["rdp"]["2"] > 0
    for name in ("curves.csv", "rounds.csv", "config.json"):
        assert (out / name).stat().st_size > 0
    assert (out / "regret.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Dist-DP-SE" in proc.stdout


def test_privbandit_run_reports_bad_input_and_exits_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "privbandit", "run", str(ROOT / "experiments" / "quickstart.toml"),
         "--set", "epsilon=0", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "epsilon" in proc.stderr and "greater than 0" in proc.stderr
    assert not (tmp_path / "summary.json").exists()


@pytest.mark.parametrize(
    "argv, env, code, words",
    [
        (["aggregator", "--broker", "http://x"], {}, 2, "expected mqtt://host:port"),
        (["aggregator", "--run-id", "bad id!"], {}, 2, "run_id"),
        (["analyzer", "--broker", "mqtt://127.0.0.1:1883"], {}, 2, "PRIVBANDIT_ANALYZER_KEY"),
        (["users", "--shard", "3/2", "--experiment", "experiments/demo.toml"], {}, 2, "0 ≤ i < N"),
        (["aggregator", "--broker", "mqtt://127.0.0.1:9"],
         {"PRIVBANDIT_CONNECT_TIMEOUT_S": "1", "PRIVBANDIT_REPORT_AUTH_KEY": "ab" * 32,
          "PRIVBANDIT_FLEET_MASTER_KEY": "cd" * 32}, 1, "cannot reach the broker"),
        (["aggregator", "--broker", "mqtt://127.0.0.1:1883"], {}, 2, "PRIVBANDIT_REPORT_AUTH_KEY"),
        # Without the fleets' master it could check no secure-aggregation chunk; a fleet without
        # its own key could sign none.
        (["aggregator", "--broker", "mqtt://127.0.0.1:1883"], {"PRIVBANDIT_REPORT_AUTH_KEY": "ab" * 32}, 2,
         "neither PRIVBANDIT_FLEET_MASTER_KEY nor PRIVBANDIT_FLEET_MASTER_KEY_FILE is set"),
        (["users", "--shard", "0/2", "--experiment", "experiments/demo.toml"], {}, 2,
         "neither PRIVBANDIT_REPORT_AUTH_KEY nor PRIVBANDIT_REPORT_AUTH_KEY_FILE is set"),
        (["users", "--shard", "0/2", "--experiment", "experiments/demo.toml"],
         {"PRIVBANDIT_REPORT_AUTH_KEY": "ab" * 32}, 2, "neither PRIVBANDIT_FLEET_KEY nor PRIVBANDIT_FLEET_KEY_FILE is set"),
        # Issue #32: the users' report keys are the session's, never the seed's
        (["keys", "--experiment", "experiments/demo.toml", "--out", "/tmp/x", "--party", "intermediary"], {}, 2,
         "no longer derive from the seed"),
        (["keys", "--out", "/tmp/x", "--party", "fleets"], {}, 2, "give --fleet-dir once per fleet"),
        (["keys", "--out", "/tmp/x", "--party", "analyzer"], {}, 2, "--experiment is required"),
        (["shuffler", "--broker", "mqtt://127.0.0.1:1883"], {"PRIVBANDIT_REPORT_AUTH_KEY": "xyz"}, 2,
         "must be a hexadecimal integer"),
        (["keys", "--experiment", "experiments/demo.toml", "--out", "/tmp/x", "--party", "me"], {}, 2, "--party"),
    ],
)
def test_party_commands_fail_clearly(monkeypatch, argv, env, code, words):
    from typer.testing import CliRunner

    from privbandit.cli import app

    monkeypatch.chdir(ROOT)
    for name in [k for k in os.environ if k.startswith("PRIVBANDIT_")]:  # only what the case gives
        monkeypatch.delenv(name)
    if code == 1:  # a party that starts serving: its own process (it registers signal handlers)
        proc = subprocess.run([sys.executable, "-m", "privbandit", *argv], capture_output=True, text=True,
                              timeout=60, env={**os.environ, **env})
        result_code, stderr, stdout = proc.returncode, proc.stderr, proc.stdout
    else:
        result = CliRunner().invoke(app, argv, env=env)
        result_code, stderr, stdout = result.exit_code, result.stderr, result.stdout
    assert result_code == code, stderr
    assert words in " ".join((stderr + stdout).split()), stderr


def test_secure_aggregation_releases_what_the_ideal_sum_releases(tmp_path, monkeypatch):
    """intermediary = "secagg" runs a real Bonawitz-style round per (batch, arm): users mask, the
    server unmasks. Every decoded sum, and so every number of the run, equals the ideal mode's."""
    from privbandit.protocol.primitives.secagg import driver

    calls = []
    real = driver.secure_sum
    monkeypatch.setattr(driver, "secure_sum", lambda *a, **k: calls.append(1) or real(*a, **k))
    path = _write(tmp_path, BASE.replace("horizon = 2000", "horizon = 700") + "[environment]\narms = 3\n")
    runs = {}
    for mode in ("auto", "secagg"):
        config, _ = load_experiment(path, ["runs=1", f"algorithms.Dist-DP-SE.intermediary={mode}"])
        runs[mode] = run(config)[0]["Dist-DP-SE"][0]
    secagg, ideal = runs["secagg"], runs["auto"]
    assert [r["estimate_sum"] for r in secagg.rounds] == [r["estimate_sum"] for r in ideal.rounds]
    assert np.array_equal(secagg.pseudo, ideal.pseudo) and np.array_equal(secagg.realized, ideal.realized)
    assert secagg.privacy == ideal.privacy
    assert len(secagg.rounds) > 10 and len(calls) == len(secagg.rounds)  # every release went through SecAgg


def test_secure_aggregation_needs_a_modular_mechanism(tmp_path):
    path = _write(tmp_path, BASE + '[algorithms.DP-SE]\nintermediary = "secagg"\n')
    with pytest.raises(ConfigError, match="algorithms.DP-SE: intermediary = 'secagg' needs a modular-sum"):
        load_experiment(path)  # refused with the file, before any run


@pytest.mark.parametrize("override, expected", [
    ("algorithms.Dist-DP-SE.dropout_rate=0.4", "algorithms.Dist-DP-SE.dropout_rate: Input should be less than 0.333"),
    ("algorithms.Dist-DP-SE.dropout_tolerance=0.95", "algorithms.Dist-DP-SE.dropout_tolerance: Input should be less than or equal to 0.9"),
    ("algorithms.cdp.dropout_tolerance=0.1", "dropout_tolerance applies to distributed noise"),
])
def test_dropout_fields_are_checked_by_name(tmp_path, override, expected):
    path = _write(tmp_path, BASE + '[algorithms.cdp]\nalgorithm = "cdp-se"\n')
    with pytest.raises(ConfigError) as e:
        load_experiment(path, [override])
    assert expected in str(e.value)


def test_unknown_family_is_refused_by_name(tmp_path):
    bad = tmp_path / "x.toml"
    bad.write_text('family = "linear-bandit-typo"\nhorizon = 100\n[algorithms.se]\n')
    proc = subprocess.run([sys.executable, "-m", "privbandit", "run", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "family = 'linear-bandit-typo' is not one of" in " ".join(proc.stderr.split())


def test_privbandit_attack_lists_every_adversary_and_compares_honest_with_attacked(tmp_path):
    from privbandit.cli import adversary_catalogue as catalogue

    helptext = subprocess.run([sys.executable, "-m", "privbandit", "attack", "--help"], capture_output=True,
                              text=True, env={**os.environ, "COLUMNS": "200"}).stdout
    for kind in catalogue():
        assert kind in helptext, kind
    exp = Path(__file__).resolve().parents[1] / "experiments" / "attacks.toml"
    proc = subprocess.run([sys.executable, "-m", "privbandit", "attack", "colluders", str(exp), "--fraction", "0.2",
                           "--set", "horizon=20000", "--runs", "1", "--jobs", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "ε vs coalition" in proc.stdout and "Dist-DP-SE" in proc.stdout
    report = json.loads((tmp_path / "attack.json").read_text())
    dist = report["algorithms"]["Dist-DP-SE"]
    # Colluders report honestly: regret unchanged, ε against the coalition above the target.
    assert dist["regret_attacked"] == dist["regret_honest"] and dist["epsilon_vs_coalition"] > 0.5
    assert report["algorithms"]["CDP-SE"]["epsilon_vs_coalition"] == 0.5
    assert (tmp_path / "honest" / "summary.json").exists() and (tmp_path / "attacked" / "rounds.csv").exists()
    bad = subprocess.run([sys.executable, "-m", "privbandit", "attack", "max-shift", str(exp), "--fraction", "0.5"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--fraction 0.5" in bad.stderr


def test_traffic_adversaries_are_checked_by_name_and_refused_in_process(tmp_path):
    from privbandit.families.distributed_dp_mab.config import TRAFFIC_ADVERSARY_KINDS
    from privbandit.services.hostile import TRAFFIC_ADVERSARIES

    assert set(TRAFFIC_ADVERSARY_KINDS) == set(TRAFFIC_ADVERSARIES)  # the config accepts what exists
    with pytest.raises(ConfigError) as e:
        load_experiment(_write(tmp_path, 'traffic_adversaries = ["flood", "nope"]\n' + BASE))
    assert "traffic_adversaries.1" in str(e.value) and "'curious-analyzer'" in str(e.value)
    with pytest.raises(ConfigError, match="flood listed more than once"):
        load_experiment(_write(tmp_path, 'traffic_adversaries = ["flood", "sybil", "flood"]\n' + BASE))
    path = _write(tmp_path, 'traffic_adversaries = ["sybil"]\n' + BASE)
    proc = subprocess.run([sys.executable, "-m", "privbandit", "run", str(path), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2 and "--transport mqtt" in proc.stderr and "traffic_adversaries" in proc.stderr
    assert not (tmp_path / "o" / "summary.json").exists()
    config, _ = load_experiment(path, ["traffic_adversaries=[]"])  # the honest reference, in-process
    assert run(config)[0]["Dist-DP-SE"][0].reports > 0


@pytest.mark.parametrize("party, var, master", [
    ("analyzer", "PRIVBANDIT_ANALYZER_KEY", "analyzer_master_key"),
    ("shuffler", "PRIVBANDIT_SHUFFLE_KEY", "shuffler_master_key"),
])
def test_privbandit_keys_writes_the_key_the_launcher_gives(tmp_path, party, var, master):
    """Compose deployments get their keys from `privbandit keys`: the same keys `privbandit run
    --transport mqtt` derives from the experiment's seed, in a file only its owner can read."""
    import stat

    from typer.testing import CliRunner

    from privbandit.cli import app
    from privbandit.protocol.primitives import seeding

    exp = ROOT / "experiments" / "demo.toml"
    result = CliRunner().invoke(app, ["keys", "--experiment", str(exp), "--out", str(tmp_path), "--party", party,
                                      "--set", "seed=4242"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    path = tmp_path / f"{party}.env"
    assert path.read_text() == f"{var}={hex(getattr(seeding, master)(4242))}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_an_unreachable_broker_ends_the_run_with_a_message_not_a_traceback(tmp_path):
    """Every party fails to connect; whichever the launcher sees first, the command says why."""
    env = {**os.environ, "PRIVBANDIT_CONNECT_TIMEOUT_S": "1"}
    proc = subprocess.run([sys.executable, "-m", "privbandit", "run", str(ROOT / "experiments" / "quickstart.toml"),
                           "--transport", "mqtt", "--broker", "mqtt://127.0.0.1:9", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, env=env, timeout=180)
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 1 and "cannot reach the broker at mqtt://127.0.0.1:9" in said, said[-2000:]
    assert "Traceback" not in proc.stderr


def test_privbandit_keys_draws_each_fleet_its_own_key_and_the_aggregator_their_master(tmp_path):
    """Issue #20 item 9: a fleet's chunk key is its own, from fresh randomness, not the world seed
    every fleet holds; the aggregator's master derives each of them, a fleet's key no other."""
    import stat

    from typer.testing import CliRunner

    from privbandit.cli import app
    from privbandit.protocol.primitives.report_auth import fleet_key
    from privbandit.services.compose import read_env_file

    def draw(out):
        argv = ["keys", "--party", "session", "--out", str(out / "master"), "--fleet-dir", str(out / "f0"),
                "--fleet-dir", str(out / "f1"), "--observer-dir", str(out / "obs")]
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 0, (result.stderr, result.exception)
        master = int(read_env_file(out / "master" / "fleets.env")["PRIVBANDIT_FLEET_MASTER_KEY"], 16)
        fleets = [read_env_file(out / f"f{i}" / "fleet.env") for i in range(2)]
        own = [int(f["PRIVBANDIT_FLEET_KEY"], 16) for f in fleets]
        # Issue #32: one users' report key for the fleets, the intermediaries and the observer
        users = {read_env_file(out / "master" / "intermediary.env")["PRIVBANDIT_REPORT_AUTH_KEY"],
                 read_env_file(out / "obs" / "observer.env")["PRIVBANDIT_REPORT_AUTH_KEY"],
                 *(f["PRIVBANDIT_REPORT_AUTH_KEY"] for f in fleets)}
        assert len(users) == 1 and len({f["PRIVBANDIT_IDENTITY_KEY"] for f in fleets}) == 1
        assert "PRIVBANDIT_FLEET_MASTER_KEY" not in fleets[0]
        for path in (out / "master" / "fleets.env", out / "f0" / "fleet.env", out / "obs" / "observer.env"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
        return master, own

    master, own = draw(tmp_path / "a")
    assert own == [fleet_key(master, 0), fleet_key(master, 1)] and own[0] != own[1]
    again, _ = draw(tmp_path / "b")
    assert again != master  # drawn afresh, not derived from anything a fleet knows


def test_importing_the_cli_imports_no_family():
    """Every party process starts by importing the CLI and its service: a family (and scipy behind
    some, or behind the secure-aggregation graph) imported there costs each process seconds of CPU;
    a party imports only its task's family, and scipy, on first use."""
    code = ("import sys, privbandit.cli, privbandit.services.intermediary, privbandit.services.users, "
            "privbandit.services.analyzer, privbandit.services.observer; "
            "print(sorted(m for m in sys.modules if m.startswith('privbandit.families') or m == 'scipy'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_each_shuffler_has_its_own_permutation_key_as_keys_the_launcher_and_the_engine_give_it(tmp_path):
    """The concurrent-shuffle family's shufflers are separate parties: one that is compromised must
    not hold another's permutation key. `privbandit keys --name`, the launcher and the in-process
    engine give shuffler-i the same key, and no two shufflers the same one."""
    from typer.testing import CliRunner

    from privbandit.cli import app
    from privbandit.protocol.primitives.seeding import derive_key, shuffler_master_key
    from privbandit.runner.tasks import parties
    from privbandit.services.launcher import plan_parties

    exp = ROOT / "experiments" / "audit_concurrent.toml"
    family, config = experiment_files.load(exp)
    planned = {p.name: p.env for p in plan_parties(family, config, exp, [], tmp_path / "o", "mqtt://127.0.0.1:1",
                                                   "r1", 1, None) if p.name.startswith("shuffler")}
    assert len(planned) >= 2
    label = family.labels(config)[0]
    _, _, _, boxes, _ = parties(family, config, label, [0])
    masters = {}
    for name, env in planned.items():
        master = int(env["PRIVBANDIT_SHUFFLE_KEY"], 16)
        assert master == shuffler_master_key(config.seed, name)
        assert boxes[name].shuffle_keys == [derive_key(master, 0, label)]  # the engine's, for its run 0
        result = CliRunner().invoke(app, ["keys", "--experiment", str(exp), "--out", str(tmp_path), "--party",
                                          "shuffler", "--name", name])
        assert result.exit_code == 0, result.output
        assert (tmp_path / f"{name}.env").read_text() == f"PRIVBANDIT_SHUFFLE_KEY={hex(master)}\n"
        masters[name] = master
    assert len(set(masters.values())) == len(masters)
    refused = CliRunner().invoke(app, ["keys", "--experiment", str(exp), "--out", str(tmp_path), "--party", "analyzer",
                                       "--name", "shuffler-2"])
    assert refused.exit_code == 2 and "--name: only with --party shuffler" in refused.output


def test_the_secagg_step_deadline_reaches_the_aggregator_only(tmp_path):
    from privbandit.services.launcher import plan_parties

    exp = ROOT / "experiments" / "pol_secagg.toml"
    family, config = experiment_files.load(exp)
    plan = {p.name: p.argv for p in plan_parties(family, config, exp, [], tmp_path, "mqtt://127.0.0.1:1", "r1", 2,
                                                 None, secagg_step_s=90)}
    assert plan["aggregator"][-2:] == ["--secagg-step-deadline", "90.0"]
    assert not any("--secagg-step-deadline" in argv for name, argv in plan.items() if name != "aggregator")
    default = {p.name: p.argv for p in plan_parties(family, config, exp, [], tmp_path, "mqtt://127.0.0.1:1", "r1", 2,
                                                    None)}
    assert "--secagg-step-deadline" not in default["aggregator"]
