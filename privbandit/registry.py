"""The one place families and their plug-ins are named: Python entry points.

- ``privbandit.families``: ``<name> = "package.module:FAMILY"``, a
  :class:`~privbandit.protocol.spine.family.Family` object. privbandit's own families are
  declared in its ``pyproject.toml`` the same way, so a package outside privbandit adds a family by
  declaring one entry point, with no line of privbandit changed (``examples/coin-family``).
- ``privbandit.plugins``: ``<family>.<kind>.<name> = "module:object"``, where ``kind`` is
  ``mechanism``, ``learner`` or ``adversary``: an extra mechanism, learner or adversary for an
  existing family, which that family looks up by name (:func:`plugins`). Today the
  distributed-DP MAB family reads mechanisms and learners (``families/distributed_dp_mab/config.py``
  says what their factories take and return; ``examples/mab-plugins``); no family reads adversaries.

Entry points are read once per process; families are imported on first use, so one family's
dependencies never slow another's start.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points

FAMILIES_GROUP = "privbandit.families"
PLUGINS_GROUP = "privbandit.plugins"
PLUGIN_KINDS = ("mechanism", "learner", "adversary")


class RegistryError(LookupError):
    """An unknown family or plug-in; the message lists what is known."""


@lru_cache(maxsize=1)
def _family_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=FAMILIES_GROUP)}


def family_names() -> list[str]:
    return sorted(_family_points())


@lru_cache(maxsize=None)
def family(name: str):
    """The family object registered under ``name``."""
    point = _family_points().get(name)
    if point is None:
        known = ", ".join(family_names()) or "none (is privbandit installed? pip install -e .)"
        raise RegistryError(f"family {name!r} is not registered; known: {known}")
    obj = point.load()
    if getattr(obj, "name", None) != name:
        raise RegistryError(f"entry point {name!r} loads {obj!r}, whose name is {getattr(obj, 'name', None)!r}")
    return obj


@lru_cache(maxsize=1)
def _plugin_points() -> dict[tuple[str, str, str], EntryPoint]:
    out = {}
    for ep in entry_points(group=PLUGINS_GROUP):
        parts = ep.name.split(".")
        if len(parts) == 3 and parts[1] in PLUGIN_KINDS:
            out[tuple(parts)] = ep
    return out


def plugins(family_name: str, kind: str) -> dict[str, EntryPoint]:
    """The plug-ins of one kind registered for a family, by name (loaded by the caller)."""
    if kind not in PLUGIN_KINDS:
        raise RegistryError(f"plug-in kind {kind!r} is not one of {', '.join(PLUGIN_KINDS)}")
    return {name: ep for (fam, k, name), ep in _plugin_points().items() if fam == family_name and k == kind}
