"""A caller's world for :class:`privbandit.policy.Policy`: the GLM family's users (Algorithm 2,
Private-GLM, the non-private baselines, and Algorithm 1, ShuffleGLM), whose arm sets and Bernoulli
rewards come from the caller.

The users' logic is the family's own (:class:`~.parties.GLMUsers`): user t acts on the billboard of
plan t through :func:`~.learners.choose` and reports (x_t, r_t, Criterion I's flag) to the trusted
analyzer. What differs is the world: user t's arm set X_t is the caller's (``contexts``, given up
front or through ``Policy.next(n, contexts=...)``), and her reward r_t for the arm she plays is
asked of the caller. Only the caller knows θ*: the block truths carry no regret (NaN).

κ and κ* (eq. (4), setting M2: κ = max over offered arms of 1/μ̇(⟨x, θ*⟩), 1/κ* = max μ̇(⟨x, θ*⟩))
calibrate the analyzer (eqs. (19)–(21), the trees' H sensitivity √2/κ*, the cutoffs). A simulated
world computes them from θ*; a caller has none, so they come from what it states (the paper, after
eq. (4): "it suffices to have access to an upper bound on κ and lower bounds on κ̂ and κ*"):

- by default, from Assumption 4.2's public bounds: ‖x‖ ≤ 1 and ‖θ*‖ ≤ S (``environment.norm``)
  give |⟨x, θ*⟩| ≤ S, and μ̇ is even and decreasing in |z| for both links, so
  κ ≤ 1/μ̇(S) and κ* ≥ 1/sup μ̇ = 1/μ̇(0) (4 logistic, √(2π) probit): :func:`kappa_bounds`;
- or explicitly, ``Policy(world={"kappa": …, "kappa_star": …})``, checked against what eq. (4)
  allows (κ* ≥ 1/μ̇(0), κ ≥ κ*).

Privacy does not rest on these values being true: the H tree's weights are clipped at 1/κ*
(learners.py), as are ShuffleGLM's covariance weights (shuffle_parties.py); the V tree's leaves are
x xᵀ with ‖x‖ ≤ 1 (checked when the caller gives them, :func:`check_contexts`); the optimizers'
noise is calibrated from the stated constants. What a loose bound costs is learning: wider
confidence sets and larger cutoffs.

ShuffleGLM (Algorithm 1) runs its own users' logic (:class:`~.shuffle_parties.ShuffleGLMUsers`) on a
duck-typed world (:class:`CallerGLMWorld`): a batch's users need their arm sets for a whole block
(≤ 65,536 users) at once, and their rewards are held for the 𝒫_GD plans that serve them again.
"""

from __future__ import annotations

import numpy as np

from privbandit.families.glm_bandits import learners as gl
from privbandit.families.glm_bandits import shuffle_parties as sp
from privbandit.families.glm_bandits.parties import GLMUsers, setup
from privbandit.families.glm_bandits.world import kappa_bounds, mu_dot_max
from privbandit.protocol.spine.events import Plan, Truth
from privbandit.protocol.spine.family import BlockAnswer, CallerRewards
from privbandit.protocol.spine.observer import checkpoint_grid, checkpoints_in

REWARDS = CallerRewards(0.0, 1.0, binary=True)  # Bernoulli rewards: the analyzer refuses any r ∉ {0, 1}


def stated_kappas(link: str, S: float, world: dict | None) -> tuple[float, float]:
    """κ, κ* the caller's world gives the analyzer: ``world``'s if stated, else :func:`kappa_bounds`."""
    if world is None:
        return kappa_bounds(link, S)
    unknown = sorted(set(world) - {"kappa", "kappa_star"})
    if unknown or set(world) != {"kappa", "kappa_star"}:
        raise ValueError(f"world: the GLM family takes exactly 'kappa' and 'kappa_star' (eq. (4)), got "
                         f"{sorted(world)}; or give no world for the bounds from S = environment.norm")
    floor = 1.0 / mu_dot_max(link)
    out = []
    for key in ("kappa", "kappa_star"):
        v = world[key]
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not np.isfinite(v):
            raise ValueError(f"world[{key!r}]={v!r}: must be a finite number")
        if float(v) < floor:
            raise ValueError(f"world[{key!r}]={float(v)!r}: must be ≥ 1/sup μ̇ = {floor:.6g} for the {link} link "
                             f"(eq. (4): no arm has μ̇ above its supremum)")
        out.append(float(v))
    if out[0] < out[1]:
        raise ValueError(f"world['kappa']={out[0]!r}: must be ≥ world['kappa_star']={out[1]!r} (eq. (4): κ is "
                         f"the largest 1/μ̇ over the arms, κ* the smallest)")
    return out[0], out[1]


class CallerGLMUsers(GLMUsers):
    """:class:`GLMUsers` of one run whose arm sets are ``contexts(t)``'s and rewards ``ask([a])``'s."""

    def __init__(self, s, contexts, ask, checkpoints: np.ndarray, public: dict):
        self.s, self.contexts, self.ask = s, contexts, ask
        self.ridx = np.arange(1)
        self.checkpoints = np.asarray(checkpoints, dtype=np.int64)
        self.public = public  # the analyzer's κ, κ*: Policy puts them in its public task

    def act(self, plan: Plan, block: int, first: int, size: int, stay: np.ndarray | None) -> BlockAnswer:
        b, d = plan.body, self.s.d
        theta = np.asarray(b["theta"])
        if theta.shape != (1, d):
            raise ValueError(f"plan {plan.id}: θ {theta.shape} does not fit one run in d = {d}")
        arms = self.contexts(first)[None]  # (1, K, d): user t's arm set X_t
        a, explored = gl.choose(arms, np.asarray(b["theta_o"]), np.asarray(b["v_inv"]), np.asarray(b["threshold"]),
                                np.asarray(b["width_o"]), theta, np.asarray(b["h_inv"]), np.asarray(b["beta"]),
                                self.s.link if b.get("reward_index") else None)
        y = np.asarray(self.ask(a.astype(np.int64)), dtype=np.float64)
        nan = np.full(1, np.nan)  # no regret: only the caller knows θ*
        at = checkpoints_in(self.checkpoints, first, size) - first - 1
        truth = Truth(plan.id, block, first, size, pseudo=nan, realized=nan.copy(), pseudo_at=nan[:, None][:, at],
                      realized_at=nan[:, None][:, at])
        reports = []
        if stay is None or stay[0]:
            values = np.concatenate([arms[self.ridx, a], y[:, None], explored[:, None].astype(np.float64)], axis=1)
            reports.append((plan.joins[0].round_id, np.array([0]), values[:, None, :], None))
        return BlockAnswer(truth, reports)


