# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja filter ``etcd_connection``: the operator's etcd settings as the options of the ``etcd`` action group (docs in
the .yml beside this one).

Every task that reads etcd (the audit, the snapshot, the rehearsal) takes its connection from this one filter through
``module_defaults``, so the settings are checked and kubeadm's client certificates defaulted in one place.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

# kubeadm's etcd client certificates on a control-plane host: the default over https when none is given.
KUBEADM_CERTS = {"etcd_ca_cert": "/etc/kubernetes/pki/etcd/ca.crt",
                 "etcd_client_cert": "/etc/kubernetes/pki/apiserver-etcd-client.crt",
                 "etcd_client_key": "/etc/kubernetes/pki/apiserver-etcd-client.key"}
# The settings' keys (kubeupgrade_etcd) -> the modules' connection options.
OPTIONS = {"endpoints": "etcd_endpoints", "ca_cert": "etcd_ca_cert", "client_cert": "etcd_client_cert",
           "client_key": "etcd_client_key", "validate_certs": "etcd_validate_certs", "request_timeout": "etcd_request_timeout"}
# Storage settings read by the tasks themselves, not connection options.
STORAGE_KEYS = ("prefix", "encryption_config")


def etcd_connection(settings, overrides=None):
    """``kubeupgrade_etcd | kubeupgrade.storage.etcd_connection`` -> ``{etcd_endpoints: [...], etcd_ca_cert: ..., ...}``;
    ``overrides``: a task's own options (``etcd_endpoints``, ...) that win over the settings."""
    settings = settings or {}
    if not isinstance(settings, dict):
        raise AnsibleFilterError(f"the etcd settings (kubeupgrade_etcd) must be a dictionary, got {type(settings).__name__}")
    unknown = sorted(set(settings) - set(OPTIONS) - set(STORAGE_KEYS))
    if unknown:
        raise AnsibleFilterError(f"the etcd settings (kubeupgrade_etcd) have unknown key(s) {', '.join(unknown)}; known: "
                                 + ", ".join(sorted(set(OPTIONS) | set(STORAGE_KEYS))))
    options = {OPTIONS[key]: value for key, value in settings.items() if key in OPTIONS and value not in (None, "")}
    options.update({key: value for key, value in (overrides or {}).items()
                    if key in OPTIONS.values() and value not in (None, "")})
    endpoints = options.get("etcd_endpoints")
    if isinstance(endpoints, str):
        options["etcd_endpoints"] = endpoints = [part.strip() for part in endpoints.split(",") if part.strip()]
    if endpoints and str(endpoints[0]).startswith("https://"):
        for option, path in KUBEADM_CERTS.items():
            options.setdefault(option, path)
    return options


class FilterModule:
    def filters(self):
        return {"etcd_connection": etcd_connection}
