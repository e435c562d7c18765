# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""API requests of the collection, checked against the shipped RBAC roles in ``rbac/``.

The simulator records each request it serves as RBAC sees it: (verb, group, resource, subresource),
or a non-resource URL. ``check_plane(plane, extra_rules)`` reads a plane's audit, fails (naming the
request and the role file to extend) when a request is not granted by the shipped roles (plus
``extra_rules``: the roles the ``custom_resource_role`` filter renders for that plane's custom
resources), and appends what it saw to a session-wide record (``tests/output/rbac/requests-<pid>.json``).
``test_rbac.py`` calls it for the plane on which it runs every use.

The rules here are RBAC's own (``plugin/pkg/auth/authorizer/rbac/rbac.go``, ``pkg/apis/rbac/helpers.go``):
``*`` matches every verb, group or resource; ``res/*`` every subresource of ``res``; ``*/sub`` that
subresource of every resource; a non-resource URL pattern may end in ``*`` (prefix match). A Role's
rules apply in its own namespace only: a namespaced request is covered by a Role only when every path
the simulator served for that resource was in the Role's namespace.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

import yaml

REPO = Path(__file__).resolve().parents[2]
RBAC_DIR = REPO / "rbac"
RECORD_DIR = Path(os.environ.get("KUBEUPGRADE_RBAC_RECORD_DIR", str(REPO / "tests" / "output" / "rbac")))

NONRESOURCE = "nonresource:"
# Requests the tests' own harness makes, not the collection: readiness probes while a plane starts.
HARNESS_ONLY: Set[Tuple[str, str, str, str]] = set()

Request = Tuple[str, str, str, str]  # (verb, group, resource, subresource); resource "nonresource:/path" for URLs


@dataclass(frozen=True)
class Rule:
    """One PolicyRule of a shipped role; ``namespace`` is set for a Role (None for a ClusterRole)."""

    role: str
    file: str
    namespace: Optional[str]
    verbs: Tuple[str, ...]
    api_groups: Tuple[str, ...] = ()
    resources: Tuple[str, ...] = ()
    resource_names: Tuple[str, ...] = ()
    non_resource_urls: Tuple[str, ...] = ()

    def covers(self, request: Request) -> bool:
        verb, group, resource, sub = request
        if not _match(self.verbs, verb):
            return False
        if resource.startswith(NONRESOURCE):
            url = resource[len(NONRESOURCE):]
            return self.namespace is None and any(_url_match(p, url) for p in self.non_resource_urls)
        if not self.resources or not _match(self.api_groups, group):
            return False
        return any(_resource_match(p, resource, sub) for p in self.resources)


def _match(allowed: Iterable[str], value: str) -> bool:
    return "*" in allowed or value in allowed


def _url_match(pattern: str, url: str) -> bool:
    if pattern.endswith("*"):
        return url.startswith(pattern[:-1])
    return url == pattern


def _resource_match(pattern: str, resource: str, sub: str) -> bool:
    full = f"{resource}/{sub}" if sub else resource
    if pattern in ("*", full):
        return True
    if sub and pattern in (f"{resource}/*", f"*/{sub}"):
        return True
    return False


def load_rules(directory: Path = RBAC_DIR) -> List[Rule]:
    """Every rule of every ClusterRole and Role shipped in ``rbac/``."""
    rules = []
    order = {"observe.yaml": 0, "count-objects.yaml": 1, "records.yaml": 2, "migrate.yaml": 3}  # read, count, record, migrate
    for path in sorted(directory.glob("*.yaml"), key=lambda p: (order.get(p.name, 9), p.name)):
        for doc in manifests(path):
            if doc.get("kind") not in ("ClusterRole", "Role"):
                continue
            rules.extend(rules_of(doc, path.name))
    return rules


def rules_of(role: dict, file: str) -> List[Rule]:
    """The rules of one ClusterRole or Role object (``file``: where it comes from, for messages)."""
    meta = role["metadata"]
    namespace = meta.get("namespace") if role["kind"] == "Role" else None
    return [Rule(role=f"{role['kind']} {meta['name']}", file=file, namespace=namespace,
                 verbs=tuple(rule.get("verbs") or ()), api_groups=tuple(rule.get("apiGroups") or ()),
                 resources=tuple(rule.get("resources") or ()), resource_names=tuple(rule.get("resourceNames") or ()),
                 non_resource_urls=tuple(rule.get("nonResourceURLs") or ()))
            for rule in role.get("rules") or []]


