"""Regret rates of the papers' theorems: each theorem's experiment file run over a grid of T (and ε),
its form fitted, and a verdict (privbandit.analysis.rates; docs/rates.md).

    python experiments/rates.py [--family mab online linear concurrent glm] [--only thm1 online-thm3 ...]
                                [--jobs 1] [--horizons T ...] [--epsilons ε ...] [--runs N]
                                [--out results/rates] [--figures docs/figures]

- mab: Chowdhury & Zhou (ICLR 2023) Thms 1, 2, 4, 5, 6 (experiments/rates_mab_thm*.toml);
- online: Hu, Huang & Mehta Thms 3, 4 (Anytime-Lazy-UCB) and 7 (FTNL) (rates_online_thm*.toml);
- linear: Chowdhury & Zhou (ICML 2022) Cor. 3.3's T^{3/5} with B ∝ T^{3/5} (rates_linear_cor33.toml);
- concurrent: Tenenbaum et al. (ICML 2023) Thm 5.1's n^{(k+1)/(2k+1)} (rates_concurrent_thm51.toml);
- glm: Sarmasarkar et al. Thm 6.2 (Private-GLM, JDP): √T with Thm I.8's logs (rates_glm_thm62.toml).

Each file is swept with the project's sweep (privbandit.runner.sweep.run_sweep, the API
``privbandit sweep`` calls), kept under ``--out/<key>`` so a second call reuses every finished task.
Prints, per theorem, the mean final regret at each point and the verdict, and writes
``--out/rates-<family>.json`` and ``--figures/rates_<family>.png`` (regret against T, one panel per
theorem, with the paper's lower bound drawn where one applies, its constant unspecified and drawn as 1).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privbandit.analysis import rates
from privbandit.runner import config as experiment_files
from privbandit.runner.sweep import run_sweep

HERE = Path(__file__).resolve().parent
DECADES = [10_000, 100_000, 1_000_000, 10_000_000]
EPSILONS = [0.2, 0.4, 0.8]  # inside Thms 4–6's ε ∈ (0, 1) (MAB) and across the online instance's gaps
COLOURS = {0.2: "tab:red", 0.4: "tab:orange", 0.8: "tab:blue", 12.0: "tab:red", 24.0: "tab:blue"}
LINEAR_T = [2500 * 2**i for i in range(10)]  # 2,500 … 1,280,000
CONCURRENT_N = [2000, 8000, 32000]
# Private-GLM runs at 10²–10³ users/s, and the family's DP-SGD accountant finds no noise multiplier at
# δ = 10⁻⁶ when a call's n is just above its batch and its share of ε is small: ε = 12 fails at T = 20,000
# (72 calls), ε < 12 already at T ≤ 10,000. So T = 1,250 … 10,000 and ε = 12, 24 (docs/rates.md).
GLM_T = [1250 * 2**i for i in range(5)]
GLM_EPSILONS = [2.0, 6.0, 12.0, 24.0]  # ≥ 1: Thm I.8's min(ε, 1) term carries no ε


@dataclass(frozen=True)
class Theorem:
    family: str
    what: str
    file: str  # experiments/<file>.toml
    horizons: tuple[int, ...]
    lower_bound: bool = True  # the family's lower bound is a valid one for this theorem's privacy


THEOREMS = {
    "thm1": Theorem("mab", "Thm 1, Dist-DP-SE (distributed pure DP)", "rates_mab_thm1", tuple(DECADES)),
    "thm2": Theorem("mab", "Thm 2, Dist-RDP-SE (RDP, s = 10)", "rates_mab_thm2", tuple(DECADES), False),
    "thm4": Theorem("mab", "Thm 4, Dist-CDP-SE (CDP, s = 10)", "rates_mab_thm4", tuple(DECADES), False),
    "thm5": Theorem("mab", "Thm 5, CDP-SE (central pure DP)", "rates_mab_thm5", tuple(DECADES)),
    # 10⁸ only where the regret is still leaving its exploration phase at 10⁷ (LDP-SE); elsewhere it
    # costs minutes for a point on a plateau (docs/rates.md, "Cost").
    "thm6": Theorem("mab", "Thm 6, LDP-SE (local pure DP)", "rates_mab_thm6", tuple(DECADES + [10**8])),
    "online-thm3": Theorem("online", "Thm 3, Anytime-Lazy-UCB (central pure DP)", "rates_online_thm3",
                           tuple(DECADES + [10**8])),
    # Thm 4's instance changes with T; 10⁸ would cost 23–37 s a run for a bound the other points already test.
    "online-thm4": Theorem("online", "Thm 4, Anytime-Lazy-UCB, Δ_T = √(K ln T/T)", "rates_online_thm4",
                           tuple(DECADES)),
    "online-thm7": Theorem("online", "Thm 7, FTNL (full information, pure DP)", "rates_online_thm7",
                           tuple(DECADES + [10**8])),
    "linear-cor33": Theorem("linear", "Cor. 3.3 / Rem. 3.6, B = 0.25·T^0.6", "rates_linear_cor33",
                            tuple(LINEAR_T), False),
    "concurrent-thm51": Theorem("concurrent", "Thm 5.1, Alg. 4 (theory constants)", "rates_concurrent_thm51",
                                tuple(CONCURRENT_N), False),
    "glm-thm62": Theorem("glm", "Thm 6.2, Private-GLM (JDP, paper-code)", "rates_glm_thm62", tuple(GLM_T), False),
}
FAMILIES = ("mab", "online", "linear", "concurrent", "glm")
SS = "Shariff–Sheffet Ω(Σ ln T/Δ + K ln T/ε), c = 1"


def instance(path: Path) -> tuple[np.ndarray, object, object]:
    """The file's arm means, family and config (a rate is fitted on one instance: named means)."""
    fam, config = experiment_files.load(path)
    env = config.environment
    if getattr(env, "kind", "means") != "means":
        raise ValueError(f"{path.name}: environment.kind = {env.kind!r}; a rate is fitted on one instance, so "
                         f"set kind = 'means'")
    return np.asarray(env.means, float), fam, config


