# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the apiservers are and how to authenticate: connection options resolved and validated.

A kubeconfig with a server, certificates and a token is read here; anything else (exec plugins, auth
providers, basic auth, the in-cluster service account) goes through the ``kubernetes`` package's
loaders, so every auth flavour they support works. Every option is checked here, before any request:
a wrong type, range, URL or file is one ``ConfigurationError`` naming the option (or the kubeconfig)
and the next step, never a traceback from a library.
"""

from __future__ import annotations

import atexit
import base64
import glob
import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional
from urllib.parse import urlsplit

from ansible_collections.kubeupgrade.storage.plugins.module_utils._validate import (
    NUMBER_RANGES,
    check_no_credentials,
    check_number,
)
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

# The kubernetes package's loaders cover every kubeconfig flavour (exec plugins, auth providers), but
# importing them costs about half a second of CPU per module run; kubeconfigs with only a server,
# certificates and a token are read here instead, and the loaders are imported when one is needed.
HAS_KUBERNETES = importlib.util.find_spec("kubernetes") is not None


def _kubernetes():
    """(Configuration, ConfigException, kube_config, load_incluster_config), imported on first use."""
    from kubernetes.client import Configuration  # pylint: disable=import-outside-toplevel
    from kubernetes.config import ConfigException, kube_config, load_incluster_config  # pylint: disable=import-outside-toplevel

    return Configuration, ConfigException, kube_config, load_incluster_config


USER_AGENT = "kubeupgrade.storage"
DEFAULT_KUBECONFIG = "~/.kube/config"
DEFAULT_TIMEOUT = 30.0


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
    timeout: float = DEFAULT_TIMEOUT

    @classmethod
    def from_params(cls, params: dict) -> ConnectionSettings:
        """Resolve module parameters (already merged with ``K8S_AUTH_*`` fallbacks) like kubernetes.core:
        explicit options win over the kubeconfig, which wins over the in-cluster configuration."""
        timeout = check_timeout("request_timeout", params.get("request_timeout"))
        if params.get("proxy"):
            check_proxy("proxy", params["proxy"])
        config = _load_base_configuration(params)
        host = _resolve_host(params, config)
        verify = params.get("validate_certs")
        settings = cls(
            host=host,
            verify=config.get("verify_ssl", True) if verify is None else bool(verify),
            ca_cert=params.get("ca_cert") or config.get("ssl_ca_cert"),
            client_cert=params.get("client_cert") or config.get("cert_file"),
            client_key=params.get("client_key") or config.get("key_file"),
            tls_server_name=config.get("tls_server_name"),
            headers=_auth_headers(params, config),
            proxy=params.get("proxy") or config.get("proxy"),
            no_proxy=params.get("no_proxy"),
            proxy_headers=_proxy_headers(params.get("proxy_headers")),
            impersonate_groups=list(params.get("impersonate_groups") or []),
            timeout=timeout,
        )
        _check_files(settings)
        return settings


def check_timeout(option: str, value) -> float:
    """Seconds for one request: above zero and at most an hour (``_validate.NUMBER_RANGES``); ``None`` means
    the default. A huge value would overflow the socket's timeout."""
    if value is None:
        return DEFAULT_TIMEOUT
    return float(check_number(option, value, NUMBER_RANGES["request_timeout"]))


def _url_problem(url, schemes) -> str:
    """Why ``url`` is not an absolute URL with one of ``schemes``, a host and a valid port ('' if it is)."""
    if not isinstance(url, str):
        return f"it is a {type(url).__name__}, not a string"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a port that is not a number in 0-65535)
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in schemes:
        return f"the scheme must be {' or '.join(schemes)}"
    if not parts.hostname:
        return "it has no host name"
    return ""


def check_url(option: str, url, where: str = "") -> str:
    """An apiserver URL such as https://10.0.0.11:6443; blame ``where`` (a kubeconfig) if it came from one.

    A URL with ``user:password@`` is refused (the message shows it without them): the apiserver does not
    read credentials from the URL, and the URL is shown in every result and report."""
    check_no_credentials(option, url, where=f"The cluster server in {where}" if where else "", one_url=True)
    problem = _url_problem(url, ("https", "http"))
    if problem:
        if where:
            raise ConfigurationError(f"The cluster server in {where} must be an apiserver URL like https://10.0.0.11:6443, "
                                     f"got {url!r} ({problem}). Fix the server URL in {where}.")
        raise ConfigurationError(f"'{option}' must be an apiserver URL like https://10.0.0.11:6443, got {url!r} ({problem}).")
    return url.rstrip("/")


