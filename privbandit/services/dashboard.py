"""The dashboard: one web page that shows a distributed session as the observer sees it, live, and
its results directory once the session is over (docs/dashboard.md).

It runs inside the observer process (``privbandit observer --dashboard``, which ``privbandit demo
--dashboard`` and ``privbandit run --transport mqtt --dashboard`` start), on the observer's event
loop, so it never holds more than the observer's broker account and the experiment file give it:
metrics topics only, never a report, a plan or a release. It reads the family-independent state of
:class:`~privbandit.services.observer.ObserverService` (tasks, the
:class:`~privbandit.protocol.spine.observer.Observer`'s truths and records, the analyzer's ledger in
``task-done``, the intermediaries' round counts, the parties' counters), so it shows every family.

After the session the observer process exits; ``privbandit demo`` and ``run`` then serve the
results directory on the same port, read-only, until Ctrl-C (:func:`serve_results`). The page
reconnects by itself and shows the results beside what it last saw live.

The stack: Starlette (routes, a streaming response for server-sent events) under uvicorn, running
as one more task on the observer's asyncio loop; the page is one static HTML file with its own
SVG chart, no library and nothing fetched from elsewhere, so it works offline and all its traffic
stays on the loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import errno
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8050
PORTS = (1, 65535)
PUSH_S = 0.5  # how often the stream sends a snapshot; snapshots are cached this long
# A party not heard from for this long is shown as silent: intermediaries send their round counts
# at least every 5 s (intermediary.ROUNDS_EVERY_S), the others whenever they act.
SILENT_S = 10.0
PAGE = Path(__file__).with_name("dashboard.html")


class DashboardError(RuntimeError):
    """The dashboard cannot listen where asked; the message names the host and port."""


def check_port(port) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not PORTS[0] <= port <= PORTS[1]:
        raise DashboardError(f"dashboard port {port!r}: must be an integer in {PORTS[0]}..{PORTS[1]}")
    return port


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, bound now: a port in use is named before any party starts."""
    check_port(port)
    try:
        return socket.create_server((host, port))  # SO_REUSEADDR: a restarted observer binds again at once
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise DashboardError(f"dashboard port {port} on {host} is in use: choose another "
                                 f"(--dashboard-port, {PORTS[0]}..{PORTS[1]})") from None
        raise DashboardError(f"dashboard: cannot listen on {host}:{port}: {exc.strerror or exc}") from None


# --- snapshots -------------------------------------------------------------------------------------

def _floats(values: np.ndarray) -> list:
    """JSON numbers, None where not finite (a curve beyond the users served so far)."""
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(values), values, None).tolist()


# Counted by a party but not refusals: authentic late copies of records an intermediary itself
# asked the fleets for again (``late-resend``), which an honest session under load provokes. They
# are reported apart (``summary.json``: ``late_copies``) so that ``rejected`` shows only what an
# attacker, a fault or a defect causes: an unattacked session's is empty (issue #32 item 5).
NOT_REFUSALS = ("late-resend",)


def merged_counters(obs) -> dict[str, int]:
    """Every counter of the session by reason: the parties' final counters and the observer's own."""
    merged: dict[str, int] = {}
    for body in obs.stats.values():
        for reason, n in body.get("rejected", {}).items():
            merged[reason] = merged.get(reason, 0) + n
    for reason, n in obs.rejected.items():
        merged[reason] = merged.get(reason, 0) + n
    return {reason: n for reason, n in sorted(merged.items()) if n}


def merged_rejections(obs) -> dict[str, int]:
    """What the session refused, by reason (:data:`NOT_REFUSALS` aside)."""
    return {reason: n for reason, n in merged_counters(obs).items() if reason not in NOT_REFUSALS}


def _role_bytes(traffic_by_task: dict) -> dict[str, int]:
    """Wire bytes sent and received over every task, from a party's counters (as ``stats`` carry them)."""
    out = {"sent": 0, "received": 0}
    for counters in traffic_by_task.values():
        for key, n in counters.get("wire", {}).items():
            direction = key.split(".", 1)[0]
            if direction in out:
                out[direction] += n
    return out


def _party_state(obs, name: str, now: float) -> dict:
    said = obs.last_said.get(name)
    heard = obs.heard.get(name)
    if name in obs.stats:
        state = "stopped"
    elif said == "error":
        state = "error"
    elif name not in obs.ready:
        state = "waiting"
    elif heard is not None and now - heard > SILENT_S:
        state = "silent"
    else:
        state = "up"
    return {"name": name, "state": state, "heard_s_ago": None if heard is None else round(now - heard, 1),
            "rejoined": obs.rejoined[name]}