def mab_forms(path: Path) -> dict[str, rates.Form]:
    """Chowdhury & Zhou's forms on the file's instance (the paper's statements; docs/rates.md)."""
    mu, fam, config = instance(path)
    gaps = mu.max() - mu
    inv_gaps, K = float(np.sum(1 / gaps[gaps > 0])), len(mu)
    (label,) = config.algorithms
    s = getattr(fam.algorithm(config, label), "s", None) or 1
    g = rates.Term("Σ ln T/Δ", 1, 0, inv_gaps)
    return {
        "thm1": rates.Form("Σ_a ln T/Δ_a + K ln T/ε", (g, rates.Term("K ln T/ε", 1, 1, K))),
        "thm2": rates.Form("Σ_a ln T/Δ_a + K √ln T/ε + K ln T/(sε)",
                           (g, rates.Term("K √ln T/ε", 0.5, 1, K), rates.Term("K ln T/(sε)", 1, 1, K / s))),
        "thm4": rates.Form("Σ_a ln T/Δ_a + K √ln T/ε", (g, rates.Term("K √ln T/ε", 0.5, 1, K))),
        "thm5": rates.Form("Σ_a ln T/Δ_a + K ln T/ε", (g, rates.Term("K ln T/ε", 1, 1, K))),
        "thm6": rates.Form("Σ_a ln T/(ε² Δ_a)", (rates.Term("Σ ln T/(ε²Δ)", 1, 2, inv_gaps),)),
    }


