"""A policy object for a caller's own loop (MABWiser's ``predict``/``partial_fit``), and its ledger as
an accountant (Opacus's ``get_epsilon``):

    policy = privbandit.Policy("dp-se", horizon=20_000, seed=1, epsilon=1.0)
    while not policy.done:
        arms = policy.next(256)            # the next users' arms (at most 256)
        policy.update(my_rewards(arms))    # their rewards, in [0, 1]
    policy.accountant.epsilon(1e-6)

No second engine: the policy runs the in-process engine (:func:`privbandit.protocol.spine.engine.run`)
over the same parties ``privbandit.run`` builds (:func:`privbandit.runner.tasks.parties`: the
analyzer's plans, the users' randomizers, the intermediary's release, the ledger), with one change,
the world: the family's :meth:`~privbandit.protocol.spine.family.Family.policy_users` gives users
whose rewards come from the caller. The engine runs in a worker thread that pauses whenever a block
of users needs rewards; ``next`` hands the caller that block's arms, ``update`` its rewards, and
returns once the engine has gone as far as it can without more (so the accountant is current).
Exactly one of the two threads runs at any time: the numbers do not depend on timing.

What the caller's world cannot give: ground truth. A policy reports no regret (the caller knows its
own rewards). Users see one block (≤ 65,536) of arms at a time, fewer at a batch's end: ``next(n)``
returns at most n arms, and fewer when the next ones depend on rewards not yet given.

Per-user contexts (the GLM family: each user's own arm set, (K, d)) enter in user order, given
up front (``Policy(contexts=...)``, (m, K, d)) or as they arrive (``next(n, contexts=...)``); the
engine pauses for them as it pauses for rewards. What else the analyzer must be told of the
caller's world (the GLM family's κ, κ*) the caller states with ``world=``; the family puts it in the
analyzer's public task in place of what a simulated world would give (:meth:`_CallerFamily.public_task`).
"""

from __future__ import annotations

import inspect
import queue
import threading
from pathlib import Path

import numpy as np

from privbandit.protocol.privacy.accountant import Accountant, NoProof
from privbandit.runner.config import ConfigError

__all__ = ["Policy", "PolicyError", "Exhausted", "NoProof", "Accountant"]


class PolicyError(ValueError):
    """A call the policy cannot take in its state (an update before any arms were handed out)."""


class Exhausted(PolicyError):
    """Every user of the horizon has been served: no more arms."""


class _Stop(BaseException):
    """Raised in the engine thread to unwind it when the policy is closed mid-run."""


class _Contexts:
    """Per-user contexts in user order (a family's ``policy_contexts = "per-user"``): rows given so far,
    read by the users' logic in the engine thread, which pauses (``need``) until the caller gives
    the row it asks for. ``check``: the family's validation of a chunk (set by its policy_users)."""

    def __init__(self, need, horizon: int):
        self.need, self.horizon = need, horizon
        self.chunks: list[np.ndarray] = []
        self.starts: list[int] = []
        self.given = 0
        self.check = None

    def add(self, contexts) -> None:
        x = np.asarray(contexts, dtype=np.float64)
        if self.check is not None:
            self.check(x)
        if self.given + x.shape[0] > self.horizon:
            raise ValueError(f"contexts: {self.given} users' contexts given already and {x.shape[0]} more: the "
                             f"horizon has {self.horizon} users")
        self.chunks.append(x.copy())
        self.starts.append(self.given)
        self.given += x.shape[0]

    def __call__(self, t: int) -> np.ndarray:
        """User t's context (0-based), pausing the engine until the caller has given it."""
        return self.rows(t, 1)[0]

    def rows(self, first: int, n: int) -> np.ndarray:
        """Users first … first + n − 1's contexts, stacked, pausing the engine until they are given."""
        while first + n > self.given:
            self.need(first + n - 1)
        i = int(np.searchsorted(self.starts, first, side="right")) - 1
        if first + n <= self.starts[i] + self.chunks[i].shape[0]:  # within one chunk: a view
            return self.chunks[i][first - self.starts[i]:first - self.starts[i] + n]
        return np.concatenate([c[max(0, first - s):first + n - s] for s, c in zip(self.starts, self.chunks)
                               if s < first + n and s + c.shape[0] > first])


