"""``privbandit observer``: collects metrics, coordinates the session, writes the results directory.

The observer is the only party that sees ground truth and decodes side by side. It also paces the
session: once every party is ready it announces task 0 (one run of one algorithm) on the control
topic with the task's *public* spec, moves to the next task when the analyzer reports it finished
and the fleets' truth covers all T users, and finally asks everyone to shut down and report their
traffic counters. It writes the same results directory as ``privbandit run`` in-process, through
the same :class:`~privbandit.protocol.spine.observer.Observer` and results writer, for any family.

It believes only what a party may say: a message on ``metrics/<party>`` must come from that party
(the broker lets only that party's account write there, and the message must name it); truths must
carry the fleets' MAC and fit the session (users inside the horizon, checkpoints where they fall);
records come from the analyzer only; every counter is checked. Anything else is refused and
counted, and the session goes on.

With a state directory it checkpoints at every task boundary (the session nonce, the task it is
starting and the results of the tasks done) and, within a task, the truths it has accepted, at most
about two seconds after they came (``TRUTH_SAVE_S``). A restarted observer resumes the same
session: it announces the running task again and asks every party to send that task's metrics
again (``resync``); the parties' metrics are idempotent, so the task is rebuilt whole. The truths
come from its own checkpoint as well, because a fleet restarted earlier in the task no longer holds
those it sent before its restart. That checkpoint grows with the task's truths (one per plan and
block of users: a few hundred bytes each); the new ones are appended to its journal at most once a
second while they come (:mod:`~privbandit.services.checkpoint`), not the whole file rewritten.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from privbandit.protocol.primitives.report_auth import ReportAuthenticator
from privbandit.protocol.spine.observer import Observer, RunResult, checkpoint_grid, checkpoints_in
from privbandit.runner.results import summarize, write_results
from privbandit.services import codec
from privbandit.services.bus import topic_party
from privbandit.services.checkpoint import CheckpointError, spec_fingerprint
from privbandit.services.dashboard import NOT_REFUSALS, live_snapshot, merged_counters, merged_rejections
from privbandit.services.party import PartyService
from privbandit.services.users import status_tag, truth_tag

log = logging.getLogger("privbandit.observer")

CONTROL_RETRY_S = 3.0
# A task whose metrics stopped coming this long asks everyone to send them again (a broker that
# died before delivering them lost them; every party's metrics are idempotent).
RESYNC_S = 6.0
STATS_WAIT_S = 15.0  # for every party's final counters after the last task
FAILED_STATS_WAIT_S = 3.0  # after a failure some parties may never answer
MAX_COUNTER_KEYS = 256  # a party's refusal reasons and traffic classes: a few dozen in practice
# A running task that records no round, serves no user and does not finish for this long has
# stalled (a hung party, a broker that stopped routing): the session fails, naming the task and
# the parties not heard from, instead of waiting for ever (issue #20 items 7 and 10). Retries and
# resyncs repeat every few seconds, so a live session never comes near it; twice an intermediary's
# default round deadline (120 s), after which a straggling round is released or failed anyway.
STALL_S = 240.0
# Accepted truths are checkpointed at the first tick (one a second) this long after the last save:
# a fleet keeps its truths only in memory, so truths the observer lost with its process come back
# from a resync only if their fleet has not restarted since it sent them. At most about two
# seconds of truths are exposed that way.
TRUTH_SAVE_S = 1.0
# Where stderr is not a terminal (a file, a pipe, a CI log), rich's bar draws nothing until the
# session ends: a line this often says how the running task goes instead (issue #35: ten minutes of
# an empty log). `privbandit observer` takes PRIVBANDIT_PROGRESS_LOG_S for another period.
PROGRESS_LOG_S = 30.0


class SessionFailed(RuntimeError):
    pass


Count = Annotated[StrictInt, Field(ge=0)]  # a counter is a non-negative int: not a float, not a string


class _Traffic(BaseModel):
    model_config = ConfigDict(extra="forbid")
    payload: dict[str, Count] = {}
    wire: dict[str, Count] = {}
    messages: dict[str, Count] = {}
    # per intermediary party (Traffic.by_party): 3 counters × the classes a party uses × k intermediaries
    by_party: dict[str, Count] = Field(default_factory=dict, max_length=8 * MAX_COUNTER_KEYS)


class _Stats(BaseModel):
    """A party's final counters, as the observer accepts them."""

    model_config = ConfigDict(extra="forbid")
    rejected: dict[str, Count] = Field(default_factory=dict, max_length=MAX_COUNTER_KEYS)
    traffic: dict[str, _Traffic] = Field(default_factory=dict, max_length=MAX_COUNTER_KEYS)