def online_forms(path: Path) -> dict[str, object]:
    """Hu, Huang & Mehta's bounds on the file's instance. Thm 3's Σ_j ln T/min{Δ_j, ε} lies between
    ½ and 1 times Σ_j ln T/Δ_j + (K−1) ln T/ε, so it is that sum's O(·). Thm 7's bound is constant in
    T once T ≥ 1/Δ_min (its min{log(1/Δ_min), log T}), so its terms carry no ln T."""
    mu, _, _ = instance(path)
    gaps = (mu.max() - mu)[mu < mu.max()]
    K, d = len(mu), float(gaps.min())
    return {
        "online-thm3": rates.Form("Σ_j ln T/min{Δ_j, ε}", (rates.Term("Σ ln T/Δ", 1, 0, float(np.sum(1 / gaps))),
                                                           rates.Term("(K−1) ln T/ε", 1, 1, len(gaps)))),
        "online-thm4": rates.PowerLaw("√(K T ln T) + K ln T/ε", 0.5, 0.5, 1),
        "online-thm7": rates.Form("ln K/Δ_min + ln K · ln(1/Δ_min)/ε",
                                  (rates.Term("ln K/Δ_min", 0, 0, math.log(K) / d),
                                   rates.Term("ln K ln(1/Δ_min)/ε", 0, 1, math.log(K) * math.log(1 / d)))),
    }


def shariff_sheffet(T, eps, inv_gaps, K):
    """Shariff & Sheffet (2018)'s Ω(Σ_a ln T/Δ_a + K ln T/ε) for central ε-DP bandits, constant 1."""
    return inv_gaps * np.log(T) + K * np.log(T) / eps


def thm4_gap(T, K: int):
    """Thm 4's worst-case gap Δ_T = √(K ln T/T) (its proof's split point)."""
    return np.sqrt(K * np.log(T) / np.asarray(T, float))


def final_regrets(out: Path, points: dict, algorithm: str | None = None) -> tuple[np.ndarray, ...]:
    """Every run's final pseudo-regret at every point of a sweep: (regret, T, ε, run), of one algorithm
    when given (else the point's only one)."""
    R, T, E, G = [], [], [], []
    for name, summary in points.items():
        horizon, eps = summary["horizon"], summary["epsilon"]
        algos = [algorithm] if algorithm else list(summary["algorithms"])
        with open(out / name / "runs.csv", newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if int(float(r["t"])) == horizon and r["algorithm"] in algos]
        if len(rows) != summary["runs"] * len(algos):
            raise RuntimeError(f"{out / name}/runs.csv: {len(rows)} rows at t = {horizon}, expected "
                               f"{summary['runs']} runs × {len(algos)} algorithms")
        for r in rows:
            R.append(float(r["pseudo"]))
            T.append(horizon)
            E.append(eps)
            G.append(int(r["run"]))
    return tuple(np.asarray(v) for v in (R, T, E, G))


def sweep(key: str, args, horizons, grids=(), overrides=(), sub: str = "") -> tuple[dict, Path, dict]:
    """One sweep of the theorem's file over ``horizon=…`` (and ``grids``), under --out/<key>[/<sub>]."""
    path = HERE / f"{THEOREMS[key].file}.toml"
    out = args.out / key / sub if sub else args.out / key
    grid = ["horizon=" + ",".join(map(str, horizons)), *grids]
    runs = [f"runs={args.runs}"] if args.runs else []
    swept = run_sweep(path, grid, out, [*overrides, *runs], jobs=args.jobs, resume=True)
    return swept["points"], out, {"computed": swept["computed"], "reused": swept["reused"]}


def eps_grid(args, default=EPSILONS) -> list[str]:
    return ["epsilon=" + ",".join(f"{e:g}" for e in (args.epsilons or default))]


def verdict_json(v) -> dict:
    if isinstance(v, rates.PowerVerdict):
        return {"kind": "power", "word": v.word, "reasons": v.reasons, "n": v.n, "text": v.text(),
                "power": [v.power.value, v.power.low, v.power.high], "a_max": v.a_max,
                "nu": None if v.nu is None else [v.nu.value, v.nu.low, v.nu.high], "nu_max": v.law.inv_eps}
    return {"kind": "form", "word": v.word, "reasons": v.reasons, "n": v.n, "note": v.note, "text": v.text(),
            "gamma": [v.gamma.value, v.gamma.low, v.gamma.high], "gamma_max": v.form.gamma_max,
            "nu": None if v.nu is None else [v.nu.value, v.nu.low, v.nu.high], "nu_max": v.form.nu_max,
            "power": [v.power.value, v.power.low, v.power.high],
            "coefficients": {k: [c.value, c.stderr] for k, c in v.coefficients.items()}}


