# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Option checks every module shares, so each says the same thing about the same mistake.

Each check runs before any request and raises one ``ConfigurationError`` naming the option, what
was wrong and the next step. Connection options are checked in ``_http/settings.py``.
"""

from __future__ import annotations

import math
import numbers
import re

from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

# A resource as ``<plural>`` (core group) or ``<plural>.<group>``: DNS-1123 labels, as the apiserver
# requires of CRD names (staging/src/k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation).
RESOURCE_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SHORT_RELEASE_RE = re.compile(r"^v?1\.[1-9]$")

FLOAT_RELEASE_HINT = ("YAML reads an unquoted 1.30 as the number 1.3: if you meant 1.30 (or 1.40...), "
                      "quote it (\"1.30\")")


def _number(option: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
        raise ConfigurationError(f"'{option}' must be a number, got {value!r}.")
    return value


def check_positive(option: str, value) -> float:
    """A duration or rate that must be above zero (zero would mean "never" or "forever")."""
    if _number(option, value) <= 0:
        raise ConfigurationError(f"'{option}' must be above 0, got {value!r}.")
    return value


def check_at_least(option: str, value, minimum) -> float:
    if _number(option, value) < minimum:
        raise ConfigurationError(f"'{option}' must be at least {minimum}, got {value!r}.")
    return value


def release_hint(value) -> str:
    """The float hint when ``value`` looks like a release YAML shortened (1.3 for 1.30), else ''."""
    if isinstance(value, float) or (isinstance(value, str) and _SHORT_RELEASE_RE.match(value.strip())):
        return FLOAT_RELEASE_HINT
    return ""


def check_resource_names(option: str, names) -> list:
    """``pods``, ``deployments.apps``, ``widgets.example.com``: lowercase, as the apiserver names resources."""
    if any(not isinstance(name, str) or not name.strip() for name in names or []):
        raise ConfigurationError(f"'{option}' entries must be non-empty strings like 'configmaps' or 'deployments.apps'.")
    bad = [name for name in names or [] if not isinstance(name, str) or not RESOURCE_NAME_RE.match(name)]
    if bad:
        raise ConfigurationError(
            f"'{option}' has names that are not Kubernetes resource names: {', '.join(repr(n) for n in bad)}. "
            "Use the lowercase plural and group, like 'configmaps' or 'deployments.apps' (kubectl api-resources lists them).")
    return list(names or [])


def check_accept(accept) -> None:
    """Every accepted subject carries the reason the report shows: an accept is a decision someone made."""
    for subject, reason in (accept or {}).items():
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigurationError(
                f"accept: the entry for {subject!r} needs a reason (a non-empty string the report shows), for example "
                f"accept: {{\"{subject}\": \"objects are re-created by the operator after the upgrade\"}}.")