class _RoundCounts(BaseModel):
    """An intermediary's round counts for one task (the dashboard's round table)."""

    model_config = ConfigDict(extra="forbid")
    open: Count
    complete: Count
    released: Count
    failed: Count
    reports: Count


class _TaskDone(BaseModel):
    model_config = ConfigDict(extra="forbid")
    privacy: dict
    learner: list[dict]
    records: int = Field(ge=0)  # the releases the analyzer decoded, each sent as a record


def _result_state(r: RunResult) -> dict:
    return {"runs": r.runs, "pseudo": r.pseudo.tolist(), "realized": r.realized.tolist(),
            "rounds": [codec.body_to_wire(row) for row in r.rounds], "privacy": r.privacy, "learner": r.learner,
            "reports": int(r.reports), "protocol_bits": int(r.protocol_bits), "max_report_bits": int(r.max_report_bits),
            "records": int(r.records)}


def _result_from_state(s: dict, grid: np.ndarray) -> RunResult:
    return RunResult(runs=list(s["runs"]), checkpoints=grid, pseudo=np.asarray(s["pseudo"], dtype=np.float64),
                     realized=np.asarray(s["realized"], dtype=np.float64),
                     rounds=[codec.body_from_wire(row) for row in s["rounds"]], privacy=s["privacy"],
                     learner=list(s["learner"]), reports=s["reports"], protocol_bits=s["protocol_bits"],
                     max_report_bits=s["max_report_bits"], records=s["records"])


