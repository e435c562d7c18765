# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one place that speaks HTTP to apiservers.

Credentials come from the ``kubernetes`` package's loaders (kubeconfig, in-cluster service account)
so every auth flavour they support works here; requests go through one urllib3 pool shared by all
endpoints and return raw JSON, because discovery and migration need the documents as the server
wrote them, not typed models. Every failure becomes an ``ApiError`` or ``EndpointUnreachable`` that
names the apiserver, the request and the next step.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional
from urllib.parse import urlencode, urlsplit

from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import (
    ApiError,
    ConfigurationError,
    EndpointUnreachable,
    is_decode_failure,
)

try:
    import urllib3

    HAS_URLLIB3 = True
except ImportError:
    HAS_URLLIB3 = False

try:
    from kubernetes.client import Configuration
    from kubernetes.config import ConfigException, kube_config, load_incluster_config

    HAS_KUBERNETES = True
except ImportError:
    HAS_KUBERNETES = False

USER_AGENT = "kubeupgrade.storage"
DEFAULT_KUBECONFIG = "~/.kube/config"


@dataclass
class ConnectionSettings:
    """Resolved connection: where the (default) apiserver is and how to authenticate to any of them."""

    host: str
    verify: bool = True
    ca_cert: Optional[str] = None
    client_cert: Optional[str] = None
    client_key: Optional[str] = None
    tls_server_name: Optional[str] = None
    headers: Dict[str, str] = field(default_factory=dict)
    proxy: Optional[str] = None
    no_proxy: Optional[str] = None
    proxy_headers: Dict[str, str] = field(default_factory=dict)
    impersonate_groups: List[str] = field(default_factory=list)
    timeout: float = 30.0

    @classmethod
    def from_params(cls, params: dict) -> ConnectionSettings:
        """Resolve module parameters (already merged with ``K8S_AUTH_*`` fallbacks) like kubernetes.core:
        explicit options win over the kubeconfig, which wins over the in-cluster configuration."""
        config = _load_base_configuration(params)
        host = (params.get("host") or config.get("host") or "").rstrip("/")
        if not host:
            raise ConfigurationError(
                "No apiserver address: set 'host', or 'kubeconfig' (a file with a cluster server), "
                "or run inside a pod with a service account."
            )
        _check_url("host", host)
        headers = {"User-Agent": USER_AGENT}
        token = params.get("api_key")
        if token:
            headers["Authorization"] = token if token.lower().startswith("bearer ") else f"Bearer {token}"
        elif params.get("username") and params.get("password"):
            headers.update(urllib3.util.make_headers(basic_auth=f"{params['username']}:{params['password']}"))
        elif config.get("authorization"):
            headers["Authorization"] = config["authorization"]
        if params.get("impersonate_user"):
            headers["Impersonate-User"] = params["impersonate_user"]
        proxy_headers = {}
        for key, value in (params.get("proxy_headers") or {}).items():
            if value:
                proxy_headers.update(urllib3.util.make_headers(**{key: value}))
        verify = params.get("validate_certs")
        settings = cls(
            host=host,
            verify=config.get("verify_ssl", True) if verify is None else bool(verify),
            ca_cert=params.get("ca_cert") or config.get("ssl_ca_cert"),
            client_cert=params.get("client_cert") or config.get("cert_file"),
            client_key=params.get("client_key") or config.get("key_file"),
            tls_server_name=config.get("tls_server_name"),
            headers=headers,
            proxy=params.get("proxy") or config.get("proxy"),
            no_proxy=params.get("no_proxy"),
            proxy_headers=proxy_headers,
            impersonate_groups=list(params.get("impersonate_groups") or []),
            timeout=float(params.get("request_timeout") or 30.0),
        )
        for label, path in (("ca_cert", settings.ca_cert), ("client_cert", settings.client_cert), ("client_key", settings.client_key)):
            if path and not os.path.isfile(path):
                raise ConfigurationError(f"'{label}' file {path} does not exist or is not a file.")
        if bool(settings.client_cert) != bool(settings.client_key):
            raise ConfigurationError("'client_cert' and 'client_key' must be given together.")
        return settings


def _check_url(label: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"'{label}' must be an apiserver URL like https://10.0.0.11:6443, got {url!r}.")


