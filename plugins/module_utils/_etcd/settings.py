# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How to reach etcd and how to scan it, from the module options, checked before any request.

The etcd connection options (``connection_args.ETCD_ARG_SPEC``) mean the same in every module that reads etcd, and
the audit and the rehearsal take the same scan options (``page_size``, ``pages_per_second``, ``etcd_prefix``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional
from urllib.parse import urlsplit

from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError

MAX_PAGE_SIZE = 10000


@dataclass
class EtcdSettings:
    """How to reach etcd. Paths are the kubeadm ones by convention; verification is on by default."""

    endpoints: List[str]
    ca_cert: Optional[str] = None
    client_cert: Optional[str] = None
    client_key: Optional[str] = None
    validate_certs: bool = True
    timeout: float = 30.0

    @classmethod
    def from_params(cls, params: dict) -> EtcdSettings:
        """The etcd connection options checked (every module that reads etcd)."""
        settings = cls(endpoints=_check_endpoints(params.get("etcd_endpoints")), validate_certs=params.get("etcd_validate_certs", True),
                       ca_cert=check_readable_file("etcd_ca_cert", params.get("etcd_ca_cert")),
                       client_cert=check_readable_file("etcd_client_cert", params.get("etcd_client_cert")),
                       client_key=check_readable_file("etcd_client_key", params.get("etcd_client_key")),
                       timeout=float(30.0 if params.get("etcd_request_timeout") is None else params["etcd_request_timeout"]))
        if bool(settings.client_cert) != bool(settings.client_key):
            raise ConfigurationError("etcd_client_cert and etcd_client_key must be given together")
        if settings.timeout <= 0:
            raise ConfigurationError("etcd_request_timeout must be a positive number of seconds")
        return settings


def check_readable_file(option: str, path: Optional[str]) -> Optional[str]:
    """A path option of a module reading etcd (its certificates, the audit's encryption_config) that must name a file
    this user can read; None when not given."""
    if path is None:
        return None
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise ConfigurationError(f"{option}: {path} does not exist or is not a readable file")
    return path


def _check_endpoints(endpoints) -> list:
    if not endpoints:
        raise ConfigurationError("etcd_endpoints is empty: give etcd's client URL, e.g. https://10.0.0.11:2379 (kubeadm)")
    cleaned = []
    for url in endpoints:
        parts = urlsplit(str(url).strip())
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/"):
            raise ConfigurationError(f"etcd_endpoints: {url!r} is not an etcd client URL like https://10.0.0.11:2379")
        cleaned.append(f"{parts.scheme}://{parts.netloc}")
    return cleaned


@dataclass
class ScanOptions:
    """``pages_per_second`` 0 = no throttle, else at that rate once ``burst_pages`` pages are read; ``keys_only``
    yields empty values (etcd sends no values).

    ``transport``: ``auto`` (gRPC, the JSON gateway where gRPC cannot be spoken), ``grpc`` or ``gateway`` only.
    """

    prefix: str = "/registry/"
    page_size: int = 500
    pages_per_second: float = 0.0
    burst_pages: int = 0
    keys_only: bool = False
    transport: str = "auto"
    sleep: Callable[[float], None] = field(default=time.sleep)
    clock: Callable[[], float] = field(default=time.monotonic)

    @classmethod
    def from_params(cls, params: dict) -> ScanOptions:
        """``page_size``, ``pages_per_second`` and ``etcd_prefix`` checked (the audit's and the rehearsal's)."""
        page_size = 1000 if params.get("page_size") is None else params["page_size"]
        if not 1 <= page_size <= MAX_PAGE_SIZE:
            raise ConfigurationError(f"page_size must be between 1 and {MAX_PAGE_SIZE}, got {page_size}")
        rate = float(params.get("pages_per_second") or 0)
        if rate < 0:
            raise ConfigurationError("pages_per_second must be 0 (no throttle) or a positive number")
        burst = int(params.get("burst_pages") or 0)  # its range: _validate.NUMBER_RANGES
        prefix = params.get("etcd_prefix") or "/registry"
        if not prefix.strip("/"):
            raise ConfigurationError("etcd_prefix must name the apiserver's prefix (kube-apiserver --etcd-prefix, default /registry), not /")
        return cls(prefix=normalize_prefix(prefix), page_size=page_size, pages_per_second=rate, burst_pages=burst)


def normalize_prefix(prefix: str) -> str:
    """``/registry`` and ``/registry/`` scan the same keys; never ``/registryfoo``."""
    prefix = "/" + prefix.strip("/")
    return prefix + "/" if prefix != "/" else prefix
