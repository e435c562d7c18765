# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The connection options every cluster-facing module shares, and those of every module reading etcd, defined once.

Names, aliases and ``K8S_AUTH_*`` environment fallbacks follow kubernetes.core, so an operator's
existing ``module_defaults`` and environment work unchanged. Modules deep-copy the spec and add
their own options.
"""

from __future__ import annotations

import copy

from ansible.module_utils.basic import env_fallback


def _env(*names):
    return (env_fallback, ["K8S_AUTH_" + n for n in names])


CONNECTION_ARG_SPEC = {
    "kubeconfig": {"type": "raw", "fallback": _env("KUBECONFIG")},
    "context": {"type": "str", "fallback": _env("CONTEXT")},
    "host": {"type": "str", "fallback": _env("HOST")},
    "api_key": {"type": "str", "no_log": True, "fallback": _env("API_KEY")},
    "username": {"type": "str", "fallback": _env("USERNAME")},
    "password": {"type": "str", "no_log": True, "fallback": _env("PASSWORD")},
    "validate_certs": {"type": "bool", "aliases": ["verify_ssl"], "fallback": _env("VALIDATE_CERTS", "VERIFY_SSL")},
    "ca_cert": {"type": "path", "aliases": ["ssl_ca_cert"], "fallback": _env("CA_CERT", "SSL_CA_CERT")},
    "client_cert": {"type": "path", "aliases": ["cert_file"], "fallback": _env("CLIENT_CERT", "CERT_FILE")},
    "client_key": {"type": "path", "aliases": ["key_file"], "no_log": False, "fallback": _env("CLIENT_KEY", "KEY_FILE")},
    "proxy": {"type": "str", "fallback": _env("PROXY")},
    "no_proxy": {"type": "str", "fallback": _env("NO_PROXY")},
    "proxy_headers": {
        "type": "dict",
        "options": {
            "proxy_basic_auth": {"type": "str", "no_log": True},
            "basic_auth": {"type": "str", "no_log": True},
            "user_agent": {"type": "str"},
        },
    },
    "impersonate_user": {"type": "str", "fallback": _env("IMPERSONATE_USER")},
    "impersonate_groups": {"type": "list", "elements": "str"},
    "request_timeout": {"type": "float", "default": 30.0},
}

ENDPOINTS_ARG_SPEC = {
    "endpoints": {"type": "list", "elements": "str", "default": []},
}


def connection_argument_spec(endpoints: bool = True, **extra) -> dict:
    """A fresh copy of the shared spec (plus ``endpoints``), extended with a module's own options."""
    spec = copy.deepcopy(CONNECTION_ARG_SPEC)
    if endpoints:
        spec.update(copy.deepcopy(ENDPOINTS_ARG_SPEC))
    spec.update(extra)
    return spec


# The etcd connection options (doc_fragments/etcd.py), shared by every module that reads etcd: the action group
# ``kubeupgrade.storage.etcd`` sets them once. A module's own meaning of an option (a required one) overrides it.
ETCD_ARG_SPEC = {
    "etcd_endpoints": {"type": "list", "elements": "str"},
    "etcd_ca_cert": {"type": "path"},
    "etcd_client_cert": {"type": "path"},
    "etcd_client_key": {"type": "path", "no_log": False},
    "etcd_validate_certs": {"type": "bool", "default": True},
    "etcd_request_timeout": {"type": "float", "default": 30},
}


def etcd_argument_spec(**extra) -> dict:
    """A fresh copy of the etcd connection spec, extended (or overridden) with a module's own options."""
    spec = copy.deepcopy(ETCD_ARG_SPEC)
    spec.update(extra)
    return spec