def _load_base_configuration(params: dict) -> dict:
    """Fields from kubeconfig or in-cluster config; empty when explicit host + credentials suffice."""
    if not HAS_KUBERNETES:
        return {}
    kubeconfig = params.get("kubeconfig")
    context = params.get("context")
    explicit = params.get("host") and (params.get("api_key") or params.get("client_cert") or params.get("username"))
    if kubeconfig is None and not context:
        default = os.path.expanduser(os.environ.get("KUBECONFIG", DEFAULT_KUBECONFIG).split(os.pathsep)[0])
        if explicit:
            return {}
        if os.path.isfile(default):
            kubeconfig = default
        else:
            return _load_incluster(explicit=bool(params.get("host")))
    config = Configuration()
    try:
        if isinstance(kubeconfig, dict):
            _check_context(kubeconfig.get("contexts") or [], context, "the kubeconfig dictionary")
            kube_config.load_kube_config_from_dict(kubeconfig, context=context, client_configuration=config, persist_config=False)
        else:
            path = os.path.expanduser(str(kubeconfig or DEFAULT_KUBECONFIG))
            if not os.path.isfile(path):
                raise ConfigurationError(f"kubeconfig {path} does not exist. Set 'kubeconfig' to an existing file, or use 'host' and 'api_key'.")
            contexts = _contexts_of_file(path)
            _check_context(contexts, context, f"kubeconfig {path}")
            kube_config.load_kube_config(config_file=path, context=context, client_configuration=config, persist_config=False)
    except ConfigException as exc:
        raise ConfigurationError(f"Cannot use kubeconfig: {exc}. Check the file, or pass 'host' and 'api_key' instead.") from None
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigurationError(f"Cannot read kubeconfig: {exc}.") from None
    return _configuration_fields(config)


def _contexts_of_file(path: str) -> list:
    try:
        contexts, _current = kube_config.list_kube_config_contexts(config_file=path)
    except ConfigException:
        return []
    except Exception as exc:  # malformed YAML surfaces as yaml errors from the loader
        raise ConfigurationError(f"kubeconfig {path} is not a valid kubeconfig: {exc}") from None
    return contexts or []


def _check_context(contexts: list, context: Optional[str], where: str) -> None:
    if not context:
        return
    names = [c.get("name") for c in contexts if isinstance(c, dict)]
    if context not in names:
        raise ConfigurationError(
            f"{where} has no context named {context!r}; its contexts are: {', '.join(map(str, names)) or 'none'}. "
            "Set 'context' to one of them."
        )


def _load_incluster(explicit: bool) -> dict:
    config = Configuration()
    try:
        load_incluster_config(client_configuration=config)
    except ConfigException:
        if explicit:
            return {}
        raise ConfigurationError(
            "No kubeconfig found (looked at $KUBECONFIG and ~/.kube/config) and not running in a pod. "
            "Set 'kubeconfig', or 'host' with 'api_key' or client certificates."
        ) from None
    return _configuration_fields(config)


def _configuration_fields(config) -> dict:
    fields = {
        "host": config.host,
        "verify_ssl": config.verify_ssl,
        "ssl_ca_cert": config.ssl_ca_cert,
        "cert_file": config.cert_file,
        "key_file": config.key_file,
        "tls_server_name": getattr(config, "tls_server_name", None),
        "proxy": config.proxy,
    }
    auth = config.get_api_key_with_prefix("BearerToken") or config.get_api_key_with_prefix("authorization")
    if auth:
        fields["authorization"] = auth
    return {k: v for k, v in fields.items() if v is not None}


@dataclass
class ApiResponse:
    status: int
    headers: Dict[str, str]
    data: bytes

    def json(self):
        if not self.data:
            return {}
        return json.loads(self.data)


_POOLS: Dict[tuple, object] = {}


def _pool_for(settings: ConnectionSettings, maxsize: int):
    """One pool manager per distinct TLS/proxy setup, shared by every endpoint and client in this process."""
    key = (settings.verify, settings.ca_cert, settings.client_cert, settings.client_key, settings.proxy, maxsize)
    pool = _POOLS.get(key)
    if pool is None:
        tls = {
            "cert_reqs": "CERT_REQUIRED" if settings.verify else "CERT_NONE",
            "ca_certs": settings.ca_cert if settings.verify else None,
            "cert_file": settings.client_cert,
            "key_file": settings.client_key,
        }
        if settings.tls_server_name:
            tls["server_hostname"] = settings.tls_server_name
        if not settings.verify:
            tls["assert_hostname"] = False
        common = {"num_pools": 16, "maxsize": maxsize, "block": True, "retries": False}
        if settings.proxy:
            pool = urllib3.ProxyManager(settings.proxy, proxy_headers=settings.proxy_headers or None, **common, **tls)
        else:
            pool = urllib3.PoolManager(**common, **tls)
        _POOLS[key] = pool
    return pool


def _bypasses_proxy(host: str, no_proxy: Optional[str]) -> bool:
    if not no_proxy:
        return False
    hostname = urlsplit(host).hostname or ""
    for entry in (e.strip() for e in no_proxy.split(",")):
        if entry and (hostname == entry or hostname.endswith("." + entry.lstrip("."))):
            return True
    return False


_NEXT_STEPS = {
    401: "The apiserver rejected the credentials: check 'api_key', the kubeconfig user, or client certificates.",
    403: "The user is not allowed to do this: grant it with RBAC (see the collection README for the required rules).",
    404: "The resource or API group is not served by this apiserver.",
    409: "The object changed while it was being written.",
    410: "The list or continue token expired; start the list again.",
    422: "The apiserver refused the object as invalid.",
    429: "The apiserver is overloaded; retry later.",
    503: "The apiserver is not ready; retry once it is.",
}