def headline(v) -> str:
    if isinstance(v, rates.PowerVerdict):
        nu = "" if v.nu is None else f", ν = {v.nu.value:.2f} [{v.nu.low:.2f}, {v.nu.high:.2f}] ≤ {v.law.inv_eps:g}"
        return f"{v.word}: a = {v.power.value:.2f} [{v.power.low:.2f}, {v.power.high:.2f}] ≤ {v.a_max:.2f}{nu}"
    return f"{v.word}: γ = {v.gamma.value:.2f} [{v.gamma.low:.2f}, {v.gamma.high:.2f}] ≤ {v.form.gamma_max:g}"


def by_eps_panel(key, R, T, E, v, bound=None, explore=None, bound_label="") -> dict:
    """A panel of mean regret against T, one line per ε; ``bound(T, ε)`` the lower bound drawn dashed
    (named ``bound_label``), ``explore(T)`` the regret while no arm has left (grey, dotted)."""
    Ts = np.unique(T)
    grid = np.geomspace(Ts.min(), Ts.max(), 50)
    series, lines = [], []
    for eps in np.unique(E):
        colour = COLOURS.get(float(eps))
        series.append({"label": f"ε = {eps:g}", "x": Ts.tolist(), "colour": colour,
                       "y": [float(R[(T == t) & (E == eps)].mean()) for t in Ts]})
        if bound is not None:
            lines.append({"x": grid.tolist(), "y": np.broadcast_to(bound(grid, eps), grid.shape).tolist(),
                          "colour": colour, "style": "--", "label": None if lines else bound_label})
    ylo = min(min(s["y"]) for s in series)
    if bound is not None:
        ylo = min(ylo, np.nanmin([line["y"] for line in lines]))
    if explore is not None:
        lines.append({"x": grid.tolist(), "y": explore(grid).tolist(), "colour": "grey", "style": ":",
                      "label": "T · mean gap"})
    th = THEOREMS[key]
    return {"title": f"{th.what}\n{headline(v)}", "series": series, "lines": lines, "xlabel": "T",
            "ylim": [0.7 * ylo, 1.6 * float(R.max())],
            "note": None if th.lower_bound or bound is None
            else "dashed: a pure-DP bound,\nnot a bound for this privacy"}


def report(key, R, T, E, v, counts, t0, name) -> None:
    print(f"{THEOREMS[key].what}: E[Reg(T)] = O({name})  [{counts['computed']} tasks computed, "
          f"{counts['reused']} reused, {time.perf_counter() - t0:.1f} s]")
    for eps in np.unique(E):
        cells = "  ".join(f"T={t:.0e}: {R[(T == t) & (E == eps)].mean():,.1f}" for t in np.unique(T))
        print(f"  ε = {eps:g}: {cells}")
    print(f"  verdict: {v.text()}")


def run_mab(key, args) -> dict:
    th, path = THEOREMS[key], HERE / f"{THEOREMS[key].file}.toml"
    form = mab_forms(path)[key]
    t0 = time.perf_counter()
    points, out, counts = sweep(key, args, args.horizons or th.horizons, eps_grid(args))
    R, T, E, G = final_regrets(out, points)
    v = rates.check(R, T, E, G, form)
    report(key, R, T, E, v, counts, t0, form.name)
    mu, _, _ = instance(path)
    gaps = mu.max() - mu
    inv_gaps, K = float(np.sum(1 / gaps[gaps > 0])), len(mu)
    panel = by_eps_panel(key, R, T, E, v, lambda t, e: shariff_sheffet(t, e, inv_gaps, K),
                         lambda t: gaps.mean() * t, SS)
    panel["ylim"][0] = 0.7 * float(shariff_sheffet(T.min(), E.max(), inv_gaps, K))
    return data(form.name, R, T, E, G, v, panel)


def data(name, R, T, E, G, v, panel) -> dict:
    return {"form": name, "regret": R.tolist(), "T": T.tolist(), "eps": E.tolist(), "run": G.tolist(),
            "verdict": verdict_json(v), "panel": panel}


