"""Checkpoints: a party's state at a round boundary, so a restarted process resumes it.

One file per party, ``<state-dir>/checkpoint.bin``: a *snapshot* of the party's state followed by a
*journal* of what changed since, one record per round boundary. A record only adds to the state
(new releases, newly closed rounds, new truths) or replaces small fields (the counters), so writing
one costs the size of what changed, not of the whole state: with one release per user (Hybrid-UCB
over MQTT) a whole-state checkpoint per release made the cost per user grow with the run, quadratic
in T (issue #33: 28 users/s falling to 20, checkpoints of 0.8–1.5 MB rewritten per user).

- A snapshot replaces the file atomically: the new file goes to a temporary in the same directory,
  which is fsynced, renamed over the old one, and the directory is fsynced (POSIX ``rename`` is
  atomic, so a reader sees the old file or the new one, never a torn mix). A snapshot is written at a
  task's first checkpoint, after a restart, and whenever the journal has grown past the snapshot's
  size (and ``COMPACT_MIN_BYTES``): the snapshots' bytes are then at most twice the records', so the
  cost per record stays constant however long the run (amortized).
- A record is appended with one ``write``: once the call returns, a killed process (SIGKILL, a
  crash) has lost nothing, since the kernel holds the bytes. They reach the disk at the party's next
  :meth:`StateDir.sync` (every tick, one a second, and at exit): a power cut can lose the records of
  the last second, which leaves the party as if it had crashed that much earlier: the state the
  protocol already recovers from (a party checkpoints after it publishes, so a crash between the
  two is always possible). An fsync per record cost 5.5 ms on this machine's disk (2 per release
  with the directory's, and two parties each), alone a ceiling near 50 users/s.

Layout: ``MAGIC`` (8 bytes), the snapshot body's length (8 bytes, big-endian), its SHA-256 (32
bytes), the body: a msgpack map ``{"format", "run", "party", "task", "spec", "state"}`` (the run id,
the party's name, the task (run of one algorithm) the state belongs to, the SHA-256 fingerprint of
that task's public spec, and the party's own state). Then the records, each its length (4 bytes),
SHA-256(the previous record's digest, or the snapshot's, + its body) (32 bytes) and its body, a
msgpack map ``{"add": {field: [items]}, "set": {field: value}}``: the items extend the state's
lists, the values replace fields. The chained digests make a record valid only in its place.

A checkpoint of another run, another party or another experiment is refused with an error naming the
file and the mismatch, never silently resumed. A damaged snapshot is refused; a record that does not
check (its length past the end, or its digest) ends the journal there: a record torn by a power cut
mid-write, or the file's end. What follows it is dropped, loudly (a warning naming the bytes), which
leaves the party as if it had crashed before writing it; the next checkpoint is a snapshot.

Reading never raises anything but :class:`CheckpointError`, whose ``reason`` is a short key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from privbandit.services.codec import RUN_ID_PATTERN

log = logging.getLogger("privbandit.checkpoint")

MAGIC = b"PBCKPT\x00\x02"
FORMAT = 2
FILE_NAME = "checkpoint.bin"
# A checkpoint holds the releases of at most two batches (see IntermediaryService); a shuffler's
# release is one packed residue per user, so 256 MiB leaves room for cohorts of tens of millions.
MAX_CHECKPOINT_BYTES = 256 * 2**20
_HEAD = struct.Struct(">Q")  # the snapshot body's length
_RECORD = struct.Struct(">I")  # a journal record's length
DIGEST = 32
# The journal is compacted into a snapshot once it outgrows the snapshot and this: small states
# (an intermediary's first rounds) are not rewritten every few records.
COMPACT_MIN_BYTES = 256 * 2**10


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
    records: int = 0  # journal records applied to the snapshot
    dropped: int = 0  # bytes after the last record that checks (a torn write): not applied


def spec_fingerprint(spec: dict) -> str:
    """SHA-256 of a task's public spec (canonical JSON): what a checkpoint is valid for."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def encode_checkpoint(run: str, party: str, task: int, spec: str, state: dict) -> bytes:
    """A snapshot (a file with no journal yet)."""
    body = msgpack.packb({"format": FORMAT, "run": run, "party": party, "task": task, "spec": spec,
                          "state": state}, use_bin_type=True)
    return MAGIC + _HEAD.pack(len(body)) + hashlib.sha256(body).digest() + body


def encode_record(previous: bytes, added: dict[str, list], replaced: dict[str, Any]) -> tuple[bytes, bytes]:
    """One journal record after the record (or snapshot) whose digest is ``previous``: (its bytes,
    its digest: the next record's ``previous``)."""
    body = msgpack.packb({"add": added, "set": replaced}, use_bin_type=True)
    digest = hashlib.sha256(previous + body).digest()
    return _RECORD.pack(len(body)) + digest + body, digest


def _unpack(body: bytes, where: str) -> Any:
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise CheckpointError("checkpoint-not-msgpack", f"{where}: {type(exc).__name__}") from None


def _apply(state: dict, record: Any, where: str) -> None:
    """A journal record into ``state``: its items extend the state's lists, its values replace fields."""
    if not (isinstance(record, dict) and set(record) == {"add", "set"}
            and isinstance(record["add"], dict) and isinstance(record["set"], dict)):
        raise CheckpointError("checkpoint-schema", f"{where}: a journal record is not a map of 'add' and 'set'")
    for field, items in record["add"].items():
        if not isinstance(items, list) or not isinstance(state.setdefault(field, []), list):
            raise CheckpointError("checkpoint-schema", f"{where}: a journal record adds to field {field!r}, "
                                  "which is not a list")
        state[field].extend(items)
    state.update(record["set"])


