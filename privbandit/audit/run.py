"""One audit: every target's two samples, its tester, its claim, its verdict; ``audit.json`` and a
plot per target."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from privbandit.audit.targets import AuditTarget
from privbandit.audit.testers import histogram_test, likelihood_ratio_test
from privbandit.protocol.primitives.seeding import stream

CLAIM_DELTAS = np.geomspace(1e-12, 1e-1, 23)  # where the plot reads the ledger's ε(δ)

# A bound above the claim by less than this is reported as consistent: ε values pass through
# float64 logs and the ledger's RDP conversion, whose last digits mean nothing.
SLACK = 1e-9


def verdict(audited: float, claim: dict) -> str:
    """``violation`` (the audit proves less privacy than the ledger states), ``consistent``, or
    ``no claim`` (the ledger states no ε: none proven, or non-private)."""
    claimed = claim.get("epsilon_at_delta")
    if claim.get("guarantee") != "proven" or claimed is None:
        return "no claim"
    return "violation" if audited > claimed + SLACK else "consistent"


def audit_target(target: AuditTarget, samples: int, delta: float | None, confidence: float,
                 rng: np.random.Generator, bins: int = 200) -> dict:
    """Sample, test and judge one target. ``delta`` None: the run's own δ (the ledger's)."""
    delta = target.delta if delta is None else delta
    if not 0 < delta < 1:  # the ledger states ε at δ > 0 only
        raise ValueError(f"delta={delta} must lie in (0, 1)")
    per = int(target.details.get("per_release", 1))
    t0 = time.perf_counter()
    x0 = target.draw(0, samples, rng, per)
    x1 = target.draw(1, samples, rng, per)
    t1 = time.perf_counter()
    if target.kind == "integer":
        bound = likelihood_ratio_test(x0, x1, delta, confidence)
    else:
        bound = histogram_test(x0, x1, delta, confidence, bins=bins)
    t2 = time.perf_counter()
    claim = target.claim(delta)
    claimed = claim.get("epsilon_at_delta") if claim.get("guarantee") == "proven" else None
    return {
        "name": target.name, "family": target.family, "label": target.label, "algorithm": target.algorithm,
        "release": target.release, "neighbours": target.neighbours, "tester": (
            "likelihood-ratio threshold" if target.kind == "integer" else f"histogram ({bins} bins) + likelihood ratio"),
        "details": target.details,
        "claim": {"guarantee": claim.get("guarantee"), "epsilon_at_delta": claimed,
                  "epsilon_pure": claim.get("epsilon_pure"), "delta": delta,
                  "curve": _claim_curve(target)},
        "audit": bound.to_dict(),
        "verdict": verdict(bound.epsilon, claim),
        "tightness": None if not claimed else bound.epsilon / claimed,
        "samples": samples,
        "seconds": {"sampling": t1 - t0, "testing": t2 - t1, "total": t2 - t0},
        "releases_per_second": 2 * samples / (t1 - t0) if t1 > t0 else math.inf,
    }


def _claim_curve(target: AuditTarget) -> list[tuple[float, float]]:
    """The ledger's (ε at δ, δ) over :data:`CLAIM_DELTAS`, where it states one."""
    out = []
    for d in CLAIM_DELTAS:
        c = target.claim(float(d))
        if c.get("guarantee") == "proven" and c.get("epsilon_at_delta") is not None:
            out.append((float(c["epsilon_at_delta"]), float(d)))
    return out


def run_audit(targets: list[AuditTarget], samples: int, delta: float | None, confidence: float, seed: int,
              progress: Callable[[str], None] | None = None) -> list[dict]:
    """Every target, each from its own stream ``(seed, "audit", name)``: one target's sampling
    never shifts another's."""
    out = []
    for target in targets:
        if progress:
            progress(target.name)
        out.append(audit_target(target, samples, delta, confidence, stream(seed, "audit", target.name)))
    return out


def _audit_spec(spec: tuple, samples: int, delta: float | None, confidence: float, seed: int) -> dict:
    """One target audited in a worker process: rebuilt there from the experiment's data (a target's
    sampler is a closure, which does not pickle), then audited from the same stream as in
    :func:`run_audit`, so the result does not depend on the number of workers."""
    import copy

    from privbandit.runner import config as experiment_files

    data, path, label, cohort, index, name = spec
    fam, config = experiment_files.load_data(copy.deepcopy(data), path)
    target = fam.audit_targets(config, label, cohort)[index]
    if target.name != name:
        raise RuntimeError(f"target {index} of {label} rebuilt as {target.name}, not {name}")
    return audit_target(target, samples, delta, confidence, stream(seed, "audit", name))


def run_audit_parallel(specs: list[tuple], jobs: int, samples: int, delta: float | None, confidence: float,
                       seed: int, progress: Callable[[str], None] | None = None) -> list[dict]:
    """:func:`run_audit` over ``jobs`` processes. ``specs``: per target ``(data, path, label,
    cohort, index, name)``, the experiment's data and where its target sits among its label's."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_audit_spec, spec, samples, delta, confidence, seed) for spec in specs]
        out = []
        for spec, future in zip(specs, futures):
            out.append(future.result())
            if progress:
                progress(spec[-1])
        return out


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def write_audit(out: Path, report: dict) -> None:
    """``audit.json`` and one ``<family>_<label>.png`` per audited target."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "audit.json").write_text(json.dumps(_finite(report), indent=2, allow_nan=False, default=_jsonable) + "\n")
    for result in report["targets"]:
        plot_target(out / f"{slug(result['name'])}.png", result)


def _finite(x):
    """JSON has no infinity: an unbounded number (an event never seen under the other input) is null."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _jsonable(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    raise TypeError(f"not JSON: {type(x).__name__}")


def plot_target(path: Path, result: dict) -> None:
    """The (ε, δ) plane: the ledger's claimed ε(δ) curve, the audit's lower bound on the δ(ε)
    curve (every point under it is excluded with the stated confidence) and the band up to the
    counted frequencies' curve, and the audited ε at the audit's δ."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a, c = result["audit"], result["claim"]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    eps, lower = np.array(a["curve"]).T
    _, est = np.array(a["curve_estimate"]).T
    ax.fill_between(eps, lower, est, color="tab:red", alpha=0.2, label="audit: lower bound … estimate")
    ax.plot(eps, lower, color="tab:red", label=f"audited δ(ε) lower bound ({a['confidence']:.0%})")
    if c["curve"]:
        ce, cd = np.array(c["curve"]).T
        ax.plot(ce, cd, color="tab:blue", marker=".", label="ledger: claimed ε(δ)")
    if c["epsilon_pure"] is not None:
        ax.axvline(c["epsilon_pure"], color="tab:blue", ls="--", label=f"ledger: pure ε = {c['epsilon_pure']:.3g}")
    top = a["epsilon_estimate"] if math.isfinite(a["epsilon_estimate"]) else a["epsilon"]
    ax.errorbar([a["epsilon"]], [a["delta"]], xerr=[[0], [max(0.0, top - a["epsilon"])]],
                fmt="o", color="black", capsize=3, label=f"audited ε ≥ {a['epsilon']:.3g} at δ = {a['delta']:.2g}")
    ax.set_yscale("symlog", linthresh=1e-6)
    ax.set_ylim(0, 1)
    ax.set_xlabel("ε")
    ax.set_ylabel("δ")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(f"{result['name']} ({result['algorithm']}): {result['verdict']}\n{result['samples']:,} samples "
                 f"per neighbour, {result['details'].get('n')} users", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
