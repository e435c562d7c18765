# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The key layout, checked against every key of two real kube-apiservers' etcd (1.28.0 and 1.32.6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import keys
from ansible_collections.kubeupgrade.storage.plugins.module_utils.profiles import load_profiles

LISTINGS = Path(__file__).resolve().parents[4] / "fixtures" / "real-etcd-keys"
PROFILES = load_profiles()


def _rows():
    rows = []
    for path in sorted(LISTINGS.glob("keys-*.tsv")):
        release = path.stem.split("-", 1)[1].rsplit(".", 1)[0]
        for line in path.read_text(encoding="utf-8").splitlines():
            key, encoding, api_version, kind, _rev = line.split("\t")
            rows.append(pytest.param(release, key, encoding, api_version, kind, id=f"{path.stem}:{key}"))
    return rows


ROWS = _rows()
# Kinds of resources the listings hold that no release profile lists (custom resources, internal kinds).
CUSTOM_KINDS = {"widgets.exp.example.org": "Widget", "widgets.example.com": "Widget",
                "storagestates.migration.k8s.io": "StorageState"}


def test_listings_are_complete():
    assert len(ROWS) == 393 + 269


@pytest.mark.parametrize("release, key, encoding, api_version, kind", ROWS)
def test_every_real_key_maps_to_the_resource_of_its_kind(release, key, encoding, api_version, kind):
    info = keys.classify_key(key)
    if kind == "RangeAllocation":
        assert info.kind == keys.INTERNAL
        return
    assert info.kind == keys.OBJECT, info.what
    name = info.resource_name
    profile = PROFILES.get(release).get(name)
    # alpha resources enabled with --runtime-config are not in that release's profile: any release's kind
    expected_kind = CUSTOM_KINDS.get(name) or (profile.kind if profile else PROFILES.kind_of(name))
    assert kind == expected_kind
    # the key's last segment is the object name, and the namespace sits right before it
    assert key.endswith("/" + (f"{info.namespace}/" if info.namespace else "") + info.name)


@pytest.mark.parametrize("key, resource_name, namespace, name", [
    ("/registry/minions/node-1", "nodes", None, "node-1"),
    ("/registry/services/specs/default/kubernetes", "services", "default", "kubernetes"),
    ("/registry/services/endpoints/default/kubernetes", "endpoints", "default", "kubernetes"),
    ("/registry/controllers/ns/rc", "replicationcontrollers", "ns", "rc"),
    ("/registry/ingress/ns/web", "ingresses.networking.k8s.io", "ns", "web"),
    ("/registry/events/ns/pod.17", "events", "ns", "pod.17"),
    ("/registry/deployments/demo/web", "deployments.apps", "demo", "web"),
    ("/registry/flowschemas/exempt", "flowschemas.flowcontrol.apiserver.k8s.io", None, "exempt"),
    ("/registry/clusterroles/system:admin", "clusterroles.rbac.authorization.k8s.io", None, "system:admin"),
    ("/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com",
     "customresourcedefinitions.apiextensions.k8s.io", None, "widgets.example.com"),
    ("/registry/apiregistration.k8s.io/apiservices/v1.", "apiservices.apiregistration.k8s.io", None, "v1."),
    ("/registry/example.com/widgets/demo/w-1", "widgets.example.com", "demo", "w-1"),
    ("/registry/example.com/clusterwidgets/w-1", "clusterwidgets.example.com", None, "w-1"),
])
def test_layout(key, resource_name, namespace, name):
    info = keys.classify_key(key)
    assert (info.kind, info.resource_name, info.namespace, info.name) == (keys.OBJECT, resource_name, namespace, name)


@pytest.mark.parametrize("key, what", [
    ("/registry/masterleases/10.0.0.1", "masterleases"),
    ("/registry/peerserverleases/apiserver-qzk7tc3nd7lrymr74debrusv3a", "peerserverleases"),  # 1.36 writes one per apiserver
    ("/registry/ranges/serviceips", "service IP"),
    ("/registry/ranges/servicenodeports", "node port"),
])
def test_internal_keys(key, what):
    info = keys.classify_key(key)
    assert info.kind == keys.INTERNAL and what in info.what


