# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What ``storage_version_audit`` calls: validate every option, scan etcd once, fold, report."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Set, Tuple

from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import model
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import envelope
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.client import EtcdError, EtcdReader
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import EtcdSettings, ScanOptions, check_readable_file
from ansible_collections.kubeupgrade.storage.plugins.module_utils._observe.target_crds import load_target_crds
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles


@dataclass
class AuditRequest:
    settings: EtcdSettings
    scan: ScanOptions
    options: model.AuditOptions
    encryption_keys: Optional[envelope.EncryptionKeys]
    target_release: Optional[str] = None  # the release the audit judged for (its profile's name), if any


def _readable(params: dict) -> Tuple[Optional[str], Optional[Dict[str, Set[str]]]]:
    """The target release's name (as its profile names it) and what a target reads, per resource: the release's
    built-ins, the target CRD manifests' custom resources (every version a manifest lists is decodable), then
    ``readable_versions`` over both."""
    readable, target = None, None
    release = params.get("target_release")
    if release:
        profile = load_profiles(params.get("profiles_file"), params.get("profiles")).get(release)
        readable = {name: entry.readable_versions() for name, entry in profile.resources.items()}
        target = profile.release
    if params.get("target_crds"):
        readable = dict(readable or {})
        for name, crd in load_target_crds(params["target_crds"]).items():
            readable[name] = {version.name for version in crd.versions}
    given = params.get("readable_versions")
    if given is not None:
        readable = dict(readable or {}, **_readable_versions(given))
    return target, readable


def _readable_versions(given) -> Dict[str, Set[str]]:
    """The ``readable_versions`` option, checked: resource -> versions (one version as a string: the agreement's
    ``storage_versions``)."""
    if not isinstance(given, dict):
        raise ConfigurationError("readable_versions must map resource names to version lists, e.g. {widgets.example.com: [v1]}")
    readable = {}
    for name, versions in given.items():
        versions = [versions] if isinstance(versions, str) else versions
        if not isinstance(versions, list) or not all(isinstance(v, str) and v for v in versions):
            raise ConfigurationError(f"readable_versions[{name}] must be a version or a list of versions such as [v1beta1, v1]")
        readable[str(name)] = set(versions)
    return readable


def _encryption_keys(path: Optional[str]) -> Optional[envelope.EncryptionKeys]:
    if not check_readable_file("encryption_config", path):
        return None
    try:
        import yaml  # pylint: disable=import-outside-toplevel  # here: only an encryption_config is YAML
    except ImportError:  # pragma: no cover - PyYAML comes with ansible-core
        raise ConfigurationError("the Python package PyYAML is required to read encryption_config") from None
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ConfigurationError(f"encryption_config: {path} is not a readable YAML file ({type(error).__name__})") from None
    try:
        return envelope.keys_from_encryption_config(document)
    except ValueError as error:
        raise ConfigurationError(f"encryption_config: {path}: {error} (the kube-apiserver's --encryption-provider-config file)") from None


def build_request(params: dict) -> AuditRequest:
    """Every option checked before any request; one ConfigurationError naming the option otherwise."""
    names_limit = 20 if params.get("names_limit") is None else params["names_limit"]
    if names_limit < -1:
        raise ConfigurationError("names_limit must be -1 (every name), 0 (none) or a positive number")
    resources = params.get("resources") or None
    target, readable = _readable(params)
    options = model.AuditOptions(names_limit=names_limit, readable=readable, resources=set(resources) if resources else None)
    return AuditRequest(EtcdSettings.from_params(params), ScanOptions.from_params(params), options, _encryption_keys(params.get("encryption_config")),
                        target_release=target)


def audit(request: AuditRequest, reader_factory=EtcdReader) -> dict:
    """Scan once and fold; the reader is injectable for tests."""
    reader = reader_factory(request.settings)
    aggregator = model.AuditAggregator(request.options)
    measured_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    prefix = request.scan.prefix
    aggregator.fold(reader.scan(request.scan), prefix, request.encryption_keys)
    if aggregator.keys_scanned == 0:
        raise EtcdError(f"etcd at {reader.endpoint} has no key under {prefix}: nothing was audited, so nothing is known about "
                        "what is stored; check etcd_prefix (kube-apiserver --etcd-prefix) and etcd_endpoints",
                        details={"endpoint": reader.endpoint, "prefix": prefix})
    result = aggregator.result()
    result.update(endpoint=reader.endpoint, transport=getattr(reader, "transport", None), revision=reader.revision,
                  pages=reader.pages, prefix=prefix, measured_at=measured_at, target_release=request.target_release,
                  etcd_space=etcd_space(reader))
    return result


def etcd_space(reader) -> dict:
    """The member's database size and space quota as it reports them (its status and its metrics), for what a
    migration may write: the NOSPACE alarm makes the whole cluster read-only. Each is None when not read."""
    space = {"db_size": None, "db_size_in_use": None, "quota": None}
    try:
        status = reader.status()
        space["db_size"] = int(status["dbSize"]) if status.get("dbSize") is not None else None
        space["db_size_in_use"] = int(status["dbSizeInUse"]) if status.get("dbSizeInUse") is not None else None
        space["quota"] = reader.quota_bytes()
    except (EtcdError, AttributeError, KeyError, TypeError, ValueError):
        pass  # said as unknown; the migration then assumes etcd's default quota
    return space


def warnings_for(result: dict) -> list:
    """What the operator must see even when the task succeeds."""
    found = []
    if result["outside_layout"]:
        found.append(f"{result['outside_layout']} keys under {result['prefix']} are outside the apiserver's key layout and were "
                     f"not counted for any resource (first: {', '.join(result['outside_layout_keys'][:3])})")
    for name, entry in result["resources"].items():
        if entry["unreadable"]:
            reasons = "; ".join(f"{count}: {reason}" for reason, count in entry["unreadable_reasons"].items())
            found.append(f"{name}: {entry['unreadable']} stored values could not be read ({reasons}); their version is unknown")
    return found


def run(kum, reader_factory=EtcdReader, warn: Optional[Callable[[str], None]] = None) -> dict:
    """Entry point of the module: ``kum`` is the KubeUpgradeModule."""
    request = build_request(kum.params)
    result = audit(request, reader_factory)
    for message in warnings_for(result):
        (warn or kum.warn)(message)
    return dict(changed=False, **result)
