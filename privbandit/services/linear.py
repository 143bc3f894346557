"""The shuffle-model linear bandits over MQTT: the family handlers of the analyzer, shuffler and user
fleet services (``PartyService.family_handlers``). Each one moves the events of a sans-I/O party of
:mod:`privbandit.protocol.parties.linear` for one task (one run of LinUCB-SDP-Vec or -Amp).

Topics are the MAB family's, so the broker ACLs are unchanged (services/acl.py):

=================  ===================  =====================  =======================================
message            topic                from → to              carries
=================  ===================  =====================  =======================================
linear-plan        plan                 analyzer → users       batch m, its users, (θ̂, V⁻¹, β)
linear-reports     report/shuffler      fleet → shuffler       one record per user: id, D labels
linear-release     release/shuffler     shuffler → analyzer    P_Vec: D totals; P_Amp: permuted list
linear-truth       metrics/users-i      fleet → observer       gap, realized regret per user, Σ entries
linear-record      metrics/analyzer     analyzer → observer    estimate, θ̂, λ_min (diagnostic batches)
=================  ===================  =====================  =======================================

The analyzer and the shuffler get only the public task (``linear_family.public_task``: the
experiment without its seed); fleets and the observer hold the experiment file.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from privbandit.experiment import linear_family as lf
from privbandit.protocol.linear_streams import BlockStreams, fleet_of, shuffler_noise
from privbandit.protocol.mechanisms import shuffle_linear_bandits as slb
from privbandit.protocol.observer import checkpoint_grid
from privbandit.protocol.parties import ProtocolError, shuffle_rng
from privbandit.protocol.parties.linear import (LinearAnalyzer, LinearPlan, LinearRelease, LinearReports,
                                                LinearShuffleBox, LinearUsers)
from privbandit.protocol.linear_engine import batch_diagnostics
from privbandit.services import codec
from privbandit.services.observer import ObserverService, add_wire_accounting

log = logging.getLogger("privbandit.linear")
FAMILY = lf.FAMILY
PLAN_RETRY_S = 3.0  # as the MAB analyzer: re-announce the open plan when nothing happened this long


def task_setup(config: lf.LinearExperiment, label: str):
    """(protocol, confidence, ledger, batch B, diagnostic batches) of one algorithm: public."""
    protocol, conf, ledger, _comm, batch, _sigma = lf.build(config, label)
    diagnostic = lf.diagnostic_batches(config.horizon, checkpoint_grid(config.horizon, config.checkpoints), batch)
    return protocol, conf, ledger, batch, {int(m) for m in diagnostic}


def plan_msg(run_id: str, task: int, plan: LinearPlan) -> codec.LinearPlanMsg:
    return codec.LinearPlanMsg(run=run_id, task=task, round=plan.round_id, first_user=plan.first_user,
                               cohort=plan.cohort, collect=plan.collect, theta=plan.theta,
                               v_inv=plan.v_inv.reshape(-1), beta=plan.beta)


def plan_of(msg: codec.LinearPlanMsg) -> LinearPlan:
    d = msg.theta.size
    return LinearPlan(msg.round, msg.first_user, msg.cohort, msg.collect, msg.theta, msg.v_inv.reshape(d, d),
                      msg.beta)


class Handler:
    def __init__(self, service):
        self.s = service
        self.done = False

    async def tick(self) -> None:
        pass

    def unexpected(self, msg) -> None:
        self.s.reject("unexpected-kind", msg.kind)


class AnalyzerHandler(Handler):
    """Algorithm 1's server: plans batch after batch, learns only from the shuffler's releases."""

    def __init__(self, service):
        super().__init__(service)
        # The service's timer may call tick() while on_task awaits its first publish.
        self.announced: list[codec.LinearPlanMsg] = []
        self.last_progress = time.monotonic()

    async def on_task(self, spec: dict) -> None:
        config = lf.from_public(spec["algorithm"])
        protocol, conf, self.ledger, batch, diagnostic = task_setup(config, spec["label"])
        self.party = LinearAnalyzer(protocol, conf, batch, config.horizon, config.environment.dim, diagnostic)
        await self.advance()

    async def advance(self) -> None:
        plan = self.party.next_plan()
        while plan is not None:
            self.announced = [plan_msg(self.s.run_id, self.s.task_index, plan)]
            log.debug("task %s: plan %s", self.s.task_index, plan.round_id)
            await self.s.bus.publish(self.s.t("plan"), self.announced[0])
            # A trailing partial batch is served from the last model and never released.
            plan = None if plan.collect else self.party.next_plan()
        self.last_progress = time.monotonic()
        if self.party.done and not self.done:
            self.done = True
            learner = self.party.learner
            await self.s.status("task-done", self.s.task_index, privacy=self.ledger,
                                batches_clipped=int(learner.clipped[0]), batches_not_pd=int(learner.not_pd[0]))

    async def on_message(self, name: str, msg) -> None:
        if not isinstance(msg, codec.LinearReleaseMsg):
            return self.unexpected(msg)
        if not self.s.current(msg):
            return
        try:
            record = self.party.on_release(LinearRelease(msg.round, msg.n_reports, msg.values))
        except ProtocolError as exc:
            return self.s.reject(exc.reason, str(exc))
        if record is not None:
            await self.s.bus.publish(self.s.t("metrics", self.s.name), codec.LinearRecordMsg(
                run=self.s.run_id, task=self.s.task_index, round=record.round_id, estimate=record.estimate,
                theta=record.theta, lambda_min=record.lambda_min))
        await self.advance()

    async def tick(self) -> None:
        if not self.done and time.monotonic() - self.last_progress > PLAN_RETRY_S:
            for msg in self.announced:  # idempotent: fleets and the shuffler count each batch once
                await self.s.bus.publish(self.s.t("plan"), msg)
            self.last_progress = time.monotonic()


class ShufflerHandler(Handler):
    """Collects a batch's B reports; releases per-label totals (P_Vec) or the permuted list (P_Amp)."""

    def __init__(self, service):
        super().__init__(service)
        self.boxes: dict[int, tuple[LinearShuffleBox, float]] = {}

    async def on_task(self, spec: dict) -> None:
        self.active = self.s.role == "shuffler"
        config = lf.from_public(spec["algorithm"])
        protocol, _conf, _ledger, batch, _diag = task_setup(config, spec["label"])
        self.shuffler = protocol.intermediary
        self.width = slb.n_entries(config.environment.dim)
        vec = protocol.analyzer.params if isinstance(protocol.analyzer, slb.BitSumAnalyzer) else None
        self.max_count = None if vec is None else vec.max_count
        # The permutation key never travels: derived from the shuffler's own master key (reproducible
        # runs), or permutations come from the OS CSPRNG.
        if self.s.shuffle_key is None:
            self.streams = BlockStreams(lambda k: shuffle_rng(), batch, self.width,
                                        lambda rng, shape: self.shuffler.draw(shape, rng))
        else:
            self.streams = shuffler_noise(self.s.shuffle_key, spec["label"], spec["run"], batch, self.shuffler,
                                          self.width)
        self.boxes: dict[int, tuple[LinearShuffleBox, float]] = {}
        self.closed: set[int] = set()
        self.failed: set[int] = set()
        self.s.forget_waiting()  # reports held for a batch of the last task that was never planned
        self.waiting = self.s.waiting  # the service counts what is still held at shutdown (wrong-round)

    async def on_message(self, name: str, msg) -> None:
        if isinstance(msg, codec.LinearPlanMsg):
            if self.s.current(msg) and self.active and msg.collect:
                await self.open(msg)
        elif isinstance(msg, codec.LinearReportsMsg):
            if self.s.current(msg):
                await self.collect(msg)
        else:
            self.unexpected(msg)

    async def open(self, msg: codec.LinearPlanMsg) -> None:
        if msg.round in self.boxes or msg.round in self.closed or msg.round in self.failed:
            return  # a re-announced plan
        box = LinearShuffleBox(plan_of(msg), self.shuffler, self.width, self.max_count, self.streams,
                               self.s.rejected)
        self.boxes[msg.round] = (box, time.monotonic())
        for early in self.waiting.pop(msg.round, []):
            await self.collect(early)

    async def collect(self, msg: codec.LinearReportsMsg) -> None:
        if msg.round in self.closed or msg.round in self.failed:
            return self.s.reject("round-closed", f"batch {msg.round}")
        if msg.round not in self.boxes:  # reports can overtake their plan (MQTT orders per topic)
            if sum(len(v) for v in self.waiting.values()) >= self.s.MAX_EARLY:
                return self.s.reject("early-overflow", f"batch {msg.round}")
            self.waiting.setdefault(msg.round, []).append(msg)
            return
        box, _ = self.boxes[msg.round]
        accepted = box.receive(LinearReports(msg.round, msg.user_ids.astype(np.int64), msg.values.reshape(-1, msg.width)))
        log.debug("task %s: %d of %d reports for batch %s admitted", self.s.task_index, accepted, msg.user_ids.size,
                  msg.round)
        if box.complete:
            rel = box.release()
            await self.s.bus.publish(self.s.t("release", self.s.role), codec.LinearReleaseMsg(
                run=self.s.run_id, task=self.s.task_index, round=rel.round_id, n_reports=rel.n_reports,
                width=self.width, values=rel.values.reshape(-1)))
            del self.boxes[msg.round]
            self.closed.add(msg.round)

    async def tick(self) -> None:
        now = time.monotonic()
        for round_id, (box, opened) in list(self.boxes.items()):
            if now - opened > self.s.deadline_s:
                self.failed.add(round_id)
                del self.boxes[round_id]
                await self.s.status("error", self.s.task_index, round=round_id, reason=(
                    f"batch {round_id} missed its {self.s.deadline_s:.0f} s deadline: "
                    f"{int(box.received.sum())} of {box.plan.cohort} reports; nothing released"))