@pytest.mark.parametrize("key, why", [
    ("/registry/frobnicators/x", "no resource is stored under 'frobnicators'"),
    ("/registry/services/x", "no resource is stored under 'services'"),
    ("/registry/pods/only-a-name", "pods keys end in <namespace>/<name>"),
    ("/registry/namespaces/a/b", "namespaces keys end in <name>"),
    ("/registry/pods/a/b/c", "pods keys end in <namespace>/<name>"),
    ("/registry/apiextensions.k8s.io/customresourcedefinitions/ns/x", "keys end in <name>"),
    ("/registry/example.com/widgets/a/b/c", "keys end in [<namespace>/]<name>"),
    ("/registry/example.com", "no resource is stored under 'example.com'"),
    ("/registry//x", "empty resource segment"),
    ("/other/pods/a/b", "not under the prefix"),
    ("/registry/pods/ns/", "pods keys end in <namespace>/<name>"),
])
def test_keys_outside_the_layout_are_reported_not_guessed(key, why):
    info = keys.classify_key(key)
    assert info.kind == keys.OUTSIDE and why in info.what


def test_other_prefix():
    assert keys.classify_key("/kubernetes.io/pods/a/b", "/kubernetes.io/").resource_name == "pods"


def test_every_builtin_of_every_release_has_a_key_prefix():
    """No built-in resource of the release data (1.25-1.37) falls outside the layout."""
    mapped = {f"{r}.{g}" if g else r for g, r, _scope in keys.BUILTIN_PREFIXES.values()}
    mapped |= {f"{r}.{g}" for g, r in keys.GROUPED_BUILTINS} | set(keys.SHARED_STORAGE)
    for release in PROFILES.releases():
        missing = set(PROFILES.get(release).resources) - mapped
        assert not missing, f"{release}: {sorted(missing)}"


def test_a_directory_seen_before_gives_the_answer_the_full_walk_gives():
    """classify_key keeps object directories; every key still classifies as the walk classifies it, in any order."""
    tricky = ["/registry/pods/ns/a", "/registry/pods/ns/b", "/registry/pods/ns/", "/registry/pods/ns/a/extra",
              "/registry/ranges/serviceips", "/registry/ranges/servicenodeports", "/registry/masterleases/10.0.0.1",
              "/registry/apiregistration.k8s.io/apiservices/v1.apps", "/registry/apiregistration.k8s.io/apiservices/v1.",
              "/registry/namespaces/default", "/registry/namespaces/default/x", "/registry/example.com/widgets/ns/w",
              "/registry/example.com/widgets/w", "/registry/example.com/widgets/ns/", "/other/pods/ns/a"]
    for order in (tricky, list(reversed(tricky)), tricky * 2):
        keys._OBJECT_DIRECTORIES.clear()
        for key in order:
            assert keys.classify_key(key) == keys._classify(key, "/registry/"), key


@pytest.mark.parametrize("key, decides", [
    ("/registry/pods/ns/a", True), ("/registry/namespaces/default", True), ("/registry/minions/node-1", True),
    ("/registry/services/specs/default/kubernetes", True), ("/registry/services/endpoints/default/kubernetes", True),
    ("/registry/apiregistration.k8s.io/apiservices/v1.", True), ("/registry/example.com/widgets/ns/w", True),
    ("/registry/example.com/widgets/w", True), ("/registry/events/ns/e.1", True),
    ("/registry/ranges/serviceips", False), ("/registry/ranges/servicenodeports", False), ("/registry/masterleases/10.0.0.1", False),
    ("/registry/pods/ns/", False), ("/registry/pods/ns/a/extra", False), ("/registry/pods/only-a-name", False),
    ("/registry/services/x", False), ("/registry//x", False), ("/other/pods/ns/a", False), ("/registry/example.com", False),
])
def test_a_directory_that_decides_gives_its_answer_to_every_name(key, decides):
    """What the audit's scan relies on to classify a directory's first key only: every other name in that directory
    classifies as the first key does, with its own name."""
    info = keys._classify(key, "/registry/")
    assert keys.directory_decides(key, info) is decides
    if decides:
        directory = key.rpartition("/")[0]
        for name in ("a", "b.c", "system:x", "serviceips", "servicenodeports", "specs", "endpoints", "\ufffd", "10.0.0.1"):
            assert keys._classify(f"{directory}/{name}", "/registry/") == info._replace(name=name)
