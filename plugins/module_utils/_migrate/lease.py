# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One migration per resource at a time, across the cluster: a ``coordination.k8s.io/v1`` Lease per resource.

The holder is the run's identity and host. The Lease is renewed while the migration runs, released
at the end, and taken over only after it expired (``renewTime + leaseDurationSeconds``), as client-go's
leader election does. Every write carries the Lease's ``resourceVersion``, so two runs racing for
the same Lease cannot both win: the loser gets 409 and looks again. A run that cannot renew its
Lease for a whole lease duration is told to stop (someone else may take over).

Every request goes through the client it is given: the runner hands a ``RetriedClient`` with the
migration's retry policy and the task's deadline, so a 503, a dropped connection or a 429 is ridden out
as the migration's own LIST and PATCH are. A renewal retries until the Lease would expire (its duration after the last
renewal that got through, counted from when that renewal was sent), each try with a request timeout of a sixth of the
duration at most, so an apiserver waiting on a stopped etcd member gets several tries, not one that takes the whole
duration. ``DEFAULT_DURATION`` (90 s, the migration's retry budget) is long enough for the Lease to outlast what the
writes ride out: an etcd member stopped or restarted (20 s, then the apiserver's reconnection) costs time, not the run.
A write whose answer was lost (the connection dropped after the apiserver stored it) looks like a 409 on
its retry: the Lease is read again, and a Lease naming this run as holder is ours.
"""

from __future__ import annotations

import hashlib
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import diagnosis, paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline, PollTimeout, poll_until
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ApiError, MigrationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.retries import NO_RETRY, RetriedClient

NAMESPACE = paths.LEASE_NAMESPACE
LEASES_PATH = paths.LEASE_COLLECTION
PREFIX = "kubeupgrade-storage-migration-"
MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"
# client-go's leader election uses 15 s with a 10 s renew deadline: a controller fails over fast. This Lease locks a
# run that may take an hour, and losing it fails the run: it lasts as long as the migration retries a request (90 s),
# so an outage the writes ride out does not cost the Lease. A run killed without releasing it blocks the next one
# this long at most (the next run says whose Lease it waits for, and until when).
DEFAULT_DURATION = 90
# A renewal's try waits at most this share of the duration for its answer: several tries fit before it expires.
RENEW_TRIES = 6


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


def what_did_not_answer(error: ApiError, timeout: Optional[float] = None) -> str:
    """Pure: what a failed request observed did not answer (etcd behind the apiserver, the apiserver, the network)."""
    message = str(error) if error.status is None else (error.api_message or error.reason or "")
    return diagnosis.unanswered(error.status, message, error.endpoint or "", timeout)


def next_step(error: ApiError) -> str:
    return diagnosis.unanswered_step(error.status, str(error) if error.status is None else (error.api_message or ""))


def waiting_line(resource: str, lease: Optional[dict], holder: str, until: Optional[float], now: datetime) -> str:
    """Pure: the progress line of a run waiting for another run's Lease: whose, when it expires unrenewed, and how
    long this run waits at most (``until``: seconds left before the task's timeout, None: no timeout)."""
    spec = (lease or {}).get("spec") or {}
    renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
    text = f"{resource}: waiting for Lease {NAMESPACE}/{lease_name(resource)}, held by {holder}"
    if renewed is not None:
        expires = renewed + timedelta(seconds=float(spec.get("leaseDurationSeconds") or 0))
        text += (f" (renewed {max(0.0, (now - renewed).total_seconds()):.0f}s ago; expires at "
                 f"{expires.strftime('%H:%M:%S')} UTC unless renewed)")
    if until is not None:
        text += f"; waiting until {(now + timedelta(seconds=until)).strftime('%H:%M:%S')} UTC at most (the task's timeout)"
    return text


class _Halted(Exception):
    """The renewal was told to stop while it waited to retry."""


class ResourceLease:
    """Acquire, renew in the background, and release the Lease of one resource."""

    def __init__(self, client, resource: str, holder: str, duration: int = DEFAULT_DURATION, now=None):
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
        self.on_wait = None  # called with a progress line while another run holds the Lease

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
            if self.on_wait is not None:
                remaining = self.client.remaining()
                self.on_wait(waiting_line(self.resource, self._lease, other, remaining, self.now()))
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
        """One renewal, retried until the Lease would expire (``last_ok + duration``) or the task's deadline; each try
        waits a sixth of the duration at most, so a try stuck behind a stopped etcd does not use up the Lease."""
        expires = Deadline(last_ok + self.duration, self.client.timing.clock)
        client = self.client.bounded(expires, sleep=self._halting_sleep,
                                     request_timeout=max(1.0, self.duration / RENEW_TRIES))
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
        wait = interval
        while not self._halt.wait(wait):
            sent = clock()  # the renewTime written: the Lease expires a duration after it, whenever the answer came
            try:
                self._renew_once(last_ok)
                last_ok = sent
                wait = max(0.0, last_ok + interval - clock())  # a renewal answered late is followed at once
            except _Halted:
                return
            except ApiError as error:
                # Lost once the Lease expired unrenewed (another run may take it then), or taken over by another run.
                if error.status == 409 or clock() + 1.0 - last_ok >= self.duration:
                    self.lost = self._lost_message(error, clock() - last_ok)
                    return
                wait = 1.0  # refused before it expired (a 403, a 422): try again shortly, not in a tight loop

    def _lost_message(self, error: ApiError, unrenewed: float) -> str:
        if error.status == 409:
            return (f"its Lease {self.label} was taken over by another run (last error: HTTP 409 from "
                    f"{error.endpoint or 'the apiserver'}); let that run finish")
        return (f"its Lease {self.label} could not be renewed before it expires (lock_duration {self.duration}s; the "
                f"last renewal that got through was sent {unrenewed:.0f}s ago), so another run may take it over: "
                f"{what_did_not_answer(error, max(1.0, self.duration / RENEW_TRIES))}. "
                f"{next_step(error)}")

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