class ObserverService(PartyService):
    role = "observer"

    def __init__(self, settings, family, config, parties: list[str], out: Path,
                 ready_timeout_s: float = 60.0, state_dir: Path | None = None, stall_timeout_s: float = STALL_S,
                 dashboard=None, *, report_key: int, progress_log_s: float | None = PROGRESS_LOG_S):
        super().__init__(settings, state_dir=state_dir)
        # The web page (privbandit.services.dashboard.Dashboard, bound already), served while the
        # session runs; it reads this object's state, nothing more.
        self.dashboard = dashboard
        self.round_counts: dict[tuple[int, str], dict] = {}  # (task, intermediary) → its last counts
        self.last_said: dict[str, str] = {}  # party → the state (or kind) of its last accepted message
        self.rejoined: Counter[str] = Counter()  # parties that said ready again mid-session
        if not stall_timeout_s > 0:
            raise ValueError(f"stall_timeout_s={stall_timeout_s}: must be > 0 seconds")
        self.stall_timeout_s = stall_timeout_s
        self.progress_mark: tuple = ()
        self.progress_at = time.monotonic()
        self.heard: dict[str, float] = {}  # party → when its last metrics message came
        self.family = family
        self.config = config
        self.ready_deadline = time.monotonic() + ready_timeout_s
        self.ready_timeout_s = ready_timeout_s
        self.labels = family.labels(config)
        # Over MQTT every task is one run of one algorithm, in the in-process engine's order.
        self.tasks = [(r, label) for r in range(config.runs) for label in self.labels]
        self.results: dict[str, list] = {label: [None] * config.runs for label in self.labels}
        self.compute = dict.fromkeys(self.labels, 0.0)
        self.grid = checkpoint_grid(config.horizon, config.checkpoints)
        self.auth = ReportAuthenticator(report_key)  # the users' master, the session's (truth and status MACs)
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
        console = Console(stderr=True)
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console)
        if progress_log_s is not None and not progress_log_s > 0:
            raise ValueError(f"progress_log_s={progress_log_s}: must be > 0 seconds (None: no progress lines)")
        # On a terminal the bar shows progress live; elsewhere a log line every progress_log_s.
        self.progress_log_s = None if console.is_terminal else progress_log_s
        self.progress_logged_at = time.monotonic()
        self.bar = self.progress.add_task(f"{config.name} over MQTT", total=len(self.tasks))
        self.experiment = spec_fingerprint(config.model_dump(mode="json"))
        self.truth_msgs: dict[tuple[int, int], bytes] = {}  # the running task's accepted truths, encoded
        self.record_msgs: set[bytes] = set()  # … its accepted records, encoded
        self.done_msg: bytes | None = None  # … and the analyzer's task-done
        # The last task's accepted truths, records and task-done, encoded: a fleet may serve a plan
        # of it again, and the analyzer answers a resync of it with its records and task-done,
        # after this observer moved on. Byte-identical copies are ignored, as a duplicate within a
        # task is; only a message that differs is refused (issue #32 item 5: unattacked sessions
        # showed 88–125 wrong-task and 1–2 bad-status this way).
        self.last_accepted: tuple[int, set[bytes]] = (-1, set())
        self.truths_saved = True
        self.truths_saved_at = time.monotonic()
        self.truths_saved_n = 0  # how many of truth_msgs (in order) the checkpoint holds
        self.saved_truths: list[bytes] = []  # a resumed task's, restored once its scoring is set up
        self.resuming = self.checkpoint is not None
        if self.resuming:
            self.restore(self.checkpoint)

    # --- checkpoints (task boundaries) -------------------------------------------------------
    def session_state(self) -> dict:
        results = {label: [None if r is None else _result_state(r) for r in runs] for label, runs in self.results.items()}
        return {"session": self.session, "results": results, "compute": self.compute,
                "elapsed": time.perf_counter() - self.started, "truths": list(self.truth_msgs.values())}

    def save_session(self) -> None:
        """At a task boundary: the whole session state, a snapshot."""
        if self.state is None:
            return
        self.save_state(self.session_state(), task=self.index, spec=self.experiment)
        self.truths_saved, self.truths_saved_at, self.truths_saved_n = True, time.monotonic(), len(self.truth_msgs)

    def save_truths(self) -> None:
        """Within a task: the truths accepted since the last save, to the checkpoint's journal."""
        if self.state is None:
            return
        new = list(islice(self.truth_msgs.values(), self.truths_saved_n, None))
        self.save_state(self.session_state, task=self.index, spec=self.experiment, added={"truths": new},
                        replaced={"elapsed": time.perf_counter() - self.started})
        self.truths_saved, self.truths_saved_at, self.truths_saved_n = True, time.monotonic(), len(self.truth_msgs)

    def restore(self, ckpt) -> None:
        if ckpt.spec != self.experiment:
            raise CheckpointError("checkpoint-wrong-experiment", f"{self.state.path} was taken with another "
                                  "experiment file: empty the state directory to start afresh")
        try:
            s = ckpt.state
            self.session = str(s["session"])
            self.results = {label: [None if r is None else _result_from_state(r, self.grid) for r in s["results"][label]]
                            for label in self.labels}
            self.compute = {label: float(s["compute"][label]) for label in self.labels}
            self.started -= float(s["elapsed"])
            self.index = ckpt.task - 1  # next_task() starts it again
            self.saved_truths = [bytes(b) for b in s.get("truths", [])]
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError("checkpoint-schema", f"{self.state.path}: {type(exc).__name__}: {exc}") from None

    # --- tasks ---------------------------------------------------------------------------------
    def begin_task(self, run: int, label: str) -> dict:
        """Set up scoring of one task; returns its public spec (the control message's body)."""
        self.observer = Observer(self.grid, 1)
        self.row = self.family.row_maker(self.config, label)
        self.truth_msgs, self.record_msgs, self.done_msg = {}, set(), None
        saved, self.saved_truths = self.saved_truths, []
        for data in saved:  # checked again: a checkpoint file is the observer's, not the fleets' word
            try:
                msg = codec.decode(data)
            except codec.DecodeError:
                msg = None
            if not isinstance(msg, codec.TruthMsg) or msg.task != self.index:
                self.reject("checkpoint-bad-truth", f"{self.state.path}: a saved truth is not this task's")
            elif self.check_truth(msg):
                self.accept_truth(msg, data)
        return codec.TaskSpec(index=self.index, runs=[run], label=label, family=self.family.name,
                              public=self.family.public_task(self.config, label, [run]),
                              session=self.session).model_dump()

    def subscriptions(self):
        return [self.t("metrics", "+")]

    async def on_connect(self) -> None:
        # The observer publishes control, not readiness. Before the first task, it asks the parties
        # that said "ready" before it subscribed to say it again now, instead of at their next tick
        # (up to 1 s later). Resuming: every party is already running (none will say ready again),
        # so start the checkpointed task again at once and ask for its metrics.
        if self.index < 0 and not self.resuming:
            await self.bus.publish(self.t("control"), codec.ControlMsg(run=self.run_id, action="resync"))
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
        done = set() if self.done_msg is None else {self.done_msg}
        self.last_accepted = (self.index - 1, set(self.truth_msgs.values()) | self.record_msgs | done)
        if self.index == len(self.tasks):
            self.truth_msgs = {}
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
        if 0 <= self.index and not self.shutting_down and getattr(self, "observer", None) is not None:
            self.log_progress()
            await self.check_stall()
            if not self.truths_saved and time.monotonic() - self.truths_saved_at >= TRUTH_SAVE_S:
                self.save_truths()
        wait = FAILED_STATS_WAIT_S if self.failure else STATS_WAIT_S
        if self.shutting_down and time.monotonic() - self.shutdown_at > wait:
            self.finished = True  # write what we have; missing stats are reported as missing

    def log_progress(self, now: float | None = None) -> str | None:
        """Once every ``progress_log_s`` while a task runs, log (and return) where it is: the task,
        its rounds recorded, users served of the horizon and their rate over the task so far."""
        now = time.monotonic() if now is None else now
        if self.progress_log_s is None or now - self.progress_logged_at < self.progress_log_s:
            return None
        self.progress_logged_at = now
        run, label = self.tasks[self.index]
        served, seconds = self.observer.served(), time.perf_counter() - self.task_started
        line = (f"progress: task {self.index + 1}/{len(self.tasks)} ({label}, run {run}): "
                f"{len(self.observer.records):,} rounds recorded, {served:,}/{self.config.horizon:,} users served, "
                f"{served / seconds if seconds > 0 else 0:,.0f} users/s over {seconds:.0f} s; "
                f"session {time.perf_counter() - self.started:.0f} s")
        log.info("%s", line)
        return line

    async def check_stall(self) -> None:
        """Fail the session if the running task has made no progress for ``stall_timeout_s``."""
        now = time.monotonic()
        mark = (self.index, len(self.observer.records), self.observer.served(), self.analyzer_done is not None)
        if mark != self.progress_mark:
            self.progress_mark, self.progress_at = mark, now
            return
        if now - self.progress_at <= self.stall_timeout_s:
            return
        run, label = self.tasks[self.index]
        silent = sorted(p for p in self.parties if now - self.heard.get(p, -float("inf")) > self.stall_timeout_s)
        await self.fail(f"task {self.index} ({label}, run {run}) made no progress for {self.stall_timeout_s:.0f} s: "
                        f"{len(self.observer.records)} rounds recorded, {self.observer.served()} of "
                        f"{self.config.horizon} users served; no metrics for as long from: "
                        f"{', '.join(silent) or 'none (all parties still talk)'}")

    # --- metrics ----------------------------------------------------------------------------
    async def serve(self) -> None:
        if self.dashboard is None:
            return await super().serve()
        async with self.dashboard.serving(lambda: live_snapshot(self)):
            log.info("dashboard at %s", self.dashboard.url)
            await super().serve()

    async def on_message(self, name: str, msg) -> None:
        now = time.monotonic()
        # An intermediary's round counts come every few seconds whatever happens: they must not
        # put off the resync of a task whose metrics stopped.
        if not (isinstance(msg, codec.StatusMsg) and msg.state == "rounds"):
            self.last_metrics = now
        sender = topic_party(name)
        if sender in self.parties:
            self.heard[sender] = now
        if sender not in self.parties and not (sender == self.name and isinstance(msg, codec.StatusMsg)):
            return self.reject("unknown-sender", f"{msg.kind} on {name}")
        if isinstance(msg, codec.StatusMsg):
            if msg.party != sender:
                return self.reject("impersonated-status", f"{msg.party} on {name}")
            # Fleets share the users' account, and so does anyone holding it: a fleet's status
            # counts only with the fleets' MAC (an error would fail the session, counters would
            # replace the fleet's own).
            if sender.startswith("users-") and not hmac.compare_digest(msg.tag, status_tag(self.auth, msg)):
                return self.reject("bad-status-tag", f"{msg.state} of {msg.party}")
            await self.on_status(msg)
            self.last_said[sender] = msg.state
            return
        self.last_said[sender] = msg.kind
        if isinstance(msg, codec.TruthMsg):
            if not sender.startswith("users-"):
                return self.reject("truth-not-from-users", name)
            if msg.task != self.index:
                if self.sent_again(msg):
                    return None  # a fleet served a plan of the last task again: as a duplicate within a task
                return self.reject("wrong-task", f"truth for task {msg.task}")
            if self.check_truth(msg):
                self.accept_truth(msg)
        elif isinstance(msg, codec.RecordMsg):
            if sender != "analyzer":
                return self.reject("record-not-from-analyzer", name)
            if msg.task != self.index:
                if self.sent_again(msg):
                    return None  # the analyzer answered a resync of the last task after we moved on
                return self.reject("wrong-task", f"record for task {msg.task}")
            record = codec.record_of(msg)
            try:
                self.family.check_record(record)
            except ValueError as exc:
                return self.reject("bad-record", f"round {msg.round}: {str(exc)[:120]}")
            if self.observer.on_record(record):
                self.record_msgs.add(codec.encode(msg))
        else:
            return self.reject("unexpected-kind", msg.kind)
        await self.maybe_finish_task()

    def sent_again(self, msg) -> bool:
        """Is ``msg`` a byte-identical copy of a truth, record or task-done accepted in the last task?"""
        task, accepted = self.last_accepted
        return msg.task == task and codec.encode(msg) in accepted

    def accept_truth(self, msg: codec.TruthMsg, data: bytes | None = None) -> None:
        if self.observer.on_truth(codec.truth_of(msg)):
            self.truth_msgs[msg.plan, msg.block] = codec.encode(msg) if data is None else data
            self.truths_saved = False

    def check_truth(self, msg: codec.TruthMsg) -> bool:
        """A truth must be the fleets' (its MAC), inside the horizon, with one value per checkpoint
        that falls in its block, and extras of the family's shape."""
        if not hmac.compare_digest(msg.tag, truth_tag(self.auth, msg)):
            self.reject("bad-truth-tag", f"plan {msg.plan}, block {msg.block}")
            return False
        inside = checkpoints_in(self.grid, msg.first_user, msg.size).size
        if (msg.first_user + msg.size > self.config.horizon or msg.pseudo.shape != (1,)
                or msg.pseudo_at.shape != (1, inside)):
            self.reject("bad-truth", f"plan {msg.plan}, block {msg.block}")
            return False
        try:
            self.family.check_truth(codec.truth_of(msg))
        except ValueError as exc:
            self.reject("bad-truth", f"plan {msg.plan}: {str(exc)[:120]}")
            return False
        return True

    async def on_status(self, msg: codec.StatusMsg) -> None:
        if msg.state == "ready":
            if self.index >= 0 and self.last_said.get(msg.party, "ready") != "ready":
                self.rejoined[msg.party] += 1  # restarted, or reconnected to the broker
            self.ready.add(msg.party)
            if self.index < 0 and self.ready >= set(self.parties):
                self.progress.start()
                await self.next_task()
        elif msg.state == "error":
            await self.fail(f"{msg.party}: {str(msg.body.get('reason', msg.body))[:500]}")
        elif msg.state == "task-done":
            if msg.party != "analyzer" or msg.task != self.index:
                if self.sent_again(msg):
                    return None  # the analyzer answered a resync of the last task after we moved on
                return self.reject("bad-status", f"task-done from {msg.party} for task {msg.task}")
            try:
                self.analyzer_done = _TaskDone.model_validate(msg.body).model_dump()
            except ValidationError:
                return self.reject("bad-status", "task-done body")
            self.done_msg = codec.encode(msg)
            await self.maybe_finish_task()
        elif msg.state == "rounds":
            if (msg.party == "analyzer" or msg.party.startswith("users-") or msg.task is None
                    or not 0 <= msg.task < len(self.tasks)):  # bounded: one entry per task and intermediary
                return self.reject("bad-status", f"round counts from {msg.party}")
            try:
                self.round_counts[msg.task, msg.party] = _RoundCounts.model_validate(msg.body).model_dump()
            except ValidationError:
                return self.reject("bad-status", f"round counts of {msg.party}")
        elif msg.state == "stats":
            try:
                self.stats[msg.party] = _Stats.model_validate(msg.body).model_dump()
            except ValidationError:
                return self.reject("bad-status", f"stats of {msg.party}")
            if self.shutting_down and set(self.stats) >= set(self.parties):
                self.finished = True

    def records_complete(self) -> bool:
        """Has every release the analyzer decoded reached us as a record? (A broker that died may
        have lost one; the resync asks for it again.) Counted by the analyzer, not read off the
        ledger, whose releases are per user: a plan of many users is one record."""
        return len(self.observer.records) >= self.analyzer_done["records"]

    async def maybe_finish_task(self) -> None:
        if self.shutting_down or self.analyzer_done is None or self.observer.served() < self.config.horizon:
            return
        if not self.records_complete():
            return  # a round's record is still on its way (or lost: resync)
        run, label = self.tasks[self.index]
        try:
            result = self.observer.result([run], self.analyzer_done["privacy"], self.analyzer_done["learner"], self.row)
            self.family.finish(self.config, label, result)
        except (RuntimeError, ValueError, KeyError, TypeError) as exc:  # truths that do not add up
            return await self.fail(f"task {self.index} ({label}, run {run}) cannot be scored: {exc}")
        self.results[label][run] = result
        self.compute[label] += time.perf_counter() - self.task_started
        self.progress.advance(self.bar)
        await self.next_task()

    # --- results ----------------------------------------------------------------------------
    def write(self) -> dict:
        self.progress.stop()
        if self.failure:
            raise SessionFailed(self.failure)
        elapsed = time.perf_counter() - self.started
        results = {label: runs for label, runs in self.results.items()}
        summary = summarize(self.family, self.config, results, self.compute, elapsed, transport="mqtt")
        add_wire_accounting(summary, self)
        write_results(self.out, self.family, self.config, summary, results)
        return summary


