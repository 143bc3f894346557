"""Errors of the secure-aggregation core. All derive from :class:`SecAggError`."""

from __future__ import annotations


class SecAggError(Exception):
    """Base class: the round cannot continue as asked."""


class KeySubstitutionError(SecAggError):
    """A key advertisement whose signature does not verify under the sender's identity key.

    This is what a corrupt aggregator substituting its own X25519 key (to run a
    man-in-the-middle on a pair of users) looks like to the honest recipient.
    """


class ShareError(SecAggError):
    """Shamir shares that cannot be used: too few, duplicate or invalid x-coordinates."""


class SecAggAbort(SecAggError):
    """The round is abandoned and nothing is released (too few survivors, inconsistent view)."""
