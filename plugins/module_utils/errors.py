# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One exception hierarchy for the collection.

Every message is written for the operator: what failed, where (parameter, resource, apiserver), and
the next step. ``KubeUpgradeModule`` turns any of these into a single ``fail_json`` at the top of a
module, so no traceback reaches the operator.
"""

from __future__ import annotations


class KubeUpgradeError(Exception):
    """Base class: ``str(error)`` is the operator-facing message; ``details`` becomes the failure's
    ``error`` object, and ``result`` the top-level result keys already known when it was raised
    (a migration's finished entries, say), which the failure returns like a success would."""

    def __init__(self, message, details=None, result=None):
        super().__init__(message)
        self.message = message
        self.details = details or {}
        self.result = result or {}


class ConfigurationError(KubeUpgradeError):
    """Bad parameters, kubeconfig, context or credentials, found before talking to any apiserver."""


class ProfileError(KubeUpgradeError):
    """A release profile that does not exist, or a profile file that is malformed."""


class ManifestError(KubeUpgradeError):
    """A CRD manifest that cannot be read or is not a valid CustomResourceDefinition."""


class ApiError(KubeUpgradeError):
    """An apiserver answered with an HTTP error status.

    ``status`` is the HTTP code, ``reason`` the Status reason (may be empty: decode failures are 500s
    without a reason), ``retry_after`` the server's suggested delay in seconds (or None).
    """

    FIELDS = ("endpoint", "method", "path", "status", "reason", "api_message", "retry_after", "body", "problem")

    def __init__(self, message, **request):
        """``request``: any of ``FIELDS``, by keyword (where and how the request failed)."""
        unknown = set(request) - set(self.FIELDS)
        if unknown:
            raise TypeError(f"unknown ApiError fields: {', '.join(sorted(unknown))}")
        details = {k: request.get(k) for k in ("endpoint", "method", "path", "status", "reason")}
        super().__init__(message, details={k: v for k, v in details.items() if v is not None})
        self.endpoint = request.get("endpoint")
        self.method = request.get("method")
        self.path = request.get("path")
        self.status = request.get("status")
        self.reason = request.get("reason") or ""
        self.api_message = request.get("api_message") or ""
        self.retry_after = request.get("retry_after")
        self.body = request.get("body")
        self.problem = request.get("problem")  # _http/diagnosis: why an apiserver could not be read (credentials, TLS, ...)


class EndpointUnreachable(ApiError):
    """No HTTP answer at all: connection refused or reset, timeout, TLS failure."""


class MigrationError(KubeUpgradeError):
    """A storage migration failed or was stopped; names the resource (and object) and the reason."""


class DisagreementError(KubeUpgradeError):
    """Apiserver endpoints report different storage versions where agreement is required."""


_DECODE_FAILURE_MARKERS = (
    "is registered for version",  # no kind "ConfigMap" is registered for version "v9" in scheme ...
    "request to convert CR from an invalid group/version",
    "illegal base64 data",
    "couldn't get version/kind",
)


def is_decode_failure(status, message) -> bool:
    """True for the 500 an apiserver returns when it cannot decode an object stored in etcd.

    The real answer is a 500 *without* a reason and with the Go error text (see the recorded
    decode/ exchanges). Retrying it never helps, so callers report it instead.
    """
    return status == 500 and any(marker in (message or "") for marker in _DECODE_FAILURE_MARKERS)
