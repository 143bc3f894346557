"""``privbandit observer``: collects metrics, coordinates the session, writes the results directory.

The observer is the only party that sees ground truth and decodes side by side. It also paces the
session: once every party is ready it announces task 0 (a run of one algorithm) on the control
topic with the task's *public* spec, moves to the next task when the analyzer reports it finished
and the fleets' truth covers all T users, and finally asks everyone to shut down and report their
traffic counters. It writes the same results directory as ``privbandit run``.

With a state directory it checkpoints at every task boundary (the session nonce, the task it is
starting and the results of the tasks done). A restarted observer resumes the same session: it
announces the running task again and asks every party to send that task's metrics again
(``resync``); the parties' metrics are idempotent, so the task is rebuilt whole.
"""

from __future__ import annotations

import logging
import secrets
import time
from pathlib import Path

import numpy as np

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from privbandit.experiment.config import ExperimentConfig
from privbandit.experiment.results import summarize, write_results
from privbandit.experiment.runner import instance_for, resolved_algorithms
from privbandit.protocol.events import BlockTruth
from privbandit.protocol.mechanisms.base import RoundParams
from privbandit.experiment.build import build_adversary, build_ledger, build_mechanism
from privbandit.protocol.observer import Observer, RunResult, checkpoint_grid, coalition_ledger
from privbandit.protocol.parties import RoundRecord
from privbandit.services import codec
from privbandit.services.checkpoint import CheckpointError, spec_fingerprint
from privbandit.services.party import PartyService

log = logging.getLogger("privbandit.observer")

CONTROL_RETRY_S = 3.0
# A task whose metrics stopped coming this long asks everyone to send them again (a broker that
# died before delivering them lost them; every party's metrics are idempotent).
RESYNC_S = 6.0
STATS_WAIT_S = 15.0  # for every party's final counters after the last task
FAILED_STATS_WAIT_S = 3.0  # after a failure some parties may never answer


class SessionFailed(RuntimeError):
    pass


def _plain(x):
    """numpy scalars to Python ones (msgpack takes no numpy types)."""
    return x.item() if isinstance(x, np.generic) else x


def _result_state(r: RunResult) -> dict:
    return {"checkpoints": r.checkpoints.tolist(), "pseudo_regret": r.pseudo_regret.tolist(),
            "realized_regret": r.realized_regret.tolist(),
            "rounds": [{k: _plain(v) for k, v in row.items()} for row in r.rounds],
            "privacy": r.privacy, "reports": int(r.reports), "protocol_bits": int(r.protocol_bits),
            "max_report_bits": int(r.max_report_bits), "eliminated_at": [int(a) for a in r.eliminated_at],
            "best_arm": int(r.best_arm)}


def _result_from_state(s: dict) -> RunResult:
    return RunResult(checkpoints=np.asarray(s["checkpoints"], dtype=np.int64),
                     pseudo_regret=np.asarray(s["pseudo_regret"], dtype=np.float64),
                     realized_regret=np.asarray(s["realized_regret"], dtype=np.float64),
                     rounds=list(s["rounds"]), privacy=s["privacy"], reports=s["reports"],
                     protocol_bits=s["protocol_bits"], max_report_bits=s["max_report_bits"],
                     eliminated_at=list(s["eliminated_at"]), best_arm=s["best_arm"])