def manifests(path: Path) -> List[dict]:
    """The objects of one file: a single object or a v1 List of them (one YAML document per file)."""
    found = []
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if doc:
            found.extend(doc.get("items") or [] if doc.get("kind") == "List" else [doc])
    return found


def requests_of(audit: List[dict]) -> Set[Request]:
    """The simulator's audit (``admin._call("audit")``) as a set of requests."""
    return {(e["verb"], e["group"], e["resource"], e["subresource"]) for e in audit} - HARNESS_ONLY


_RESOURCE_PATH = re.compile(r"^/(?:api/[^/]+|apis/(?P<group>[^/]+)/[^/]+)/(?P<rest>.+)$")
ALL_NAMESPACES = "*"


def namespaces_of(stats: dict) -> Dict[Tuple[str, str], Set[str]]:
    """{(group, resource): namespaces} of the resource paths the simulator served (from ``stats()``);
    a path outside any namespace (a cluster-wide LIST, a cluster-scoped object) counts as ``*``."""
    seen: Dict[Tuple[str, str], Set[str]] = {}
    for apiserver in stats.get("apiservers", []):
        for path in apiserver.get("by_path", {}):
            match = _RESOURCE_PATH.match(path.rstrip("/"))
            if not match:
                continue
            rest = match.group("rest").split("/")
            namespace = ALL_NAMESPACES
            if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
                namespace, rest = rest[1], rest[2:]
            seen.setdefault((match.group("group") or "", rest[0]), set()).add(namespace)
    return seen


def granting(request: Request, rules: List[Rule], namespaces: Optional[Dict] = None, strict: bool = True) -> List[Rule]:
    """The rules granting ``request``. A Role grants only when every namespace the resource was asked in is
    the Role's; when the simulator's path counts were reset (nothing known), only ``strict=False`` accepts it."""
    found = []
    for rule in rules:
        if not rule.covers(request):
            continue
        used = (namespaces or {}).get((request[1], request[2]))
        if rule.namespace is not None and not (used == {rule.namespace} if used else not strict):
            continue
        found.append(rule)
    return found


def uncovered(requests: Iterable[Request], rules: List[Rule], namespaces: Optional[Dict] = None,
              strict: bool = True) -> List[Request]:
    return sorted(r for r in requests if not granting(r, rules, namespaces, strict))


def describe(request: Request) -> str:
    verb, group, resource, sub = request
    if resource.startswith(NONRESOURCE):
        return f"{verb} {resource[len(NONRESOURCE):]}"
    full = f"{resource}/{sub}" if sub else resource
    return f"{verb} {full}.{group}" if group else f"{verb} {full}"


def check_plane(plane, extra_rules: Iterable[Rule] = ()) -> Set[Request]:
    """Every request ``plane`` served must be granted by ``rbac/`` (plus ``extra_rules``); record them for the session.

    Raises ``AssertionError`` naming each request no role grants.
    """
    try:
        audit = plane.admin._call("audit")
        stats = plane.admin.stats()
    except OSError:  # the plane is already stopped: it has nothing more to tell
        return set()
    requests = requests_of(audit)
    namespaces = namespaces_of(stats)
    _append(requests)
    missing = uncovered(requests, load_rules() + list(extra_rules), namespaces, strict=False)  # tests may reset the path counts
    assert not missing, ("the collection made requests no role in rbac/ grants: "
                         + "; ".join(describe(r) for r in missing)
                         + ". Grant them in the role of that use (rbac/*.yaml, or scripts/generate_rbac.py for the generated "
                           "roles) and run scripts/generate_rbac.py.")
    return requests


def _append(requests: Set[Request]) -> None:
    RECORD_DIR.mkdir(parents=True, exist_ok=True)
    path = RECORD_DIR / f"requests-{os.getpid()}.json"
    known = set()
    if path.exists():
        known = {tuple(r) for r in json.loads(path.read_text(encoding="utf-8"))}
    path.write_text(json.dumps(sorted(known | requests)), encoding="utf-8")


def recorded() -> Set[Request]:
    """Every request recorded by this and earlier sessions' planes (the union of the record files)."""
    found: Set[Request] = set()
    for path in RECORD_DIR.glob("requests-*.json"):
        found |= {tuple(r) for r in json.loads(path.read_text(encoding="utf-8"))}
    return found