def check_contexts(env):
    """The check of a chunk of users' arm sets: shape (m, K, d), finite, every ‖x‖ ≤ 1 (Assumption 4.2)."""
    def check(x: np.ndarray) -> None:
        if x.ndim != 3 or x.shape[1:] != (env.arms, env.dim) or x.shape[0] < 1:
            raise ValueError(f"contexts: users' arm sets, shape (m, {env.arms}, {env.dim}) (m ≥ 1 users, "
                             f"environment.arms, environment.dim), not {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError("contexts: every feature must be a finite number")
        norms = np.linalg.norm(x, axis=-1)
        if (norms > 1.0 + 1e-9).any():  # the analyzer's own tolerance (parties.GLMServer.on_release): rounding
            u, k = np.unravel_index(int(norms.argmax()), norms.shape)
            raise ValueError(f"contexts[{u}, {k}]: ‖x‖₂ = {float(norms[u, k]):.6g} must be ≤ 1 (Assumption 4.2: "
                             f"the bound the trees and κ are calibrated to)")
    return check


class _Arms:
    """The arm sets of :class:`CallerGLMWorld`: ``arms[:, first:first + n]`` is the caller's (1, n, K, d)."""

    def __init__(self, contexts, T: int, K: int, d: int):
        self.contexts, self.shape = contexts, (1, T, K, d)

    def __getitem__(self, key):
        runs, users = key
        if runs != slice(None) or not isinstance(users, slice) or users.step not in (None, 1):
            raise IndexError(f"a caller's arm sets are read a block of users at a time, not {key!r}")
        first, stop = users.start or 0, min(users.stop, self.shape[1])
        return self.contexts.rows(first, stop - first)[None]


class _Asked:
    """The ``means`` of :class:`CallerGLMWorld`: ``means[r, t, a]`` is user t's reward for her arm a,
    asked of the caller the first time and held for the run (with uniforms ½, the simulated
    ``1{u_t < mean}`` is then that reward exactly). Held because Algorithm 1's gradient plans
    recompute the same users' play, and must read the rewards they were given, not ask again."""

    def __init__(self, ask, T: int):
        self.ask = ask
        self.held = np.full(T, np.nan)

    def __getitem__(self, key):
        _, t, a = key
        t, a = np.broadcast_arrays(np.asarray(t), np.asarray(a))
        t, a = t.reshape(-1), a.reshape(-1)
        new = np.isnan(self.held[t])
        if new.any():
            if not new.all() or np.any(np.diff(t) != 1):
                raise ValueError(f"users {t[0]}…{t[-1]}: some rewards held and some not (a block served in part)")
            self.held[t] = np.asarray(self.ask(a.astype(np.int64)), dtype=np.float64)
        return self.held[t].reshape(1, -1)


class CallerGLMWorld:
    """The duck-typed :class:`~.world.GLMWorld` of a caller's world for Algorithm 1's users
    (:class:`~.shuffle_parties.ShuffleGLMUsers`, whose logic runs unchanged on it): arm sets read from
    the caller's contexts, rewards asked (:class:`_Asked`), no θ* (NaN) and so no regret."""

    def __init__(self, contexts, ask, T: int, K: int, d: int):
        self.arms = _Arms(contexts, T, K, d)
        self.means = _Asked(ask, T)
        self.uniforms = np.full((1, T), 0.5)
        self.theta = np.full((1, d), np.nan)
        self.best = np.full((1, T), np.nan)


def caller_users(fam, config, label: str, run: int, ask, contexts, world: dict | None = None):
    """The users of run ``run`` of ``label`` in the caller's world: ``contexts`` is the Policy's
    per-user feed (``contexts(t)``, user t's arm set), ``world`` the caller's κ, κ* (else the bounds)."""
    a = fam.algorithm(config, label)
    if not callable(contexts) or not hasattr(contexts, "add"):
        raise ValueError(f"contexts: family {fam.name} takes each user's arm set (m, K, d) through its policy's "
                         f"per-user feed (privbandit.Policy)")
    env = config.environment
    kappa, kappa_star = stated_kappas(env.link, env.norm, world)
    contexts.check = check_contexts(env)
    public = {"kappa": [kappa], "kappa_star": [kappa_star]}
    task = {**fam.public_task(config, label, [run]), **public}
    grid = checkpoint_grid(config.horizon, config.checkpoints)
    if a.algorithm == "shuffle-glm":
        w = CallerGLMWorld(contexts, ask, config.horizon, env.arms, env.dim)
        users = sp.ShuffleGLMUsers(sp.shuffle_setup(task), w, config.seed, label, [run], grid)
        users.public = public  # Policy puts them in the analyzer's public task
        return users, REWARDS
    return CallerGLMUsers(setup(task), contexts, ask, grid, public), REWARDS