class ObserverService(PartyService):
    role = "observer"

    def __init__(self, settings, config: ExperimentConfig, parties: list[str], out: Path,
                 ready_timeout_s: float = 60.0, state_dir: Path | None = None):
        super().__init__(settings, state_dir=state_dir)
        self.ready_deadline = time.monotonic() + ready_timeout_s
        self.ready_timeout_s = ready_timeout_s
        self.config = config
        self.setup()
        self.parties = parties
        self.out = out
        self.ready: set[str] = set()
        self.stats: dict[str, dict] = {}
        self.index = -1
        self.last_metrics = self.last_resync = time.monotonic()
        self.session = secrets.token_hex(8)  # tells this session's checkpoints from an earlier one's
        self.failure: str | None = None
        self.shutting_down = False
        self.started = time.perf_counter()
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=Console(stderr=True))
        self.bar = self.progress.add_task(f"{config.name} over MQTT", total=len(self.tasks))
        self.experiment = spec_fingerprint(config.model_dump(mode="json"))
        self.resuming = self.checkpoint is not None
        if self.resuming:
            self.restore(self.checkpoint)

    # --- checkpoints (task boundaries) -------------------------------------------------------
    def save_session(self) -> None:
        if self.state is None:
            return
        results = {label: [None if r is None else _result_state(r) for r in runs]
                   for label, runs in self.results.items()}
        self.save_state({"session": self.session, "results": results, "compute": self.compute,
                         "elapsed": time.perf_counter() - self.started}, task=self.index, spec=self.experiment)

    def restore(self, ckpt) -> None:
        if ckpt.spec != self.experiment:
            raise CheckpointError("checkpoint-wrong-experiment", f"{self.state.path} was taken with another "
                                  "experiment file: empty the state directory to start afresh")
        try:
            s = ckpt.state
            self.session = str(s["session"])
            self.results = {label: [None if r is None else _result_from_state(r) for r in s["results"][label]]
                            for label in self.algos}
            self.compute = {label: float(s["compute"][label]) for label in self.algos}
            self.started -= float(s["elapsed"])
            self.index = ckpt.task - 1  # next_task() starts it again
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError("checkpoint-schema", f"{self.state.path}: {type(exc).__name__}: {exc}") from None

    # --- what a paper family changes (services/linear.py: LinearObserverService) ------------
    def setup(self) -> None:
        """The session's tasks (run, label), in the in-process engine's order, and result slots."""
        config = self.config
        self.algos = resolved_algorithms(config)
        self.tasks = [(r, label) for r in range(config.runs) for label in self.algos]
        self.results = {label: [None] * config.runs for label in self.algos}
        self.compute = dict.fromkeys(self.algos, 0.0)
        self.grid = checkpoint_grid(config.horizon, config.checkpoints)

    def records_complete(self) -> bool:
        """Has every release the analyzer made reached us as a record? (A broker that died may
        have lost one; the resync asks for it again.)"""
        return len(self.observer.records) >= self.analyzer_done["privacy"]["releases"]

    def begin_task(self, run: int, label: str) -> dict:
        """Set up scoring of one task; returns its public spec (the control message's body)."""
        # Built once per task: re-announcements must not rebuild the world (or re-read a means file).
        self.instance = instance_for(self.config, run)
        algo = self.algos[label]
        mechanism = build_mechanism(algo)
        adversary = build_adversary(algo, mechanism, self.config.seed, (run, label), self.instance)
        ledger = build_ledger(algo, mechanism, self.config.delta)
        self.observer = Observer(self.grid, algo.p, coalition_ledger(mechanism, ledger, adversary))
        return {"index": self.index, "run": run, "label": label, "algorithm": algo.model_dump(),
                "horizon": self.config.horizon, "arms": self.instance.n_arms, "delta": self.config.delta,
                "session": self.session}

    def subscriptions(self):
        return [self.t("metrics", "+")]

    async def on_connect(self) -> None:
        # The observer publishes control, not readiness. Resuming: every party is already running
        # (none will say ready again), so start the checkpointed task again at once and ask for
        # its metrics.
        if self.resuming:
            self.resuming = False
            self.ready = set(self.parties)
            self.progress.start()
            self.progress.update(self.bar, completed=max(self.index + 1, 0))
            await self.next_task()
            await self.resync()
            log.info("resumed the session at task %d from %s", self.index, self.state.path)

    async def resync(self) -> None:
        self.last_resync = time.monotonic()
        await self.bus.publish(self.t("control"), codec.ControlMsg(run=self.run_id, action="resync", task=self.index))

    # --- session pacing ---------------------------------------------------------------------
    async def announce(self) -> None:
        self.last_announce = time.monotonic()
        if self.shutting_down:
            await self.bus.publish(self.t("control"), codec.ControlMsg(run=self.run_id, action="shutdown"))
        elif self.index >= 0:
            await self.bus.publish(self.t("control"), codec.ControlMsg(
                run=self.run_id, action="task", task=self.index, body=self.task_body))

    async def next_task(self) -> None:
        self.index += 1
        if self.index == len(self.tasks):
            self.shutting_down = True
            self.shutdown_at = time.monotonic()
        else:
            self.task_body = self.begin_task(*self.tasks[self.index])
            self.analyzer_done: dict | None = None
            self.task_started = time.perf_counter()
        self.save_session()
        await self.announce()

    async def fail(self, reason: str) -> None:
        self.failure = reason
        self.shutting_down = True
        self.shutdown_at = time.monotonic()
        await self.announce()

    async def tick(self) -> None:
        if self.index < 0 and not self.shutting_down and time.monotonic() > self.ready_deadline:
            missing = ", ".join(sorted(set(self.parties) - self.ready))
            await self.fail(f"parties never became ready within {self.ready_timeout_s:.0f} s: {missing}")
        if self.index >= 0 and time.monotonic() - self.last_announce > CONTROL_RETRY_S:
            await self.announce()  # for a party that restarted and missed it
        if (0 <= self.index and not self.shutting_down and time.monotonic() - self.last_metrics > RESYNC_S
                and time.monotonic() - self.last_resync > RESYNC_S):
            await self.resync()
        wait = FAILED_STATS_WAIT_S if self.failure else STATS_WAIT_S
        if self.shutting_down and time.monotonic() - self.shutdown_at > wait:
            self.finished = True  # write what we have; missing stats are reported as missing

    # --- metrics ----------------------------------------------------------------------------
    async def on_message(self, name: str, msg) -> None:
        self.last_metrics = time.monotonic()
        if isinstance(msg, codec.StatusMsg):
            await self.on_status(msg)
        elif isinstance(msg, (codec.TruthMsg, codec.RecordMsg)):
            if msg.task != self.index:
                return self.reject("wrong-task", f"{msg.kind} for task {msg.task}")
            if isinstance(msg, codec.TruthMsg):
                self.observer.on_truth(BlockTruth(
                    round_id=msg.round, block=msg.block, first_user=msg.first_user, size=msg.size, gap=msg.gap,
                    realized_regret=msg.realized_regret, realized_at_checkpoints=msg.realized_at,
                    reward_sum=msg.reward_sum, noise_sum=msg.noise_sum, attackers=msg.attackers))
            else:
                self.observer.on_record(RoundRecord(
                    round_id=msg.round, batch=msg.batch, arm=msg.arm, params=RoundParams(**msg.params.model_dump()),
                    release=msg.release, estimate=msg.estimate, wrapped=msg.wrapped, central_noise=msg.central_noise,
                    reports=msg.reports, epsilon=msg.epsilon))
            await self.maybe_finish_task()
        else:
            self.reject("unexpected-kind", msg.kind)

    async def on_status(self, msg: codec.StatusMsg) -> None:
        if msg.state == "ready":
            self.ready.add(msg.party)
            if self.index < 0 and self.ready >= set(self.parties):
                self.progress.start()
                await self.next_task()
        elif msg.state == "error":
            await self.fail(f"{msg.party}: {msg.body.get('reason', msg.body)}")
        elif msg.state == "task-done" and msg.task == self.index:
            self.analyzer_done = msg.body
            await self.maybe_finish_task()
        elif msg.state == "stats":
            self.stats[msg.party] = msg.body
            if self.shutting_down and set(self.stats) >= set(self.parties):
                self.finished = True

    def served(self) -> int:
        return sum(b.size for b in self.observer.blocks.values())

    def finish_task(self, run: int, label: str) -> None:
        self.results[label][run] = self.observer.result(
            self.analyzer_done["privacy"], self.analyzer_done["eliminated_at"], self.instance.best_arm)

    async def maybe_finish_task(self) -> None:
        if self.shutting_down or self.analyzer_done is None or self.served() < self.config.horizon:
            return
        if not self.records_complete():
            return  # a round's record is still on its way (or lost: resync)
        run, label = self.tasks[self.index]
        self.finish_task(run, label)
        self.compute[label] += time.perf_counter() - self.task_started
        self.progress.advance(self.bar)
        await self.next_task()

    # --- results ----------------------------------------------------------------------------
    def write(self) -> dict:
        self.progress.stop()
        if self.failure:
            raise SessionFailed(self.failure)
        elapsed = time.perf_counter() - self.started
        return self.write_results(elapsed)

    def write_results(self, elapsed: float) -> dict:
        summary = summarize(self.config, self.results, self.algos, self.compute, elapsed, transport="mqtt")
        add_wire_accounting(summary, self)
        write_results(self.out, self.config, summary, self.results, self.algos)
        return summary


