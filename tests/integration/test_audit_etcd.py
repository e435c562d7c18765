# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""storage_version_audit against a real etcd: plain and with TLS client certificates, and every bad input."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest
import yaml
from etcd_fixture import free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "plugins" / "module_utils" / "audit"))

from audit_values import aescbc, aesgcm, encryption_config, json_value, protobuf_value, secretbox

from ansible_collections.kubeupgrade.storage.plugins.module_utils._audit import runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.client import EtcdError, EtcdReader
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import KubeUpgradeError

LISTING = Path(__file__).resolve().parents[1] / "fixtures" / "real-etcd-keys" / "keys-1.32.6.tsv"


def _real_listing():
    rows = []
    for line in LISTING.read_text(encoding="utf-8").splitlines():
        key, encoding, api_version, kind, _rev = line.split("\t")
        rows.append((key, protobuf_value(api_version, kind) if encoding == "proto" else json_value(api_version, kind), api_version))
    return rows


def _params(server, **extra):
    params = {"etcd_endpoints": [server.url], "pages_per_second": 0, "page_size": 50, "names_limit": 20}
    if server.tls:
        params.update(etcd_ca_cert=server.pki.ca_cert, etcd_client_cert=server.pki.client_cert, etcd_client_key=server.pki.client_key)
    params.update(extra)
    return params


def _audit(params):
    return runner.audit(runner.build_request(params))


def _expected_counts(rows):
    found = collections.Counter()
    for key, _value, api_version in rows:
        if "/ranges/" not in key:
            found[(key.split("/")[2], api_version)] += 1
    return found


@pytest.mark.parametrize("fixture", ["etcd_plain", "etcd_tls"])
def test_real_listing_is_counted_exactly(request, fixture):
    server = request.getfixturevalue(fixture)
    rows = _real_listing()
    server.put_many((k, v) for k, v, _a in rows)
    server.put("/other-prefix/pods/x/y", protobuf_value("v1", "Pod"))  # not under the prefix: never read
    result = _audit(_params(server, readable_versions={"widgets.example.com": ["v1"]}))
    assert result["keys_scanned"] == len(rows) == 269 and result["pages"] == 6
    assert result["objects"] == 267 and result["unreadable"] == 0 and result["outside_layout"] == 0
    widgets = result["resources"]["widgets.example.com"]
    assert {v["api_version"]: v["count"] for v in widgets["versions"]} == {"example.com/v1": 5, "example.com/v1alpha1": 50}
    assert widgets["not_readable"] == 50 and len(widgets["not_readable_names"]) == 20
    assert result["resources"]["secrets"]["versions"][0]["hash"] == "S6u1pOWzb84="
    assert result["endpoint"] == server.url and result["revision"] > 0 and result["measured_at"].endswith("Z")


def test_scan_is_one_snapshot_at_the_first_page_revision(etcd_plain):
    etcd_plain.put_many((f"/registry/configmaps/ns/cm-{i:03d}", protobuf_value("v1", "ConfigMap")) for i in range(30))
    request = runner.build_request(_params(etcd_plain, page_size=10))
    reader = EtcdReader(request.settings)
    seen = []
    for index, (key, _value) in enumerate(reader.scan(request.scan)):
        seen.append(key)
        if index == 0:  # written after the first page: a later page must not see it
            etcd_plain.put("/registry/configmaps/ns/cm-999", protobuf_value("v1", "ConfigMap"))
    assert len(seen) == 30 and reader.pages == 3


@pytest.mark.parametrize("burst, expected", [(0, [0.25, 0.25]), (1, [0.25]), (2, [])])
def test_throttle_pauses_between_pages_once_the_burst_is_read(etcd_plain, burst, expected):
    etcd_plain.put_many((f"/registry/secrets/ns/s-{i:03d}", protobuf_value("v1", "Secret")) for i in range(12))
    request = runner.build_request(_params(etcd_plain, page_size=5, pages_per_second=4, burst_pages=burst))
    now, pauses = [100.0], []
    request.scan.clock = lambda: now[0]
    request.scan.sleep = lambda seconds: pauses.append(seconds) or now.__setitem__(0, now[0] + seconds)
    assert sum(1 for _kv in EtcdReader(request.settings).scan(request.scan)) == 12  # pages of 5, 5 and 2
    assert pauses == expected


