"""What every party service shares: a name, its subscriptions, a message handler, timers, and
the reconnect loop that drives them (the aiomqtt docs' pattern: reconnect outside the client)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections import Counter
from pathlib import Path

import aiomqtt

from privbandit.services import acl, codec
from privbandit.services.bus import Bus, BusSettings, Outbox, RateLimitedLog, Traffic, connect, end_session, topic
from privbandit.services.checkpoint import CheckpointError, StateDir, resume_state, spec_fingerprint

log = logging.getLogger("privbandit.party")

RECONNECT_MAX_S = 5.0
class PartyService:
    """Base for the MQTT-facing wrapper of one sans-I/O party."""

    role: str = "party"
    tick_s: float = 1.0  # how often `tick` runs (retries, deadlines)

    def __init__(self, settings: BusSettings, name: str | None = None, state_dir: Path | None = None):
        self.settings = settings
        self.run_id = settings.run_id
        self.name = name or self.role
        self.traffic = Traffic()
        self.traffic_by_task: dict[int, Traffic] = {}
        self.rejected: Counter[str] = Counter()
        self.log_rejection = RateLimitedLog(log)
        self.finished = False
        self.bus: Bus | None = None
        self.outbox = Outbox()  # sent messages the broker has not acknowledged, across connections
        self.task_spec: dict | None = None
        self.task_fingerprint: str | None = None  # spec_fingerprint(task_spec): its checkpoints' spec
        self.early: list = []
        self.connections = 0  # > 1: the broker was lost and regained (messages may be lost)
        # Checkpoints (docs/distributed.md, "Faults and restarts"): loaded now, so that a state
        # directory of another run stops the process before it touches the bus.
        self.state = None if state_dir is None else StateDir(state_dir, self.run_id, self.name)
        self.checkpoint = None if self.state is None else self.state.load()
        if self.checkpoint is not None:
            self._restore_counters(self.checkpoint.state.get("counters", {}))

    @property
    def client_id(self) -> str:  # fixed across restarts: the broker keeps its session and queue
        return f"{self.run_id}-{self.name}"

    def t(self, *parts: str) -> str:
        return topic(self.run_id, *parts)

    def subscriptions(self) -> list[str]:
        return [self.t("control")]

    async def on_connect(self) -> None:
        await self.status("ready")

    async def status(self, state: str, task: int | None = None, **body) -> None:
        msg = codec.StatusMsg(run=self.run_id, party=self.name, state=state, task=task, body=body)
        await self.bus.publish(self.t("metrics", self.name), self.signed(msg))

    def signed(self, msg: codec.StatusMsg) -> codec.StatusMsg:
        """A status as sent: a party with its own broker account is known by its topic."""
        return msg

    def reject(self, reason: str, detail: str = "", count: int = 1) -> None:
        self.rejected[reason] += count
        self.log_rejection(self.name, reason, detail, self.rejected[reason])

    async def handle(self, name: str, msg) -> None:
        """Dispatch one decoded message. A message whose content the party cannot act on (a task
        spec that does not validate, say) is counted as ``invalid-content``; it never ends the party.
        A checkpoint of another experiment does end it (CheckpointError): resuming it would be wrong."""
        try:
            await self._dispatch(name, msg)
        except (ValueError, LookupError, TypeError, ArithmeticError, AttributeError) as exc:
            # what a family's logic raises on a body it cannot use (pydantic's ValidationError is a
            # ValueError; an arm out of range an IndexError; a count of 0 a ZeroDivisionError)
            log.exception("%s could not act on a %s message", self.name, msg.kind)
            self.reject("invalid-content", f"{msg.kind}: {type(exc).__name__}")

    async def _dispatch(self, name: str, msg) -> None:
        if msg.run != self.run_id:
            return self.reject("wrong-run", msg.run)
        if isinstance(msg, codec.ControlMsg):
            if msg.action == "shutdown":
                self.on_shutdown()
                await self.before_stats()
                await self.status("stats", rejected=dict(self.rejected),
                                  traffic={str(i): t.as_dict() for i, t in self.traffic_by_task.items()})
                self.finished = True
            elif msg.action == "resync":
                if msg.task is None and self.task_spec is None and self.role != "observer":
                    await self.status("ready")  # the observer came up after this party last said so
                elif self.task_index is not None and msg.task == self.task_index:
                    await self.on_resync()
            else:
                spec = codec.TaskSpec.model_validate(msg.body).model_dump()
                if spec["index"] != msg.task:
                    raise ValueError(f"control message for task {msg.task} carries the spec of task {spec['index']}")
                if self.task_index is not None and spec["index"] <= self.task_index:
                    return  # a re-announced control message: already running it
                await self.start_task(spec)
            return
        await self.deliver(name, msg)

    async def deliver(self, name: str, msg) -> None:
        await self.on_message(name, msg)

    async def start_task(self, spec: dict) -> None:
        previous = self.task_spec, self.task_fingerprint, self.traffic
        # once per task: a checkpoint per user would otherwise hash the spec's JSON each time
        self.task_spec, self.task_fingerprint = spec, spec_fingerprint(spec)
        # Count each task's bytes apart, so results can say what each algorithm cost.
        self.traffic = self.bus.traffic = self.traffic_by_task.setdefault(spec["index"], Traffic())
        try:
            await self.on_task(spec)
        except Exception:  # a spec we cannot act on must not leave us half-switched
            self.task_spec, self.task_fingerprint, self.traffic = previous
            self.bus.traffic = self.traffic
            raise
        await self.replay_early()

    async def on_task(self, spec: dict) -> None:  # a new task starts: set up its party objects
        pass

    async def on_resync(self) -> None:
        """The observer misses some of the running task's metrics: send them again (idempotent)."""

    # --- checkpoints ---------------------------------------------------------------------------
    def resumable(self, spec: dict) -> dict | None:
        """The state this party checkpointed for the task ``spec`` describes, if any."""
        if self.state is None:
            return None
        return resume_state(self.checkpoint, spec["index"], spec_fingerprint(spec), self.state.path)

    def save_state(self, state, task: int | None = None, spec: str | None = None,
                   added: dict[str, list] | None = None, replaced: dict | None = None) -> None:
        """Checkpoint the running task's state (at a round boundary), with the counters.
        ``task`` and ``spec`` (a fingerprint) default to the running task's. Without ``added``,
        ``state`` (a dict) is written whole, a snapshot; with it, only what changed since the last
        checkpoint goes to the journal (``added``: items that extend the state's lists,
        ``replaced``: fields set), and ``state`` is a function returning the whole state, called
        only when the journal is compacted into a snapshot (:class:`StateDir`)."""
        if self.state is None:
            return
        counters = {"rejected": dict(self.rejected),
                    "traffic": {str(i): t.as_dict() for i, t in self.traffic_by_task.items()}}
        task = self.task_index if task is None else task
        spec = self.task_fingerprint if spec is None else spec
        if added is None:
            self.state.save(task, spec, {**state, "counters": counters})
        else:
            self.state.append(task, spec, added, {**(replaced or {}), "counters": counters},
                              lambda: {**state(), "counters": counters})

    def _restore_counters(self, counters: dict) -> None:
        try:
            self.rejected.update({str(k): int(v) for k, v in counters.get("rejected", {}).items()})
            for i, t in counters.get("traffic", {}).items():
                self.traffic_by_task[int(i)] = Traffic.from_dict(t)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise CheckpointError("checkpoint-schema", f"{self.state.path}: counters: {exc}") from None

    def on_shutdown(self) -> None:
        """Last chance to count what never completed: messages held for a task that never came."""
        self.rejected["wrong-task"] += len(self.early)
        self.early = []

    async def before_stats(self) -> None:
        """The session ends: metrics still owed to the observer go out before the final counters."""

    async def on_message(self, name: str, msg) -> None:
        self.reject("unexpected-kind", msg.kind)

    # --- task bookkeeping shared by parties that act on task-scoped messages ---------------
    MAX_EARLY = 4096  # messages held for a task that has not started here yet

    @property
    def task_index(self) -> int | None:
        return None if self.task_spec is None else self.task_spec["index"]

    def current(self, msg) -> bool:
        """True if ``msg`` belongs to the running task. Messages for a later task (they can
        overtake the control message: MQTT orders only per topic) are held and replayed."""
        if self.task_index is not None and msg.task == self.task_index:
            return True
        if self.task_index is None or msg.task > self.task_index:
            if len(self.early) >= self.MAX_EARLY:
                self.reject("early-overflow", f"task {msg.task}")
            else:
                self.early.append(msg)
            return False
        self.reject("wrong-task", f"task {msg.task}, running {self.task_index}")
        return False

    async def replay_early(self) -> None:
        held, self.early = self.early, []
        for msg in held:
            await self.deliver("", msg)

    async def tick(self) -> None:
        pass

    def beat(self, path: str) -> None:
        """Mark this party alive and connected (its healthcheck reads the file's age)."""
        try:
            Path(path).touch()
        except OSError as exc:  # a healthcheck must never stop the party: say so, once
            if not getattr(self, "_health_warned", False):
                self._health_warned = True
                log.warning("%s cannot mark itself alive in %s: %s", self.name, path, exc.strerror or exc)

    async def _ticker(self) -> None:
        while not self.finished:
            await asyncio.sleep(self.tick_s)
            if self.state is not None:
                self.state.sync()  # the journal's records of the last tick to the disk (StateDir)
            if self.bus is None or self.bus.lost is not None:
                continue  # retries wait for the next connection; their messages would only pile up
            if self.settings.health_file:
                self.beat(self.settings.health_file)
            if self.task_spec is None and self.role != "observer":
                await self.status("ready")  # until the coordinator starts us: it may have come up later
            await self.tick()

    async def _pump(self) -> None:
        """Connect, and hand every message to ``handle`` until finished; reconnect on loss.
        A finished party still reconnects until its outbox is sent (its last stats, say)."""
        delay = 0.1
        while not (self.finished and not self.outbox):
            try:
                async with connect(self.settings, self.client_id, self.subscriptions(),
                                   self.traffic, self.rejected, self.outbox, self.log_rejection,
                                   acl.PUBLISH_BUDGETS.get(self.role)) as bus:
                    self.bus = bus
                    delay = 0.1
                    self.connections += 1
                    if self.connections > 1:
                        log.info("%s reconnected (connection %d)", self.name, self.connections)
                    if self.finished:
                        return  # connecting sent the outbox
                    await self.on_connect()
                    async for name, msg in bus.messages():
                        await self.handle(name, msg)
                        if self.finished and not self.outbox:
                            return
            except aiomqtt.MqttError as exc:
                # The lost bus stays: a timer or handler still sending through it queues in the
                # outbox for the next connection (issue #20 item 6: a None here crashed the analyzer's
                # plan retry when a paused broker timed a publish out).
                if self.bus is not None and self.bus.lost is None:
                    self.bus.lost = exc
                if self.finished and not self.outbox:
                    return
                log.warning("%s lost the broker (%s); reconnecting in %.1f s", self.name, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_S)

    def dump_state(self) -> None:
        """``kill -USR2 <pid>``: where every coroutine waits, and the bus state, to the party's log
        (``kill -USR1`` dumps the threads, for a party stuck outside the event loop)."""
        bus = "none" if self.bus is None else ("lost" if self.bus.lost is not None else "up")
        log.warning("%s: task %s, bus %s, connection %d, %d message(s) in the outbox", self.name,
                    self.task_index, bus, self.connections, len(self.outbox))
        for task in asyncio.all_tasks():
            task.print_stack(file=sys.stderr)

    async def serve(self) -> None:
        """Run until finished, whether a message or a timer (``tick``) finishes the party."""
        with contextlib.suppress(NotImplementedError, RuntimeError):  # no signals off the main thread
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, self.dump_state)
        pump = asyncio.create_task(self._pump())
        ticker = asyncio.create_task(self._ticker())
        try:
            await asyncio.wait({pump, ticker}, return_when=asyncio.FIRST_COMPLETED)
            # Finished with messages still unsent (the broker was lost, or another coroutine is
            # sending them now): the pump reconnects and sends them, or the sender finishes.
            while self.finished and self.outbox and not pump.done():
                await asyncio.wait({pump}, timeout=0.05)
        finally:
            for task in (pump, ticker):
                task.cancel()
            await asyncio.gather(pump, ticker, return_exceptions=True)
        if self.state is not None:
            self.state.close()
        for task in (pump, ticker):  # a timer that raised must end the party loudly, not silently
            if task.done() and not task.cancelled() and task.exception():
                raise task.exception()
        if self.finished and not self.outbox:
            await end_session(self.settings, self.client_id)