class ApiClient:
    """Requests against one apiserver endpoint; ``for_endpoint`` reuses credentials and the pool."""

    def __init__(self, settings: ConnectionSettings, endpoint: Optional[str] = None, maxsize: int = 10):
        if not HAS_URLLIB3:
            raise ConfigurationError("The 'urllib3' Python library is required (it comes with the 'kubernetes' library).")
        self.settings = settings
        self.endpoint = (endpoint or settings.host).rstrip("/")
        _check_url("endpoints", self.endpoint)
        self.maxsize = maxsize
        self._pool = _pool_for(settings, maxsize)
        self._direct = _bypasses_proxy(self.endpoint, settings.no_proxy)
        if self._direct and settings.proxy:
            self._pool = _pool_for(ConnectionSettings(**{**settings.__dict__, "proxy": None}), maxsize)

    def for_endpoint(self, endpoint: str) -> ApiClient:
        return ApiClient(self.settings, endpoint, self.maxsize)

    def request(self, method: str, path: str, query=None, body=None, content_type: str = "application/json",
                accept: str = "application/json", timeout: Optional[float] = None) -> ApiResponse:
        """Send one request; return the response for 2xx, raise ``ApiError``/``EndpointUnreachable`` otherwise."""
        url = self.endpoint + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        headers = urllib3.HTTPHeaderDict(self.settings.headers)
        headers["Accept"] = accept
        for group in self.settings.impersonate_groups:
            headers.add("Impersonate-Group", group)
        payload = None
        if body is not None:
            payload = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode("utf-8")
            headers["Content-Type"] = content_type
        try:
            raw = self._pool.request(method, url, body=payload, headers=headers,
                                     timeout=urllib3.Timeout(total=timeout or self.settings.timeout),
                                     preload_content=True, redirect=False)
        except urllib3.exceptions.SSLError as exc:
            raise EndpointUnreachable(
                f"TLS to {self.endpoint} failed ({_short(exc)}). Check 'ca_cert' / the kubeconfig's certificate-authority, "
                "or that the endpoint URL matches the apiserver's certificate.",
                endpoint=self.endpoint, method=method, path=path) from None
        except urllib3.exceptions.HTTPError as exc:
            raise EndpointUnreachable(
                f"apiserver {self.endpoint} did not answer {method} {path}: {_short(exc)}. "
                "Check that the endpoint URL is right and the apiserver is running.",
                endpoint=self.endpoint, method=method, path=path) from None
        response = ApiResponse(raw.status, dict(raw.headers), raw.data or b"")
        if raw.status >= 400:
            raise self._error(method, path, response)
        return response

    def _error(self, method: str, path: str, response: ApiResponse) -> ApiError:
        reason, message, body = "", "", None
        try:
            body = response.json()
        except ValueError:
            message = response.data.decode("utf-8", "replace").strip()
        if isinstance(body, dict):
            reason = body.get("reason") or ""
            message = body.get("message") or message
        retry_after = None
        header = response.headers.get("Retry-After") or response.headers.get("retry-after")
        if header:
            try:
                retry_after = float(header)
            except ValueError:
                retry_after = None
        if retry_after is None and isinstance(body, dict):
            retry_after = (body.get("details") or {}).get("retryAfterSeconds")
        if is_decode_failure(response.status, message):
            hint = ("The object is stored in etcd in a version this apiserver cannot decode; "
                    "no API call can read, rewrite or delete it. Restore it with an apiserver release that can read it, "
                    "or remove the key from etcd.")
        else:
            hint = _NEXT_STEPS.get(response.status, "")
        text = f"{method} {path} on apiserver {self.endpoint} failed: HTTP {response.status}"
        text += f" {reason}" if reason else ""
        text += f": {message}" if message else ""
        text += f". {hint}" if hint else ""
        return ApiError(text, endpoint=self.endpoint, method=method, path=path, status=response.status,
                        reason=reason, api_message=message, retry_after=retry_after, body=body)

    def get(self, path: str, query=None, accept: str = "application/json"):
        return self.request("GET", path, query=query, accept=accept).json()

    def get_text(self, path: str, query=None) -> str:
        return self.request("GET", path, query=query, accept="text/plain, application/json").data.decode("utf-8", "replace")

    def post(self, path: str, body, query=None):
        return self.request("POST", path, query=query, body=body).json()

    def put(self, path: str, body, query=None):
        return self.request("PUT", path, query=query, body=body).json()

    def patch(self, path: str, body, content_type: str = "application/merge-patch+json", query=None):
        return self.request("PATCH", path, query=query, body=body, content_type=content_type).json()

    def delete(self, path: str, query=None, body=None):
        return self.request("DELETE", path, query=query, body=body).json()


def _short(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc)[:300]