def test_encrypted_values_decrypt_with_the_apiservers_config(etcd_plain, tmp_path):
    cbc, gcm, box = bytes(range(32)), bytes(range(16)), bytes(range(64, 96))
    config = tmp_path / "encryption.yaml"
    config.write_text(yaml.safe_dump(encryption_config({"aescbc": [("k1", cbc)], "aesgcm": [("k2", gcm)], "secretbox": [("k3", box)]})))
    plain = protobuf_value("v1", "Secret")
    etcd_plain.put_many([
        ("/registry/secrets/a/cbc", aescbc(cbc, "k1", plain)),
        ("/registry/secrets/a/gcm", aesgcm(gcm, "k2", plain, b"/registry/secrets/a/gcm")),
        ("/registry/secrets/a/box", secretbox(box, "k3", plain)),
        ("/registry/secrets/a/plain", plain),
        ("/registry/secrets/a/kms", b"k8s:enc:kms:v2:vault:\x0a\x03abc"),
    ])
    secrets = _audit(_params(etcd_plain, encryption_config=str(config)))["resources"]["secrets"]
    stored = [value for key, value in etcd_plain.range_prefix("/registry/secrets/a/") if not key.endswith(b"/kms")]
    assert secrets["versions"] == [{"api_version": "v1", "kind": "Secret", "count": 4, "hash": "S6u1pOWzb84=",
                                    "names": ["a/box", "a/cbc", "a/gcm", "a/plain"], "bytes": sum(map(len, stored))}]
    assert secrets["encryption"] == {"aescbc:k1": 1, "aesgcm:k2": 1, "identity": 1, "kms:v2:vault": 1, "secretbox:k3": 1}
    assert secrets["unreadable_names"] == ["a/kms"]
    # a configuration that does not match: reported per value, never decoded as anything
    config.write_text(yaml.safe_dump(encryption_config({"aescbc": [("k1", bytes(32))]})))
    result = _audit(_params(etcd_plain, encryption_config=str(config)))
    secrets = result["resources"]["secrets"]
    assert secrets["unreadable"] == 4 and secrets["versions"][0]["count"] == 1
    assert secrets["unreadable_reasons"]["the aescbc key named k1 in the EncryptionConfiguration does not decrypt this value"] == 1
    assert any("secrets: 4 stored values could not be read" in w for w in runner.warnings_for(result))
    assert "AAAAAAAA" not in json.dumps(result)  # the all-zero key never appears


def test_garbage_and_keys_outside_the_layout_are_reported(etcd_plain):
    etcd_plain.put_many([
        ("/registry/configmaps/ns/good", protobuf_value("v1", "ConfigMap")),
        ("/registry/configmaps/ns/garbage", b"\x00\xff not a value"),
        ("/registry/configmaps/ns/truncated", b"k8s\x00\x0a\x40\x0a"),
        ("/registry/frobnicators/x", protobuf_value("v1", "Frob")),
        ("/registry/pods/missing-namespace", protobuf_value("v1", "Pod")),
    ])
    result = _audit(_params(etcd_plain, target_release="1.33"))
    configmaps = result["resources"]["configmaps"]
    assert configmaps["objects"] == 3 and configmaps["unreadable"] == 2 and configmaps["not_readable"] == 0
    assert result["outside_layout_keys"] == ["/registry/frobnicators/x", "/registry/pods/missing-namespace"]
    warnings = runner.warnings_for(result)
    assert any("2 keys under /registry/ are outside" in w for w in warnings)
    assert any("configmaps: 2 stored values could not be read" in w for w in warnings)


