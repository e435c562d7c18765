# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shell every module of the collection runs in.

It merges the shared connection options, reports missing Python libraries, keeps kubeconfig
secrets out of logs, builds one client per apiserver endpoint, and turns any ``KubeUpgradeError``
into exactly one ``fail_json`` with an operator-facing message, so modules stay thin.
"""

from __future__ import annotations

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.kubeupgrade.storage.plugins.module_utils import client as client_mod
from ansible_collections.kubeupgrade.storage.plugins.module_utils.connection_args import connection_argument_spec
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import KubeUpgradeError

_SECRET_KUBECONFIG_KEYS = ("token", "password", "client-key-data", "client-certificate-data")


def _kubeconfig_secrets(kubeconfig) -> list:
    """Secret values of an inline kubeconfig dict, so Ansible masks them in output and logs."""
    if not isinstance(kubeconfig, dict):
        return []
    found = []
    for entry in kubeconfig.get("users") or []:
        user = (entry or {}).get("user") or {}
        found.extend(str(user[k]) for k in _SECRET_KUBECONFIG_KEYS if user.get(k))
    return found


class KubeUpgradeModule:
    """Wraps ``AnsibleModule``: ``connection=True`` adds the shared connection and ``endpoints`` options."""

    def __init__(self, argument_spec: dict, connection: bool = True, endpoints: bool = True,
                 requires_kubernetes: bool = True, **kwargs):
        spec = connection_argument_spec(endpoints=endpoints, **argument_spec) if connection else dict(argument_spec)
        self.module = AnsibleModule(argument_spec=spec, **kwargs)
        if connection:
            for secret in _kubeconfig_secrets(self.module.params.get("kubeconfig")):
                self.module.no_log_values.add(secret)
        if connection and requires_kubernetes and not client_mod.HAS_KUBERNETES:
            self.module.fail_json(msg=missing_required_lib("kubernetes"))
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

    def warn(self, message: str) -> None:
        self.module.warn(message)

    def client(self) -> client_mod.ApiClient:
        """Client for the connection's host (the load balancer, usually): for cluster-wide reads and writes."""
        if self._client is None:
            settings = client_mod.ConnectionSettings.from_params(self.params)
            self._client = client_mod.ApiClient(settings)
        return self._client

    def endpoint_clients(self) -> list:
        """One client per apiserver in ``endpoints`` (default: the connection's host), sharing one pool."""
        base = self.client()
        urls = [u for u in (self.params.get("endpoints") or []) if u]
        if not urls:
            return [base]
        seen = []
        for url in urls:
            url = url.rstrip("/")
            if url not in seen:
                seen.append(url)
        return [base.for_endpoint(url) for url in seen]

    def run(self, action) -> None:
        """Call ``action(self) -> dict`` and exit with its result; fail once, clearly, on any collection error."""
        try:
            result = action(self)
        except KubeUpgradeError as error:
            self.module.fail_json(msg=str(error), **_failure_details(error))
        except Exception as error:  # a bug: still one clear failure, with the traceback for a report
            self.module.fail_json(
                msg=f"Unexpected internal error in kubeupgrade.storage: {type(error).__name__}: {error}. "
                "Please report it with the exception below.",
                exception=traceback.format_exc(),
            )
        self.module.exit_json(**result)


def _failure_details(error: KubeUpgradeError) -> dict:
    details = dict(error.details or {})
    return {"error": details} if details else {}
