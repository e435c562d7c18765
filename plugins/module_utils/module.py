# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shell every module of the collection runs in.

It merges the shared connection options, reports missing Python libraries, keeps kubeconfig
secrets out of logs, builds one client per apiserver endpoint, and fails through exactly one path:
``fail`` (directly, or from any ``KubeUpgradeError`` raised under ``run``) exits with ``msg``, an
``error`` object and the same top-level keys a success returns, so a playbook reads one shape
whether the task failed or not, and modules stay thin.
"""

from __future__ import annotations

import copy
import traceback
from typing import TYPE_CHECKING, Optional
from urllib.parse import unquote

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.common.validation import check_type_float, check_type_int

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import scratch
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import (
    HAS_KUBERNETES,
    ConnectionSettings,
    check_url,
    remove_stale_private_dirs,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._validate import (
    check_no_credentials,
    check_number,
    check_resource_names,
    url_userinfo,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils.connection_args import connection_argument_spec
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError, KubeUpgradeError

if TYPE_CHECKING:  # imported where used: a module without a connection (hash, audit, snapshot) never compiles them
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiClient

# Keys whose values are secret wherever they are in a kubeconfig (a user's, an auth-provider's config).
_SECRET_KUBECONFIG_KEYS = ("token", "password", "client-key-data", "client-certificate-data", "id-token", "refresh-token",
                           "access-token", "client-secret")
_NUMBER_TYPES = {"int": check_type_int, "float": check_type_float}
_TOKEN_LENGTH = 16
# Options whose values are URLs (or lists of URLs), in any module.
_URL_OPTIONS = ("host", "endpoints", "proxy", "target_endpoint", "upgrade_order", "upgrading", "etcd_endpoints")
# Keys Ansible gives a meaning to: a module's result never carries them as its own data.
_RESERVED_KEYS = ("msg", "failed", "skipped", "unreachable", "results", "diff", "error", "exception",
                  "invocation", "warnings", "deprecations")


def _strings(value) -> list:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return [value] if isinstance(value, str) and value else []


def _kubeconfig_secrets(kubeconfig) -> list:
    """Secret values of an inline kubeconfig, so Ansible masks them in output and logs (the echoed arguments too).

    Runs before any option is checked (and before the one failure path exists), so it reads any shape
    without failing, and finds the secrets wherever they are: a malformed kubeconfig (``users`` a mapping,
    a user a list) is refused later by ``check_kubeconfig_shape``, and is echoed with the failure."""
    found = []
    if isinstance(kubeconfig, dict):
        for key, value in kubeconfig.items():
            found.extend(_strings(value) if key in _SECRET_KUBECONFIG_KEYS else _kubeconfig_secrets(value))
    elif isinstance(kubeconfig, list):
        for item in kubeconfig:
            found.extend(_kubeconfig_secrets(item))
    return found


def _url_secrets(value, one_url: bool = False) -> list:
    """The password of every URL with ``user:password@`` in any option, nested or not (or a user long enough to
    be a token, ``https://<token>@host``), so Ansible masks them even in the echo of the arguments; the URL
    itself is refused. A short user alone (``ssh://git@...`` in a manifest) is no secret: masking it would
    mask that word everywhere in the output. ``one_url``: the value is a URL (``_URL_OPTIONS``), which also
    counts without a scheme (``admin:pw@10.0.0.11:6443``; elsewhere that is an e-mail-like name)."""
    if isinstance(value, dict):
        return [secret for key, item in value.items() for secret in _url_secrets(item, one_url or key in _URL_OPTIONS)]
    if isinstance(value, (list, tuple)):
        return [secret for item in value for secret in _url_secrets(item, one_url)]
    found = []
    candidates = url_userinfo(value) + (url_userinfo(value, one_url=True) if one_url else [])
    for userinfo in candidates:
        user, colon, password = userinfo.partition(":")
        secret = password if colon else (user if len(user) >= _TOKEN_LENGTH else "")
        if secret:
            found.extend({secret, unquote(secret)})
    return found


def _numbers_as_given(spec: dict) -> dict:
    """``spec`` with Ansible's int/float conversion made total: the conversion raises OverflowError, which
    ``AnsibleModule`` does not catch, for ``inf`` as an int or 10**400 as a float. The value is then kept
    (as a float when it is one), and ``check_number`` refuses it naming the option and its range."""
    def lenient(convert):
        def number(value):
            try:
                return convert(value)
            except OverflowError:
                try:
                    return float(value)
                except (OverflowError, TypeError, ValueError):
                    return value
        return number

    patched = copy.deepcopy(spec)
    for option in patched.values():
        if option.get("type") in _NUMBER_TYPES:
            option["type"] = lenient(_NUMBER_TYPES[option["type"]])
    return patched


def remove_leftovers() -> None:
    """What killed runs left in the system's temporary directory, removed at the start of every module: private key
    directories (``_http/settings.py``) and scratch etcd copies (``_etcd/scratch.py``) whose run is gone. A SIGKILL
    skips every cleanup of the run itself. A copy in another ``work_dir`` is removed by the next run using it."""
    try:
        remove_stale_private_dirs()
        scratch.remove_stale()
    except OSError:
        pass  # a cleanup that cannot be done never fails the task


class KubeUpgradeModule:
    """Wraps ``AnsibleModule``: ``connection=True`` adds the shared connection and ``endpoints`` options.

    ``empty_result`` is the result a module returns when it has found nothing (every key its RETURN
    documents as always returned): failures carry it too, filled with whatever was known.
    """

    def __init__(self, argument_spec: dict, connection: bool = True, endpoints: bool = True,
                 empty_result: Optional[dict] = None, **kwargs):
        requires_kubernetes = kwargs.pop("requires_kubernetes", True)
        spec = connection_argument_spec(endpoints=endpoints, **argument_spec) if connection else dict(argument_spec)
        try:
            self.module = AnsibleModule(argument_spec=spec, **kwargs)
        except OverflowError:  # a number too big for Ansible's own conversion: refused by _check_shared_options
            self.module = AnsibleModule(argument_spec=_numbers_as_given(spec), **kwargs)
        self._spec = spec
        remove_leftovers()
        self.empty_result = dict({"changed": False}, **(empty_result or {}))
        self._connection = connection
        self._warned = set()
        secrets = _url_secrets(self.module.params)
        if connection:
            secrets.extend(_kubeconfig_secrets(self.module.params.get("kubeconfig")))
        self.module.no_log_values.update(secrets)
        if connection and requires_kubernetes and not HAS_KUBERNETES:
            self.fail(missing_required_lib("kubernetes"), error={"type": "MissingLibrary", "library": "kubernetes"})
        self._client = None

    @property
    def params(self) -> dict:
        return self.module.params

    @property
    def check_mode(self) -> bool:
        return self.module.check_mode

    @property
    def diff_mode(self) -> bool:
        return self.module._diff

    @property
    def tmpdir(self) -> Optional[str]:
        """Ansible's per-task temporary directory on the managed host (removed after the task)."""
        return getattr(self.module, "tmpdir", None)

    def warn(self, message: str) -> None:
        """Each warning once per task: an observation repeated after a refresh says the same things again."""
        if message not in self._warned:
            self._warned.add(message)
            self.module.warn(message)

    def client(self) -> ApiClient:
        """Client for the connection's host (the load balancer, usually): for cluster-wide reads and writes."""
        if self._client is None:
            from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import (  # pylint: disable=import-outside-toplevel
                ApiClient,
            )

            self._client = ApiClient(ConnectionSettings.from_params(self.params))
        return self._client

    def endpoint_clients(self) -> list:
        """One client per apiserver in ``endpoints`` (default: the connection's host), sharing one pool."""
        urls = list(self.params.get("endpoints") or [])
        for index, url in enumerate(urls):
            if not str(url or "").strip():
                raise ConfigurationError(
                    f"endpoints #{index + 1} is empty: give the URL of every apiserver of its own (never the load "
                    "balancer's); an empty value is not replaced by the kubeconfig's server, which may be a load "
                    "balancer that hides an apiserver. Leave endpoints out to check the connection's host alone.")
        seen = []
        for url in urls:
            url = check_url("endpoints", url)
            if url not in seen:
                seen.append(url)
        base = self.client()
        if not seen:
            return [base]
        return [base.for_endpoint(url) for url in seen]

    def _check_shared_options(self) -> None:
        """Options with one meaning in every module, checked before the module's own code sends anything:
        no URL carries credentials; every number is in its range (``_validate.NUMBER_RANGES``); ``resources``
        are Kubernetes resource names; connection options and ``endpoints`` resolve."""
        for option, value in self.params.items():
            if option != "kubeconfig" and isinstance(value, (str, list)):
                check_no_credentials(option, value)
        for option, spec in self._spec.items():
            if spec.get("type") in _NUMBER_TYPES:
                check_number(option, self.params.get(option))
        if isinstance(self.params.get("resources"), list):
            check_resource_names("resources", self.params["resources"])
        if self._connection:
            self.endpoint_clients()

    def fail(self, msg: str, result: Optional[dict] = None, error: Optional[dict] = None) -> None:
        """The one way a module fails: ``msg``, an ``error`` object, and the success keys (empty or as known)."""
        payload = copy.deepcopy(self.empty_result)
        payload.update({k: v for k, v in (result or {}).items() if k not in _RESERVED_KEYS})
        payload["error"] = dict(error or {"type": "Failed"})
        self.module.fail_json(msg=msg, **payload)

    def run(self, action) -> None:
        """Call ``action(self) -> dict`` and exit with its result; fail once, clearly, on any collection error."""
        try:
            self._check_shared_options()
            result = action(self)
        except KubeUpgradeError as error:
            self.fail(str(error), result=error.result, error=_error_object(error))
        except Exception as error:  # a bug: still one clear failure, with the traceback for a report
            self.module.fail_json(
                msg=f"Unexpected internal error in kubeupgrade.storage: {type(error).__name__}: {error}. "
                "Please report it with the exception below.",
                exception=traceback.format_exc(), error={"type": "InternalError"}, **self.empty_result,
            )
        self.module.exit_json(**result)


def _error_object(error: KubeUpgradeError) -> dict:
    """``type`` (the error class: ConfigurationError, ApiError, ...) and the error's details."""
    return dict(error.details or {}, type=type(error).__name__)
