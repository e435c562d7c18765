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
    grouped: Dict[str, list] = {}
    for url, problem in problems.items():
        grouped.setdefault(problem if problem in _STEPS else NO_ANSWER, []).append(url)
    order = [CREDENTIALS, ANONYMOUS, FORBIDDEN, TLS, NOT_JSON, NO_ANSWER]
    return "; ".join(step(kind, ", ".join(grouped[kind])) for kind in order if kind in grouped)
