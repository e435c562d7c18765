# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The audit's whole result on a mixed store, pinned: every key form (namespaced, cluster-scoped, internal, outside the
layout, not UTF-8), every value form (protobuf, JSON, encrypted and decrypted or not, garbage), filtered resources,
CRDs, and every kind of ``names_limit``. ``audit-fold.json`` holds the results the audit gave before its per-key work
was made cheaper; the scan's fold (``runner.audit``) and the one-key-at-a-time fold (``AuditAggregator.add``) must
both still give them, and give the same as each other in any order of keys."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from audit_values import aescbc, aesgcm, encryption_config, json_value, kms, protobuf_value, secretbox

from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import model, runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import envelope, keys
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import ScanOptions

PINNED = Path(__file__).with_name("audit-fold.json")
CBC, GCM, BOX = bytes(range(32)), bytes(range(16)), bytes(range(100, 132))
KEYS = envelope.keys_from_encryption_config(encryption_config({
    "aescbc": [("cbc1", CBC)], "aesgcm": [("gcm1", GCM)], "secretbox": [("box1", BOX)]}))
CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": "widgets.example.com"},
       "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [{"name": "v1alpha1", "served": True, "storage": False}, {"name": "v1", "served": True, "storage": True}]},
       "status": {"storedVersions": ["v1alpha1", "v1"]}}
CM1, CM0 = protobuf_value("v1", "ConfigMap", raw=b"\x0a\x03abc"), protobuf_value("v0", "ConfigMap")
LONG_TYPE_META = protobuf_value("v1", "ConfigMap" + "x" * 140)  # TypeMeta over 127 bytes: a two-byte length


def _configmaps():
    """Sixty ConfigMaps of one namespace: versions and unreadable values interleaved, so that name lists fill up at
    different keys."""
    values = [CM1, CM0, CM1, json_value("v1", "ConfigMap"), b"\x00garbage", CM1, kms("v2", "vault"), CM0,
              aescbc(CBC, "cbc1", CM0), aescbc(CBC, "nokey", CM1), LONG_TYPE_META, b""]
    return [(f"/registry/configmaps/busy/cm-{i:03d}".encode(), values[i % len(values)]) for i in range(60)]


def _corpus():
    gcm_key = b"/registry/secrets/app/gcm"
    pairs = _configmaps() + [
        (b"/registry/configmaps/app/settings", CM1), (b"/registry/configmaps/app/", CM1),
        (b"/registry/configmaps/app/deep/er", CM1), (b"/registry/configmaps/only-a-name", CM1),
        (b"/registry/configmaps/ns\xff/bad\xfename", CM0), (b"/registry/configmaps/n\xe2/x\xe2", CM1),
        (b"/registry/secrets/app/cbc", aescbc(CBC, "cbc1", protobuf_value("v1", "Secret"))),
        (gcm_key, aesgcm(GCM, "gcm1", protobuf_value("v1", "Secret"), gcm_key)),
        (b"/registry/secrets/app/gcm-copied", aesgcm(GCM, "gcm1", protobuf_value("v1", "Secret"), gcm_key)),
        (b"/registry/secrets/app/box", secretbox(BOX, "box1", json_value("v1", "Secret"))),
        (b"/registry/secrets/app/kms1", kms("v1", "legacy")), (b"/registry/secrets/app/odd", b"k8s:enc:rot13:v1:k:xyz"),
        (b"/registry/secrets/app/malformed", b"k8s:enc:aescbc"), (b"/registry/secrets/app/trunc", b"k8s\x00\x0a\x40\x0a\x02v1"),
        (b"/registry/secrets/app/one", b"k8s\x00\x0a\x01\x0a"), (b"/registry/secrets/app/nokind", b"k8s\x00\x0a\x04\x0a\x02v1"),
        (b"/registry/secrets/app/noproto", b"k8s\x00\x10\x01"), (b"/registry/secrets/app/array", b"[1, 2]"),
        (b"/registry/secrets/app/badjson", b"{nope"), (b"/registry/secrets/app/nojsonkind", b'{"apiVersion": "v1"}'),
        (b"/registry/minions/node-1", protobuf_value("v1", "Node")), (b"/registry/namespaces/app", protobuf_value("v1", "Namespace")),
        (b"/registry/namespaces/app/x", protobuf_value("v1", "Namespace")),
        (b"/registry/clusterroles/system:admin", protobuf_value("rbac.authorization.k8s.io/v1", "ClusterRole")),
        (b"/registry/services/specs/default/kubernetes", protobuf_value("v1", "Service")),
        (b"/registry/services/endpoints/default/kubernetes", protobuf_value("v1", "Endpoints")),
        (b"/registry/services/x", protobuf_value("v1", "Service")), (b"/registry/events/app/e.1", protobuf_value("v1", "Event")),
        (b"/registry/events/lonely", protobuf_value("v1", "Event")),
        (b"/registry/deployments/app/web", protobuf_value("apps/v1", "Deployment")),
        (b"/registry/deployments/app/web-old", protobuf_value("apps/v1beta1", "Deployment")),
        (b"/registry/masterleases/10.0.0.1", b"\x00"), (b"/registry/peerserverleases/apiserver-a", b"\x00"),
        (b"/registry/ranges/serviceips", protobuf_value("v1", "RangeAllocation")),
        (b"/registry/ranges/servicenodeports", protobuf_value("v1", "RangeAllocation")),
        (b"/registry/ranges/other", b"\x00"), (b"/registry/frobs/x", CM1), (b"/registry//x", CM1), (b"/registry/example.com", CM1),
        (b"/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com", json.dumps(CRD).encode()),
        (b"/registry/apiextensions.k8s.io/customresourcedefinitions/sealed.example.com", kms("v2", "vault")),
        (b"/registry/apiextensions.k8s.io/customresourcedefinitions/proto.example.com",
         protobuf_value("apiextensions.k8s.io/v1", "CustomResourceDefinition")),
        (b"/registry/apiregistration.k8s.io/apiservices/v1.", json_value("apiregistration.k8s.io/v1", "APIService")),
        (b"/registry/example.com/widgets/app/w-1", json_value("example.com/v1alpha1", "Widget")),
        (b"/registry/example.com/widgets/app/w-2", json_value("example.com/v1", "Widget")),
        (b"/registry/example.com/widgets/w-cluster", json_value("example.com/v1", "Widget")),
        (b"/registry/example.com/widgets/a/b/c", json_value("example.com/v1", "Widget")),
        (b"/registry/example.com/gadgets/g-1", protobuf_value("example.com/v2", "Gadget")),
        (b"/registry/example.com/gadgets/g-2", json_value("example.com/v2", "Gadget")),
        (b"/other/pods/app/p", protobuf_value("v1", "Pod")),
    ]
    return sorted(pairs)


