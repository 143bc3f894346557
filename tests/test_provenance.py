"""Issue #18's no-lost-work and provenance parts: results say where they came from, rerun as they
stand, and a bad or occupied --out stops before any work; the Python API the README shows."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import privbandit
from privbandit.runner import config as experiment_files
from privbandit.runner.results import experiment_toml

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--set", "horizon=4000", "--runs", "2", "--jobs", "1"]


def cli(*args, cwd=ROOT, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "privbandit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)
    if check and proc.returncode:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.toml")), ids=lambda p: p.name)
def test_every_experiment_round_trips_through_its_config_toml(path, tmp_path):
    """What a results directory's config.toml holds loads back, from another directory, to the
    very config that ran (relative data paths included)."""
    family, config = experiment_files.load(path)
    copy = tmp_path / "elsewhere" / "config.toml"
    copy.parent.mkdir()
    copy.write_text(experiment_toml(config))
    again_family, again = experiment_files.load(copy)
    assert again_family is family and again == config


def test_a_run_records_its_provenance_and_its_config_toml_reruns_to_the_same_numbers(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    cli("run", "experiments/quickstart.toml", *SMALL, "--out", str(first))
    summary = json.loads((first / "summary.json").read_text())
    p = summary["provenance"]
    assert p["privbandit"] == privbandit.__version__ and p["python"] == sys.version.split()[0]
    assert p["command"].startswith("privbandit run experiments/quickstart.toml --set horizon=4000")
    assert p["started"] <= p["ended"] and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", p["started"])
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode == 0:  # a checkout (CI's is one): the commit the numbers came from
        assert p["git"]["commit"] == head.stdout.strip()
    assert p["libraries"]["numpy"] and p["libraries"]["dp-accounting"]
    cli("run", str(first / "config.toml"), "--out", str(second), cwd=tmp_path)
    wrong = cli("run", str(first / "config.json"), "--out", str(tmp_path / "third"), check=False)
    assert wrong.returncode == 2 and f"run {first / 'config.toml'}, which it holds beside it" in " ".join(
        wrong.stderr.split())
    for name in ("runs.csv", "curves.csv", "rounds.csv"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    again = json.loads((second / "summary.json").read_text())
    assert again["privacy"] == summary["privacy"] and again["communication"] == summary["communication"]


def test_an_occupied_out_is_refused_before_any_work_and_overwrite_replaces_the_old_results(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("an earlier run's")
    (out / "rounds.csv").write_text("stale")
    (out / "notes.txt").write_text("mine")
    (out / "logs").mkdir()
    (out / "logs" / "aggregator.log").write_text("an earlier session's party log")
    (out / "audit").mkdir()
    (out / "audit" / "audit.json").write_text("an audit of the earlier experiment")
    proc = cli("run", "experiments/quickstart.toml", *SMALL, "--out", str(out), check=False)
    assert proc.returncode == 2 and "not empty" in proc.stderr and "--overwrite" in proc.stderr
    assert (out / "summary.json").read_text() == "an earlier run's"  # nothing touched
    done = cli("run", "experiments/quickstart.toml", *SMALL, "--out", str(out), "--overwrite")
    assert json.loads((out / "summary.json").read_text())["experiment"] == "quickstart"
    listed = " ".join(done.stdout.split()).split(f"results in {out}/ (", 1)[1]
    assert "rounds.csv" in listed and "notes.txt" not in listed  # a file of the user's is not a result
    assert (out / "rounds.csv").read_text().startswith("algorithm,run,round")
    assert (out / "notes.txt").read_text() == "mine"  # only privbandit's own files are replaced
    assert not (out / "logs").exists()  # an earlier distributed session's logs would read as this run's
    assert not (out / "audit").exists()  # the dashboard would show the earlier experiment's audit as this one's


@pytest.mark.parametrize("where", ["under-a-file", "a-file"])
def test_an_unwritable_out_is_refused_before_any_work(tmp_path, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    out = blocker / "sub" if where == "under-a-file" else blocker
    proc = cli("run", "experiments/quickstart.toml", "--set", "horizon=10000000", "--out", str(out), check=False)
    assert proc.returncode == 2 and f"--out {out}" in proc.stderr  # at T = 10⁷ the work would take minutes


def test_a_refused_broker_url_stops_before_out_is_touched(tmp_path):
    """--overwrite would remove the earlier results: a bad or unreachable --broker must stop first."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("an earlier run's")
    for url, code, said in (("http://127.0.0.1:1883", 2, "--broker: broker_url 'http://127.0.0.1:1883': expected "
                                                        "mqtt://host:port"),
                            ("mqtt://127.0.0.1:9", 1, "cannot reach the broker at mqtt://127.0.0.1:9")):
        proc = cli("run", "experiments/quickstart.toml", "--transport", "mqtt", "--broker", url, "--out", str(out),
                   "--overwrite", check=False)
        assert proc.returncode == code and said in " ".join(proc.stderr.split()), proc.stderr
        assert (out / "summary.json").read_text() == "an earlier run's"


