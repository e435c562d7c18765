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
from typing import Optional

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiClient
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import (
    HAS_KUBERNETES,
    ConnectionSettings,
    check_url,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils._validate import check_resource_names
from ansible_collections.kubeupgrade.storage.plugins.module_utils.connection_args import connection_argument_spec
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError, KubeUpgradeError

_SECRET_KUBECONFIG_KEYS = ("token", "password", "client-key-data", "client-certificate-data")
# Keys Ansible gives a meaning to: a module's result never carries them as its own data.
_RESERVED_KEYS = ("msg", "failed", "skipped", "unreachable", "results", "diff", "error", "exception",
                  "invocation", "warnings", "deprecations")


def _kubeconfig_secrets(kubeconfig) -> list:
    """Secret values of an inline kubeconfig dict, so Ansible masks them in output and logs."""
    if not isinstance(kubeconfig, dict):
        return []
    found = []
    for entry in kubeconfig.get("users") or []:
        user = (entry.get("user") if isinstance(entry, dict) else None) or {}
        if isinstance(user, dict):
            found.extend(str(user[k]) for k in _SECRET_KUBECONFIG_KEYS if user.get(k))
    return found


class KubeUpgradeModule:
    """Wraps ``AnsibleModule``: ``connection=True`` adds the shared connection and ``endpoints`` options.

    ``empty_result`` is the result a module returns when it has found nothing (every key its RETURN
    documents as always returned): failures carry it too, filled with whatever was known.
    """

    def __init__(self, argument_spec: dict, connection: bool = True, endpoints: bool = True,
                 empty_result: Optional[dict] = None, **kwargs):
        requires_kubernetes = kwargs.pop("requires_kubernetes", True)
        spec = connection_argument_spec(endpoints=endpoints, **argument_spec) if connection else dict(argument_spec)
        self.module = AnsibleModule(argument_spec=spec, **kwargs)
        self.empty_result = dict({"changed": False}, **(empty_result or {}))
        self._connection = connection
        self._warned = set()
        if connection:
            for secret in _kubeconfig_secrets(self.module.params.get("kubeconfig")):
                self.module.no_log_values.add(secret)
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
        ``resources`` are Kubernetes resource names; connection options and ``endpoints`` resolve."""
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