def add_wire_accounting(summary: dict, obs: ObserverService) -> None:
    """Per algorithm and role, both directions: payload and wire bytes, per reporting user; and what
    the users sent, per user and per intermediary party (``per_user``: messages, payload bytes and
    wire bytes to each of k shufflers and in total, N users a run)."""
    summary["rejected"] = merged_rejections(obs)
    summary["late_copies"] = sum(merged_counters(obs).get(reason, 0) for reason in NOT_REFUSALS)
    summary["parties_missing_stats"] = sorted(set(obs.parties) - set(obs.stats))
    for label, comm in summary["communication"].items():
        tasks = [str(i) for i, (_, l) in enumerate(obs.tasks) if l == label]
        reports = comm["reports_per_run"] * len(tasks)
        roles: dict[str, dict[str, int]] = {}
        by_party: dict[str, int] = {}  # the fleets' counters per intermediary
        for party, body in obs.stats.items():
            role = party.split("-")[0]
            acc = roles.setdefault(role, {})
            for t in tasks:
                counters = body.get("traffic", {}).get(t, {})
                for kind in ("payload", "wire"):
                    for key, n in counters.get(kind, {}).items():
                        acc[f"{kind}.{key}"] = acc.get(f"{kind}.{key}", 0) + n
                if role == "users":
                    for key, n in counters.get("by_party", {}).items():
                        by_party[key] = by_party.get(key, 0) + n
                    for key, n in counters.get("messages", {}).items():
                        acc[f"messages.{key}"] = acc.get(f"messages.{key}", 0) + n
        users = roles.get("users", {})
        comm["bytes_per_user_payload"] = users.get("payload.sent.report", 0) / reports if reports else 0.0
        comm["bytes_per_user_wire"] = users.get("wire.sent.report", 0) / reports if reports else 0.0
        comm["roles"] = {role: {k: v / reports for k, v in acc.items() if not k.startswith("messages.")}
                         for role, acc in roles.items()} if reports else {}
        comm["roles_unit"] = "bytes per reporting user"
        comm["per_user"] = users_sent_per_user(users, by_party, obs.family.users_protected(obs.config) * len(tasks))


def users_sent_per_user(users: dict[str, int], by_party: dict[str, int], n_users: int) -> dict:
    """The fleets' reports per user: MQTT messages (a message carries a block's records, so a
    fraction), payload and wire bytes, in total and to each intermediary party."""
    def per(get) -> dict[str, float]:
        return {name: get(f"{kind}.sent.report") / n_users if n_users else 0.0
                for name, kind in (("messages", "messages"), ("payload_bytes", "payload"), ("wire_bytes", "wire"))}

    parties = sorted({key.rsplit(".", 1)[1] for key in by_party if ".sent.report." in key})
    return {"users": n_users, "total": per(lambda key: users.get(key, 0)),
            "by_intermediary": {p: per(lambda key, p=p: by_party.get(f"{key}.{p}", 0)) for p in parties}}
