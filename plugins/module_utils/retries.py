# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounded, jittered retries that honour ``Retry-After``, declared at the call site.

Only transient failures are retried: 429, 500 (but never a decode failure nor etcd's space alarm), 502, 503, 504, timeouts
and dropped connections. Everything else is returned to the caller at once, so no loop can spin on a
denial or a bad request. A retry is bounded three ways: a number of attempts, a time ``budget`` for
the whole call (client-go gives a 429 ten tries; an apiserver restart behind a load balancer answers
503 for several seconds), and the caller's ``deadline``: no wait ever ends past it.

``RetriedClient`` is the same retry for a client handed to code that sends its own requests (the
migration's Lease and StorageState bookkeeping): whoever wraps the client declares the policy and the
deadline, so the retry is still chosen at the call site; ``ApiClient`` itself never retries.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import List, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import none_if_missing, paged_items
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import (
    ApiError,
    EndpointUnreachable,
    is_decode_failure,
)

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
# etcd's space alarm (NOSPACE, raised when its database reaches --quota-backend-bytes): the apiserver answers every
# write with 500 "etcdserver: mvcc: database space exceeded" until an operator reclaims the space. No retry helps.
SPACE_EXCEEDED = ("database space exceeded", "NOSPACE")


def etcd_out_of_space(error: Exception) -> bool:
    """The apiserver's etcd refuses writes for its space alarm: a 500 no retry can get through."""
    if not isinstance(error, ApiError) or isinstance(error, EndpointUnreachable) or error.status != 500:
        return False
    return any(text in (error.api_message or "") for text in SPACE_EXCEEDED)


# etcd's maintenance guide, "Space quota": what ends the alarm. Compaction frees the old revisions (a rewrite keeps the
# object's previous value until then), defragmentation gives the space back, and the alarm stays until disarmed.
SPACE_RECOVERY = (
    "The whole cluster is read-only until etcd's space is reclaimed (etcd's maintenance guide, \"Space quota\"), on "
    "a control-plane node with etcdctl and the etcd client certificates: `etcdctl endpoint status --cluster -w table` "
    "(DB SIZE against the quota), `etcdctl alarm list` (NOSPACE); compact to the current revision: `etcdctl compact "
    "$(etcdctl endpoint status -w json | grep -o '\"revision\":[0-9]*' | cut -d: -f2)`; `etcdctl defrag "
    "--endpoints=<member>` on each member, one at a time; then `etcdctl alarm disarm`. Raise etcd's "
    "--quota-backend-bytes if the data needs more room: a full rewrite adds about the size of what it rewrites until "
    "the next compaction.")


@dataclass
class RetryPolicy:
    attempts: int = 6  # total tries, including the first
    base_delay: float = 0.2
    max_delay: float = 15.0
    retry_statuses: frozenset = field(default_factory=lambda: TRANSIENT_STATUSES)
    retry_unreachable: bool = True
    budget: Optional[float] = None  # seconds from the first try after which no retry starts

    def should_retry(self, error: Exception) -> bool:
        if isinstance(error, EndpointUnreachable):
            return self.retry_unreachable
        if isinstance(error, ApiError):
            if is_decode_failure(error.status, error.api_message) or etcd_out_of_space(error):
                return False
            return error.status in self.retry_statuses
        return False

    def delay(self, attempt: int, retry_after=None, rng=random) -> float:
        """Seconds to wait before try ``attempt + 1`` (attempt counts from 1): full jitter, capped,
        never shorter than the server asked for (plus up to 10 % jitter, so throttled clients spread)."""
        backoff = rng.uniform(0, min(self.max_delay, self.base_delay * (2 ** (attempt - 1))))
        if retry_after is not None:
            asked = max(0.0, float(retry_after))
            return asked + rng.uniform(0, 0.1 * asked + 0.05)
        return backoff


NO_RETRY = RetryPolicy(attempts=1)


def retry_bound(policy: RetryPolicy) -> str:
    """How far a policy retries, for messages: ``up to 40 attempts within 90s``."""
    if policy.budget is None:
        return f"{policy.attempts} attempts"
    return f"up to {policy.attempts} attempts within {policy.budget:g}s"


@dataclass
class RetryClock:
    """Where ``call_with_retries`` sleeps, and the caller's ``Deadline`` (the API layer's one deadline; time is read
    on its clock). ``Deadline(None)``: no deadline."""

    sleep: object = time.sleep
    deadline: Deadline = field(default_factory=Deadline)
    deadline_hit: bool = False  # set when a retry was given up because its wait would pass the deadline

    @property
    def clock(self):
        return self.deadline.clock


def _may_wait(policy: RetryPolicy, timing: RetryClock, started: float, wait: float) -> bool:
    if policy.budget is not None and timing.clock() + wait - started > policy.budget:
        return False
    if not timing.deadline.allows(wait):
        timing.deadline_hit = True
        return False
    return True


def call_with_retries(fn, policy: RetryPolicy, sleep=time.sleep, on_retry=None, timing: Optional[RetryClock] = None):
    """Call ``fn()`` until it succeeds, fails permanently, or the attempts, budget or deadline run out.

    When giving up, the last error is raised unchanged: the caller names the object and the cause.
    """
    timing = timing or RetryClock(sleep=sleep)
    started = timing.clock()
    attempt = 1
    while True:
        try:
            return fn()
        except (ApiError, EndpointUnreachable) as error:
            if attempt >= policy.attempts or not policy.should_retry(error):
                raise
            wait = policy.delay(attempt, getattr(error, "retry_after", None))
            if not _may_wait(policy, timing, started, wait):
                raise
            if on_retry is not None:
                on_retry(error, attempt, wait)
            timing.sleep(wait)
            attempt += 1


# A request sent with less than this left before the deadline still gets this long to answer.
MIN_REQUEST_TIMEOUT = 0.5


class RetriedClient:
    """``client`` with every request sent through ``call_with_retries(policy)``, no wait ending past ``timing.deadline``.

    Each request's timeout is cut to what is left before the deadline (at least ``MIN_REQUEST_TIMEOUT``).
    When a request is given up, the last error is raised unchanged and ``explain(error)`` says why it was
    given up (the deadline, the retry bound, or a refusal that is never retried), for the caller's message.
    One instance per thread: ``explain`` describes the last request given up by this instance.
    """

    def __init__(self, client, policy: RetryPolicy, timing: Optional[RetryClock] = None, on_retry=None,
                 request_timeout: Optional[float] = None):
        self.client = client
        self.policy = policy
        self.timing = timing or RetryClock()
        self.on_retry = on_retry
        self.request_timeout = request_timeout  # each try waits at most this long for its answer (None: the settings')
        self.endpoint = getattr(client, "endpoint", None)
        self.settings = getattr(client, "settings", None)
        self._deadline_hit = False

    def bounded(self, deadline: Optional[Deadline], sleep=None, request_timeout: Optional[float] = None) -> RetriedClient:
        """The same client and policy, giving up at ``deadline`` too (the earlier one wins), sleeping with ``sleep``;
        ``request_timeout`` caps each try's wait for an answer, so several tries fit before ``deadline``."""
        return RetriedClient(self.client, self.policy,
                             RetryClock(sleep=sleep or self.timing.sleep, deadline=self.timing.deadline.earlier(deadline)),
                             self.on_retry, request_timeout or self.request_timeout)

    def remaining(self) -> Optional[float]:
        return self.timing.deadline.remaining()

    def explain(self, error: Exception) -> str:
        """Why ``error`` ended the request: what an operator reads after "failed (...)"."""
        if self._deadline_hit:
            return "retried until the next try would come after the task's timeout"
        if self.policy.attempts > 1 and self.policy.should_retry(error):
            return f"still failing after retrying, {retry_bound(self.policy)}"
        if etcd_out_of_space(error):
            return f"not retried: etcd's space alarm (NOSPACE) is raised. {SPACE_RECOVERY}"
        return "not retried: the apiserver refused" if not isinstance(error, EndpointUnreachable) else "not retried"

    def _timeout(self) -> Optional[float]:
        """Each try's wait for its answer: the settings' (or ``request_timeout``), cut to what is left before the
        deadline; read again before every try, so a retry never waits past the deadline either."""
        remaining = self.remaining()
        base = float(getattr(self.settings, "timeout", 30.0) or 30.0)
        if self.request_timeout:
            base = min(base, float(self.request_timeout))
        elif remaining is None:
            return None
        return max(MIN_REQUEST_TIMEOUT, base if remaining is None else min(base, remaining))

    def _call(self, fn):
        timing = RetryClock(sleep=self.timing.sleep, deadline=self.timing.deadline)
        self._deadline_hit = False
        try:
            return call_with_retries(fn, self.policy, on_retry=self.on_retry, timing=timing)
        except (ApiError, EndpointUnreachable):
            self._deadline_hit = timing.deadline_hit or (self.remaining() is not None and self.remaining() <= 0)
            raise

    def _send(self, method: str, path: str, query, body, options: dict):
        """One try; its timeout is the caller's when given, else ``_timeout()`` as of this try."""
        if not options.get("timeout"):
            timeout = self._timeout()
            if timeout is not None:
                options = dict(options, timeout=timeout)
        return self.client.request(method, path, query=query, body=body, **options)

    def request(self, method: str, path: str, query=None, body=None, **options):
        return self._call(lambda: self._send(method, path, query, body, options))

    def _json(self, method: str, path: str, query=None, body=None, **options) -> dict:
        options.pop("timeout", None)  # always the client's own, cut to the deadline
        return self._call(lambda: self._send(method, path, query, body, options).json())

    def get(self, path: str, query=None, accept: str = "application/json") -> dict:
        return self._json("GET", path, query=query, accept=accept)

    def get_or_none(self, path: str, query=None) -> Optional[dict]:
        """The object at ``path``, or None when the apiserver answers 404 (never for an unreachable one)."""
        return none_if_missing(lambda: self.get(path, query=query))

    def post(self, path: str, body, query=None) -> dict:
        return self._json("POST", path, query=query, body=body)

    def put(self, path: str, body, query=None) -> dict:
        return self._json("PUT", path, query=query, body=body)

    def patch(self, path: str, body, content_type: str = "application/merge-patch+json") -> dict:
        return self._json("PATCH", path, body=body, content_type=content_type)

    def delete(self, path: str, query=None, body=None) -> dict:
        return self._json("DELETE", path, query=query, body=body)

    def list_all(self, path: str, query=None, chunk: int = 500) -> List[dict]:
        """Every item of a LIST in chunks, each page retried; an expired token (410) restarts the list once."""
        return paged_items(lambda where, params: self.get(where, query=params), path, query, chunk)


def why_given_up(client, error: Exception) -> str:
    """Why a request of ``client`` ended in ``error``: its ``RetriedClient.explain``, or "not retried" for a plain client."""
    explain = getattr(client, "explain", None)
    return explain(error) if explain is not None else "not retried"