def run_online(key, args) -> dict:
    th, path = THEOREMS[key], HERE / f"{THEOREMS[key].file}.toml"
    form = online_forms(path)[key]
    mu, _, _ = instance(path)
    K = len(mu)
    t0 = time.perf_counter()
    horizons = args.horizons or th.horizons
    if key == "online-thm4":  # the instance changes with T: one sweep per T, its means set
        parts, counts = [], {"computed": 0, "reused": 0}
        for t in horizons:
            d = float(thm4_gap(t, K))
            means = "[" + ", ".join(f"{m:.6g}" for m in [0.5 + d] + [0.5] * (K - 1)) + "]"
            points, out, c = sweep(key, args, [t], eps_grid(args), [f"environment.means={means}"], sub=f"T={t}")
            parts.append(final_regrets(out, points))
            counts = {k: counts[k] + c[k] for k in counts}
        R, T, E, G = (np.concatenate(p) for p in zip(*parts))
        v = rates.check_power(R, T, form, eps=E, groups=G)
        report(key, R, T, E, v, counts, t0, form.name)
        panel = by_eps_panel(key, R, T, E, v, lambda t, e: shariff_sheffet(t, e, (K - 1) / thm4_gap(t, K), K),
                             lambda t: (K - 1) / K * thm4_gap(t, K) * t, "Ω(Σ ln T/Δ_T + K ln T/ε), c = 1")
        return data(form.name, R, T, E, G, v, panel)
    points, out, counts = sweep(key, args, horizons, eps_grid(args))
    R, T, E, G = final_regrets(out, points)
    v = rates.check(R, T, E, G, form)
    report(key, R, T, E, v, counts, t0, form.name)
    gaps = (mu.max() - mu)[mu < mu.max()]
    if key == "online-thm3":
        panel = by_eps_panel(key, R, T, E, v, lambda t, e: shariff_sheffet(t, e, float(np.sum(1 / gaps)), K),
                             lambda t: (mu.max() - mu).mean() * t, SS)
        return data(form.name, R, T, E, G, v, panel)
    # Thm 10: Ω(max{ln K/Δ_min, ln K/ε}) for ε-DP stochastic DTOL, once T ≥ max{ln K/(16Δ²), ln K/(10εΔ)}.
    d = float(gaps.min())
    def thm10(t, e):
        holds = t >= max(math.log(K) / (16 * d * d), math.log(K) / (10 * e * d))
        return np.where(holds, max(math.log(K) / d, math.log(K) / e), np.nan)

    panel = by_eps_panel(key, R, T, E, v, thm10, bound_label="Thm 10: Ω(max{ln K/Δ_min, ln K/ε}), c = 1")
    return data(form.name, R, T, E, G, v, panel)


def by_algorithm(key, args, horizons, laws: dict, overrides_at) -> dict:
    """The T-power families: one sweep per T (its overrides from ``overrides_at(T)``), each algorithm
    judged against its law; one panel, one line per algorithm with its law drawn through its first point."""
    t0 = time.perf_counter()
    parts, counts = {a: [] for a in laws}, {"computed": 0, "reused": 0}
    for t in horizons:
        points, out, c = sweep(key, args, [t], (), overrides_at(t), sub=f"T={t}")
        counts = {k: counts[k] + c[k] for k in counts}
        for a in laws:
            parts[a].append(final_regrets(out, points, a))
    th, found, series, lines = THEOREMS[key], {}, [], []
    panel_x = "T" if th.family == "linear" else "n"  # the concurrent paper's horizon is n
    print(f"{th.what}  [{counts['computed']} tasks computed, {counts['reused']} reused, "
          f"{time.perf_counter() - t0:.1f} s]")
    for (a, law), colour in zip(laws.items(), ["tab:red", "tab:green", "tab:purple", "tab:blue"]):
        R, T, E, G = (np.concatenate(p) for p in zip(*parts[a]))
        v = rates.check_power(R, T, law, groups=G)
        Ts = np.unique(T)
        mean = np.array([R[T == t].mean() for t in Ts])
        print(f"  {a}: O({law.name}); " + "  ".join(f"{panel_x}={t:,}: {m:,.0f}" for t, m in zip(Ts, mean)))
        print(f"    verdict: {v.text()}")
        series.append({"label": f"{a}: {headline(v)}", "x": Ts.tolist(), "y": mean.tolist(), "colour": colour})
        lines.append({"x": Ts.tolist(), "y": (mean[0] * law(Ts) / law(Ts[0])).tolist(), "colour": colour,
                      "style": "--", "label": None if lines else "the law through the first point"})
        found[a] = {"form": law.name, "regret": R.tolist(), "T": T.tolist(), "run": G.tolist(),
                    "verdict": verdict_json(v)}
    panel = {"title": th.what, "series": series, "lines": lines, "xlabel": panel_x,
             "ylim": None, "note": None}
    return {"algorithms": found, "panel": panel}