def test_an_error_that_quotes_brackets_is_printed_whole(tmp_path):
    """Error text is not rich markup: "[algorithms.<label>]" must not vanish from the message."""
    path = tmp_path / "none.toml"
    path.write_text('name = "x"\nhorizon = 1000\n[algorithms]\n')
    proc = cli("run", str(path), "--out", str(tmp_path / "o"), check=False)
    assert proc.returncode == 2 and "at least one [algorithms.<label>] table is required" in proc.stderr, proc.stderr


def test_version_and_list():
    assert cli("--version").stdout.strip() == f"privbandit {privbandit.__version__}"
    text = cli("list").stdout
    for name in ("distributed-dp-mab", "private-online-learning", "shuffle-linear-bandits", "dist-rdp-se",
                 "hybrid-ucb", "linucb-sdp-vec", "paper-code", "curious-analyzer", "[algorithms.<label>]"):
        assert name in text, name
    # One line per algorithm saying what it is: every built-in family describes every algorithm it
    # accepts, and the list prints it next to the name.
    from privbandit import registry
    from privbandit.runner.config import field_choices

    flat = " ".join(text.split())
    for family in ("concurrent-shuffle", "distributed-dp-mab", "glm-bandits", "private-online-learning",
                   "shuffle-linear-bandits"):
        fam = registry.family(family)
        accepted = set(field_choices(fam.experiment_model, ("algorithms", "algorithm")))
        assert accepted == set(fam.algorithm_lines), family
        for line in fam.algorithm_lines.values():
            assert " ".join(line.split()[:4]) in flat, line


def test_the_readme_python_example_runs(tmp_path, monkeypatch):
    readme = (ROOT / "README.md").read_text()
    code = readme.split("### From Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert len(code.strip().splitlines()) <= 10
    monkeypatch.chdir(ROOT)
    code = code.replace('out="results/api"', f'out="{tmp_path / "api"}"')
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "api" / "config.toml").exists()


def test_the_api_takes_a_path_a_dict_and_a_config_alike_and_its_table_is_runs_csv(tmp_path):
    import csv

    res = privbandit.run(ROOT / "experiments" / "quickstart.toml", ["horizon=2000", "runs=2"], out=tmp_path / "o")
    assert isinstance(res, privbandit.Results)
    final = {k: a["regret_final_mean"] for k, a in res.summary["algorithms"].items()}
    for same in (res.config, res.config.model_dump(mode="json")):
        assert {k: a["regret_final_mean"] for k, a in privbandit.run(same).summary["algorithms"].items()} == final
    table = res.table()
    rows = table if isinstance(table, list) else table.to_dict("records")
    with open(tmp_path / "o" / "runs.csv") as fh:
        written = [(r["algorithm"], int(r["run"]), int(r["t"]), float(r["pseudo"]), float(r["realized"]))
                   for r in csv.DictReader(fh)]
    assert [(r["algorithm"], r["run"], r["t"], r["pseudo"], r["realized"]) for r in rows] == written
    assert len(written) == 2 * len(final) * len(res.results["SE"][0].checkpoints)


def test_the_api_refuses_what_is_not_an_experiment():
    with pytest.raises(TypeError, match="experiment must be a path, a dict or a family's config"):
        privbandit.run(42)