def check_proxy(option: str, url, where: str = "") -> str:
    """A proxy URL such as http://proxy.example.com:3128, without credentials (urllib3 does not send them
    from the URL: they go in ``proxy_headers``)."""
    source = f"The proxy-url in {where}" if where else f"'{option}'"
    check_no_credentials(option, url, where=source, one_url=True)
    problem = _url_problem(url, ("http", "https"))
    if problem:
        raise ConfigurationError(f"{source} is not a proxy URL ({problem}): got {url!r}. "
                                 "Use a URL like http://proxy.example.com:3128.")
    return url


def _resolve_host(params: dict, config: dict) -> str:
    if params.get("host"):
        return check_url("host", params["host"])
    host = config.get("host")
    if not host:
        raise ConfigurationError(
            "No apiserver address: set 'host', or 'kubeconfig' (a file with a cluster server), "
            "or run inside a pod with a service account."
        )
    return check_url("host", host, where=config.get("source") or "the kubeconfig")


def _auth_headers(params: dict, config: dict) -> Dict[str, str]:
    headers = {"User-Agent": USER_AGENT}
    token = params.get("api_key")
    if token:
        headers["Authorization"] = token if token.lower().startswith("bearer ") else f"Bearer {token}"
    elif params.get("username") and params.get("password"):
        credentials = f"{params['username']}:{params['password']}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(credentials).decode("ascii")
    elif config.get("authorization"):
        headers["Authorization"] = config["authorization"]
    if params.get("impersonate_user"):
        headers["Impersonate-User"] = params["impersonate_user"]
    return headers


def _proxy_headers(options) -> Dict[str, str]:
    """Headers for the proxy (kubernetes.core's ``proxy_headers``), made by urllib3, which proxied requests use."""
    headers: Dict[str, str] = {}
    for key, value in (options or {}).items():
        if value:
            import urllib3  # pylint: disable=import-outside-toplevel

            headers.update(urllib3.util.make_headers(**{key: value}))
    return headers


def _check_files(settings: ConnectionSettings) -> None:
    for label, path in (("ca_cert", settings.ca_cert), ("client_cert", settings.client_cert), ("client_key", settings.client_key)):
        if path and not os.path.isfile(path):
            raise ConfigurationError(f"'{label}' file {path} does not exist or is not a file.")
        if path and not os.access(path, os.R_OK):
            raise ConfigurationError(f"'{label}' file {path} is not readable by this user.")
    if bool(settings.client_cert) != bool(settings.client_key):
        raise ConfigurationError("'client_cert' and 'client_key' must be given together.")
    if settings.proxy:
        check_proxy("proxy", settings.proxy, where="the kubeconfig")


# --- kubeconfig and in-cluster configuration -------------------------------------------------------

_KUBECONFIG_LISTS = (("clusters", "cluster"), ("contexts", "context"), ("users", "user"))
_TYPE_WORDS = {str: "a string", bool: "true or false", dict: "a mapping", list: "a list"}
# The type of every field of a kubeconfig that this file or the kubernetes loader reads (others are ignored).
_KUBECONFIG_TOP_FIELDS = {"apiVersion": str, "kind": str, "current-context": str, "preferences": dict, "extensions": list}
_KUBECONFIG_FIELDS = {
    "cluster": {"server": str, "certificate-authority": str, "certificate-authority-data": str,
                "insecure-skip-tls-verify": bool, "tls-server-name": str, "proxy-url": str, "disable-compression": bool,
                "extensions": list},
    "context": {"cluster": str, "user": str, "namespace": str, "extensions": list},
    "user": {"token": str, "tokenFile": str, "client-certificate": str, "client-certificate-data": str, "client-key": str,
             "client-key-data": str, "username": str, "password": str, "as": str, "as-uid": str, "as-groups": list,
             "as-user-extra": dict, "auth-provider": dict, "exec": dict, "extensions": list},
}


def _a(value) -> str:
    """``a list``, ``an int``: the type of a value, never the value (it may be a secret)."""
    name = type(value).__name__
    return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


def _check_fields(mapping: dict, fields: dict, where: str, path: str) -> None:
    for key, kind in fields.items():
        value = mapping.get(key)
        if value is not None and not isinstance(value, kind):
            name = f"{path}{key}" if path else f"'{key}'"
            raise ConfigurationError(f"{where}: {name} must be {_TYPE_WORDS[kind]}, got {_a(value)}.")