def test_empty_prefix_is_an_error_never_safe(etcd_plain):
    etcd_plain.put("/registry/pods/ns/p", protobuf_value("v1", "Pod"))
    with pytest.raises(EtcdError) as raised:
        _audit(_params(etcd_plain, etcd_prefix="/kubernetes.io"))
    assert "has no key under /kubernetes.io/" in str(raised.value) and "nothing is known" in str(raised.value)


def test_tls_errors_name_the_endpoint_and_the_fix(etcd_tls):
    etcd_tls.put("/registry/pods/ns/p", protobuf_value("v1", "Pod"))
    with pytest.raises(EtcdError) as raised:
        _audit(_params(etcd_tls, etcd_ca_cert=etcd_tls.pki.other_ca_cert))
    assert etcd_tls.url in str(raised.value) and "not signed by etcd_ca_cert" in str(raised.value)
    with pytest.raises(EtcdError) as raised:
        _audit(_params(etcd_tls, etcd_client_cert=None, etcd_client_key=None))
    assert "refused the TLS connection" in str(raised.value) and "etcd_client_cert and etcd_client_key" in str(raised.value)
    with pytest.raises(EtcdError) as raised:
        _audit(_params(etcd_tls, etcd_endpoints=[etcd_tls.url.replace("https", "http")], etcd_ca_cert=None))
    assert f"use {etcd_tls.url} with etcd_ca_cert" in str(raised.value), str(raised.value)  # the hint: https
    with pytest.raises(EtcdError) as raised:  # a key that is not the certificate's: not a CA problem
        _audit(_params(etcd_tls, etcd_client_key=etcd_tls.pki.server_key))
    assert "is not the key of etcd_client_cert" in str(raised.value) and "CA" not in str(raised.value), str(raised.value)


def test_unreachable_endpoint_and_failover(etcd_plain):
    etcd_plain.put("/registry/pods/ns/p", protobuf_value("v1", "Pod"))
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EtcdError) as raised:
        _audit(_params(etcd_plain, etcd_endpoints=[dead], etcd_request_timeout=3))
    assert f"etcd at {dead} is unreachable" in str(raised.value)
    result = _audit(_params(etcd_plain, etcd_endpoints=[dead, etcd_plain.url]))
    assert result["endpoint"] == etcd_plain.url and result["objects"] == 1


def test_etcd_stopped_mid_scan(etcd_plain):
    etcd_plain.put_many((f"/registry/configmaps/ns/cm-{i:03d}", protobuf_value("v1", "ConfigMap")) for i in range(20))
    request = runner.build_request(_params(etcd_plain, page_size=5, etcd_request_timeout=3))
    scan = EtcdReader(request.settings).scan(request.scan)
    next(scan)
    etcd_plain.stop()
    with pytest.raises(EtcdError) as raised:
        list(scan)
    assert "stopped answering in the middle of the scan" in str(raised.value) and etcd_plain.url in str(raised.value)


@pytest.mark.parametrize("extra, message", [
    ({"etcd_endpoints": []}, "etcd_endpoints is empty"),
    ({"etcd_endpoints": ["10.0.0.1:2379"]}, "is not an etcd client URL"),
    ({"etcd_ca_cert": "/nonexistent/ca.crt"}, "etcd_ca_cert: /nonexistent/ca.crt does not exist"),
    ({"page_size": 0}, "page_size must be between 1 and 10000"),
    ({"pages_per_second": -1}, "pages_per_second must be 0"),
    ({"etcd_prefix": "/"}, "etcd_prefix must name"),
    ({"names_limit": -2}, "names_limit must be -1"),
    ({"readable_versions": {"pods": {"v1": True}}}, "readable_versions[pods] must be a version or a list"),
    ({"target_release": "1.99"}, "no release profile for Kubernetes 1.99"),
])
def test_bad_options_fail_before_any_request(etcd_plain, extra, message):
    with pytest.raises(KubeUpgradeError) as raised:
        runner.build_request(_params(etcd_plain, **extra))
    assert message in str(raised.value)


