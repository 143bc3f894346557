"""What a paper family gives the spine: a small, typed interface.

A family is one package (``privbandit/families/<name>/`` or a package of its own, registered as a
``privbandit.families`` entry point) exporting one :class:`Family` object. The spine's parties,
engine, services, observer and results writer serve every family through it, so a family gets the
distributed path, report MACs, checkpoints, adversaries, ACLs and wire accounting without writing
any of them.

The family supplies:

- its experiment file model (pydantic) and what a task is: one run, or several runs stacked when
  their plans line up (:meth:`Family.stackable`);
- the analyzer's logic (:class:`AnalyzerLogic`): what the next plans ask, and how a release is
  decoded and learned from, with the privacy event (:class:`Spend`) each release costs;
- the users' logic (:class:`UserLogic`): how a block of users acts on a plan and randomizes;
- the observer's extras: one row per released round for ``rounds.csv``, a few summary fields.

What the intermediaries release is not the family's code: the rounds its plans open say it
(:class:`~privbandit.protocol.spine.events.Round`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from privbandit.protocol.privacy import Ledger, PrivacyEvent
from privbandit.protocol.spine.events import Plan, Release, Round, Truth


@dataclass(frozen=True)
class Spend:
    """One release's privacy event, and where it sits in the per-user composition
    (:class:`~privbandit.protocol.privacy.Ledger`): ``group`` None is a release of its own users."""

    event: PrivacyEvent
    lane: str = "round"
    group: object = None
    releases: int = 1  # how many releases this stands for (a block of one-user releases decided at once)


class AnalyzerLogic(Protocol):
    """The learner's side of one task, sans-I/O and deterministic given its public task and key
    (so replaying its releases rebuilds it: the analyzer's checkpoint)."""

    def plans(self) -> list[Plan]:
        """The next plans, or [] while it waits for releases (or once it is done)."""

    def on_release(self, rnd: Round, release: Release) -> tuple[dict[str, Any], Spend | list[Spend]]:
        """Decode a release of ``rnd`` (already checked against it) and learn from it. Must not
        change any state before it has decided the release is acceptable (raise ProtocolError).
        Several Spends (different lanes) when one release triggers several mechanisms."""

    @property
    def done(self) -> bool:
        """Every user the task serves has been planned (open rounds may remain). A logic may also
        define ``awaiting() -> set[int]``: the open rounds it still needs released; the others are
        abandoned once it is done (default: it awaits every open round)."""

    def summary(self) -> list[dict[str, Any]]:
        """What the learner ends with, per run (arms eliminated, batches clipped, …)."""


@dataclass
class BlockAnswer:
    """What one block of a plan's users does. ``reports``: per round it reports into, the offsets
    of the reporting users within the block, their values (R, k, width) and, for adversaries, their
    honest encodings (k,) or (k, width), or None. ``truth``: the block's ground truth (observer only)."""

    truth: Truth | None
    reports: list[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]] = field(default_factory=list)


@dataclass(frozen=True)
class CallerRewards:
    """What rewards a family's users accept from a caller's world (:meth:`Family.policy_users`):
    values in [``low``, ``high``], or only ``low`` and ``high`` when ``binary`` (the bound a
    mechanism's noise is calibrated to: a larger reward would spend more than the ledger says)."""

    low: float = 0.0
    high: float = 1.0
    binary: bool = False

    def check(self, rewards: np.ndarray, name: str = "rewards") -> None:
        """ValueError naming ``name`` and the allowed values, for any reward outside them."""
        if not np.isfinite(rewards).all():
            raise ValueError(f"{name}: every reward must be a finite number")
        if self.binary:
            bad = ~np.isin(rewards, (self.low, self.high))
            rule = f"must be {self.low:g} or {self.high:g}"
        else:
            bad = (rewards < self.low) | (rewards > self.high)
            rule = f"must lie in [{self.low:g}, {self.high:g}]"
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{name}[{i}]={float(rewards[i])!r}: {rule} ({int(bad.sum())} of {rewards.size} do not)")