def check_kubeconfig_shape(doc, where: str) -> None:
    """Types the kubernetes loader and this file assume without checking: lists of named entries holding
    mappings, and the type of every field read from them (a string ``server``, a boolean
    ``insecure-skip-tls-verify``...).

    The loader fails on a wrong type with a bare TypeError ("'int' object is not iterable") or, worse,
    uses it (the string "false" as a true ``insecure-skip-tls-verify``, a list as a token), so the shape
    is checked first and the message names the kubeconfig and the field, never the field's value.
    """
    if not isinstance(doc, dict):
        raise ConfigurationError(f"{where} must be a mapping (a kubeconfig document), got {_a(doc)}.")
    for key, inner in _KUBECONFIG_LISTS:
        entries = doc.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise ConfigurationError(f"{where}: '{key}' must be a list of named {inner} entries, got {_a(entries)}.")
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ConfigurationError(f"{where}: {key}[{index}] must be a mapping with a string 'name'.")
            body = entry.get(inner)
            if body is None:
                continue
            if not isinstance(body, dict):
                raise ConfigurationError(f"{where}: {key}[{index}].{inner} must be a mapping, got {_a(body)}.")
            _check_fields(body, _KUBECONFIG_FIELDS[inner], where, f"{key}[{index}].{inner}.")
    _check_fields(doc, _KUBECONFIG_TOP_FIELDS, where, "")


def _read_kubeconfig_file(path: str) -> dict:
    """The parsed document of a kubeconfig file, or a ConfigurationError saying why it is not one."""
    if not os.path.isfile(path):
        raise ConfigurationError(f"kubeconfig {path} does not exist. Set 'kubeconfig' to an existing file, or use 'host' and 'api_key'.")
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except OSError as exc:
        raise ConfigurationError(f"kubeconfig {path} cannot be read: {exc.strerror or exc}.") from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"kubeconfig {path} is not a text file (not UTF-8); point 'kubeconfig' at a kubeconfig YAML file.") from None
    try:
        import yaml  # pylint: disable=import-outside-toplevel  # here: a module that reads no kubeconfig never pays its import
    except ImportError:
        return {}
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"kubeconfig {path} is not valid YAML: {exc}") from None
    check_kubeconfig_shape(doc, f"kubeconfig {path}")
    return doc


def _default_kubeconfig() -> str:
    return os.path.expanduser(os.environ.get("KUBECONFIG", DEFAULT_KUBECONFIG).split(os.pathsep)[0])


def _load_base_configuration(params: dict) -> dict:
    """Fields from kubeconfig or in-cluster config; empty when explicit host + credentials suffice."""
    if not HAS_KUBERNETES:
        return {}
    kubeconfig = params.get("kubeconfig")
    context = params.get("context")
    explicit = params.get("host") and (params.get("api_key") or params.get("client_cert") or params.get("username"))
    if kubeconfig is None and not context:
        if explicit:
            return {}
        if not os.path.isfile(_default_kubeconfig()):
            return _load_incluster(explicit=bool(params.get("host")))
        kubeconfig = _default_kubeconfig()
    own = bool(params.get("api_key") or params.get("client_cert") or params.get("username"))  # the user's plugin is not used
    if isinstance(kubeconfig, dict):
        return _load_kubeconfig_dict(kubeconfig, context, own)
    if kubeconfig is not None and not isinstance(kubeconfig, str):
        raise ConfigurationError(f"'kubeconfig' must be a file path or a kubeconfig mapping, got {_a(kubeconfig)}.")
    return _load_kubeconfig_file(os.path.expanduser(kubeconfig or DEFAULT_KUBECONFIG), context, own)


_SIMPLE_CLUSTER_KEYS = {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify",
                        "tls-server-name", "proxy-url", "extensions"}
_SIMPLE_USER_KEYS = {"token", "client-certificate", "client-certificate-data", "client-key", "client-key-data", "extensions"}


def _named(doc: dict, key: str, name) -> Optional[dict]:
    for entry in doc.get(key) or []:
        if entry.get("name") == name:
            return entry.get(key[:-1]) or {}
    return None


# Key material from a kubeconfig's ``*-data`` fields never goes to a shared temporary directory, where a killed
# run (SIGKILL skips atexit) would leave a private key, cluster-admin on kubeadm. On Linux it lives in an anonymous
# memory file (memfd) opened by path as ``/proc/self/fd/<n>``: every reader (ssl, urllib3) runs in this process, and the
# file ends with it. Elsewhere, and for the kubernetes loaders' own files, it goes to a private directory (0700) named
# with this process's pid, which the next module run removes once that pid is gone (``module.remove_leftovers``).
KEYS_PREFIX = "kubeupgrade-keys-"
_HELD: Dict[bytes, str] = {}  # memory files kept open for the life of the process (their paths stay valid), by content
_PRIVATE: List[str] = []


