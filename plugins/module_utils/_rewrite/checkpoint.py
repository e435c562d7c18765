# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the client-side migrator remembers how far it got: an interface and a file store.

Like kube-storage-version-migrator's progress tracker (``save``/``load``), the migrator only knows
the interface. A checkpoint names the run that wrote it, the storage hash it was made for and when;
``load`` discards one for another resource, cluster or hash, or one older than the apiserver's
continue-token lifetime (its token would be expired), and says why. A run that resumed from a
checkpoint it did not write must verify with a fresh pass before anything is recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Optional, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

FORMAT = 2
# kube-apiserver's continue tokens live as long as etcd keeps their revision: the default compaction
# interval is 5 minutes (kube-apiserver --etcd-compaction-interval).
TOKEN_LIFETIME = 300.0


@dataclass
class Checkpoint:
    """The position of the next unfinished chunk, and whose it is."""

    resource: str
    cluster: str
    storage_hash: str
    run_id: str
    token: str
    saved_at: float  # wall-clock seconds
    objects_migrated: int = 0
    chunks: int = 0

    def to_dict(self) -> dict:
        return {"format": FORMAT, "resource": self.resource, "cluster": self.cluster,
                "storage_hash": self.storage_hash, "run_id": self.run_id, "continue": self.token,
                "saved_at": self.saved_at, "objects_migrated": self.objects_migrated, "chunks": self.chunks}


def checkpoint_from_dict(data) -> Optional[Checkpoint]:
    """Pure: a checkpoint from its JSON form, None when the form is not this format."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or not data.get("continue"):
        return None
    try:
        return Checkpoint(str(data["resource"]), str(data["cluster"]), str(data.get("storage_hash") or ""),
                          str(data.get("run_id") or ""), str(data["continue"]), float(data["saved_at"]),
                          int(data.get("objects_migrated") or 0), int(data.get("chunks") or 0))
    except (KeyError, TypeError, ValueError):
        return None


def usable(saved: Optional[Checkpoint], wanted: Checkpoint, now: float, max_age: float = TOKEN_LIFETIME) -> Tuple[bool, str]:
    """Pure: may ``saved`` be resumed for the migration ``wanted`` describes? ``(ok, why not)``."""
    if saved is None:
        return False, "the checkpoint is unreadable or of another format"
    if (saved.resource, saved.cluster) != (wanted.resource, wanted.cluster):
        return False, f"the checkpoint belongs to {saved.resource} on another cluster"
    if saved.storage_hash != wanted.storage_hash:
        return False, (f"the checkpoint was made for storage hash {saved.storage_hash or '(none)'}, "
                       f"the apiservers now store {wanted.storage_hash}")
    age = now - saved.saved_at
    if age > max_age or age < -60:
        return False, (f"the checkpoint is {age:.0f}s old, older than the apiserver's continue-token lifetime "
                       f"({max_age:.0f}s)")
    return True, ""


class CheckpointStore:
    """The interface the migrator depends on."""

    def load(self, wanted: Checkpoint) -> Tuple[Optional[Checkpoint], str]:
        """The checkpoint to resume, or None and why an existing one was discarded ("" if there was none)."""
        raise NotImplementedError

    def save(self, checkpoint: Checkpoint) -> None:
        raise NotImplementedError

    def remove(self, wanted: Checkpoint) -> None:
        raise NotImplementedError


class MemoryStore(CheckpointStore):
    """Keeps checkpoints in memory: for tests and for benchmarks."""

    def __init__(self, clock=time.time):
        self.saved = {}
        self.clock = clock

    def load(self, wanted):
        saved = self.saved.get((wanted.cluster, wanted.resource))
        if saved is None:
            return None, ""
        ok, why = usable(saved, wanted, self.clock())
        return (saved, "") if ok else (None, why)

    def save(self, checkpoint):
        self.saved[(checkpoint.cluster, checkpoint.resource)] = checkpoint

    def remove(self, wanted):
        self.saved.pop((wanted.cluster, wanted.resource), None)


class FileStore(CheckpointStore):
    """One JSON file per cluster and resource in ``directory``, replaced atomically."""

    def __init__(self, directory: str, clock=time.time, max_age: float = TOKEN_LIFETIME):
        self.directory = directory
        self.clock = clock
        self.max_age = max_age

    def check_writable(self) -> None:
        """Before any request: a directory that cannot be written fails now, not after chunks were migrated."""
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
        except OSError as error:
            raise ConfigurationError(f"'checkpoint_dir' {self.directory} cannot be created: {error.strerror}. "
                                     "Give a writable directory.") from None
        if not os.path.isdir(self.directory) or not os.access(self.directory, os.W_OK | os.X_OK):
            raise ConfigurationError(f"'checkpoint_dir' {self.directory} is not a writable directory. "
                                     "Give a writable directory.")

    def path(self, wanted: Checkpoint) -> str:
        cluster_id = hashlib.sha256(wanted.cluster.encode("utf-8")).hexdigest()[:12]
        return os.path.join(self.directory, f"storage-migration-{cluster_id}-{wanted.resource}.json")

    def load(self, wanted):
        path = self.path(wanted)
        if not os.path.isfile(path):
            return None, ""
        try:
            with open(path, encoding="utf-8") as handle:
                saved = checkpoint_from_dict(json.load(handle))
        except (OSError, ValueError):
            saved = None
        ok, why = usable(saved, wanted, self.clock(), self.max_age)
        if not ok:
            self.remove(wanted)
            return None, f"checkpoint {path} discarded: {why}"
        return saved, ""

    def save(self, checkpoint):
        path = self.path(checkpoint)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".checkpoint-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(checkpoint.to_dict(), handle)
            os.replace(tmp, path)
        except OSError:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def remove(self, wanted):
        path = self.path(wanted)
        if os.path.isfile(path):
            os.unlink(path)


def default_directory(tmpdir: Optional[str] = None) -> str:
    """``~/.ansible/tmp/kubeupgrade-storage-migration`` on the host running the module, else its tmpdir."""
    home = os.path.expanduser("~/.ansible/tmp")
    try:
        os.makedirs(home, mode=0o700, exist_ok=True)
        return os.path.join(home, "kubeupgrade-storage-migration")
    except OSError:
        return os.path.join(tmpdir or tempfile.gettempdir(), "kubeupgrade-storage-migration")