BAD = """
name = "b"
horizon = 1000
epsilon = 0.5
horizn = 3
preset = "papr"
[environment]
kind = "unifrom"
lwo = 0.2
[algorithms.Foo]
[algorithms.Dist-DP-SR]
[algorithms.c]
algorithm = "DP-SE"
[algorithms.DP-SE]
widht_multiplier = 2
"""


def test_misspelt_fields_get_a_did_you_mean_and_an_unknown_label_the_algorithms(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(BAD)
    proc = cli("run", str(path), "--out", str(tmp_path / "o"), check=False)
    assert proc.returncode == 2
    for line in ("horizn: Extra inputs are not permitted (got 3); did you mean 'horizon'?",
                 "environment.lwo: Extra inputs are not permitted (got 0.2); did you mean 'low'?",
                 "algorithms.DP-SE.widht_multiplier: Extra inputs are not permitted (got 2); did you mean 'width_multiplier'?",
                 "algorithms.Foo.algorithm: Field required; the label 'Foo' names no algorithm, so set algorithm = one of "
                 "dist-dp-se, dist-rdp-se, dist-cdp-se, cdp-se, ldp-se, dp-se, se, ucb1, thompson, mt-ucb, dp-ucb-bound, "
                 "dp-ucb, ldp-ucb, vb-sdp-ae (or name the table after one)",
                 "algorithms.Dist-DP-SR.algorithm: Field required; the label 'Dist-DP-SR' names no algorithm (did you "
                 "mean 'dist-dp-se'?)",
                 "algorithms.c.algorithm: Input should be 'dist-dp-se', 'dist-rdp-se', 'dist-cdp-se', 'cdp-se', "
                 "'ldp-se', 'dp-se', 'se', 'ucb1', 'thompson', 'mt-ucb', 'dp-ucb-bound', 'dp-ucb', 'ldp-ucb' or "
                 "'vb-sdp-ae' "
                 "(got 'DP-SE'); did you mean 'dp-se'?",
                 "preset: Input should be 'paper' or 'paper-code' (got 'papr'); did you mean 'paper'?",
                 "environment.kind: Input should be 'uniform', 'means', 'means-file' or 'bundled' (got 'unifrom'); did you mean "
                 "'uniform'?"):
        assert line in proc.stderr, (line, proc.stderr)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flag", [["--broker", "mqtt://127.0.0.1:1883"], ["--shards", "3"], ["--restart-on-crash", "2"]])
def test_mqtt_only_flags_are_refused_in_process(tmp_path, flag):
    proc = cli("run", "experiments/quickstart.toml", *flag, "--out", str(tmp_path / "o"), check=False)
    assert proc.returncode == 2 and f"{flag[0]}: only with --transport mqtt" in proc.stderr


def test_help_shows_the_defaults_written_in_the_code_and_flags_as_flags():
    text = cli("run", "--help").stdout
    assert "[default: results/<name>]" in text and "[default: all cores]" in text and "[default: 2]" in text
    assert "--overwrite " in text and "<bool>" not in text


def test_ctrl_c_stops_at_once_keeps_finished_tasks_and_resume_finishes_with_the_same_numbers(tmp_path):
    """A real SIGINT to a real `privbandit run` (2 worker processes, 14 tasks): it exits within a
    few seconds with status 130, prints the command that resumes, and keeps every finished task;
    that command computes only the rest and writes what an uninterrupted run writes."""
    import signal
    import time

    args = ["experiments/quickstart.toml", "--set", "horizon=100000", "--set", "preset=paper-code", "--runs", "2",
            "--jobs", "2"]
    out = tmp_path / "interrupted"
    proc = subprocess.Popen([sys.executable, "-m", "privbandit", "run", *args, "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list((out / ".tasks").glob("*.pkl")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be interrupted: make it longer"
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130 and time.monotonic() - t0 < 10, stderr
    kept = len(list((out / ".tasks").glob("*.pkl")))
    assert 1 <= kept < 14 and "--resume" in stderr and f"{kept} finished task(s)" in stderr
    resume = stderr.strip().splitlines()[-1].strip()
    assert resume.startswith("privbandit run experiments/quickstart.toml") and resume.endswith("--resume")
    cli(*resume.split()[1:])
    full = tmp_path / "full"
    cli("run", *args, "--out", str(full))
    for name in ("runs.csv", "curves.csv", "rounds.csv"):
        assert (out / name).read_bytes() == (full / name).read_bytes(), name


def test_resume_never_reuses_a_task_of_another_config_and_recomputes_a_damaged_one(tmp_path):
    out = tmp_path / "o"
    first = privbandit.run("experiments/quickstart.toml", ["horizon=4000", "runs=2"], out=out)
    files = sorted((out / ".tasks").glob("*.pkl"))
    assert len(files) == 2 * len(first.summary["algorithms"])  # one task per run and label
    files[0].write_bytes(b"not a pickle")
    again = privbandit.run("experiments/quickstart.toml", ["horizon=4000", "runs=2"], out=out, resume=True)
    assert again.summary["algorithms"] == {k: {**v, "users_per_s": again.summary["algorithms"][k]["users_per_s"]}
                                           for k, v in first.summary["algorithms"].items()}
    # the damaged file was set aside, recomputed, and pruned with the run's results written
    assert sorted((out / ".tasks").iterdir()) == files
    changed = privbandit.run("experiments/quickstart.toml", ["horizon=4000", "runs=2", "seed=7"], out=out, resume=True)
    now = sorted((out / ".tasks").glob("*.pkl"))
    assert len(now) == len(files) and not set(now) & set(files)  # nothing of seed 1 reused, and none kept
    assert changed.summary["algorithms"]["SE"]["regret_final_mean"] != first.summary["algorithms"]["SE"]["regret_final_mean"]


def test_resume_says_what_it_reused_and_the_summary_counts_every_leg(tmp_path):
    """Issue #35: --resume names what it reused; provenance names the config hash that names the kept
    tasks; elapsed_s covers the earlier leg's kept work as well as the last leg."""
    import pickle

    from privbandit.runner.store import experiment_key

    out = tmp_path / "o"
    first = privbandit.run("experiments/quickstart.toml", ["horizon=4000", "runs=2"], out=out)
    key = experiment_key(first.config)
    assert first.summary["provenance"]["config_hash"] == key
    n = 2 * len(first.summary["algorithms"])  # one task per run and label
    assert first.summary["provenance"]["tasks"] == {"reused": 0, "computed": n, "legs": 1,
                                                    "elapsed_s_this_leg": first.summary["elapsed_s"]}
    files = sorted((out / ".tasks").glob("*.pkl"))
    for path in files[5:]:  # an interrupted first leg: 5 of its n tasks were kept
        path.unlink()
    legs = [pickle.loads(path.read_bytes())["leg"] for path in files[:5]]
    assert len({leg["started"] for leg in legs}) == 1
    earlier = max(leg["elapsed"] for leg in legs)  # the first leg's wall time to its last kept task

    proc = cli("run", "experiments/quickstart.toml", "--set", "horizon=4000", "--runs", "2", "--jobs", "1",
               "--out", str(out), "--resume")
    said = " ".join(proc.stderr.split())
    assert f"resumed: 5 of {n} task(s) reused from {out / '.tasks'} (config {key[:12]}), {n - 5} computed" in said, said
    summary = json.loads((out / "summary.json").read_text())
    p = summary["provenance"]
    assert p["config_hash"] == key  # the name of the task files: sha256(config hash, label, runs)
    assert {k: v for k, v in p["tasks"].items() if k != "elapsed_s_this_leg"} == {"reused": 5, "computed": n - 5, "legs": 2}
    assert summary["elapsed_s"] == pytest.approx(p["tasks"]["elapsed_s_this_leg"] + earlier, abs=2e-3)
    assert summary["elapsed_s"] > p["tasks"]["elapsed_s_this_leg"]
    assert p["started"] <= first.summary["provenance"]["ended"]  # from the first leg's start
    # without a results directory, and over MQTT (no task store), the hash is there all the same
    bare = privbandit.run("experiments/quickstart.toml", ["horizon=4000"])
    assert bare.summary["provenance"]["config_hash"] == experiment_key(bare.config)
    assert "tasks" not in bare.summary["provenance"]


def test_the_image_pins_every_runtime_requirement_within_its_range():
    """The Dockerfile installs with constraints.txt: every runtime requirement of pyproject.toml
    (and nothing twice) is pinned there with ==, at a version its specifier admits."""
    import tomllib

    from packaging.requirements import Requirement

    root = Path(__file__).resolve().parents[1]
    pins: dict[str, str] = {}
    for line in (root / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt: {line!r} is not NAME==VERSION"
            key = re.sub(r"[-_.]+", "-", name).lower()
            assert key not in pins, f"constraints.txt pins {name} twice"
            pins[key] = version
    for spec in tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]:
        req = Requirement(spec)
        key = re.sub(r"[-_.]+", "-", req.name).lower()
        assert key in pins, f"constraints.txt does not pin {req.name}"
        assert req.specifier.contains(pins[key]), f"{req.name}=={pins[key]} is outside {req.specifier}"
    assert "constraints.txt" in (root / "Dockerfile").read_text()


def test_a_data_file_rewritten_in_place_is_another_experiment(tmp_path):
    """The same config naming a means file whose bytes changed never reuses the old file's tasks."""
    data = json.loads((ROOT / "experiments" / "data" / "mslr_standin_k50.json").read_text())
    means = tmp_path / "means.json"
    means.write_text(json.dumps(data))
    path = tmp_path / "m.toml"
    path.write_text('name = "m"\nhorizon = 3000\nruns = 1\n[environment]\nkind = "means-file"\npath = "means.json"\n'
                    '[algorithms.DP-SE]\n')
    out = tmp_path / "o"
    first = privbandit.run(path, out=out)
    (task,) = (out / ".tasks").glob("*.pkl")
    privbandit.run(path, out=out, resume=True)
    assert list((out / ".tasks").glob("*.pkl")) == [task]  # the same bytes: the task is reused
    data.update(k=10, means=data["means"][:10], counts=data["counts"][:10], probabilities=data["probabilities"][:10])
    means.write_text(json.dumps(data))
    again = privbandit.run(path, out=out, resume=True)
    (again_task,) = (out / ".tasks").glob("*.pkl")
    assert again_task != task  # computed anew under another key (the old file's task then pruned)
    assert again.summary["algorithms"]["DP-SE"]["regret_final_mean"] != first.summary["algorithms"]["DP-SE"]["regret_final_mean"]


def test_a_package_inside_another_repository_claims_no_commit(tmp_path):
    """An installed privbandit under some other checkout (a virtualenv kept in a project's
    repository) is not that repository's commit; a tracked package is."""
    from privbandit.runner.provenance import git_commit

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                       capture_output=True)

    git("init", "-q")
    (tmp_path / "README").write_text("another project")
    git("add", "README")
    git("commit", "-qm", "x")
    package = tmp_path / ".venv" / "privbandit"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    assert git_commit(package) is None
    git("add", "-f", ".venv/privbandit/__init__.py")
    git("commit", "-qm", "y")
    assert git_commit(package)["commit"] == subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"],
                                                           capture_output=True, text=True).stdout.strip()


def test_kept_tasks_are_keyed_by_privbandits_code_not_only_its_version(tmp_path, monkeypatch):
    """The version stays 0.1.0 across commits: a task computed before a code change must not be
    reused after it. The fingerprint covers every source file of the package."""
    from privbandit.runner import store

    fingerprint = store.code_fingerprint.__wrapped__  # uncached
    _, config = experiment_files.load(ROOT / "experiments" / "quickstart.toml")
    before = store.experiment_key(config)
    assert store.experiment_key(config) == before  # deterministic
    monkeypatch.setattr(store, "code_fingerprint", lambda: "another commit's code")
    assert store.experiment_key(config) != before
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "mechanism.py").write_text("SCALE = 1\n")
    first = fingerprint(package)
    (package / "sub" / "mechanism.py").write_text("SCALE = 2\n")
    assert fingerprint(package) != first