def _data_file(data: str, suffix: str) -> str:
    """A ``*-data`` field as a path only this process can open (a memory file; else a file in the private directory)."""
    content = base64.b64decode(data)  # before anything exists: data that is not base64 leaves nothing behind
    if content in _HELD:
        return _HELD[content]
    fd = _memory_file(suffix)
    if fd is not None:
        _write_all(fd, content)
        _HELD[content] = f"/proc/self/fd/{fd}"
        return _HELD[content]
    handle, path = tempfile.mkstemp(dir=private_dir(), suffix=suffix)
    with os.fdopen(handle, "wb") as out:
        out.write(content)
    return path


def _memory_file(suffix: str) -> Optional[int]:
    """An anonymous memory file (close-on-exec), or None where there is none (not Linux, or a sandbox forbids it)."""
    create = getattr(os, "memfd_create", None)
    if create is None or not os.path.isdir("/proc/self/fd"):
        return None
    try:
        return create("kubeupgrade" + suffix)
    except OSError:
        return None


def _write_all(fd: int, content: bytes) -> None:
    view = memoryview(content)
    while view:
        view = view[os.write(fd, view):]


def private_dir() -> str:
    """This process's private directory for key material (made once, removed at exit and by a later run if killed)."""
    if not _PRIVATE:
        remove_stale_private_dirs()
        path = tempfile.mkdtemp(prefix=f"{KEYS_PREFIX}{os.getpid()}-")
        atexit.register(shutil.rmtree, path, True)
        _PRIVATE.append(path)
    return _PRIVATE[0]