def live_snapshot(obs) -> dict:
    """What the observer knows now, for the page. Family-independent: tasks, regret, round counts,
    the ledger, counters. Costs one pass over the running task's truths (its partial curve)."""
    from privbandit.runner.results import per_run, worst_privacy

    now = time.monotonic()
    config = obs.config
    running = obs.index if 0 <= obs.index < len(obs.tasks) and not obs.shutting_down else None
    phase = ("failed" if obs.failure else "waiting" if obs.index < 0 else
             "running" if running is not None else "finishing")
    curves, final, privacy = [], {}, {}
    for label in obs.labels:
        done = [r for r in obs.results[label] if r is not None]
        ledgers = [r.privacy for r in done]
        if done:
            pseudo, _ = per_run(done)
            curves.append({"label": label, "kind": "mean", "runs": len(done), "pseudo": _floats(pseudo.mean(axis=0))})
            final[label] = {"mean": float(pseudo[:, -1].mean()), "runs": len(done)}
        if running is not None and obs.tasks[running][1] == label and obs.analyzer_done is not None:
            ledgers.append(obs.analyzer_done["privacy"])
        if ledgers:
            p = worst_privacy(ledgers)
            privacy[label] = {k: p.get(k) for k in ("guarantee", "trust_model", "epsilon_pure", "epsilon_at_delta",
                                                    "delta", "users_protected", "releases")}
    current = None
    if running is not None:
        run, label = obs.tasks[running]
        served = obs.observer.served()
        pseudo, _ = obs.observer.regret_curves(partial=True)
        curves.append({"label": label, "kind": "running", "run": run, "pseudo": _floats(pseudo[0])})
        current = {"index": running, "label": label, "run": run, "served": int(served), "horizon": config.horizon,
                   "records": len(obs.observer.records)}
    rounds: dict[str, dict] = {}
    for (task, party), counts in sorted(obs.round_counts.items()):
        acc = rounds.setdefault(party, {"open": 0, "complete": 0, "released": 0, "failed": 0, "reports": 0})
        for key in ("released", "failed"):  # over the session
            acc[key] += counts[key]
        if task == obs.index:  # what it holds now
            for key in ("open", "complete", "reports"):
                acc[key] = counts[key]
    # The analyzer's records of released rounds (one per release: Observer.records_complete).
    records = sum(r.records for runs in obs.results.values() for r in runs if r is not None)
    records += len(obs.observer.records) if running is not None else 0
    traffic = {"observer": _role_bytes({"session": obs.traffic.as_dict()})}  # the observer runs no task of its own
    for party, body in obs.stats.items():
        role = party.split("-")[0]
        acc = traffic.setdefault(role, {"sent": 0, "received": 0})
        for k, n in _role_bytes(body.get("traffic", {})).items():
            acc[k] += n
    return {
        "phase": phase, "failure": obs.failure, "experiment": config.name, "family": obs.family.name,
        "cumulative": bool(obs.family.plot_options(config).get("cumulative", False)),
        "run_id": obs.run_id, "horizon": config.horizon, "runs": config.runs, "labels": list(obs.labels),
        "elapsed_s": round(time.perf_counter() - obs.started, 1),
        "tasks": {"total": len(obs.tasks), "done": sum(r is not None for runs in obs.results.values() for r in runs),
                  "current": current},
        "regret": {"t": obs.grid.tolist(), "curves": curves, "final": final},
        "rounds": {"intermediaries": rounds, "records": records},
        "privacy": privacy,
        "traffic": traffic,
        "rejected": merged_rejections(obs),
        "parties": [_party_state(obs, p, now) for p in obs.parties],
    }


def results_snapshot(out: Path) -> dict:
    """A finished results directory, for the page: summary.json, the regret means of curves.csv,
    rounds.csv per algorithm, the parties of a distributed run, which axis regret.png uses, and
    which result files there are."""
    return {"phase": "finished", "results": _results(Path(out))}


def _results(out: Path) -> dict:
    from privbandit.runner.results import RESULT_FILES

    files = [name for name in RESULT_FILES if (out / name).is_file()]
    res: dict = {"dir": str(out.resolve()), "files": files}
    try:
        res["summary"] = json.loads((out / "summary.json").read_text()) if "summary.json" in files else None
        try:
            res["cumulative"] = _cumulative(out, res["summary"])
        except ValueError as exc:  # the chart's default axis only: the page names it and shows the rest
            res["cumulative"], res["error"] = False, str(exc)
        if "curves.csv" in files:
            with open(out / "curves.csv", newline="") as fh:
                rows = list(csv.DictReader(fh))
            t = [int(r["t"]) for r in rows]
            labels = [k.removesuffix(".pseudo_mean") for k in (rows[0] if rows else {}) if k.endswith(".pseudo_mean")]
            res["curves"] = {"t": t, "pseudo": {label: [float(r[f"{label}.pseudo_mean"]) for r in rows]
                                                for label in labels}}
        if "rounds.csv" in files:
            with open(out / "rounds.csv", newline="") as fh:
                res["rounds_rows"], res["rounds"] = {}, {}
                for row in csv.DictReader(fh):
                    label = row["algorithm"]
                    res["rounds_rows"][label] = res["rounds_rows"].get(label, 0) + 1
                    acc = res["rounds"].setdefault(label, {"rounds": 0, "reports": 0, "runs": set()})
                    acc["rounds"] += 1
                    acc["reports"] += int(float(row["reports"] or 0))
                    acc["runs"].add(row["run"])
                for acc in res["rounds"].values():
                    acc["runs"] = len(acc["runs"])
        res["parties"] = _parties(out, res["summary"])
        res["audit"] = audit_rows(out)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # a damaged file: say so on the page, serve the rest
        res["error"] = f"{type(exc).__name__}: {exc}"
    return res


