# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Option checks every module shares, so each says the same thing about the same mistake.

Each check runs before any request and raises one ``ConfigurationError`` naming the option, what
was wrong and the next step. Connection options are checked in ``_http/settings.py``.

Every number option of every module has its allowed range here, once (``NUMBER_RANGES``): the module
shell checks each one before the module's code runs, so a huge value (``1e300``, ``10**20``) is refused
naming the option and the range instead of overflowing a socket timeout or a date. URLs never carry
credentials (``user:password@``): they would be shown in results and messages, and neither an
apiserver nor etcd reads them; such a URL is refused without echoing its user information.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import NamedTuple, Optional

from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

# A resource as ``<plural>`` (core group) or ``<plural>.<group>``: DNS-1123 labels, as the apiserver
# requires of CRD names (staging/src/k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation).
RESOURCE_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SHORT_RELEASE_RE = re.compile(r"^v?1\.[1-9]$")

FLOAT_RELEASE_HINT = ("YAML reads an unquoted 1.30 as the number 1.3: if you meant 1.30 (or 1.40...), "
                      "quote it (\"1.30\")")


def is_number(value) -> bool:
    """A real number that is not NaN (a bool is not a number; a huge int is, without converting it to a float)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return not (isinstance(value, float) and math.isnan(value))


def show_number(value) -> str:
    """``value`` for a message: a huge int as its size (its digits are no help, and past 4300 cannot be printed)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 15:
        return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    return repr(value)


def _number(option: str, value) -> float:
    if not is_number(value):
        raise ConfigurationError(f"'{option}' must be a number, got {show_number(value)}.")
    return value


class NumberRange(NamedTuple):
    """The values a number option accepts: ``low`` to ``high`` (``low`` excluded when ``above``)."""

    low: float
    high: float
    unit: str = ""
    above: bool = False
    note: str = ""

    def describe(self) -> str:
        start = f"above {_plain(self.low)} up" if self.above else _plain(self.low)
        text = f"{start} to {_plain(self.high)}" + (f" {self.unit}" if self.unit else "")
        return f"{text}; {self.note}" if self.note else text


def _plain(bound) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


DAY = 86400
# Every int and float option of every module (tests/unit/plugins/modules/test_bad_input_classes.py checks
# that none is missing). An option name means the same in every module that has it; where one module is
# stricter, the range is the loosest and that module's own check adds the rest (the note says so).
NUMBER_RANGES = {
    # connection options (every cluster module)
    "request_timeout": NumberRange(0, 3600, "seconds", above=True),
    # storage_version_agreement (timeout also storage_migration)
    "polls": NumberRange(1, 1000),
    "interval": NumberRange(0, 3600, "seconds"),
    "timeout": NumberRange(0, 7 * DAY, "seconds",
                           note="0 is one observation in storage_version_agreement; storage_migration needs at least 1"),
    # storage_migration
    "stall_timeout": NumberRange(0, DAY, "seconds", note="0 never stops a migration as stuck"),
    "poll_interval": NumberRange(0.05, 3600, "seconds"),
    "concurrency": NumberRange(1, 100),
    "parallel_resources": NumberRange(1, 100),
    "qps": NumberRange(0, 10000, "requests per second", note="0 is no limit, else at least 0.01"),
    "chunk_size": NumberRange(1, 10000, "objects per LIST"),
    "max_failures": NumberRange(0, 1000000),
    "lock_duration": NumberRange(5, 3600, "seconds"),
    # storage_state, storage_version_check
    "heartbeat_interval": NumberRange(1, 365 * DAY, "seconds"),
    "record_max_age": NumberRange(0, 10 * 365 * DAY, "seconds"),
    # storage_version_audit, storage_rehearsal
    "etcd_request_timeout": NumberRange(0, 3600, "seconds", above=True),
    "page_size": NumberRange(1, 10000, "keys per range request"),
    "pages_per_second": NumberRange(0, 10000, note="0 reads as fast as etcd answers"),
    "burst_pages": NumberRange(0, 1000000, "pages", note="0 paces from the first page"),
    "names_limit": NumberRange(-1, 1000000, note="-1 lists every name, 0 none"),
    # storage_rehearsal
    "start_timeout": NumberRange(5, 3600, "seconds"),
}


