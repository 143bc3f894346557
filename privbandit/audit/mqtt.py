"""``privbandit audit --transport mqtt``: the releases read from the broker with the analyzer's own
account, as the analyzer really gets them, instead of sampled in-process.

For each target whose release leaves an intermediary process, the audit runs that process as the
launcher plans it (:func:`~privbandit.services.launcher.plan_parties`: the real ``privbandit
aggregator`` or ``privbandit shuffler``, its own broker account, the users' report keys) against a
broker enforcing the run's ACL, and plays the three other roles through their own accounts:

- the observer (``control``): starts one task per chunk of rounds, as the observer starts tasks;
- the analyzer (``plan``, ``release/<intermediary>``): opens the rounds as the family's analyzer
  opens them (its own round: ``round_of``, ``Setup.round``, ``cov_round``, …), and reads what the
  intermediary releases;
- the users (``report/<intermediary>``): each round's cohort randomizes its input (a reward, a bit,
  an entries vector) with the mechanism's randomizer, the user-side code a fleet runs, under
  neighbouring input 0 or 1
  (alternating rounds), and sends one message per round as a fleet does
  (:func:`~privbandit.services.users.reports_message`: every record MAC'd by its user, the block
  closed with the fleets' MAC), so the intermediary admits them only as it admits a fleet's.

What arrives on ``release/<intermediary>`` is decoded by the project's codec, checked to be exactly
the round's rule applied to the reports sent (``mqtt.exact``, by
:func:`~privbandit.audit.targets.rule_check`: the modular sum or the per-label totals, the index of
the largest decoded modular sum, the same multiset in every column group the round permutes, the
same reports under the same ids), and reduced to the very statistic the in-process target computes (the modular
sum; the count of residues equal to g mod m in a shuffled multiset; user 0's attributable report;
P_Vec's label totals or P_Amp's largest S1 projection on the pair's difference; a counter node's
total); the same testers turn the two samples into the ε lower bound
(:func:`privbandit.audit.run.audit_target`).

A round trip through two processes and a broker costs far more than a vectorized draw, so an MQTT
audit takes 10³–10⁴ releases per neighbour where the in-process one takes 10⁶–10⁷. What justifies
the large in-process samples is that both paths draw from one law: :func:`law_check` compares the
MQTT releases with as many in-process ones, per neighbour, by a two-sample χ² test and a two-sample
Kolmogorov–Smirnov test, and the result goes into ``audit.json`` beside the bound. A target whose
releases fail either check, the exact one or the law (:data:`LAW_ALPHA`), gets no verdict:
``"verdict": "refused"`` and the reason (:func:`no_verdict`); its bound stays in ``audit.json``,
unjudged, and the command exits 1.

Which targets have an MQTT path is the family's to say (:meth:`~privbandit.protocol.spine.family.Family.wire_target`,
the :class:`~privbandit.audit.targets.WireTarget` of a release; the users' inputs are each one's
neighbour index, so a family's randomizer maps them to rewards, bits or entries vectors, and a
report may be a vector). Today: the rounds of the MAB family's
:class:`~privbandit.families.distributed_dp_mab.parties.EliminationServer` (every algorithm of the
distributed-DP MAB family, and DP-SE of the private-online-learning family) under distributed or
local trust; the online family's distributed Anytime-Lazy-UCB arrays and FTNL epochs (the aggregator's
``sum`` and ``argmax``); the shuffle-linear family's LinUCB-SDP-Amp, LinUCB-SDP-Vec (the shuffler) and
LinUCB-LDP (the aggregator, attributable); the concurrent-shuffle family's nodes (``shuffler-i``,
several intermediary processes in one session), Algorithm 4's nodes and randomized response; and
ShuffleGLM's P_Vec rounds. Not: the central model (what crosses the broker is the raw data; its
privacy is the analyzer's own noise, drawn after the wire by the code the in-process audit
samples: CDP-SE, DP-SE, the central Anytime-Lazy-UCB and FTNL, Hybrid-UCB, LinUCB-JDP's and
Private-GLM's trees, the counters' central tree), the non-private baselines, and the releases no
family hook wires yet (docs/audit.md).
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import aiomqtt
import numpy as np

from privbandit.audit.run import audit_target
from privbandit.audit.targets import AuditTarget, NoWirePath, WireTarget
from privbandit.protocol.primitives.report_auth import ReportAuthenticator, SessionKeys
from privbandit.protocol.primitives.seeding import USER_BLOCK, stream
from privbandit.protocol.spine.events import Join, Plan, Reports

# One task, one plan per chunk of rounds. A plan may open 1,024 (the codec's limit), but the
# intermediary looks at every round it holds on each message (``Intermediary.ready``), so fewer
# open rounds cost less per report. A chunk's users fit in one 65,536-user block, so each round is
# one message closing its block, as a fleet sends it. A new task resets the intermediary's
# per-task bookkeeping, which grows with the releases it made.
MAX_ROUNDS_PER_TASK = 256
READY_TIMEOUT_S = 60.0  # the intermediary process starts (imports numpy, scipy, pydantic) and connects
RELEASE_TIMEOUT_S = 60.0  # a chunk's releases: far beyond any chunk's seconds, short of a hung session
MAX_MQTT_SAMPLES = 10**6
PARTY_EXIT_S = 10.0  # an intermediary told to shut down leaves within this, or is stopped
LAW_BINS = 50  # χ² cells at most: pooled quantiles, each cell ≥ LAW_MIN_CELL pooled draws
LAW_MIN_CELL = 10
# Below this p-value (χ² or KS, either input) the MQTT releases are taken not to follow the
# in-process sampler's law, and the audit gives no verdict. Four p-values per target, each uniform
# (KS: conservative) when the laws agree: an honest session is refused with probability ≤ 4·10⁻⁴.
# The defects the check exists for sit far below it: an off-by-one in the statistic at 4·10⁻⁶,
# forged releases at 10⁻³⁹, FTNL without its head start at 10⁻⁵¹ (docs/audit.md).
LAW_ALPHA = 1e-4


class SessionFailed(RuntimeError):
    """An intermediary process died, or gave up on a round."""


# --- the session ---------------------------------------------------------------------------------


@dataclass
class Broker:
    """Where the session runs: a URL and the role passwords (None: anonymous), TLS files, the run id
    its ACL is written for, and whether to run on a broker the probe finds open (``--insecure-broker``)."""

    url: str | None  # None: start an embedded broker with fresh accounts
    passwords: Mapping[str, str] | None = None
    tls_files: Mapping[str, str] | None = None
    run_id: str | None = None
    insecure: bool = False


@dataclass
class Collected:
    x0: np.ndarray
    x1: np.ndarray
    seconds: float  # from the first task's control message to the last release
    tasks: int
    bytes_received: int  # the analyzer account's payload bytes on release/<intermediary>
    exact: int  # releases equal to the round's functionality of the reports sent


def collect(family, config, wires: list[WireTarget], samples: int, seed: int, broker: Broker, out: Path,
            progress: Callable[[str], None] | None = None) -> tuple[list[Collected], dict]:
    """Every wire target's ``samples`` releases per neighbour, read from the broker by the analyzer's
    account: one session (broker, intermediary processes) for all of them. Returns the samples and
    a description of the session (broker, ACL verdict, run id)."""
    from privbandit.services.broker_probe import check_broker
    from privbandit.services.bus import BusSettings
    from privbandit.services.launcher import TLS_FIELDS, log_tail, plan_parties

    run_id = broker.run_id or "a" + secrets.token_hex(4)
    names = sorted({w.intermediary for w in wires})
    out.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        url, passwords, kind = broker.url, broker.passwords, "external"
        if url is None:
            from privbandit.services.acl import Role
            from privbandit.services.embedded_broker import start_embedded_broker

            # Every role's account, and each intermediary instance's (the counters' shuffler-1 … shuffler-k)
            passwords = {a: secrets.token_urlsafe(16) for a in dict.fromkeys([*(r.value for r in Role), *names])}
            embedded = start_embedded_broker(run_id, passwords)
            stack.callback(embedded.stop)
            url, kind = embedded.url, "embedded"
        settings = BusSettings(broker_url=url, run_id=run_id, username=None, password=None, credentials_file=None,
                               **{k: None for k in TLS_FIELDS} | dict(broker.tls_files or {}))
        settings.tls_context()
        missing = [r for r in ("analyzer", "users", "observer", *names) if passwords and r not in passwords]
        if missing:
            raise ValueError(f"--credentials: no password for the {', '.join(missing)} account(s): the MQTT audit "
                             f"logs in as the analyzer, the users and the observer, and starts the {', '.join(names)}")
        acl_state, _ = check_broker(settings, run_id, passwords, broker.insecure)
        # The intermediaries exactly as a session's launcher plans them; its other parties stay unstarted.
        # The audit plays the users, so it holds the session's users' key, as the fleets would.
        keys = SessionKeys.draw()
        parties = [p for p in plan_parties(family, config, Path("audit"), [], out, url, run_id, 1, passwords,
                                           checkpoint=False, tls_files=broker.tls_files, session_keys=keys)
                   if p.name in names]
        for p in parties:
            p.start()
            stack.callback(p.stop)

        def accounts(role: str) -> BusSettings:
            creds = {} if not passwords else {"username": role, "password": passwords[role]}
            return settings.model_copy(update=creds)

        try:
            results, rejected = asyncio.run(_session(family, config, wires, samples, seed, run_id, accounts,
                                                     parties, progress, keys.users))
        except (TimeoutError, ConnectionError, SessionFailed) as exc:
            tails = "\n".join(f"--- {p.name} ({p.log}) ---\n{log_tail(p.log)}" for p in parties)
            raise RuntimeError(f"{exc}\n{tails}") from None
        for p in parties:  # told to shut down: each sends its counters and ends its broker session
            try:
                p.proc.wait(PARTY_EXIT_S)
            except subprocess.TimeoutExpired:
                pass  # the ExitStack stops it
    return results, {"broker": kind if kind == "embedded" else url, "acl": acl_state, "run_id": run_id,
                     "intermediaries": names, "rejected": rejected}


async def _session(family, config, wires, samples, seed, run_id, accounts, parties, progress, users_key: int):
    """The audit's three clients (the observer's, the analyzer's and the users' accounts) around
    :func:`_rounds`; their broker sessions ended afterwards. ``users_key``: the session's users'
    report key, which the intermediaries were given."""
    from privbandit.services.bus import Traffic, connect, end_session, topic

    names = sorted({w.intermediary for w in wires})
    auth = ReportAuthenticator(users_key)
    ids = {role: f"{run_id}-{role}-audit" for role in ("observer", "analyzer", "users")}
    traffic = Traffic()
    try:
        async with connect(accounts("observer"), ids["observer"], [topic(run_id, "metrics", n) for n in names]) as obs, \
                connect(accounts("analyzer"), ids["analyzer"], [topic(run_id, "release", n) for n in names],
                        traffic) as ana, \
                connect(accounts("users"), ids["users"], []) as users:
            inbox, status = _Inbox(ana), _Inbox(obs)
            try:
                out, rejected = await _rounds(family, config, wires, samples, seed, run_id, parties, progress, auth,
                                              traffic, obs, ana, users, inbox, status)
            finally:
                inbox.close()
                status.close()
    finally:  # whatever happened, the broker forgets the audit's sessions
        for role, cid in ids.items():
            await end_session(accounts(role), cid)
    return out, rejected


async def _rounds(family, config, wires, samples, seed, run_id, parties, progress, auth, traffic, obs, ana, users,
                  inbox, status):
    """Every wire target's rounds, task after task: control, plan, reports, then its releases."""
    from privbandit.services import codec
    from privbandit.services.bus import topic
    from privbandit.services.users import reports_message

    names = sorted({w.intermediary for w in wires})
    await _ready(status, names, parties)
    task, out = 0, []
    for w in wires:
        if progress:
            progress(w.target.name)
        rng = stream(seed, "audit-mqtt", w.target.name)
        n, k = w.round.expected, w.reports
        chunk = max(1, min(MAX_ROUNDS_PER_TASK, USER_BLOCK // n))
        got, exact = {0: [], 1: []}, 0
        before = traffic.payload["received.release"]
        start = time.perf_counter()
        tasks = 0
        for first in range(0, 2 * samples, chunk):
            rounds = min(chunk, 2 * samples - first)
            which = (first + np.arange(rounds)) % 2  # neighbours alternate: both see the same session
            label = w.label or w.target.label
            spec = codec.TaskSpec(index=task, runs=[0], label=label, family=family.name,
                                  public=family.public_task(config, label, [0]))
            await obs.publish(topic(run_id, "control"), codec.ControlMsg(
                run=run_id, action="task", task=task, body=spec.model_dump()))
            opens = tuple(replace(w.round, id=i) for i in range(rounds))
            joins = tuple(Join(i, i * n, n, n) for i in range(rounds))
            plan = Plan(0, 0, rounds * n, w.body, opens, joins)
            await ana.publish(topic(run_id, "plan"), codec.plan_msg(run_id, task, plan))
            inputs = np.zeros((rounds, k))  # every user's input: 0, but user 0's is the round's neighbour
            inputs[:, 0] = which
            messages = w.randomize(inputs, rng)
            for i, rnd in enumerate(opens):
                # The round's first k users report (user 0 always): the others dropped out.
                rep = Reports(i, 0, np.arange(i * n, i * n + k, dtype=np.int64),
                              messages[i].reshape(1, k, -1))
                await users.publish(topic(run_id, "report", rnd.intermediary),
                                    reports_message(auth, run_id, task, plan, rnd, 0, rep))
            pending = set(range(rounds))
            deadline = time.monotonic() + RELEASE_TIMEOUT_S
            while pending:
                status.raise_failure()
                _alive(parties)
                try:
                    msg = await inbox.next(min(1.0, deadline - time.monotonic()))
                except TimeoutError:
                    if time.monotonic() < deadline:
                        continue
                    raise TimeoutError(f"{w.target.name}: {len(pending)} of {rounds} rounds of task {task} "
                                       f"not released in {RELEASE_TIMEOUT_S:.0f} s") from None
                if not isinstance(msg, codec.ReleaseMsg) or msg.task != task or msg.round not in pending:
                    continue  # a repeat, or another task's: the intermediary re-sends on re-announced plans
                pending.discard(msg.round)
                release = codec.release_of(msg)
                if release.n_reports != k:
                    raise RuntimeError(f"{w.target.name}: round {msg.round} released over {release.n_reports} "
                                       f"reports, {k} sent")
                first_id = msg.round * n
                exact += w.ideal(release, np.arange(first_id, first_id + k), messages[msg.round])
                got[int(which[msg.round])].append(w.statistic(release, first_id))
            task += 1
            tasks += 1
        seconds = time.perf_counter() - start
        out.append(Collected(np.asarray(got[0]), np.asarray(got[1]), seconds, tasks,
                             traffic.payload["received.release"] - before, exact))
    await obs.publish(topic(run_id, "control"), codec.ControlMsg(run=run_id, action="shutdown"))
    rejected = await _stats(status, names)
    return out, rejected


class _Inbox:
    """A bus's decoded messages in a queue, so that a reader can wait for the next with a timeout
    (a timeout cancelling the bus's own iterator would end it)."""

    def __init__(self, bus):
        self.queue: asyncio.Queue = asyncio.Queue()
        self.lost: Exception | None = None
        self.task = asyncio.create_task(self._pump(bus))

    async def _pump(self, bus) -> None:
        try:
            async for item in bus.messages():
                await self.queue.put(item)
        except aiomqtt.MqttError as exc:  # surfaces in next(), once the queue is read
            self.lost = exc

    async def next(self, timeout: float):
        """The next message, or TimeoutError; a lost connection is raised as ConnectionError."""
        if self.task.done() and self.queue.empty():
            raise ConnectionError(f"the audit's connection to the broker was lost ({self.lost})")
        try:
            return (await asyncio.wait_for(self.queue.get(), max(0.0, timeout)))[1]
        except asyncio.TimeoutError:
            raise TimeoutError from None

    def raise_failure(self) -> None:
        """An intermediary's ``error`` status among the messages waiting (a round it gave up on):
        raised at once as :class:`SessionFailed`, rather than waited out. Other statuses are dropped."""
        from privbandit.services import codec

        while not self.queue.empty():
            msg = self.queue.get_nowait()[1]
            if isinstance(msg, codec.StatusMsg) and msg.state == "error":
                raise SessionFailed(f"the {msg.party} failed: {msg.body.get('reason', msg.body)}")

    def close(self) -> None:
        self.task.cancel()


def _alive(parties) -> None:
    dead = [p for p in parties if p.proc.poll() is not None]
    if dead:
        raise SessionFailed(f"the {dead[0].name} process exited with {dead[0].proc.returncode}")


async def _ready(inbox: _Inbox, names: list[str], parties) -> None:
    """Until every intermediary says ``ready`` (it repeats it until a task starts): a control message
    sent before its first subscription would never reach it."""
    from privbandit.services import codec

    waiting = set(names)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while waiting:
        _alive(parties)
        try:
            msg = await inbox.next(min(1.0, deadline - time.monotonic()))
        except TimeoutError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{', '.join(sorted(waiting))} not ready in {READY_TIMEOUT_S:.0f} s") from None
            continue
        if isinstance(msg, codec.StatusMsg) and msg.state == "ready":
            waiting.discard(msg.party)


async def _stats(inbox: _Inbox, names: list[str]) -> dict:
    """Each intermediary's refusal counters, from the final stats it sends on shutdown."""
    from privbandit.services import codec

    rejected = {}
    deadline = time.monotonic() + 20.0
    while set(rejected) != set(names):
        try:
            msg = await inbox.next(deadline - time.monotonic())
        except TimeoutError:
            raise TimeoutError(f"no final counters from {', '.join(sorted(set(names) - set(rejected)))}") from None
        if isinstance(msg, codec.StatusMsg) and msg.state == "stats":
            rejected[msg.party] = {k: v for k, v in msg.body.get("rejected", {}).items() if v}
    return rejected


# --- the audit -------------------------------------------------------------------------------------


def law_check(mqtt: np.ndarray, inproc: np.ndarray) -> dict:
    """Do the MQTT releases follow the in-process sampler's law? Two-sample χ² on at most
    :data:`LAW_BINS` cells (edges at the pooled sample's quantiles, neighbouring cells merged until
    each holds ≥ :data:`LAW_MIN_CELL` pooled draws; a modular sum's residues are binned as integers,
    a wrap-around only splits a cell) and two-sample Kolmogorov–Smirnov (conservative for discrete
    laws). Small p-values say the laws differ; at a fixed seed the numbers are reproducible."""
    from scipy.stats import chi2_contingency, ks_2samp

    a, b = np.asarray(mqtt, dtype=np.float64), np.asarray(inproc, dtype=np.float64)
    pooled = np.concatenate([a, b])
    edges = np.unique(np.quantile(pooled, np.linspace(0, 1, LAW_BINS + 1)[1:-1]))
    cells = np.searchsorted(edges, pooled, side="right")
    counts = np.bincount(cells, minlength=edges.size + 1)
    merged, run = np.empty_like(counts), 0  # cell → merged cell, left to right
    total = 0
    for i, c in enumerate(counts):
        merged[i] = run
        total += c
        if total >= LAW_MIN_CELL:
            run, total = run + 1, 0
    if total and run:  # a short last run joins the one before it
        merged[merged == run] = run - 1
    k = int(merged.max()) + 1
    table = np.stack([np.bincount(merged[cells[: a.size]], minlength=k),
                      np.bincount(merged[cells[a.size:]], minlength=k)])
    if k >= 2:
        chi2, p_chi2, dof, _ = chi2_contingency(table, correction=False)
    else:  # one value only, on both sides: nothing tells them apart
        chi2, p_chi2, dof = 0.0, 1.0, 0
    ks = ks_2samp(a, b)
    return {"mqtt": int(a.size), "inproc": int(b.size), "chi2": float(chi2), "dof": int(dof),
            "p_chi2": float(p_chi2), "ks": float(ks.statistic), "p_ks": float(ks.pvalue)}


def no_verdict(exact: dict, law: dict) -> str | None:
    """Why the bound computed from a target's MQTT releases must not be judged against its claim,
    or None. Either the releases are not the round's rule applied to the reports sent (forged on
    the way, or an intermediary that computes something else: the bound is then about releases no
    mechanism made), or they do not follow the in-process sampler's law (so neither the MQTT bound
    nor the in-process one speaks for what the analyzer receives)."""
    why = []
    if exact["equal"] != exact["releases"]:
        why.append(f"only {exact['equal']} of {exact['releases']} releases equal the round's rule applied to the "
                   f"reports sent (forged, or altered by the intermediary or on the wire)")
    failed = [f"input {which[-1]} (χ² p = {t['p_chi2']:.2g}, KS p = {t['p_ks']:.2g})"
              for which, t in law.items() if min(t["p_chi2"], t["p_ks"]) < LAW_ALPHA]
    if failed:
        why.append(f"the releases do not follow the in-process sampler's law at p < {LAW_ALPHA:g}: "
                   f"{', '.join(failed)}")
    return "; ".join(why) or None


class _Replay:
    """A target's sampler replaced by the releases collected over MQTT, handed out in order."""

    def __init__(self, x0: np.ndarray, x1: np.ndarray):
        self.data, self.at = (x0, x1), [0, 0]

    def __call__(self, which: int, count: int, rng) -> np.ndarray:
        start = self.at[which]
        if start + count > self.data[which].size:
            raise RuntimeError(f"asked for {count} more releases of input {which}, {self.data[which].size - start} left")
        self.at[which] += count
        return self.data[which][start:start + count]


def audit_over_mqtt(family, config, found: list[tuple[str, AuditTarget]], samples: int, delta: float | None,
                    confidence: float, seed: int, broker: Broker, out: Path,
                    progress: Callable[[str], None] | None = None,
                    mechanisms: Mapping | None = None) -> tuple[list[dict], dict]:
    """Audit ``found`` (label, target) pairs: those with an MQTT path over the broker, the rest
    in-process as ``--transport inproc`` would (each result says which, and why). Raises
    :class:`NoWirePath` if none has an MQTT path. ``mechanisms``: label → a mechanism the tests
    break (:meth:`~privbandit.protocol.spine.family.Family.wire_target`)."""
    from privbandit.audit.run import run_audit

    wires, at, reasons = [], [], {}  # reasons: position in ``found`` → why in-process
    for i, (label, target) in enumerate(found):
        try:
            wires.append(replace(family.wire_target(config, label, target, (mechanisms or {}).get(label)), label=label))
            at.append(i)
        except NoWirePath as exc:
            reasons[i] = str(exc)
    if not wires:
        grouped: dict[str, list[str]] = {}
        for i, why in reasons.items():
            grouped.setdefault(why, []).append(found[i][1].name)
        raise NoWirePath("; ".join(f"{why} ({', '.join(names)})" for why, names in grouped.items()))
    collected, session = collect(family, config, wires, samples, seed, broker, out / "mqtt", progress)
    results: list[dict | None] = [None] * len(found)
    for i, w, c in zip(at, wires, collected):
        t = w.target
        reference = [t.draw(which, samples, stream(seed, "audit-mqtt-reference", t.name),
                            int(t.details.get("per_release", 1))) for which in (0, 1)]
        law = {f"input_{which}": law_check(x, ref) for which, x, ref in zip((0, 1), (c.x0, c.x1), reference)}
        replayed = replace(t, sample=_Replay(c.x0, c.x1), details=t.details | {"per_release": 1})
        r = audit_target(replayed, samples, delta, confidence, np.random.default_rng(0))
        r["details"] = t.details
        r["seconds"] = {**r["seconds"], "sampling": c.seconds, "total": c.seconds + r["seconds"]["testing"]}
        r["releases_per_second"] = 2 * samples / c.seconds
        r["transport"] = "mqtt"
        r["mqtt"] = {"intermediary": w.intermediary, "rule": w.round.rule, "tasks": c.tasks,
                     "release_payload_bytes": c.bytes_received / (2 * samples), "law_check": law,
                     "exact": {"releases": 2 * samples, "equal": c.exact},
                     "notes": w.notes, **{k: v for k, v in session.items() if k != "rejected"},
                     "rejected": session["rejected"].get(w.intermediary, {})}
        if why := no_verdict(r["mqtt"]["exact"], law):  # the bound stays in audit.json, unjudged
            r["verdict"], r["refused"], r["tightness"] = "refused", why, None
        results[i] = r
    rest = sorted(reasons)
    for i, r in zip(rest, run_audit([found[i][1] for i in rest], samples, delta, confidence, seed, progress)):
        r["transport"] = "inproc"
        r["mqtt"] = {"why_not": reasons[i]}
        results[i] = r
    return results, session