def _cumulative(out: Path, summary: dict | None) -> bool:
    """Whether regret.png draws cumulative Reg(t) on a linear axis (the family's plot options for
    this config) rather than Reg(t)/t against log t; the page's chart starts on the same axis."""
    from privbandit.runner import config as experiment_files

    if not summary or not (out / "config.toml").is_file():
        return False
    try:
        fam, config = experiment_files.load(out / "config.toml")
    except (OSError, ValueError) as exc:  # ConfigError is a ValueError; the page names it
        raise ValueError(f"config.toml: {exc}") from None
    return bool(fam.plot_options(config).get("cumulative", False))


def _parties(out: Path, summary: dict | None) -> list[dict] | None:
    """The parties of a distributed run (one log each under ``logs/``), and whether each sent its
    final counters (summary.json's ``parties_missing_stats``); None for an in-process run."""
    logs = out / "logs"
    if not logs.is_dir():
        return None
    missing = set((summary or {}).get("parties_missing_stats", []))
    return [{"name": f.stem, "final_counters": f.stem not in missing} for f in sorted(logs.glob("*.log"))]


class DirectoryError(ValueError):
    """A path given to ``privbandit dashboard`` that is neither a results directory nor a sweep's."""


def results_dirs(paths: list[Path]) -> list[tuple[str, Path]]:
    """Each path as (name, results directory): a results directory (it holds summary.json) as
    itself, a sweep's directory (sweep.csv) as its points in sweep.csv's order. Names are the
    directories' own, prefixed by the sweep's; a name given twice gets its position appended."""
    out: list[tuple[str, Path]] = []
    for path in map(Path, paths):
        if (path / "summary.json").is_file():
            out.append((path.resolve().name or str(path), path))
        elif (path / "sweep.csv").is_file():
            with open(path / "sweep.csv", newline="") as fh:
                names = list(dict.fromkeys(row.get("point", "") for row in csv.DictReader(fh)))
            points = [path / n for n in names if n and (path / n / "summary.json").is_file()]
            if not points:
                raise DirectoryError(f"{path}: a sweep's directory whose sweep.csv names no point with a summary.json")
            out += [(f"{path.resolve().name}/{p.name}", p) for p in points]
        else:
            raise DirectoryError(f"{path}: neither a results directory (summary.json) nor a sweep's (sweep.csv)")
    seen: dict[str, int] = {}
    named = []
    for name, path in out:
        seen[name] = seen.get(name, 0) + 1
        named.append((name if seen[name] == 1 else f"{name} ({seen[name]})", path))
    return named


def compare_snapshot(dirs: list[tuple[str, Path]]) -> dict:
    """Several finished results directories on one page: ``runs`` holds each (its name, then what
    :func:`results_snapshot` holds); ``results`` is the first, as for one directory."""
    runs = [{"name": name, "index": i, **_results(Path(path))} for i, (name, path) in enumerate(dirs)]
    return {"phase": "finished", "results": runs[0], "runs": runs}


AUDIT_FILES = ("audit.json", "audit/audit.json")  # where `privbandit audit … --out` may have put one


def audit_rows(out: Path) -> list[dict] | None:
    """The audit of this results directory, if one was written into it (``privbandit audit FILE
    --out <results>/audit``): per release, the ledger's claim against the audited lower bound."""
    path = next((out / name for name in AUDIT_FILES if (out / name).is_file()), None)
    if path is None:
        return None
    report = json.loads(path.read_text())
    return [{"name": t["name"], "release": t["release"], "guarantee": t["claim"]["guarantee"],
             "claimed": t["claim"].get("epsilon_at_delta"), "delta": t["audit"]["delta"],
             # a refused target's bound is about releases the audit could not vouch for: not shown
             "audited": None if t["verdict"] == "refused" else t["audit"]["epsilon"], "verdict": t["verdict"],
             "samples": t["samples"]}
            for t in report["targets"]]


# --- the web app ---------------------------------------------------------------------------------