def run_linear(key, args) -> dict:
    # Cor. 3.3 (P_Amp) and Remark 3.6 (P_Vec): Õ(T^{3/5} log^{1/2}(T/δ)); the Õ's other logs are
    # LinUCB's (ln T)^1 at most, so q = 1 is the allowance. LDP per round: Õ(T^{3/4}), the same q.
    shuffle = rates.PowerLaw("T^{3/5} ln T", 0.6, 1)
    laws = {"LinUCB-SDP-Amp": shuffle, "LinUCB-SDP-Vec": shuffle, "LinUCB-LDP": rates.PowerLaw("T^{3/4} ln T", 0.75, 1)}

    def overrides(t):
        b = max(1, round(0.25 * t**0.6))  # reproduce_linear.py's B = 0.25·T^{0.6}
        return [f"algorithms.LinUCB-SDP-Amp.batch={b}", f"algorithms.LinUCB-SDP-Vec.batch={b}"]

    return by_algorithm(key, args, args.horizons or THEOREMS[key].horizons, laws, overrides)


def run_concurrent(key, args) -> dict:
    # Thm C.3's proof bounds the regret by k^{3/4} n^{(k+1)/(2k+1)} (√σ + d) log(n)/√ε: q = 1.
    laws = {f"alg4@k{k}": rates.PowerLaw(f"n^{k + 1}/{2 * k + 1} ln n", (k + 1) / (2 * k + 1), 1) for k in (1, 2, 3)}
    return by_algorithm(key, args, args.horizons or THEOREMS[key].horizons, laws, lambda t: [])


def glm_law(key: str) -> rates.PowerLaw:
    """Sarmasarkar et al. Thm 6.2 through Thm I.8, at δ and ζ fixed (the file's): √T·log(T/δ) and
    √T·log^{3/2}(Td/ζ)·log(1/δ), so √T (ln T)^{3/2} leads, with 1/√ε; beside it
    κ·(log²(Td/ζ)·log(32/δ)/(min(ε, 1)κ*))²·log T, a (ln T)⁵ term without ε at ε ≥ 1."""
    return rates.PowerLaw("√T (ln T)^{3/2}/√ε + (ln T)^5", 0.5, 1.5, 0.5, also=((0.0, 5.0),))


def run_glm(key, args) -> dict:
    """One sweep over T × ε of the theorem's file, judged by :func:`glm_law` (â and ν̂); one panel,
    a line per ε, the law's leading term drawn through each ε's first point."""
    law = glm_law(key)
    t0 = time.perf_counter()
    points, out, counts = sweep(key, args, args.horizons or THEOREMS[key].horizons, eps_grid(args, GLM_EPSILONS))
    R, T, E, G = final_regrets(out, points)
    v = rates.check_power(R, T, law, eps=E, groups=G)
    report(key, R, T, E, v, counts, t0, law.name)
    first = {float(e): R[(E == e) & (T == T.min())].mean() for e in np.unique(E)}
    panel = by_eps_panel(key, R, T, E, v, lambda t, e: first[float(e)] * law(t) / law(T.min()),
                         bound_label="√T·(ln T)^1.5 through each first point (the law's shape, not a bound)")
    panel["note"] = None
    return data(law.name, R, T, E, G, v, panel)


RUNNERS = {"mab": run_mab, "online": run_online, "linear": run_linear, "concurrent": run_concurrent, "glm": run_glm}