class _CallerFamily:
    """The family as the policy's parties see it: the same object, but the public task completed by
    the caller world's own public constants (``logic.public``: what the caller stated, e.g. GLM's κ,
    κ*), never by a simulated world's."""

    def __init__(self, family, public: dict):
        self._family, self._public = family, public

    def public_task(self, config, label: str, runs: list[int]) -> dict:
        return {**self._family.public_task(config, label, runs), **self._public}

    def __getattr__(self, name):
        return getattr(self._family, name)


def _find_family(algorithm: str) -> str:
    """The family whose algorithms include ``algorithm`` (each family lists them in the registry)."""
    from privbandit import registry

    owners = [name for name in registry.family_names() if algorithm in registry.family(name).algorithm_lines]
    if len(owners) == 1:
        return owners[0]
    if not owners:
        known = sorted({a for n in registry.family_names() for a in registry.family(n).algorithm_lines})
        raise ConfigError(f"algorithm={algorithm!r}: not an algorithm of any family; known: {', '.join(known)}")
    raise ConfigError(f"algorithm={algorithm!r}: offered by {', '.join(owners)}; say which with family=")


class Policy:
    """One run of one algorithm, served to a caller's loop.

    ``experiment``: an experiment file's path, its data (dict) or a family's config, as
    :func:`privbandit.run` takes (``label``: which algorithm table, needed when it has several); or
    an algorithm's name (``"dp-se"``, ``"linucb-sdp-amp"``; ``family=`` where two families offer it),
    whose experiment is that algorithm with its family's defaults. ``**settings`` and ``overrides``
    as in :func:`privbandit.run` (``horizon=``, ``seed=``, ``environment={"arms": 5}``…); with an
    algorithm's name, ``epsilon=`` sets that algorithm's ε. ``run``: which run's streams and keys
    (run r of ``privbandit.run`` at the same seed). ``contexts``: the family's (the linear
    families' fixed arm features, (K, d); the GLM family's first users' arm sets, (m, K, d), the
    rest through :meth:`next`); None for a multi-armed bandit. ``world``: what the caller states of
    its world that the family's analyzer needs (the GLM family: ``kappa``, ``kappa_star``);
    None where the family needs nothing or derives it from public bounds.
    """

    def __init__(self, experiment, label: str | None = None, *, family: str | None = None, run: int = 0,
                 contexts=None, world: dict | None = None, overrides: list[str] | None = None,
                 epsilon: float | None = None, **settings):
        from privbandit.api import settings_overrides
        from privbandit.runner import load_experiment

        if isinstance(overrides, str):
            raise ConfigError(f"overrides={overrides!r}: a list of KEY=VALUE strings, not one string")
        if isinstance(run, bool) or not isinstance(run, int) or run < 0:
            raise ConfigError(f"run={run!r}: must be an integer ≥ 0")
        overrides = [*(overrides or ()), *settings_overrides(settings)]
        named = isinstance(experiment, str) and not experiment.endswith(".toml") and not Path(experiment).exists()
        if named:
            fam_name = family or _find_family(experiment)
            label = label or experiment
            data = {"family": fam_name, "name": f"policy-{experiment}",
                    "algorithms": {label: {"algorithm": experiment}}}
            if epsilon is not None:
                overrides.append(f"algorithms.{label}.epsilon={float(epsilon)!r}")
            experiment = data
        elif epsilon is not None or family is not None:
            raise ConfigError("epsilon, family: only with an algorithm's name (an experiment file sets them itself)")
        self.family, self.config = load_experiment(experiment, overrides)
        labels = self.family.labels(self.config)
        if label is None:
            if len(labels) != 1:
                raise ConfigError(f"label: the experiment has {len(labels)} algorithms ({', '.join(labels)}); "
                                  f"name one")
            label = labels[0]
        if label not in labels:
            raise ConfigError(f"label={label!r}: not one of {', '.join(labels)}")
        if run >= self.config.runs:
            raise ConfigError(f"run={run}: must lie in [0, {self.config.runs - 1}] (the experiment's runs)")
        self.label, self.run, self.horizon = label, run, int(self.config.horizon)
        self._feed = None
        if getattr(self.family, "policy_contexts", "fixed") == "per-user":
            self._feed = _Contexts(self._need, self.horizon)
        self._contexts = None if contexts is None else np.asarray(contexts, dtype=np.float64)
        if world is not None and not isinstance(world, dict):
            raise ConfigError(f"world={world!r}: a dict of what the family needs stated (e.g. the GLM family's "
                              f"{{'kappa': …, 'kappa_star': …}})")
        extra = {} if world is None else {"world": dict(world)}
        if extra and "world" not in inspect.signature(self.family.policy_users).parameters:
            raise ConfigError(f"world: family {self.family.name} takes nothing stated of the caller's world; "
                              f"give none")
        try:
            logic, self.rewards_allowed = self.family.policy_users(
                self.config, label, run, self._ask, self._contexts if self._feed is None else self._feed, **extra)
            if self._feed is not None and self._contexts is not None:
                self._feed.add(self._contexts)
        except (ValueError, NotImplementedError) as exc:
            raise ConfigError(str(exc)) from None
        self._start(logic)

    def _start(self, logic) -> None:
        from privbandit.protocol.spine import engine
        from privbandit.runner import tasks

        public = getattr(logic, "public", None)
        family = self.family if public is None else _CallerFamily(self.family, public)
        self.public, self._analyzer, users, boxes, observer = tasks.parties(
            family, self.config, self.label, [self.run], oracle=False, user_logic=logic)
        algorithm = self.family.algorithm(self.config, self.label)
        name = getattr(algorithm, "algorithm", self.label)
        self.accountant = Accountant(self._analyzer.ledger, f"{name}: {self.family.algorithm_lines.get(name, '')}",
                                     self.label)
        self.served = 0  # users whose rewards the engine has taken
        self._to_engine: queue.Queue = queue.Queue(maxsize=1)
        self._to_caller: queue.Queue = queue.Queue(maxsize=1)
        self._block: np.ndarray | None = None  # the paused block's arms
        self._wanting: int | None = None  # the user whose context the paused engine needs
        self._given = 0  # of which handed to the caller
        self._got: list[np.ndarray] = []  # their rewards so far
        self._finished = False
        self._error: BaseException | None = None  # what stopped the engine, if anything did
        self.rejected: dict = {}

        def work():
            try:
                rejected = engine.run(self._analyzer, users, boxes, observer)
            except _Stop:
                return
            except BaseException as exc:  # handed to the caller's thread, raised there
                self._to_caller.put(("error", exc))
                return
            self._to_caller.put(("done", dict(rejected)))

        self._observer = observer
        self._thread = threading.Thread(target=work, name=f"privbandit-policy-{self.label}", daemon=True)
        self._thread.start()
        self._wait()

    # --- the engine thread's side --------------------------------------------------------------
    def _ask(self, arms: np.ndarray) -> np.ndarray:
        """Called by the users' logic inside the engine: pause until the caller gives these users' rewards."""
        self._to_caller.put(("arms", np.asarray(arms, dtype=np.int64)))
        reply = self._to_engine.get()
        if reply is None:
            raise _Stop
        return reply

    def _need(self, t: int) -> None:
        """Called by the users' logic (through the contexts feed): pause until the caller gives user t's context."""
        self._to_caller.put(("contexts", t))
        if self._to_engine.get() is None:
            raise _Stop

    # --- the caller's side ---------------------------------------------------------------------
    def _wait(self) -> None:
        kind, value = self._to_caller.get()
        if kind == "arms":
            self._block, self._given, self._got = value, 0, []
        elif kind == "contexts":
            self._block, self._given, self._got, self._wanting = None, 0, [], value
        elif kind == "done":
            self._finished, self._block, self.rejected = True, None, value
        else:
            self._finished, self._block, self._error = True, None, value
            raise value

    @property
    def done(self) -> bool:
        """No more arms: every user of the horizon has been served (and every release the run makes
        was made), or the run stopped on an error (raised then, and named by every later call)."""
        return self._finished

    def _check_running(self, call: str) -> None:
        if self._error is not None:
            raise PolicyError(f"{call}: the run stopped on an error: {self._error!r}")
        if self._finished:
            raise Exhausted(f"{call}: horizon exhausted: all {self.horizon} users were served")

    @property
    def records(self) -> list:
        """The analyzer's record of every release so far, in round order (what it decoded: the
        family's ``rounds.csv`` fields before the truth is joined, and the release's own ε)."""
        return [self._observer.records[k] for k in sorted(self._observer.records)]

    @property
    def pending(self) -> int:
        """Arms handed out whose rewards :meth:`update` has not had yet."""
        return self._given - sum(g.size for g in self._got)

    def next(self, n: int = 1, contexts=None) -> np.ndarray:
        """The arms of the next users, in order: at most ``n``, fewer at the end of a block of users
        or of a batch (the following users' arms depend on these users' rewards). Give their
        rewards to :meth:`update` before asking again. ``contexts``: where the family takes per-user
        contexts (GLM: arm sets (m, K, d)), the next m users' (after those already given), kept until
        those users come; a user's arm needs her context, so the first call with none left is an error."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise PolicyError(f"n={n!r}: must be an integer ≥ 1")
        if self.pending:
            raise PolicyError(f"next: {self.pending} arms handed out still await their rewards (update first)")
        self._check_running("next")
        if contexts is not None:
            if self._feed is None:
                raise PolicyError(f"contexts: family {self.family.name} takes no per-user contexts in next "
                                  f"(its contexts, if any, are given once: Policy(contexts=...))")
            try:
                self._feed.add(contexts)
            except ValueError as exc:
                raise PolicyError(str(exc)) from None
        if self._wanting is not None:
            if self._wanting >= self._feed.given:
                need = self._wanting + 1 - self._feed.given
                raise PolicyError(f"contexts: the contexts of users up to {self._wanting} (0-based) are needed before "
                                  f"their arms, {need} more: next(n, contexts=...) with the next users' arm sets")
            self._wanting = None
            self._to_engine.put(True)
            self._wait()
            self._check_running("next")
        out = self._block[self._given:self._given + int(n)]
        self._given += out.size
        return out.copy()

    def predict(self, n: int = 1) -> np.ndarray:
        """MABWiser's name for :meth:`next`."""
        return self.next(n)

    def update(self, rewards) -> None:
        """The rewards of the arms :meth:`next` last handed out, in their order (one per arm; the
        family's range, e.g. [0, 1])."""
        if not self.pending:
            self._check_running("update")
            raise PolicyError("update before next: no arms await rewards (call next(n) first)")
        r = np.asarray(rewards, dtype=np.float64) if not isinstance(rewards, (str, bytes)) else None
        if r is None or r.shape != (self.pending,):
            shape = None if r is None else r.shape
            raise PolicyError(f"rewards: shape {shape}, but {self.pending} arms await rewards (give shape "
                              f"({self.pending},))")
        try:
            self.rewards_allowed.check(r, "rewards")
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
        self._got.append(r.copy())
        if self._given < self._block.size:
            return
        answer = np.concatenate(self._got)
        self.served += answer.size
        self._block = None
        self._to_engine.put(answer)
        self._wait()

    def partial_fit(self, decisions, rewards) -> None:
        """MABWiser's name for :meth:`update`, given the arms too (checked against those handed out)."""
        d = np.asarray(decisions)
        start = self._given - self.pending
        want = None if self._block is None else self._block[start:self._given]
        if want is None or d.shape != want.shape or not np.array_equal(d, want):
            raise PolicyError(f"decisions: {d.tolist()[:8]}… are not the arms handed out and awaiting rewards "
                              f"({[] if want is None else want.tolist()[:8]}…)")
        self.update(rewards)

    def close(self) -> None:
        """Stop the engine thread of a policy left before its horizon (done by garbage collection too)."""
        if not self._finished and self._thread.is_alive():
            self._finished = True
            self._to_engine.put(None)
            self._thread.join(timeout=5)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to stop
            pass

    def __repr__(self) -> str:
        spent = self.accountant.spent()
        eps = spent["epsilon_at_delta"]
        return (f"<Policy {self.label} ({self.family.name}), run {self.run}: {self.served:,} of {self.horizon:,} "
                f"users served, ε = {'none proven' if eps is None else f'{eps:.4g}'} at δ = {spent['delta']:.3g}>")