class UserLogic(Protocol):
    """The users' side of one task (its simulated world and randomizers)."""

    def act(self, plan: Plan, block: int, first: int, size: int, stay: np.ndarray | None) -> BlockAnswer:
        """Users ``first … first + size − 1`` (block ``block`` of ``plan``) act. ``stay``: None, or
        the mask of users who report (the others dropped out after acting)."""

    def shard(self, plan: Plan, block: int, shards: int) -> int:
        """Which of ``shards`` fleets hosts this block."""


class Family(ABC):
    """A paper family: one object per package, found through the registry."""

    name: ClassVar[str]
    title: ClassVar[str]  # the paper, one line
    algorithm_lines: ClassVar[dict[str, str]] = {}  # algorithm name → what it is, one line (privbandit list)
    experiment_model: ClassVar[type]
    round_fields: ClassVar[list[str]] = []  # the family's rounds.csv columns, after the spine's

    # --- experiment files and tasks --------------------------------------------------------
    def load(self, data: dict, path: str) -> Any:
        """A validated config from an experiment file's data (raise ValueError/ValidationError)."""
        return self.experiment_model.model_validate(data)

    def labels(self, config) -> list[str]:
        return list(config.algorithms)

    def algorithm(self, config, label: str):
        """One algorithm's table with every default the family fills (presets) filled in."""
        return config.algorithms[label]

    def stackable(self, config, label: str) -> bool:
        """May the in-process engine step this algorithm's runs stacked (their plans line up)?"""
        return False

    @abstractmethod
    def intermediaries(self, config) -> list[str]:
        """The intermediary parties a session of this experiment needs."""

    @abstractmethod
    def users_protected(self, config) -> int:
        """N, the users one run protects: δ defaults to 1/(10N)."""

    @abstractmethod
    def public_task(self, config, label: str, runs: list[int]) -> dict:
        """What the analyzer and intermediaries may know of one task: never the world seed."""

    @abstractmethod
    def analyzer(self, public: dict, keys: list[int], oracle: Callable | None = None) -> AnalyzerLogic:
        """The analyzer's logic for one task, from its public spec and the analyzer's own key for
        each run. ``oracle``: in-process only, where the family's users offer one (a central-model
        learner may look ahead into data the trusted analyzer receives anyway; the decisions must
        be exactly those without it, which is what the MQTT run makes)."""

    @abstractmethod
    def users(self, config, label: str, runs: list[int]) -> UserLogic:
        """The users' logic of the given runs (stacked on axis 0)."""

    @abstractmethod
    def ledger(self, public: dict) -> Ledger:
        """An empty ledger for one run of the task."""

    # --- what arrives from the wire ------------------------------------------------------------
    # Pydantic models of the family's plan bodies, truth extras and record bodies: the services
    # check every message against them before the family's logic sees it (None: no fields to check).
    plan_body_model: ClassVar[type | None] = None
    truth_extras_model: ClassVar[type | None] = None
    record_body_model: ClassVar[type | None] = None

    def check_plan(self, plan: Plan) -> None:
        """Raise ValueError if a plan's body is not one this family's analyzer makes."""
        if self.plan_body_model is not None:
            self.plan_body_model.model_validate(plan.body)

    def check_secure_round(self, config, label: str, rnd) -> None:
        """Raise ValueError if a secure round's graph (``rnd.secagg``, ``secagg_degree``,
        ``secagg_threshold``) is not the one the users' own configuration gives. The analyzer chooses
        the graph, and a curious one could weaken it; users who hold the threat model check it."""

    def check_truth(self, truth: Truth) -> None:
        if self.truth_extras_model is not None:
            self.truth_extras_model.model_validate(truth.extras)

    def check_record(self, record) -> None:
        if self.record_body_model is not None:
            self.record_body_model.model_validate(record.body)

    def dropout_rate(self, config, label: str) -> float:
        return 0.0

    # --- privbandit.Policy: a caller's own loop -------------------------------------------------
    def policy_users(self, config, label: str, run: int, ask: Callable[[np.ndarray], np.ndarray],
                     contexts: np.ndarray | None = None) -> tuple[UserLogic, CallerRewards]:
        """The users of run ``run`` of ``label`` in a world that is the caller's
        (:class:`privbandit.policy.Policy`): the same logic and randomizers as :meth:`users`, but
        each block's rewards come from ``ask(arms)`` (the arm each of the block's users pulled, in
        user order; returns their rewards), and ``contexts`` (the family's shape) stand for the
        simulated world's. Only the caller knows the truth: the block truths carry no regret. A
        family whose users cannot be served so raises NotImplementedError saying why."""
        raise NotImplementedError(f"family {self.name} does not serve a caller's world yet: its users draw their "
                                  f"rewards inside their own logic, with no seam a caller's rewards could enter "
                                  f"(Family.policy_users; docs/api.md)")

    def adversary(self, config, label: str, run: int):
        """The in-process adversary of one run (:mod:`privbandit.protocol.spine.adversaries`), or None."""
        return None

    # --- privbandit audit ----------------------------------------------------------------------
    def audit_targets(self, config, label: str, cohort: int | None = None) -> list:
        """The releases of one algorithm that ``privbandit audit`` can test
        (:class:`privbandit.audit.targets.AuditTarget`), built from the family's own mechanisms and
        analyzer logic, with cohorts of ``cohort`` users (None: the family's default). []: none
        yet, which the audit reports as not audited."""
        return []

    def audit_candidates(self, config, label: str, cohort: int | None = None) -> list[list]:
        """``privbandit audit --search``: per release of :meth:`audit_targets` that has them, a few
        candidate neighbouring pairs of that release (each an ``AuditTarget`` of the same name, the
        default pair first; :mod:`privbandit.audit.search`). []: none offered."""
        return []

    def canary_audit(self, config, label: str, seed: int, confidence: float) -> dict:
        """A one-run canary audit of a whole run of ``label`` (Steinke, Nasr & Jagielski 2023):
        ``privbandit audit --canary``. A family that has none raises NotImplementedError."""
        raise NotImplementedError(f"family {self.name} has no one-run audit (docs/audit.md)")

    def wire_target(self, config, label: str, target, mechanism=None):
        """``privbandit audit --transport mqtt``: how the real intermediary process is fed and read
        for ``target``, one of :meth:`audit_targets`' (:class:`privbandit.audit.targets.WireTarget`:
        the round, the users' randomizer, the statistic of a decoded release, the rule's check).
        ``mechanism``: one the tests break, in place of the algorithm's. A release with no such
        path raises :class:`~privbandit.audit.targets.NoWirePath` saying why; it is then audited
        in-process."""
        from privbandit.audit.targets import NOT_WIRED, NoWirePath

        raise NoWirePath(NOT_WIRED)

    # --- the observer's extras ---------------------------------------------------------------
    def row_maker(self, config, label: str) -> Callable:
        """``row(record, truths) -> dict | list[dict] | None``: the ``rounds.csv`` row of a released
        round (its record and its plan's block truths), with the family's :attr:`round_fields`; None:
        no row. A list: the rows of the rounds one record stands for (an in-process look-ahead
        block of batches), each with its ``round``, ``n`` and ``reports``."""
        return lambda record, truths: {}

    def finish(self, config, label: str, result) -> None:
        """Last touches on one task's :class:`~privbandit.protocol.spine.observer.RunResult`
        (e.g. a ledger against colluders), the same in-process and over MQTT."""

    def label_summary(self, config, label: str, results: list) -> dict:
        """Extra ``summary.json`` fields for one algorithm (its tasks' results)."""
        return {}

    def experiment_summary(self, config) -> dict:
        """Extra top-level ``summary.json`` fields (the world's description)."""
        return {}

    def plot_options(self, config) -> dict:
        """Keyword arguments of :func:`privbandit.runner.results.plot_regret` for ``regret.png``."""
        return {}