def decode_checkpoint(data: bytes, where: str = "checkpoint") -> tuple[str, str, Checkpoint]:
    """Bytes → (run, party, Checkpoint: the snapshot with its journal applied), or
    :class:`CheckpointError` naming what is wrong."""
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise CheckpointError("checkpoint-too-large", f"{where}: {len(data)} bytes > {MAX_CHECKPOINT_BYTES}")
    if data[:len(MAGIC)] != MAGIC:
        raise CheckpointError("checkpoint-bad-magic", f"{where} is not a privbandit checkpoint (format {FORMAT})")
    head = len(MAGIC) + _HEAD.size
    if len(data) < head + DIGEST:
        raise CheckpointError("checkpoint-corrupt", f"{where}: {len(data)} bytes, shorter than its header")
    (size,) = _HEAD.unpack_from(data, len(MAGIC))
    digest, body = data[head:head + DIGEST], data[head + DIGEST:head + DIGEST + size]
    if len(body) != size or hashlib.sha256(body).digest() != digest:
        raise CheckpointError("checkpoint-corrupt", f"{where}: the SHA-256 of its snapshot does not match")
    obj = _unpack(body, where)
    if not isinstance(obj, dict):
        raise CheckpointError("checkpoint-schema", f"{where}: the body is a {type(obj).__name__}, not a map")
    try:
        b = _Body.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "body"
        raise CheckpointError("checkpoint-schema", f"{where}: field {field!r}: {first['msg']}") from None
    state = dict(b.state)
    at, records = head + DIGEST + size, 0
    while at < len(data):
        if at + _RECORD.size + DIGEST > len(data):
            break
        (n,) = _RECORD.unpack_from(data, at)
        start = at + _RECORD.size + DIGEST
        rec = data[start:start + n]
        if len(rec) != n or hashlib.sha256(digest + rec).digest() != data[at + _RECORD.size:start]:
            break
        _apply(state, _unpack(rec, where), where)
        digest, at, records = data[at + _RECORD.size:start], start + n, records + 1
    return b.run, b.party, Checkpoint(b.task, b.spec, state, records, len(data) - at)


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


@dataclass
class _Journal:
    """The file this process wrote last: what a record may be appended to."""

    task: int
    spec: str
    snapshot: int  # its snapshot's bytes
    digest: bytes  # the last record's (or the snapshot's) digest
    fd: int | None = None
    inode: int = -1  # the file the snapshot was written to
    journal: int = 0  # its records' bytes


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
        self.writes = 0  # snapshots and records
        self.snapshots = 0
        self.syncs = 0
        self._journal: _Journal | None = None  # None: the next checkpoint is a snapshot
        self._unsynced = False

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
        if ckpt.dropped:
            log.warning("%s: %d bytes after its %d-th journal record do not check (a write torn by a crash of "
                        "the machine): resuming without them", self.path, ckpt.dropped, ckpt.records)
        return ckpt

    def save(self, task: int, spec: str, state: dict[str, Any]) -> int:
        """A snapshot of the whole ``state``, replacing the file atomically (and its journal)."""
        data = encode_checkpoint(self.run, self.party, task, spec, state)
        self.close()
        atomic_write(self.path, data)
        head = len(MAGIC) + _HEAD.size
        self._journal = _Journal(task, spec, len(data), data[head:head + DIGEST], inode=os.stat(self.path).st_ino)
        self.bytes_written += len(data)
        self.writes += 1
        self.snapshots += 1
        return len(data)

    def append(self, task: int, spec: str, added: dict[str, list], replaced: dict[str, Any],
               state: Callable[[], dict[str, Any]]) -> int:
        """Record what changed since the last checkpoint: ``added`` items extend the state's lists,
        ``replaced`` fields are set. ``state()`` is the whole state after the change: written as a
        snapshot instead when there is no journal to append to (another task, a restart) or when
        the journal has outgrown its snapshot."""
        j = self._journal
        if j is None or (j.task, j.spec) != (task, spec):
            return self.save(task, spec, state())
        data, digest = encode_record(j.digest, added, replaced)
        if j.journal + len(data) > max(j.snapshot, COMPACT_MIN_BYTES):
            return self.save(task, spec, state())
        try:  # the file must still be the one this snapshot began: one replaced meanwhile (by a restarted
            # copy of this party, say) gets a snapshot, never a record chained to another file's digest
            same = os.stat(self.path).st_ino == j.inode
            if same and j.fd is None:
                j.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
                same = os.fstat(j.fd).st_ino == j.inode
        except FileNotFoundError:
            same = False
        if not same:
            return self.save(task, spec, state())
        try:
            view = memoryview(data)
            while view:  # one write for a record of any size the kernel takes whole; loop if it does not
                view = view[os.write(j.fd, view):]
        except BaseException:
            # A partial record would end the journal where it stands (it does not check): start
            # the next checkpoint afresh, as a snapshot, rather than append after it.
            self.close()
            raise
        j.digest, j.journal = digest, j.journal + len(data)
        self._unsynced = True
        self.bytes_written += len(data)
        self.writes += 1
        return len(data)

    def sync(self) -> None:
        """The records appended since the last sync to the disk (a power cut no longer loses them)."""
        j = self._journal
        if self._unsynced and j is not None and j.fd is not None:
            os.fdatasync(j.fd)
            self.syncs += 1
        self._unsynced = False

    def close(self) -> None:
        """Sync and close the journal; the next checkpoint is a snapshot."""
        if self._journal is not None and self._journal.fd is not None:
            try:
                self.sync()
            finally:
                os.close(self._journal.fd)
        self._journal, self._unsynced = None, False


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