class UsersHandler(Handler):
    """A fleet's users of one run: serve the batches of the noise blocks this fleet hosts."""

    async def on_task(self, spec: dict) -> None:
        config = self.s.config
        if not isinstance(config, lf.LinearExperiment):
            raise ValueError("a shuffle-linear-bandits task reached a fleet started with another family's file")
        protocol, _conf, _ledger, self.batch, diagnostic = task_setup(config, spec["label"])
        self.party = LinearUsers(lf.world(config, [spec["run"]]), protocol.randomizer, config.seed, spec["run"],
                                 spec["label"], self.batch, diagnostic)
        vec = protocol.analyzer.params if isinstance(protocol.analyzer, slb.BitSumAnalyzer) else None
        self.max_count = None if vec is None else vec.max_count
        self.served: set[int] = set()

    async def on_message(self, name: str, msg) -> None:
        if not isinstance(msg, codec.LinearPlanMsg):
            return self.unexpected(msg)
        if not self.s.current(msg) or msg.round in self.served:
            return
        if fleet_of(msg.round, self.batch, self.s.shards) != self.s.shard:
            return
        if msg.theta.size != self.party.arms.shape[-1]:
            return self.s.reject("wrong-shape", f"batch {msg.round}: θ̂ has {msg.theta.size} entries")
        reports, truth = self.party.respond(plan_of(msg))
        log.debug("task %s: serving batch %s", self.s.task_index, msg.round)
        if reports is not None:
            ids = reports.user_ids.astype("<u4" if reports.user_ids[-1] < 2**32 else "<u8")
            # P_Vec counts in the narrowest unsigned type holding 0 … max_count (as vec_bits counts them)
            values = codec.packed(reports.values, None if self.max_count is None else self.max_count + 1)
            await self.s.bus.publish(self.s.t("report", "shuffler"), codec.LinearReportsMsg(
                run=self.s.run_id, task=self.s.task_index, round=msg.round, width=self.party.width,
                user_ids=ids, values=values.reshape(-1)))
        await self.s.bus.publish(self.s.t("metrics", self.s.name), codec.LinearTruthMsg(
            run=self.s.run_id, task=self.s.task_index, round=truth.round_id, first_user=truth.first_user,
            gap=truth.gap, realized=truth.realized, entries_sum=truth.entries_sum))
        self.served.add(msg.round)


