# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One migration per resource at a time, across the cluster: a ``coordination.k8s.io/v1`` Lease per resource.

The holder is the run's identity and host. The Lease is renewed while the migration runs, released
at the end, and taken over only after it expired (``renewTime + leaseDurationSeconds``), as client-go's
leader election does. Every write carries the Lease's ``resourceVersion``, so two runs racing for
the same Lease cannot both win: the loser gets 409 and looks again. A run that cannot renew its
Lease for a whole lease duration is told to stop (someone else may take over).
"""

from __future__ import annotations

import hashlib
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate.ratelimit import Deadline
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, MigrationError

NAMESPACE = "kube-system"
LEASES_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
PREFIX = "kubeupgrade-storage-migration-"
MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def lease_name(resource: str) -> str:
    """``kubeupgrade-storage-migration-<resource>``; long names end in a hash so they stay valid and unique."""
    name = PREFIX + resource.lower()
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(resource.encode("utf-8")).hexdigest()[:10]
    return f"{name[:242]}-{digest}"


def _parse(stamp: Optional[str]) -> Optional[datetime]:
    if not stamp:
        return None
    for fmt in (MICROTIME, "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return datetime.strptime(stamp, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    return None


def holder_of(lease: dict, now: datetime) -> Optional[str]:
    """Pure: who holds ``lease`` at ``now`` (None when free or expired)."""
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds") or 0
    if not holder or renewed is None:
        return None
    return holder if renewed + timedelta(seconds=float(duration)) > now else None


class ResourceLease:
    """Acquire, renew in the background, and release the Lease of one resource."""

    def __init__(self, client, resource: str, holder: str, duration: int = 30, now=None):
        self.client = client
        self.resource = resource
        self.name = lease_name(resource)
        self.holder = holder
        self.duration = int(duration)
        self.now = now or (lambda: datetime.now(timezone.utc))
        self.lost = ""  # why the Lease was lost, once it was
        self._lease: Optional[dict] = None
        self._halt = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _spec(self, acquire: bool) -> dict:
        stamp = self.now().strftime(MICROTIME)
        spec = dict((self._lease or {}).get("spec") or {})
        spec.update(holderIdentity=self.holder, leaseDurationSeconds=self.duration, renewTime=stamp)
        if acquire:
            spec["acquireTime"] = stamp
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if self._lease else 0)
        return spec

    def _try_acquire(self) -> Optional[str]:
        """One attempt; returns the other holder when the Lease is held, None when we hold it now."""
        try:
            self._lease = self.client.get(f"{LEASES_PATH}/{self.name}")
        except ApiError as error:
            if error.status != 404:
                raise
            self._lease = None
        if self._lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": NAMESPACE,
                                 "labels": {"app.kubernetes.io/managed-by": "kubeupgrade.storage"}},
                    "spec": self._spec(acquire=True)}
            return self._write("POST", LEASES_PATH, body)
        other = holder_of(self._lease, self.now())
        if other and other != self.holder:
            return other
        body = dict(self._lease, spec=self._spec(acquire=other != self.holder))
        return self._write("PUT", f"{LEASES_PATH}/{self.name}", body)

    def _write(self, method: str, path: str, body: dict) -> Optional[str]:
        try:
            self._lease = self.client.request(method, path, body=body).json()
        except ApiError as error:
            if error.status in (409, 422):  # someone else created or updated it first: look again
                return "(another run, racing for it)"
            raise
        return None

    def acquire(self, deadline: Deadline, poll: float = 2.0, sleep=time.sleep) -> None:
        """Take the Lease, waiting within ``deadline`` for the holder to release it or let it expire."""
        while True:
            other = self._try_acquire()
            if other is None:
                self._start_renewing()
                return
            remaining = deadline.remaining()
            if remaining is not None and remaining <= 0:
                raise MigrationError(
                    f"Migration of {self.resource} not started: another migration holds Lease {NAMESPACE}/{self.name} "
                    f"(holder {other}). Wait for it to finish, or for the Lease to expire ({self.duration}s after its "
                    "last renewal) if that run is gone, then re-run.",
                    details={"resource": self.resource, "lease": f"{NAMESPACE}/{self.name}", "holder": other})
            sleep(poll if remaining is None else max(0.0, min(poll, remaining)))

    def _start_renewing(self) -> None:
        self._thread = threading.Thread(target=self._renew_loop, daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        last_ok = time.monotonic()
        while not self._halt.wait(max(1.0, self.duration / 3.0)):
            try:
                body = dict(self._lease, spec=self._spec(acquire=False))
                self._lease = self.client.request("PUT", f"{LEASES_PATH}/{self.name}", body=body).json()
                last_ok = time.monotonic()
            except ApiError as error:
                if error.status == 409 or time.monotonic() - last_ok >= self.duration:
                    self.lost = (f"Lease {NAMESPACE}/{self.name} could not be renewed ({error.status or 'no answer'}); "
                                 "another run may have taken it over")
                    return

    def release(self) -> None:
        """Stop renewing and free the Lease (holder cleared), so the next run need not wait for expiry."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.lost or self._lease is None:
            return
        spec = dict(self._lease.get("spec") or {})
        spec.update(holderIdentity=None, leaseDurationSeconds=1)
        try:
            self.client.request("PUT", f"{LEASES_PATH}/{self.name}", body=dict(self._lease, spec=spec))
        except ApiError:
            pass  # it expires on its own after leaseDurationSeconds