def remove_stale_private_dirs(tmp_dir: Optional[str] = None) -> List[str]:
    """Remove the private key directories of runs that are gone (killed: atexit did not run). Returns them."""
    removed = []
    for path in glob.glob(os.path.join(tmp_dir or tempfile.gettempdir(), KEYS_PREFIX + "*")):
        pid = os.path.basename(path)[len(KEYS_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or process_running(int(pid)) or not os.path.isdir(path) or os.stat(path).st_uid != os.getuid():
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def process_running(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts too): a leftover is removed only once its run is
    gone (here, and the rehearsal's scratch workspaces)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _file_field(entry: dict, key: str, base_dir: str, suffix: str) -> Optional[str]:
    if entry.get(f"{key}-data"):
        return _data_file(entry[f"{key}-data"], suffix)
    if entry.get(key):
        return os.path.join(base_dir, os.path.expanduser(str(entry[key])))
    return None


def _simple_fields(doc: dict, context: Optional[str], base_dir: str) -> Optional[dict]:
    """The connection of a kubeconfig that needs no plugin (server, CA, client certificate, token), read
    without the kubernetes loaders; None when it needs them (exec, auth-provider, basic auth, token files)."""
    name = context or doc.get("current-context")
    ctx = _named(doc, "contexts", name) if name else None
    cluster = _named(doc, "clusters", (ctx or {}).get("cluster"))
    user = _named(doc, "users", (ctx or {}).get("user")) or {}
    if ctx is None or cluster is None or not cluster.get("server"):
        return None
    if set(cluster) - _SIMPLE_CLUSTER_KEYS or set(user) - _SIMPLE_USER_KEYS:
        return None
    try:
        fields = {"host": str(cluster["server"]).rstrip("/"), "verify_ssl": not cluster.get("insecure-skip-tls-verify", False),
                  "ssl_ca_cert": _file_field(cluster, "certificate-authority", base_dir, ".crt"),
                  "cert_file": _file_field(user, "client-certificate", base_dir, ".crt"),
                  "key_file": _file_field(user, "client-key", base_dir, ".key"),
                  "tls_server_name": cluster.get("tls-server-name"), "proxy": cluster.get("proxy-url")}
    except (ValueError, TypeError) as exc:  # binascii.Error is a ValueError
        raise ConfigurationError(f"kubeconfig: a certificate or key '-data' field is not base64: {exc}.") from None
    if user.get("token"):
        fields["authorization"] = f"Bearer {user['token']}"
    return {k: v for k, v in fields.items() if v is not None}


def _load_kubeconfig_dict(doc: dict, context: Optional[str], own_credentials: bool = False) -> dict:
    where = "the 'kubeconfig' mapping"
    check_kubeconfig_shape(doc, where)
    _check_context(doc.get("contexts") or [], context, where)
    simple = _simple_fields(doc, context, os.getcwd())
    if simple is not None:
        return dict(simple, source=where)
    Configuration, _unused, kube_config, _unused2 = _kubernetes()
    config = Configuration()
    with _kubeconfig_errors(where) as errors:
        kube_config.load_kube_config_from_dict(doc, context=context, client_configuration=config, persist_config=False,
                                               temp_file_path=private_dir())
    fields = _configuration_fields(config)
    if not own_credentials:
        check_plugin_credential(doc, context, fields, where, errors.handler.messages)
    return dict(fields, source=where)


def _load_kubeconfig_file(path: str, context: Optional[str], own_credentials: bool = False) -> dict:
    where = f"kubeconfig {path}"
    doc = _read_kubeconfig_file(path)
    _check_context((doc or {}).get("contexts") or [], context, where)
    simple = _simple_fields(doc, context, os.path.dirname(path)) if isinstance(doc, dict) else None
    if simple is not None:
        return dict(simple, source=where)
    Configuration, _unused, kube_config, _unused2 = _kubernetes()
    config = Configuration()
    with _kubeconfig_errors(where) as errors:
        kube_config.load_kube_config(config_file=path, context=context, client_configuration=config, persist_config=False,
                                     temp_file_path=private_dir())
    fields = _configuration_fields(config)
    if not own_credentials:
        check_plugin_credential(doc, context, fields, where, errors.handler.messages)
    return dict(fields, source=where)


class _LoggedErrors(logging.Handler):
    """What the kubernetes loaders log instead of raising (an exec plugin that is missing or fails)."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: List[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _selected_user(doc, context: Optional[str]) -> dict:
    if not isinstance(doc, dict):
        return {}
    ctx = _named(doc, "contexts", context or doc.get("current-context")) or {}
    return _named(doc, "users", ctx.get("user")) or {}


def check_plugin_credential(doc, context: Optional[str], fields: dict, where: str, logged: List[str]) -> None:
    """A kubeconfig user that authenticates through an exec plugin or an auth-provider and got no credential from
    it: one error naming the user, the plugin and the cause. The loaders log such failures and go on, and the
    requests would then go out anonymous, to be refused with a 401 or 403 that blames RBAC."""
    user = _selected_user(doc, context)
    if not (user.get("exec") or user.get("auth-provider")) or fields.get("authorization") or fields.get("cert_file"):
        return
    why = f" ({'; '.join(dict.fromkeys(m.strip() for m in logged if m.strip()))})" if logged else ""
    if user.get("exec"):
        command = (user["exec"] or {}).get("command", "?")
        raise ConfigurationError(f"{where}: the user's exec credential plugin {command!r} gave no credential{why}. Check that "
                                 "it is installed and runs on the host running the module (as the same user), or give "
                                 "'api_key' or another kubeconfig user.")
    name = (user.get("auth-provider") or {}).get("name", "?")
    raise ConfigurationError(f"{where}: the user's auth-provider {name!r} gave no credential{why}: the kubernetes Python "
                             "client supports only 'azure', 'gcp' and 'oidc' (each with its own settings). Use an exec "
                             "plugin, a token ('api_key') or a client certificate instead.")


class _kubeconfig_errors:
    """Turn the loader's exceptions into one ConfigurationError naming the kubeconfig; keep what it logged."""

    def __init__(self, where: str):
        self.where = where
        self.handler = _LoggedErrors()

    def __enter__(self):
        logging.getLogger().addHandler(self.handler)
        return self

    def __exit__(self, kind, exc, _traceback):
        logging.getLogger().removeHandler(self.handler)
        if exc is None:
            return False
        if isinstance(exc, ConfigurationError):
            return False
        if HAS_KUBERNETES and isinstance(exc, _kubernetes()[1]):
            raise ConfigurationError(f"Cannot use {self.where}: {exc}. Check it, or pass 'host' and 'api_key' instead.") from None
        if isinstance(exc, (OSError, ValueError, TypeError, AttributeError, KeyError)):
            raise ConfigurationError(f"Cannot read {self.where}: {type(exc).__name__}: {exc}. Check its fields.") from None
        return False


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
    Configuration, ConfigException, _unused, load_incluster_config = _kubernetes()
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
    return dict(_configuration_fields(config), source="the in-cluster service account configuration")


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
