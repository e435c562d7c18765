# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Why an apiserver could not be read, and the one fix for each reason: decided here, for every module.

The API layer tags each failure with a ``problem`` (``ApiError.problem``): rejected credentials (401), a request
the apiserver saw as anonymous (403 to ``system:anonymous``: the credentials were not sent or not accepted), a
user without the grant (403), TLS that failed, an answer that is not the Kubernetes API (a proxy or login page),
or no answer at all. The gates say the fix that goes with it, never "the apiservers do not agree".
"""

from __future__ import annotations

from typing import Dict, Optional

CREDENTIALS = "credentials_rejected"
ANONYMOUS = "anonymous"
FORBIDDEN = "forbidden"
TLS = "tls"
NOT_JSON = "not_json"
NO_ANSWER = "no_answer"

_STEPS = {
    CREDENTIALS: "fix the credentials used for {where} (the token, kubeconfig user or client certificate was rejected: HTTP 401)",
    ANONYMOUS: ("fix the credentials used for {where}: the apiserver saw no identity (HTTP 403 to system:anonymous), so "
                "none was sent or it was not accepted (a client certificate not signed by the apiserver's --client-ca-file, "
                "an exec plugin that gave no token, a missing token)"),
    FORBIDDEN: ("grant the user discovery on {where} (HTTP 403: a ClusterRole with nonResourceURLs /api, /api/*, /apis, "
                "/apis/*, /version, /readyz and verb get; the collection's rbac/observe.yaml)"),
    TLS: ("fix TLS to {where}: give the CA that signed its serving certificate ('ca_cert' or the kubeconfig's "
          "certificate-authority), or use a URL its certificate names"),
    NOT_JSON: ("point the endpoint at the apiserver itself: {where} answered with something that is not the Kubernetes API "
               "(a proxy's or login page, or another service)"),
    NO_ANSWER: "make {where} reachable (or remove an apiserver that no longer exists from the endpoints)",
}


# The same fixes in a few words, for a failure's first line (the full step follows on the next lines).
_SHORT = {
    CREDENTIALS: "fix the credentials (rejected: HTTP 401)",
    ANONYMOUS: "fix the credentials (none seen: HTTP 403 to system:anonymous)",
    FORBIDDEN: "grant the user discovery (HTTP 403; rbac/observe.yaml)",
    TLS: "fix TLS (the CA that signed its serving certificate)",
    NOT_JSON: "point the URL at the apiserver itself",
    NO_ANSWER: "make it reachable, or remove it from the endpoints",
}
_ORDER = [CREDENTIALS, ANONYMOUS, FORBIDDEN, TLS, NOT_JSON, NO_ANSWER]


def of_status(status: Optional[int], message: str = "") -> Optional[str]:
    """The problem an HTTP error status says (None when it is not about access)."""
    if status == 401:
        return CREDENTIALS
    if status == 403:
        return ANONYMOUS if "system:anonymous" in (message or "") else FORBIDDEN
    return None


def step(problem: Optional[str], where: str) -> str:
    """The fix for one problem at ``where`` (an apiserver URL, or several); reachability when it is not known."""
    return _STEPS.get(problem or NO_ANSWER, _STEPS[NO_ANSWER]).format(where=where)


def steps(problems: Dict[str, Optional[str]]) -> str:
    """One fix per problem, naming the apiservers that have it (``problems``: URL -> problem), in a stable order."""
    grouped = _grouped(problems)
    return "; ".join(step(kind, ", ".join(grouped[kind])) for kind in _ORDER if kind in grouped)


def first_step(problems: Dict[str, Optional[str]]) -> str:
    """The fix of the first problem in ``steps``' order, in a few words (for a first line)."""
    grouped = _grouped(problems)
    return next((_SHORT[kind] for kind in _ORDER if kind in grouped), _SHORT[NO_ANSWER])


def _grouped(problems: Dict[str, Optional[str]]) -> Dict[str, list]:
    grouped: Dict[str, list] = {}
    for url, problem in problems.items():
        grouped.setdefault(problem if problem in _STEPS else NO_ANSWER, []).append(url)
    return grouped


# What an apiserver says when the etcd behind it did not answer in time: its storage layer's own timeout (etcd's
# "request timed out", gRPC's "context deadline exceeded" or "Unavailable"), or its request timeout (HTTP 504).
_ETCD_MARKERS = ("etcdserver:", "context deadline exceeded", "rpc error", "Timeout: request did not complete",
                 "etcd cluster is unavailable")


def unanswered(status: Optional[int], message: str, endpoint: str, timeout: Optional[float] = None) -> str:
    """What did not answer, as observed from one failed request: etcd behind the apiserver, the apiserver, or the
    network. ``status`` None: no HTTP answer (``message`` is the socket's error)."""
    where = endpoint or "the apiserver"
    text = (message or "").strip()
    if status is not None:
        quoted = f"'{text[:200]}'" if text else "no message"
        if status == 504 or any(marker in text for marker in _ETCD_MARKERS):
            return f"the apiserver {where} answered HTTP {status} {quoted}: etcd behind it did not answer"
        return f"the apiserver {where} answered HTTP {status} {quoted}"
    lowered = text.lower()
    if "refused" in lowered:
        return f"no TCP answer from {where}: the connection was refused (no apiserver listening there)"
    if "read operation timed out" in lowered or "read timed out" in lowered:
        waited = f" within {timeout:g}s" if timeout else ""
        return (f"the apiserver {where} took the request but sent no answer{waited}: it was waiting on what is behind "
                "it, most likely its etcd")
    if "reset" in lowered or "closed" in lowered or "eof" in lowered or "broken pipe" in lowered:
        return f"the connection to {where} was dropped ({text[:120]})"
    return f"no answer from {where} ({text[:160]}): the apiserver or the network to it"


def unanswered_step(status: Optional[int], message: str) -> str:
    """The next step that goes with ``unanswered``."""
    described = unanswered(status, message, "x")
    if "etcd" in described:
        return ("Check the etcd member that apiserver talks to (etcdctl endpoint health and endpoint status: a member "
                "stopped, restarting or being defragmented), then re-run; the migration resumes from its checkpoint")
    return "Check that the apiserver is running and reachable from here, then re-run; the migration resumes from its checkpoint"
