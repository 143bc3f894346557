"""`privbandit audit`: an ε lower bound for each release, in-process or read from the broker, set
against the ledger's claim (docs/audit.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from privbandit.cli.broker import (CaFileOption, CertFileOption, CredentialsOption, InsecureBrokerOption, KeyFileOption,
                                   RunIdForBroker, _broker_access, _broker_reachable)
from privbandit.cli.common import SetOption, _error, err
from privbandit.runner.config import ConfigError


def audit(
    experiment: Annotated[Optional[Path], typer.Argument(help="experiment file (TOML); or --family and --algorithm")] = None,
    family: Annotated[Optional[str], typer.Option(help="audit this family's ALGORITHM with its defaults (no file)")] = None,
    algorithm: Annotated[Optional[list[str]], typer.Option(
        help="without FILE: the algorithm to audit; with FILE: audit only this label (repeatable)")] = None,
    set_: SetOption = None,
    samples: Annotated[int, typer.Option(help="releases per neighbouring input, in [100, 10^9]")] = 1_000_000,
    delta: Annotated[Optional[float], typer.Option(help="δ of the ε lower bound, in (0, 1) [default: the run's own δ]")] = None,
    confidence: Annotated[float, typer.Option(
        help="1 − β: each release's bounds hold together with this probability, in (0, 1)")] = 0.95,
    cohort: Annotated[Optional[int], typer.Option(
        help="users per audited round where the family lets it vary (the MAB rounds), in [1, 10^6] "
             "[default: the family's]")] = None,
    seed: Annotated[int, typer.Option(help="the audit's own seed (≥ 0)")] = 0,
    jobs: Annotated[int, typer.Option(help="worker processes, one release each at a time (results do not "
                                           "depend on it), in [1, 64]")] = 1,
    out: Annotated[Path, typer.Option(help="directory for audit.json and the plots (replaced)")] = Path("results/audit"),
    transport: Annotated[str, typer.Option(help="inproc: the releases sampled in-process from the project's "
                                                "own mechanisms; mqtt: read from the broker with the analyzer's "
                                                "account, released by the real intermediary process")] = "inproc",
    canary: Annotated[bool, typer.Option(help="also run each algorithm once with canaries and bound the whole "
                                              "run's ε (one-run audit), where the family supports it")] = False,
    search: Annotated[bool, typer.Option(help="also search the family's candidate neighbouring pairs of each "
                                              "release: pilot each on max(1000, samples/20), audit the strongest "
                                              "on a fresh sample")] = False,
    broker: Annotated[Optional[str], typer.Option(
        help="with --transport mqtt: mqtt://host:port or mqtts://host:port [default: an embedded broker]")] = None,
    run_id: RunIdForBroker = None,
    credentials: CredentialsOption = None,
    ca_file: CaFileOption = None,
    cert_file: CertFileOption = None,
    key_file: KeyFileOption = None,
    insecure_broker: InsecureBrokerOption = False,
):
    """Measure the privacy each release really gives: two neighbouring inputs, many releases of what
    the analyzer receives under each, and an ε lower bound at δ with the stated confidence, set
    against the ledger's claim (docs/audit.md). Exits 1 if any bound exceeds its claim."""
    from privbandit import api

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    bar, ids = Progress(*columns, console=err, transient=not err.is_terminal), []

    def progress(done: int, total: int, name: str | None) -> None:
        if not ids:  # once the releases to audit are known, as the first starts
            bar.start()
            ids.append(bar.add_task("audit", total=total))
        bar.update(ids[0], completed=done, **({"description": name} if name else {}))

    try:
        if transport == "inproc":  # silently ignoring them would mislead: nothing here uses a broker
            given = [flag for flag, value in (("--broker", broker), ("--run-id", run_id), ("--credentials", credentials),
                                              ("--ca-file", ca_file), ("--cert-file", cert_file),
                                              ("--key-file", key_file), ("--insecure-broker", insecure_broker or None))
                     if value is not None]
            if given:
                raise ConfigError(f"{', '.join(given)}: only with --transport mqtt (this audit is in-process)")
        access = _broker_access(broker, run_id, credentials, ca_file, cert_file, key_file)
        if broker is not None:
            _broker_reachable(broker)
        try:
            report = api.audit(experiment, family=family, algorithm=algorithm, overrides=set_, samples=samples,
                               delta=delta, confidence=confidence, cohort=cohort, seed=seed, jobs=jobs, out=out,
                               transport=transport, canary=canary, search=search, broker=broker, run_id=run_id,
                               insecure_broker=insecure_broker, progress=progress,
                               **(access if transport == "mqtt" else {}))
        finally:
            bar.stop()
    except ConfigError as exc:
        _error(exc)
        raise typer.Exit(2)
    except (RuntimeError, ConnectionError) as exc:  # over MQTT: the broker, or the audit's session
        if transport != "mqtt":
            raise
        from privbandit.services.broker_probe import BrokerInsecure, BrokerUnusable

        if isinstance(exc, (BrokerInsecure, BrokerUnusable)):
            _error(f"--transport mqtt: {exc}")
        elif isinstance(exc, RuntimeError):
            _error(f"--transport mqtt: the audit's session stopped: {exc}")
        else:
            raise
        raise typer.Exit(1)
    results, runs, searches = report["targets"], report["canary_runs"], report["searches"]
    session, skipped, no_canary = report.get("mqtt"), report["not_audited"], report["no_canary_run"]
    console = Console(width=None if sys.stdout.isatty() else 140)
    table = Table(title=f"audit: {samples:,} releases per neighbour, confidence {confidence:g}")
    mqtt = transport == "mqtt"
    for col in ("mechanism", *(["transport", "law p (0, 1)", "releases/s"] if mqtt else ["release"]),
                "claimed ε", "audited ε ≥", "δ", "verdict", "seconds"):
        table.add_column(col, justify="right" if col in ("claimed ε", "audited ε ≥", "δ", "seconds", "releases/s")
                         else "left")
    for r in results:
        a, claimed = r["audit"], _claimed(r["claim"])
        extra = []
        if mqtt:
            law = r["mqtt"].get("law_check")
            p = "—" if law is None else ", ".join(
                f"{min(law[k]['p_chi2'], law[k]['p_ks']):.2g}" for k in ("input_0", "input_1"))
            extra = [r["transport"], p, f"{r['releases_per_second']:,.0f}"]
        audited = "—" if r["verdict"] == "refused" else f"{a['epsilon']:.4g}"  # no bound from forged releases
        table.add_row(f"{r['name']} ({r['algorithm']})", *(extra or [r["release"]]), claimed, audited,
                      f"{a['delta']:.2g}", r["verdict"], f"{r['seconds']['total']:.1f}")
    console.print(table)
    for r in results:
        if mqtt and r["transport"] != "mqtt":
            console.print(f"in-process, not over MQTT: {r['name']}: {r['mqtt']['why_not']}")
    refused = [r for r in results if r["verdict"] == "refused"]
    for r in refused:
        console.print(f"over MQTT, {r['name']}: no verdict: {r['refused']} (logs in {out}/mqtt/logs)")
    if session:
        console.print(f"over MQTT: the {', '.join(session['intermediaries'])} process(es) on the "
                      f"{session['broker']} broker (ACL {session['acl']}, run {session['run_id']}); law p: the smaller "
                      f"of the χ² and KS two-sample p-values against the in-process sampler, per input")
    for r in runs:
        claimed = _claimed(r["claim"])
        console.print(f"one run of {r['name']} ({r['horizon']:,} users, {r['canaries']} canaries): ε ≥ "
                      f"{r['epsilon']:.4g} at δ = {r['delta']:.2g} ({r['correct']}/{r['guesses']} guesses right), "
                      f"claimed {claimed}: {r['verdict']} ({r['seconds']:.1f} s)")
    for r in searches:
        claimed, pick = _claimed(r["claim"]), r["search"]["chosen"]
        pilots = ", ".join(f"{row['pilot_epsilon']:.3g}" for row in r["search"]["candidates"])
        console.print(f"search {r['name']}: pilots ε ≥ {pilots} ({r['search']['pilot_samples']:,} samples each); "
                      f"chosen #{pick} ({r['neighbours']}): ε ≥ {r['audit']['epsilon']:.4g}, claimed {claimed}: "
                      f"{r['verdict']}")
    for row in no_canary:
        console.print(f"no one-run audit of {report['family']}/{row['label']}: {row['why']}", highlight=False)
    if skipped:
        console.print(f"not audited (no audit targets yet): {', '.join(skipped)}")
    console.print(f"audit.json and one plot per mechanism in {out}/")
    if any(r["verdict"] == "violation" for r in results + runs + searches) or refused:
        raise typer.Exit(1)


def _claimed(claim: dict) -> str:
    """The ledger's ε at the audit's δ as the audit prints it, or its guarantee where it states none."""
    return f"{claim['epsilon_at_delta']:.4g}" if claim["epsilon_at_delta"] is not None else claim["guarantee"]
