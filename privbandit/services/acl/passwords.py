"""Broker passwords in Mosquitto's ``$7$`` PBKDF2-SHA512 format, verified by the embedded broker
and written for Mosquitto."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from pathlib import Path

# Passwords end up unquoted in credentials.env (read by shells and docker's env_file alike), so
# they are restricted to characters that need no quoting anywhere. token_urlsafe() fits.
PASSWORD_RE = re.compile(r"[A-Za-z0-9_.~+/=@%:,-]{1,1024}")
# Mosquitto's PBKDF2-SHA512 ("$7$") format: mosquitto_passwd 2.0 uses 101 iterations, a 12-byte
# salt and a 64-byte digest. Mosquitto reads the iteration count from the hash, so more is fine.
PBKDF2_ITERATIONS = 1000
SALT_BYTES = 12
DIGEST_BYTES = 64


# ---------------------------------------------------------------------------------------------
# passwords (mosquitto's $7$ PBKDF2-SHA512 format)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def hash_password(password: str, *, salt: bytes | None = None, iterations: int = PBKDF2_ITERATIONS) -> str:
    """``$7$<iterations>$<b64 salt>$<b64 PBKDF2-HMAC-SHA512>``, as written by mosquitto_passwd 2.x."""
    if not isinstance(password, str) or not password:
        raise ValueError("password must be a non-empty string")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    digest = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations, DIGEST_BYTES)
    return f"$7${iterations}${_b64(salt)}${_b64(digest)}"


def _parse_hash(password_hash: str) -> tuple[int, bytes, bytes]:
    parts = password_hash.split("$")
    if len(parts) != 5 or parts[0] or parts[1] != "7":
        raise ValueError("not a $7$ (PBKDF2-SHA512) password hash")
    iterations = int(parts[2])
    if not 1 <= iterations <= 10_000_000:
        raise ValueError("iteration count out of range")
    return iterations, base64.b64decode(parts[3], validate=True), base64.b64decode(parts[4], validate=True)


def verify_password(password: str | None, password_hash: str) -> bool:
    """Constant-time check of ``password`` against a ``$7$`` hash; False for anything malformed."""
    if not isinstance(password, str) or not password:
        return False
    try:
        iterations, salt, expected = _parse_hash(password_hash)
    except (ValueError, TypeError):
        return False
    digest = hashlib.pbkdf2_hmac("sha512", password.encode("utf-8"), salt, iterations, len(expected) or 1)
    return hmac.compare_digest(digest, expected)


def read_password_file(path: Path | str) -> dict[str, str]:
    """``username -> hash`` from a mosquitto password file."""
    users: dict[str, str] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        username, sep, password_hash = line.partition(":")
        if not sep or not username:
            raise ValueError(f"{path}: malformed line (expected username:hash)")
        users[username] = password_hash
    return users
