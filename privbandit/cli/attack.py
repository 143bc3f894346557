"""`privbandit attack`: an adversary in-process against an experiment file, or on the wire against a
running session (docs/attacks.md), and the catalogue of every adversary."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from privbandit.cli.common import SetOption, _error, _settings, _world
from privbandit.runner.config import ConfigError


def adversary_catalogue() -> dict[str, tuple[str, str]]:
    """Every adversary: kind → (where it runs, one line). In-process adversaries come from each
    registered family; traffic adversaries act on the wire against a running session."""
    from privbandit import registry
    from privbandit.services.hostile import TRAFFIC_ADVERSARIES

    out = {}
    for name in registry.family_names():
        for kind, cls in getattr(registry.family(name), "adversaries", {}).items():
            where, text = out.get(kind, ("", cls.summary))
            out[kind] = (f"{where}, {name}" if where else name, text)  # every family that takes it
    return out | {kind: ("over MQTT", text) for kind, text in TRAFFIC_ADVERSARIES.items()}


_ATTACK_SUMMARY = "Run an adversary and measure the damage (docs/attacks.md)."


def _attack_help() -> str:
    lines = [f"{kind}: {text} [{where}]" for kind, (where, text) in adversary_catalogue().items()]
    return (_ATTACK_SUMMARY + "\n\n"
            "In-process, against an experiment file: privbandit attack KIND FILE [--fraction F] "
            "prints honest vs attacked regret, estimate error and ε side by side. Over MQTT, against "
            "a running session: privbandit attack KIND --broker URL --run RUN_ID.\n\n"
            "Adversaries:\n\n" + "\n\n".join(lines))


class _AttackCommand(typer.core.TyperCommand):
    """The adversary list in ``attack --help`` imports every family: it is built when the help is
    shown, not when the CLI is imported, which every party process does at start-up."""

    def format_help(self, ctx, formatter) -> None:
        self.help = _attack_help()
        super().format_help(ctx, formatter)


def attack(
    kind: Annotated[str, typer.Argument(help="the adversary (listed above)")],
    experiment: Annotated[Optional[Path], typer.Argument(help="experiment file, for the in-process adversaries")] = None,
    fraction: Annotated[float, typer.Option(help="share of every cohort that attacks, in [0, 1/3)")] = 0.05,
    magnitude: Annotated[float, typer.Option(help="out-of-range: how far beyond [0, 1], in rewards")] = 1.0,
    range_check: Annotated[bool, typer.Option("--range-check", help="turn on the clear-text defences "
                                              "wherever someone sees the reports")] = False,
    set_: SetOption = None,
    runs: Annotated[Optional[int], typer.Option(help="number of runs (overrides the file)")] = None,
    out: Annotated[Optional[Path], typer.Option(help="results [default: results/attack-<kind>]")] = None,
    jobs: Annotated[Optional[int], typer.Option(help="worker processes [default: all cores]")] = None,
    broker: Annotated[Optional[str], typer.Option(help="mqtt://host:port of a running session")] = None,
    run_id: Annotated[Optional[str], typer.Option("--run", help="the running session's run id")] = None,
    username: Annotated[Optional[str], typer.Option(help="broker account [default: $PRIVBANDIT_USERNAME]")] = None,
    password: Annotated[Optional[str], typer.Option(help="[default: $PRIVBANDIT_PASSWORD]")] = None,
    duration: Annotated[float, typer.Option(help="over MQTT: seconds to attack, or until the session shuts down")] = 60.0,
    report: Annotated[Optional[Path], typer.Option(help="over MQTT: also write the attack's report (JSON) here")] = None,
    ready_file: Annotated[Optional[Path], typer.Option(help="over MQTT: created once the attack is subscribed "
                                                            "(the launcher waits for it)")] = None,
):
    known = adversary_catalogue()
    if kind not in known:
        _error(f"adversary {kind!r} is not one of {', '.join(known)} "
                  f"(see privbandit attack --help)")
        raise typer.Exit(2)
    if known[kind][0] == "over MQTT":
        # forge: what an attacker with the experiment file could sign before session secrets (#32)
        seed = _world(experiment, set_)[1].seed if kind == "forge" and experiment is not None else None
        if kind == "forge" and seed is None:
            _error("forge attacks with the experiment file's keys: give it (privbandit attack forge FILE --broker …)")
            raise typer.Exit(2)
        return _attack_over_mqtt(kind, broker, run_id, username, password, duration, report, ready_file, seed)
    if experiment is None:
        _error(f"{kind} runs in-process: give an experiment file "
                  f"(privbandit attack {kind} experiments/attacks.toml)")
        raise typer.Exit(2)
    from privbandit.families.distributed_dp_mab.attack import run_attack

    overrides = list(set_ or []) + ([f"runs={runs}"] if runs is not None else [])
    out = out or Path("results") / f"attack-{kind}"
    try:
        if not 0 <= fraction < 1 / 3:
            raise ConfigError(f"--fraction {fraction}: must lie in [0, 1/3) (the release threshold)")
        if jobs is not None and jobs < 1:
            raise ConfigError(f"--jobs {jobs}: must be ≥ 1")
        report = run_attack(experiment, overrides, kind, fraction, magnitude, range_check, out, jobs)
    except ConfigError as exc:
        _error(exc)
        raise typer.Exit(2)
    _print_attack(report, out)


def _print_attack(report: dict, out: Path) -> None:
    adv = report["adversary"]
    console = Console(width=None if sys.stdout.isatty() else 160)
    table = Table(title=f"{adv['kind']} ({adv['fraction']:.0%} of users"
                        f"{', range check' if adv['range_check'] else ''}) on {report['experiment']}: "
                        f"T = {report['horizon']:,}, {report['runs']} runs")
    for col in ("algorithm", "regret honest", "regret attacked", "est. error honest", "est. error attacked",
                "ε honest", "ε attacked", "ε vs coalition", "attackers"):
        table.add_column(col, justify="right", no_wrap=True)
    fmt = lambda e: "∞" if e is None else (e if isinstance(e, str) else f"{e:.3g}")  # noqa: E731
    for label, a in report["algorithms"].items():
        table.add_row(label, f"{a['regret_honest']:,.0f} ± {a['regret_honest_stderr']:,.0f}",
                      f"{a['regret_attacked']:,.0f} ± {a['regret_attacked_stderr']:,.0f}",
                      *("—" if a[k] is None else f"{a[k]:.4f}" for k in ("estimate_error_honest",
                                                                         "estimate_error_attacked")),
                      fmt(a["epsilon_honest"]), fmt(a["epsilon_attacked"]),
                      "-" if a["epsilon_vs_coalition"] is None else fmt(a["epsilon_vs_coalition"]),
                      "—" if a["attackers"] is None else f"{a['attackers']:,}")
    console.print(table)
    rejected = ", ".join(f"{k}: {v:,}" for k, v in report["rejected"].items()) or "none"
    console.print(f"rejected (attacked run): {rejected}")
    console.print(f"results in {out}/ (attack.json, honest/, attacked/)")


def _attack_over_mqtt(kind: str, broker: str | None, run_id: str | None, username: str | None,
                      password: str | None, duration: float, report_file: Path | None = None,
                      ready_file: Path | None = None, experiment_seed: int | None = None) -> None:
    import asyncio
    import json

    from privbandit.services.hostile import attack_session

    if not duration > 0:
        _error(f"--duration {duration}: must be > 0 seconds")
        raise typer.Exit(2)
    settings = _settings(broker, run_id)
    given = {k: v for k, v in (("username", username), ("password", password)) if v is not None}
    settings = settings.model_copy(update=given)
    try:
        report = asyncio.run(attack_session(kind, settings, duration, ready_file, experiment_seed, report_file))
    except ConnectionError as exc:
        _error(exc)
        raise typer.Exit(1)
    print(json.dumps(report, indent=2))