READABLE = {"configmaps": {"v1"}, "secrets": {"v1"}, "widgets.example.com": {"example.com/v1"},
            "deployments.apps": {"apps/v1"}, "gadgets.example.com": {"v1"}}
CASES = {
    "default": dict(),
    "names 0": dict(names_limit=0, readable=READABLE),
    "names 1": dict(names_limit=1, readable=READABLE),
    "names 2": dict(names_limit=2),
    "every name": dict(names_limit=-1, readable=READABLE),
    "filtered": dict(names_limit=3, readable=READABLE, resources={"configmaps", "widgets.example.com", "frobs"}),
    "filtered, every name": dict(names_limit=-1, resources={"secrets"}),
}


class _Reader:
    endpoint, transport, revision, pages = "http://127.0.0.1:2379", "grpc", 7, 1
    pairs = ()

    def __init__(self, settings):
        self.settings = settings

    def scan(self, scan):
        return iter(self.pairs)

    def status(self):
        return {"dbSize": 10, "dbSizeInUse": 5}

    def quota_bytes(self):
        return 100


def _scanned(options, pairs):
    request = runner.AuditRequest(settings=None, scan=ScanOptions(), options=options, encryption_keys=KEYS)
    reader = type("Reader", (_Reader,), {"pairs": pairs})
    result = runner.audit(request, reader)
    for added in ("endpoint", "transport", "revision", "pages", "prefix", "measured_at", "target_release", "etcd_space"):
        result.pop(added)
    return result


def _one_by_one(options, pairs):
    aggregator = model.AuditAggregator(options)
    for key, value in pairs:
        text = key.decode("utf-8", "replace")
        info = keys.classify_key(text)
        aggregator.add(text, info, lambda v=value, k=key: envelope.decode_value(v, k, KEYS), len(value))
        aggregator.add_definition(info, value)
    return aggregator.result()


@pytest.fixture(autouse=True)
def _small_version_cap(monkeypatch):
    """With ``names_limit`` -1 each stored version keeps ``VERSION_NAMES_CAP`` names: 5 here, so the cap is reached."""
    monkeypatch.setattr(model, "VERSION_NAMES_CAP", 5)


def _write_pinned():  # pragma: no cover - how audit-fold.json was made, with the audit as it was
    results = {case: _scanned(model.AuditOptions(**options), _corpus()) for case, options in CASES.items()}
    PINNED.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")


@pytest.mark.parametrize("case", list(CASES))
def test_the_scan_gives_the_pinned_result(case):
    assert _scanned(model.AuditOptions(**CASES[case]), _corpus()) == json.loads(PINNED.read_text(encoding="utf-8"))[case]


@pytest.mark.parametrize("case", list(CASES))
def test_one_key_at_a_time_gives_the_pinned_result(case):
    assert _one_by_one(model.AuditOptions(**CASES[case]), _corpus()) == json.loads(PINNED.read_text(encoding="utf-8"))[case]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("case", ["names 2", "every name", "filtered"])
def test_any_order_of_keys_gives_the_same_result_both_ways(case, seed):
    """Keys out of etcd's order (a directory's keys apart, directories revisited) and the directories kept by
    ``classify_key`` from earlier tests: the scan's fold still answers as the one-key-at-a-time fold."""
    pairs = _corpus() * 2
    random.Random(seed).shuffle(pairs)
    assert _scanned(model.AuditOptions(**CASES[case]), pairs) == _one_by_one(model.AuditOptions(**CASES[case]), pairs)