def check_number(option: str, value, bounds: Optional[NumberRange] = None):
    """A number option within its range (``NUMBER_RANGES[option]`` unless ``bounds``); ``None`` means unset.

    One message naming the option, what is wrong and the allowed range, for a value that is no number,
    NaN, infinite, below or above the range."""
    bounds = bounds or NUMBER_RANGES.get(option)
    if value is None:
        return value
    allowed = f" (allowed: {bounds.describe()})" if bounds else ""
    if not is_number(value):
        raise ConfigurationError(f"'{option}' must be a number, got {show_number(value)}{allowed}.")
    if bounds is None:
        if isinstance(value, float) and math.isinf(value):
            raise ConfigurationError(f"'{option}' must be a finite number, got {value!r}.")
        return value
    if value < bounds.low or (bounds.above and value <= bounds.low):
        if bounds.above:
            wanted = f"be above {_plain(bounds.low)}"
        elif bounds.low == 0:
            wanted = "not be negative"
        else:
            wanted = f"be at least {_plain(bounds.low)}"
        raise ConfigurationError(f"'{option}' must {wanted}, got {show_number(value)}{allowed}.")
    if value > bounds.high:
        raise ConfigurationError(f"'{option}' must be at most {_plain(bounds.high)}, got {show_number(value)}{allowed}.")
    return value


# scheme://userinfo@ : the user information of a URL (what comes before the host), anywhere in a string; for a
# value that is one URL (an apiserver, proxy or etcd URL), also without a scheme and with spaces in it.
_URL_USERINFO_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s]*)@")
_ONE_URL_USERINFO_RE = re.compile(r"^(?P<scheme>\s*(?:[A-Za-z][A-Za-z0-9+.-]*://)?)(?P<userinfo>[^/?#]*)@")


def url_userinfo(text, one_url: bool = False) -> list:
    """The user information (``user:password``) of every URL in ``text`` (of ``text`` itself when ``one_url``)."""
    if not isinstance(text, str):
        return []
    pattern = _ONE_URL_USERINFO_RE if one_url else _URL_USERINFO_RE
    return [match.group("userinfo") for match in pattern.finditer(text) if match.group("userinfo")]


def redact_url(text, one_url: bool = False) -> str:
    """``text`` with the user information of every URL replaced by ``***`` (for messages)."""
    pattern = _ONE_URL_USERINFO_RE if one_url else _URL_USERINFO_RE
    return pattern.sub(lambda m: f"{m.group('scheme')}***@", text) if isinstance(text, str) else text


def check_no_credentials(option: str, value, where: str = "", one_url: bool = False) -> None:
    """Refuse a URL (or a list of them) carrying ``user:password@``, naming the option (or ``where``) but not the
    password. ``one_url``: the value is a URL, not text that may contain some (an ``@`` before the host counts)."""
    for text in value if isinstance(value, (list, tuple)) else [value]:
        if url_userinfo(text, one_url):
            source = where or f"'{option}'"
            raise ConfigurationError(
                f"{source} has a URL with credentials in it ({redact_url(text, one_url)}): they would be shown in "
                "results, reports and logs, and the server does not read them there. Remove the user:password@ part "
                "and give the credentials through the credential options ('api_key', 'username'/'password', client "
                "certificates or the kubeconfig user; for a proxy 'proxy_headers' with proxy_basic_auth; for etcd "
                "'etcd_client_cert'/'etcd_client_key').")


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
    """Every accepted subject is named by a string and carries the reason the report shows: an accept is a
    decision someone made."""
    for subject, reason in (accept or {}).items():
        if not isinstance(subject, str) or not subject.strip():
            raise ConfigurationError(
                f"accept: the subject {subject!r} must be a non-empty string naming what is accepted (a resource such as "
                "'widgets.example.com' or a group/version such as 'metrics.k8s.io/v1beta1'); quote it in YAML.")
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigurationError(
                f"accept: the entry for {subject!r} needs a reason (a non-empty string the report shows), for example "
                f"accept: {{\"{subject}\": \"objects are re-created by the operator after the upgrade\"}}.")
