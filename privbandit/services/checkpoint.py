"""Checkpoint files: a party's state at a round boundary, so a restarted process resumes it.

One file per party, ``<state-dir>/checkpoint.bin``, replaced atomically: the new state goes to a
temporary file in the same directory, which is fsynced, renamed over the old one, and the
directory is fsynced (POSIX ``rename`` is atomic, so a reader sees the old file or the new one,
never a torn mix; the fsyncs make the rename survive a power cut, not only a crash).

Layout: ``MAGIC`` (8 bytes), the SHA-256 of the body (32 bytes), then the body, a msgpack map
``{"format", "run", "party", "task", "spec", "state"}``: the run id, the party's name, the task
(run of one algorithm) the state belongs to, the SHA-256 fingerprint of that task's public spec,
and the party's own state. A checkpoint of another run, another party or another experiment is
refused with an error naming the file and the mismatch, never silently resumed.

Reading never raises anything but :class:`CheckpointError`, whose ``reason`` is a short key.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from privbandit.services.codec import RUN_ID_PATTERN

MAGIC = b"PBCKPT\x00\x01"
FORMAT = 1
FILE_NAME = "checkpoint.bin"
# A checkpoint holds the releases of at most two batches (see IntermediaryService); a shuffler's
# release is one packed residue per user, so 256 MiB leaves room for cohorts of tens of millions.
MAX_CHECKPOINT_BYTES = 256 * 2**20


class CheckpointError(Exception):
    """A checkpoint that cannot be resumed. ``reason`` is a short, countable key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    format: Annotated[int, Field(ge=FORMAT, le=FORMAT)]
    run: Annotated[str, Field(pattern=RUN_ID_PATTERN)]
    party: Annotated[str, Field(pattern=r"^[a-z]+(-[0-9]+)?$")]
    task: Annotated[int, Field(ge=0)]
    spec: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    state: dict


@dataclass(frozen=True)
class Checkpoint:
    task: int
    spec: str
    state: dict


def spec_fingerprint(spec: dict) -> str:
    """SHA-256 of a task's public spec (canonical JSON): what a checkpoint is valid for."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def encode_checkpoint(run: str, party: str, task: int, spec: str, state: dict) -> bytes:
    body = msgpack.packb({"format": FORMAT, "run": run, "party": party, "task": task, "spec": spec,
                          "state": state}, use_bin_type=True)
    return MAGIC + hashlib.sha256(body).digest() + body


def decode_checkpoint(data: bytes, where: str = "checkpoint") -> tuple[str, str, Checkpoint]:
    """Bytes → (run, party, Checkpoint), or :class:`CheckpointError` naming what is wrong."""
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise CheckpointError("checkpoint-too-large", f"{where}: {len(data)} bytes > {MAX_CHECKPOINT_BYTES}")
    if data[:len(MAGIC)] != MAGIC:
        raise CheckpointError("checkpoint-bad-magic", f"{where} is not a privbandit checkpoint (format {FORMAT})")
    digest, body = data[len(MAGIC):len(MAGIC) + 32], data[len(MAGIC) + 32:]
    if hashlib.sha256(body).digest() != digest:
        raise CheckpointError("checkpoint-corrupt", f"{where}: the SHA-256 of its body does not match")
    try:
        obj = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise CheckpointError("checkpoint-not-msgpack", f"{where}: {type(exc).__name__}") from None
    if not isinstance(obj, dict):
        raise CheckpointError("checkpoint-schema", f"{where}: the body is a {type(obj).__name__}, not a map")
    try:
        b = _Body.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "body"
        raise CheckpointError("checkpoint-schema", f"{where}: field {field!r}: {first['msg']}") from None
    return b.run, b.party, Checkpoint(b.task, b.spec, b.state)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash at any instant leaves the old or the new file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class StateDir:
    """One party's checkpoint in its own directory (``--state-dir``)."""

    def __init__(self, directory: Path, run: str, party: str):
        self.directory = Path(directory)
        self.path = self.directory / FILE_NAME
        self.run, self.party = run, party
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError("state-dir", f"--state-dir {self.directory}: {exc.strerror}") from None
        self.bytes_written = 0
        self.writes = 0

    def load(self) -> Checkpoint | None:
        """The last checkpoint, None if there is none; refuses one that belongs elsewhere."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CheckpointError("checkpoint-unreadable", f"{self.path}: {exc.strerror}") from None
        run, party, ckpt = decode_checkpoint(data, str(self.path))
        if run != self.run:
            raise CheckpointError("checkpoint-wrong-run", f"{self.path} belongs to run {run!r}, this is run "
                                  f"{self.run!r}: point --state-dir at an empty directory to start afresh")
        if party != self.party:
            raise CheckpointError("checkpoint-wrong-party", f"{self.path} belongs to {party!r}, this is {self.party!r}")
        return ckpt

    def save(self, task: int, spec: str, state: dict[str, Any]) -> int:
        data = encode_checkpoint(self.run, self.party, task, spec, state)
        atomic_write(self.path, data)
        self.bytes_written += len(data)
        self.writes += 1
        return len(data)


def progress(directory: Path) -> tuple[int, int]:
    """(task, rounds done) that the checkpoint in a party's state ``directory`` records: an
    intermediary's closed rounds, or the analyzer's journal of releases; (-1, 0) before the first
    checkpoint. For watching a session from outside (the fault tests and benchmark)."""
    try:
        _, _, ckpt = decode_checkpoint((Path(directory) / FILE_NAME).read_bytes(), str(directory))
    except FileNotFoundError:
        return -1, 0
    done = ckpt.state["closed"] if "closed" in ckpt.state else ckpt.state.get("releases", [])
    return ckpt.task, len(done)


def resume_state(ckpt: Checkpoint | None, task: int, spec: str, where: Path) -> dict | None:
    """The saved state for ``task``, None if the checkpoint is of an earlier task (start afresh);
    a checkpoint of the same task under another spec is another experiment: refused."""
    if ckpt is None or ckpt.task < task:
        return None
    if ckpt.task > task:
        # A restarted party is only ever told the running task (the observer re-announces it),
        # so a checkpoint of a later task was taken in another session.
        raise CheckpointError("checkpoint-ahead", f"{where} is of task {ckpt.task}, the session runs task {task}: "
                              "it belongs to another session; empty the state directory to start afresh")
    if ckpt.spec != spec:
        raise CheckpointError("checkpoint-wrong-experiment", f"{where}: task {task} was checkpointed under "
                              "another task spec (another session, experiment file or algorithm): "
                              "empty the state directory to start afresh")
    return ckpt.state