def add_wire_accounting(summary: dict, obs: ObserverService) -> None:
    """Per algorithm and role, both directions: payload and wire bytes, per reporting user."""
    rejected: dict[str, int] = {}
    for body in obs.stats.values():
        for reason, n in body.get("rejected", {}).items():
            rejected[reason] = rejected.get(reason, 0) + n
    for reason, n in obs.rejected.items():
        rejected[reason] = rejected.get(reason, 0) + n
    summary["rejected"] = {reason: n for reason, n in sorted(rejected.items()) if n}
    summary["parties_missing_stats"] = sorted(set(obs.parties) - set(obs.stats))
    for label, comm in summary["communication"].items():
        tasks = [str(i) for i, (_, l) in enumerate(obs.tasks) if l == label]
        reports = comm["reports_per_run"] * len(tasks)
        roles: dict[str, dict[str, int]] = {}
        for party, body in obs.stats.items():
            role = party.split("-")[0]
            acc = roles.setdefault(role, {})
            for t in tasks:
                for kind in ("payload", "wire"):
                    for key, n in body.get("traffic", {}).get(t, {}).get(kind, {}).items():
                        acc[f"{kind}.{key}"] = acc.get(f"{kind}.{key}", 0) + n
        users = roles.get("users", {})
        comm["bytes_per_user_payload"] = users.get("payload.sent.report", 0) / reports if reports else 0.0
        comm["bytes_per_user_wire"] = users.get("wire.sent.report", 0) / reports if reports else 0.0
        comm["roles"] = {role: {k: v / reports for k, v in acc.items()} for role, acc in roles.items()} if reports else {}
        comm["roles_unit"] = "bytes per reporting user"
