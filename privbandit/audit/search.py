"""The neighbour search of ``privbandit audit --search``: for one release, which of the family's
candidate neighbouring pairs does the implementation make worst?

Each family's per-release target fixes one pair, the worst case of the theorem it implements. A
defect need not respect the theorem: a randomizer that skips its noise at the top of the reward
range, an encoding that saturates, a statistic only one end of the range reveals. So the family
offers a few candidate pairs of the same release (:meth:`~privbandit.protocol.spine.family.Family.audit_candidates`,
DP-Auditorium's *generator*), and the search:

1. audits every candidate on a small *pilot* sample, each from its own stream
   ``(seed, "search-pilot", name, i)``;
2. picks the candidate with the largest pilot bound (ties: the larger pilot estimate, then the
   first offered);
3. audits that one candidate again on a fresh full sample, from ``(seed, "search-final", name)``.

Multiple comparisons: the choice is a function of the pilot samples only and the final sample is
drawn independently of them, so conditionally on the choice the final bound is one ordinary audit
and keeps its confidence 1 − β; no correction is needed or applied. The pilot bounds are each at
confidence 1 − β on their own, not jointly, and serve only to choose: they are reported, never
compared with a claim. The price of the split is the pilots' samples, and a pilot that may pick a
candidate that is not the worst when two are close (the final bound is then sound but lower).
"""

from __future__ import annotations

from privbandit.audit.run import audit_target
from privbandit.audit.targets import AuditTarget
from privbandit.protocol.primitives.seeding import stream

# A pilot's share of the final sample: enough to rank candidates whose bounds differ by more than
# the pilot's own Clopper–Pearson width, a small fraction of the final audit's cost per candidate.
PILOT_FRACTION = 20
MIN_PILOT = 1000


def pilot_samples(samples: int) -> int:
    return max(MIN_PILOT, samples // PILOT_FRACTION)


def search_release(candidates: list[AuditTarget], samples: int, delta: float | None, confidence: float, seed: int,
                   pilot: int | None = None) -> dict:
    """Pilot every candidate, audit the strongest on a fresh sample (module docstring). All
    candidates are neighbouring pairs of one release: one name, one claim."""
    if not candidates:
        raise ValueError("the search needs at least one candidate pair")
    names = {c.name for c in candidates}
    if len(names) != 1:
        raise ValueError(f"candidates of one release share its name, got {sorted(names)}")
    (name,) = names
    pilot = pilot_samples(samples) if pilot is None else pilot
    rows = []
    for i, c in enumerate(candidates):
        r = audit_target(c, pilot, delta, confidence, stream(seed, "search-pilot", name, i))
        rows.append({"index": i, "neighbours": c.neighbours, "pilot_epsilon": r["audit"]["epsilon"],
                     "pilot_estimate": r["audit"]["epsilon_estimate"], "seconds": r["seconds"]["total"]})
    chosen = max(rows, key=lambda row: (row["pilot_epsilon"], row["pilot_estimate"], -row["index"]))["index"]
    final = audit_target(candidates[chosen], samples, delta, confidence, stream(seed, "search-final", name))
    final["search"] = {"pilot_samples": pilot, "candidates": rows, "chosen": chosen,
                       "selection": "largest pilot bound; the final sample is fresh, so the bound keeps its confidence"}
    return final


def search(groups: list[list[AuditTarget]], samples: int, delta: float | None, confidence: float, seed: int,
           progress=None) -> list[dict]:
    """:func:`search_release` for each release's candidates."""
    out = []
    for group in groups:
        if progress:
            progress(group[0].name)
        out.append(search_release(group, samples, delta, confidence, seed))
    return out