class LinearObserverService(ObserverService):
    """The observer of a linear session: paces tasks as the MAB observer does, scores regret from the
    fleets' truth and writes the same results directory as ``privbandit run`` in-process."""

    def setup(self) -> None:
        config = self.config
        self.algos = config.algorithms
        self.tasks = [(r, label) for r in range(config.runs) for label in self.algos]
        self.grid = checkpoint_grid(config.horizon, config.checkpoints)
        self.world = lf.world(config)  # θ* per run, for rounds.csv's θ̂ error
        self.per_run = {label: [None] * config.runs for label in self.algos}
        self.compute = dict.fromkeys(self.algos, 0.0)

    def begin_task(self, run: int, label: str) -> dict:
        horizon = self.config.horizon
        self.pseudo_inc, self.realized_inc = np.zeros(horizon), np.zeros(horizon)
        self.truths: dict[int, codec.LinearTruthMsg] = {}
        self.records: dict[int, codec.LinearRecordMsg] = {}
        self.covered = 0
        return {"index": self.index, "run": run, "label": label, "algorithm": lf.public_task(self.config, label),
                "horizon": horizon, "arms": self.config.environment.arms, "delta": self.config.delta,
                "family": FAMILY}

    async def on_message(self, name: str, msg) -> None:
        if isinstance(msg, codec.StatusMsg):
            return await self.on_status(msg)
        if not isinstance(msg, (codec.LinearTruthMsg, codec.LinearRecordMsg)):
            return self.reject("unexpected-kind", msg.kind)
        if msg.task != self.index:
            return self.reject("wrong-task", f"{msg.kind} for task {msg.task}")
        if isinstance(msg, codec.LinearRecordMsg):
            self.records.setdefault(msg.round, msg)
        elif msg.round not in self.truths:  # a restarted fleet may serve a batch twice
            end = msg.first_user + msg.realized.size
            if end > self.config.horizon:
                return self.reject("out-of-range", f"truth for users up to {end}")
            self.truths[msg.round] = msg
            self.pseudo_inc[msg.first_user:end] = msg.gap
            self.realized_inc[msg.first_user:end] = msg.realized
            self.covered += msg.realized.size
        await self.maybe_finish_task()

    def served(self) -> int:
        return self.covered

    def records_complete(self) -> bool:
        return True  # linear records are diagnostics of a few batches; the regret does not wait for them

    def finish_task(self, run: int, label: str) -> None:
        cp = self.grid - 1
        body = self.analyzer_done
        diag = {}
        for m, rec in self.records.items():
            truth = self.truths.get(m)
            if truth is None or truth.entries_sum is None:
                continue
            diag[m] = (rec.lambda_min, rec.theta, rec.estimate - truth.entries_sum)
        self.per_run[label][run] = {
            "pseudo": np.cumsum(self.pseudo_inc)[cp], "realized": np.cumsum(self.realized_inc)[cp], "diag": diag,
            "clipped": body["batches_clipped"], "not_pd": body["batches_not_pd"], "ledger": body["privacy"]}

    def assemble(self, label: str) -> dict:
        """One label's runs in the in-process engine's result layout."""
        config, runs = self.config, self.per_run[label]
        _protocol, conf, _ledger, comm, batch, _sigma = lf.build(config, label)
        d = config.environment.dim
        diag = {k: [] for k in ("batch", "t", "lambda_min_mean", "lambda_min_min", "clipped_frac", "theta_error",
                                "u_error_mean", "u_error_var", "V_error_mean", "V_error_var")}
        for m in sorted(set.intersection(*(set(r["diag"]) for r in runs))):
            lam, theta, err = (np.array([r["diag"][m][i] for r in runs]) for i in range(3))
            diag["batch"].append(m + 1)
            diag["t"].append((m + 1) * batch)
            for k, v in batch_diagnostics(lam, conf.floor, theta, self.world.theta, err, d).items():
                diag[k].append(v)
        ledger = dict(runs[0]["ledger"])
        clipped = np.array([r["clipped"] for r in runs])
        not_pd = np.array([r["not_pd"] for r in runs])
        ledger["batches_clipped"], ledger["batches_not_pd"] = int(clipped.sum()), int(not_pd.sum())
        return {"checkpoints": self.grid, "pseudo": np.stack([r["pseudo"] for r in runs]),
                "realized": np.stack([r["realized"] for r in runs]),
                "diagnostics": {k: np.asarray(v) for k, v in diag.items()}, "ledger": ledger,
                "communication": comm, "batch": batch, "clipped": clipped, "not_pd": not_pd}

    def write_results(self, elapsed: float) -> dict:
        outcome = ({label: self.assemble(label) for label in self.algos}, self.compute, elapsed)
        summary = lf.summarize(self.config, outcome, transport="mqtt")
        add_wire_accounting(summary, self)
        return lf.write(self.out, self.config, outcome, summary)
