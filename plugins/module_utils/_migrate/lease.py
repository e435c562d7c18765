# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One migration per resource at a time, across the cluster: a ``coordination.k8s.io/v1`` Lease per resource.

The holder is the run's identity and host. The Lease is renewed while the migration runs, released
at the end, and taken over only after it expired (``renewTime + leaseDurationSeconds``), as client-go's
leader election does. Every write carries the Lease's ``resourceVersion``, so two runs racing for
the same Lease cannot both win: the loser gets 409 and looks again. A run that cannot renew its
Lease for a whole lease duration is told to stop (someone else may take over).

Every request goes through the client it is given: the runner hands a ``RetriedClient`` with the
migration's retry policy and the task's deadline, so a 503, a dropped connection or a 429 is ridden out
as the migration's own LIST and PATCH are. A renewal retries only until the Lease would have expired.
A write whose answer was lost (the connection dropped after the apiserver stored it) looks like a 409 on
its retry: the Lease is read again, and a Lease naming this run as holder is ours.
"""

from __future__ import annotations

import hashlib
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline, PollTimeout, poll_until
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, MigrationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.retries import NO_RETRY, RetriedClient

NAMESPACE = paths.LEASE_NAMESPACE
LEASES_PATH = paths.LEASE_COLLECTION
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


class _Halted(Exception):
    """The renewal was told to stop while it waited to retry."""


class ResourceLease:
    """Acquire, renew in the background, and release the Lease of one resource."""

    def __init__(self, client, resource: str, holder: str, duration: int = 30, now=None):
        self.client = client if isinstance(client, RetriedClient) else RetriedClient(client, NO_RETRY)
        self.resource = resource
        self.name = lease_name(resource)
        self.holder = holder
        self.duration = int(duration)
        self.now = now or (lambda: datetime.now(timezone.utc))
        self.lost = ""  # why the Lease was lost, once it was
        self.waited_for: Optional[str] = None  # the other holder this run waited for, if it had to
        self._lease: Optional[dict] = None
        self._halt = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def label(self) -> str:
        return f"{NAMESPACE}/{self.name}"

    @property
    def path(self) -> str:
        return paths.lease(self.name)

    def _spec(self, acquire: bool) -> dict:
        stamp = self.now().strftime(MICROTIME)
        spec = dict((self._lease or {}).get("spec") or {})
        spec.update(holderIdentity=self.holder, leaseDurationSeconds=self.duration, renewTime=stamp)
        if acquire:
            spec["acquireTime"] = stamp
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if self._lease else 0)
        return spec

    def _read(self, client) -> Optional[dict]:
        return client.get_or_none(self.path)

    def _ours(self, lease: Optional[dict]) -> bool:
        return lease is not None and ((lease.get("spec") or {}).get("holderIdentity") == self.holder)

    def _try_acquire(self) -> Optional[str]:
        """One attempt; returns the other holder when the Lease is held, None when we hold it now."""
        self._lease = self._read(self.client)
        if self._lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": NAMESPACE,
                                 "labels": {"app.kubernetes.io/managed-by": "kubeupgrade.storage"}},
                    "spec": self._spec(acquire=True)}
            return self._write("POST", paths.LEASE_COLLECTION, body)
        other = holder_of(self._lease, self.now())
        if other and other != self.holder:
            return other
        body = dict(self._lease, spec=self._spec(acquire=other != self.holder))
        return self._write("PUT", self.path, body)

    def _write(self, method: str, path: str, body: dict) -> Optional[str]:
        try:
            self._lease = self.client.request(method, path, body=body).json()
        except ApiError as error:
            if error.status not in (409, 422):
                raise
            # Someone else created or updated it first, or our own write landed and only its answer was lost.
            now = self._read(self.client)
            if self._ours(now):
                self._lease = now
                return None
            return "(another run, racing for it)"
        return None

    def _failed(self, error: ApiError) -> MigrationError:
        why = self.client.explain(error)
        return MigrationError(
            f"Migration of {self.resource} not started: its Lease {self.label} could not be taken ({why}): {error}",
            details={"resource": self.resource, "lease": self.label, "status": error.status,
                     "endpoint": error.endpoint})

    def _holder_now(self) -> Optional[str]:
        """One attempt to take the Lease: None when we hold it now, else its other holder (remembered)."""
        try:
            other = self._try_acquire()
        except ApiError as error:
            raise self._failed(error) from None
        if other is not None:
            self.waited_for = other
        return other

    def acquire(self, deadline: Deadline, poll: float = 2.0, sleep=time.sleep) -> None:
        """Take the Lease, waiting within ``deadline`` for the holder to release it or let it expire."""
        try:
            poll_until(self._holder_now, lambda other: other is None, deadline, poll, sleep=sleep)
        except PollTimeout as timeout:
            raise MigrationError(
                f"Migration of {self.resource} not started: another migration holds Lease {self.label} "
                f"(holder {timeout.last}). Wait for it to finish, or for the Lease to expire ({self.duration}s after "
                "its last renewal) if that run is gone, then re-run.",
                details={"resource": self.resource, "lease": self.label, "holder": timeout.last}) from None
        self._start_renewing()

    def _start_renewing(self) -> None:
        self._thread = threading.Thread(target=self._renew_loop, daemon=True)
        self._thread.start()

    def _halting_sleep(self, seconds: float) -> None:
        """A renewal's wait to retry: ends early (and stops the retry) when the Lease is released."""
        sleep = self.client.timing.sleep
        if sleep is time.sleep:
            halted = self._halt.wait(seconds)
        else:  # an injected sleep (tests)
            sleep(seconds)
            halted = self._halt.is_set()
        if halted:
            raise _Halted()

    def _renew_once(self, last_ok: float) -> None:
        """One renewal, retried until the Lease would expire (``last_ok + duration``) or the task's deadline."""
        expires = Deadline(last_ok + self.duration, self.client.timing.clock)
        client = self.client.bounded(expires, sleep=self._halting_sleep)
        body = dict(self._lease, spec=self._spec(acquire=False))
        try:
            self._lease = client.request("PUT", self.path, body=body).json()
        except ApiError as error:
            if error.status != 409:
                raise
            now = self._read(client)  # our renewal may have landed with its answer lost
            if not self._ours(now):
                raise
            self._lease = now
            self._lease = client.request("PUT", self.path, body=dict(now, spec=self._spec(acquire=False))).json()

    def _renew_loop(self) -> None:
        clock = self.client.timing.clock  # the task's clock: the retry's deadline is on it
        last_ok = clock()
        interval = max(1.0, self.duration / 3.0)
        while not self._halt.wait(interval):
            try:
                self._renew_once(last_ok)
                last_ok = clock()
            except _Halted:
                return
            except ApiError as error:
                # Lost once the next renewal would come after the Lease expired: another run may take it then.
                if error.status == 409 or clock() + interval - last_ok >= self.duration:
                    last = f"last error: {error.status or 'no answer'} from {error.endpoint or 'the apiserver'}"
                    self.lost = (f"its Lease {self.label} was taken over by another run ({last}); let that run finish"
                                 if error.status == 409
                                 else f"its Lease {self.label} could not be renewed before it expires ({self.duration}s "
                                      f"after its last renewal), so another run may take it over ({last}). Re-run once that apiserver answers")
                    return

    def release(self) -> None:
        """Stop renewing and free the Lease (holder cleared), so the next run need not wait for expiry."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.lost or self._lease is None:
            return
        for _attempt in (1, 2):
            spec = dict(self._lease.get("spec") or {})
            spec.update(holderIdentity=None, leaseDurationSeconds=1)
            try:
                self.client.request("PUT", self.path, body=dict(self._lease, spec=spec))
                return
            except ApiError as error:
                if error.status != 409:
                    return  # it expires on its own after leaseDurationSeconds
                try:
                    now = self._read(self.client)
                except ApiError:
                    return
                if not self._ours(now):
                    return  # released already (our answer was lost), or someone else's now
                self._lease = now