def test_module_through_ansible_playbook_in_check_mode(etcd_tls, tmp_path, ansible_playbook):
    etcd_tls.put_many((k, v) for k, v, _a in _real_listing())
    out = tmp_path / "audit.json"
    playbook = tmp_path / "audit.yml"
    playbook.write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "module_defaults": {"group/kubeupgrade.storage.etcd": {
            "etcd_endpoints": [etcd_tls.url], "etcd_ca_cert": etcd_tls.pki.ca_cert,
            "etcd_client_cert": etcd_tls.pki.client_cert, "etcd_client_key": etcd_tls.pki.client_key}},
        "tasks": [
            {"name": "audit", "kubeupgrade.storage.storage_version_audit": {
                "target_release": "1.32", "readable_versions": {"widgets.example.com": ["v1"]}, "pages_per_second": 0}, "register": "audit"},
            {"name": "save", "ansible.builtin.copy": {"content": "{{ audit | to_json }}", "dest": str(out)}, "check_mode": False},
        ]}]))
    run = ansible_playbook(playbook, check=True)
    assert run.rc == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    assert result["changed"] is False and result["resources"]["widgets.example.com"]["not_readable"] == 50
    assert result["not_readable"] == 50 and "269 keys" in result["summary"]


def test_target_crd_manifests_name_the_custom_resources_a_target_cannot_decode(etcd_plain):
    etcd_plain.put("/registry/example.com/widgets/default/old", json_value("example.com/v1alpha1", "Widget"))
    etcd_plain.put("/registry/example.com/widgets/default/new", json_value("example.com/v1", "Widget"))
    manifest = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "widgets.example.com"},
                "spec": {"group": "example.com", "scope": "Namespaced",
                         "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                         "versions": [{"name": "v1", "served": True, "storage": True,
                                       "schema": {"openAPIV3Schema": {"type": "object"}}}]}}
    dropping = _audit(_params(etcd_plain, target_crds=[manifest]))["resources"]["widgets.example.com"]
    assert dropping["judged"] and dropping["not_readable_names"] == ["default/old"], dropping
    keeping = dict(manifest, spec=dict(manifest["spec"], versions=[
        {"name": "v1alpha1", "served": False, "storage": False, "schema": {"openAPIV3Schema": {"type": "object"}}},
        *manifest["spec"]["versions"]]))
    kept = _audit(_params(etcd_plain, target_crds=[keeping]))["resources"]["widgets.example.com"]
    assert kept["judged"] and kept["not_readable"] == 0, kept


@pytest.mark.parametrize("tls, version", [(False, None), (True, "3.5")], ids=["3.4-plain", "3.5-tls"])
def test_the_audit_measures_etcd_s_space_and_each_version_s_bytes(tmp_path, tls, version):
    """etcd's own numbers, as a migration checks its rewrites against them: the quota it was started with (its
    metrics), the database size (its status), and the stored bytes per resource and version."""
    from etcd_fixture import EtcdServer

    with EtcdServer(tmp_path / "etcd", tls=tls, extra_args=["--quota-backend-bytes=67108864"], version=version) as server:
        server.put("/registry/configmaps/default/small", json_value("v1", "ConfigMap"))
        server.put("/registry/configmaps/default/large", json_value("v1", "ConfigMap") + b" " * 100_000)
        result = _audit(_params(server))
    space = result["etcd_space"]
    assert space["quota"] == 64 * 1024 * 1024, space
    assert space["db_size"] > 0 and 0 < space["db_size_in_use"] <= space["db_size"], space
    configmaps = result["resources"]["configmaps"]
    assert configmaps["bytes"] == 2 * len(json_value("v1", "ConfigMap")) + 100_000
    assert [v["bytes"] for v in configmaps["versions"]] == [configmaps["bytes"]]