class _Cache:
    """One snapshot per PUSH_S however many pages are open: each costs the observer's loop a pass."""

    def __init__(self, make: Callable[[], dict]):
        self.make, self.at, self.data = make, -float("inf"), ""

    def get(self) -> str:
        if time.monotonic() - self.at >= PUSH_S * 0.9:
            self.data, self.at = json.dumps(self.make(), allow_nan=False), time.monotonic()
        return self.data


def make_app(snapshot: Callable[[], dict], results: Path | list[Path] | None = None, host: str = DEFAULT_HOST):
    """The page, ``/api/snapshot`` (JSON), ``/api/stream`` (server-sent events, a snapshot every
    PUSH_S), ``/results/<file>`` (the first results directory's files, read-only; nothing else of
    the directory) and ``/runs/<k>/<file>`` (the k-th's, when several are compared)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, Response, StreamingResponse
    from starlette.routing import Route

    from privbandit.runner.results import RESULT_FILES

    dirs = [] if results is None else [Path(results)] if isinstance(results, (str, Path)) else list(map(Path, results))
    cache = _Cache(snapshot)
    page = PAGE.read_text()

    async def index(request):
        return HTMLResponse(page)

    async def snap(request):
        return Response(cache.get(), media_type="application/json")

    async def stream(request):
        async def events():
            yield "retry: 1000\n\n"  # the page reconnects this soon (to the results server, after the run)
            while True:
                closing = app.state.closing
                yield f"data: {cache.get() if not closing else json.dumps(snapshot(), allow_nan=False)}\n\n"
                if closing:  # the session is over: this was its last state
                    return
                await asyncio.sleep(PUSH_S)

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})

    async def result_file(request):
        name, k = request.path_params["name"], request.path_params.get("k", 0)
        if not 0 <= k < len(dirs) or name not in RESULT_FILES or not (dirs[k] / name).is_file():
            return PlainTextResponse(f"no {name} here", status_code=404)
        return FileResponse(dirs[k] / name, headers={"Cache-Control": "no-store"})

    # A page of another site must not read this one through a DNS name rebound to the loopback.
    hosts = ["127.0.0.1", "localhost", "[::1]"] + ([host] if host not in ("0.0.0.0", "::", "") else [])
    app = Starlette(routes=[Route("/", index), Route("/api/snapshot", snap), Route("/api/stream", stream),
                            Route("/results/{name}", result_file), Route("/runs/{k:int}/{name}", result_file)],
                    middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts)])
    app.state.closing = False
    return app


class Dashboard:
    """The server, bound at construction (:func:`bind`), serving while :meth:`serving` is entered."""

    def __init__(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT):
        self.host, self.port = host, port
        self.sock = bind(host, port)

    @property
    def url(self) -> str:
        return f"http://{'127.0.0.1' if self.host in ('0.0.0.0', '') else self.host}:{self.port}/"

    @contextlib.asynccontextmanager
    async def serving(self, snapshot: Callable[[], dict], results: Path | list[Path] | None = None):
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):  # the host process keeps its own signal handling
                yield

        app = make_app(snapshot, results, self.host)
        server = Server(uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False,
                                       timeout_graceful_shutdown=2))
        task = asyncio.create_task(server.serve(sockets=[self.sock]))
        try:
            yield self
        finally:
            app.state.closing = True  # open streams send the last snapshot and end
            await asyncio.sleep(PUSH_S + 0.1)
            server.should_exit = True
            await asyncio.gather(task, return_exceptions=True)
            self.sock.close()


def serve_results(out: Path | list[Path], port: int, host: str = DEFAULT_HOST,
                  announce: Callable[[str], None] = print) -> None:
    """Serve the finished results directory ``out`` until Ctrl-C (after ``demo --dashboard``), or
    several side by side (``privbandit dashboard DIR DIR …``; a sweep's directory is its points).
    Raises :class:`DirectoryError` naming a path that is neither."""
    single = isinstance(out, (str, Path))
    named = [("", Path(out))] if single else results_dirs(out)
    dirs = [path for _, path in named]
    files = dirs[0] if single else dirs

    def make() -> dict:
        return results_snapshot(dirs[0]) if single else compare_snapshot(named)

    kept: dict = {}

    def snapshot() -> dict:
        # Read again only when a directory changed (a file added or replaced: its summary.json, an
        # audit): a finished directory is otherwise re-read twice a second, and a sweep has many.
        stamp = tuple(_mtime(d / name) for d in dirs for name in ("", "summary.json", *AUDIT_FILES))
        if kept.get("stamp") != stamp:
            kept.update(stamp=stamp, snap=make())
        return kept["snap"]

    dashboard = Dashboard(host, port)

    async def main():
        async with dashboard.serving(snapshot, files):
            announce(dashboard.url)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None