def draw(found: dict, dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(found))
    rows = -(-len(found) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 4.0 * rows), squeeze=False)
    for ax in axes.flat[len(found):]:
        ax.set_visible(False)
    for ax, f in zip(axes.flat, found.values()):
        p = f["panel"]
        for i, s in enumerate(p["series"]):
            # Shrinking markers: where the lines coincide (exploration, plateaus) each stays visible.
            ax.loglog(s["x"], s["y"], "o-", color=s["colour"], ms=8 - 2.5 * min(i, 2), lw=2.2 - 0.6 * min(i, 2),
                      label=s["label"])
        for line in p["lines"]:
            ax.loglog(line["x"], line["y"], line["style"], color=line["colour"], lw=1, label=line.get("label"))
        if p["ylim"]:
            ax.set_ylim(*p["ylim"])
        xs = [x for s in p["series"] for x in s["x"]]
        if max(xs) < 100 * min(xs):  # under two decades matplotlib's minor labels overlap: label the points
            from matplotlib.ticker import NullFormatter

            ax.set_xticks(sorted(set(xs)), [f"{x:,.0f}" for x in sorted(set(xs))])
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(p["title"], fontsize=8)
        ax.set_xlabel(p["xlabel"])
        ax.grid(alpha=0.3, which="both")
        if p["note"]:
            ax.text(0.02, 0.02, p["note"], transform=ax.transAxes, fontsize=7)
        ax.legend(fontsize=6)
    for row in axes:
        row[0].set_ylabel("final pseudo-regret (mean of runs)")
    fig.tight_layout()
    fig.savefig(dest, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", nargs="+", choices=FAMILIES, default=None,
                    help="every theorem of these families [default: mab, or the families of --only]")
    ap.add_argument("--only", nargs="+", choices=list(THEOREMS), default=None)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes [default 1: the cores are shared]")
    ap.add_argument("--horizons", type=int, nargs="+", default=None,
                    help="the T of every theorem run [default: each theorem's grid, docs/rates.md]")
    ap.add_argument("--epsilons", type=float, nargs="+", default=None,
                    help=f"the ε of the mab and online grids [default {EPSILONS}] and of the glm grid [{GLM_EPSILONS}]")
    ap.add_argument("--runs", type=int, default=None, help="runs per point [default: the file's]")
    ap.add_argument("--out", type=Path, default=Path("results/rates"))
    ap.add_argument("--figures", type=Path, default=HERE.parent / "docs" / "figures")
    ap.add_argument("--replot", action="store_true", help="redraw each family's figure from --out/rates-<family>.json")
    args = ap.parse_args()
    if args.replot:
        for family in args.family or FAMILIES:
            saved = args.out / f"rates-{family}.json"
            if saved.exists():
                draw(json.loads(saved.read_text()), args.figures / f"rates_{family}.png")
                print(f"redrew {args.figures / f'rates_{family}.png'} from {saved}")
        return
    if args.only:
        keys = [k for k in args.only if not args.family or THEOREMS[k].family in args.family]
        if not keys:
            ap.error(f"--only {' '.join(args.only)}: none of them is in --family {' '.join(args.family)}")
    else:
        keys = [k for k, th in THEOREMS.items() if th.family in (args.family or ["mab"])]
    args.out.mkdir(parents=True, exist_ok=True)
    args.figures.mkdir(parents=True, exist_ok=True)
    for family in FAMILIES:
        found = {k: RUNNERS[family](k, args) for k in keys if THEOREMS[k].family == family}
        if not found:
            continue
        if args.horizons:  # a sub-grid fit: the family's saved results and figure stay the full grid's
            print(f"--horizons given: {args.out / f'rates-{family}.json'} and its figure left as they were")
            continue
        (args.out / f"rates-{family}.json").write_text(json.dumps(found, indent=1) + "\n")
        draw(found, args.figures / f"rates_{family}.png")
        print(f"wrote {args.out / f'rates-{family}.json'} and {args.figures / f'rates_{family}.png'}")


if __name__ == "__main__":
    main()
