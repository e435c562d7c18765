# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The generated etcd messages: etcd's packages, method paths and field numbers (what etcd decodes), a message that
round-trips, the committed files equal to a fresh generation (where grpcio-tools 1.62.3 can run), and the one error a
host without grpcio gets."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import client as etcd_client
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import envelope, scratch
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.etcdpb import kv_pb2, rpc_pb2
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.settings import EtcdSettings, ScanOptions
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import protobuf
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.k8spb import k8s_pb2

REPO = Path(__file__).resolve().parents[5]

# etcd's api/etcdserverpb/rpc.proto and api/mvccpb/kv.proto (etcd-io/etcd): the fields the collection sends or reads
FIELDS = {
    "etcdserverpb.RangeRequest": {"key": 1, "range_end": 2, "limit": 3, "revision": 4, "serializable": 7, "keys_only": 8},
    "etcdserverpb.RangeResponse": {"header": 1, "kvs": 2, "more": 3, "count": 4},
    "etcdserverpb.ResponseHeader": {"revision": 3},
    "etcdserverpb.StatusResponse": {"header": 1, "version": 2, "dbSize": 3, "dbSizeInUse": 9},
    "etcdserverpb.SnapshotResponse": {"header": 1, "remaining_bytes": 2, "blob": 3, "version": 4},
    "etcdserverpb.PutRequest": {"key": 1, "value": 2, "lease": 3, "prev_kv": 4, "ignore_value": 5, "ignore_lease": 6},
    "etcdserverpb.RequestOp": {"request_range": 1, "request_put": 2},
    "etcdserverpb.TxnRequest": {"success": 2, "failure": 3},
    "etcdserverpb.TxnResponse": {"header": 1, "succeeded": 2, "responses": 3},
    "mvccpb.KeyValue": {"key": 1, "create_revision": 2, "mod_revision": 3, "version": 4, "value": 5, "lease": 6},
    # Kubernetes' generated.proto files: k8s.io/apimachinery pkg/runtime (Unknown, TypeMeta), pkg/apis/meta/v1
    # (ObjectMeta, ListMeta, Status, StatusDetails, StatusCause), k8s.io/api core/v1 (Namespace; every object's metadata
    # and every list's items, as ConfigMap and ConfigMapList), in the collection's own package
    "kubeupgrade.storage.k8s.Unknown": {"typeMeta": 1, "raw": 2, "contentEncoding": 3, "contentType": 4},
    "kubeupgrade.storage.k8s.TypeMeta": {"apiVersion": 1, "kind": 2},
    "kubeupgrade.storage.k8s.ObjectMeta": {"name": 1, "namespace": 3, "uid": 5, "resourceVersion": 6},
    "kubeupgrade.storage.k8s.ListMeta": {"selfLink": 1, "resourceVersion": 2, "continue": 3, "remainingItemCount": 4},
    "kubeupgrade.storage.k8s.Status": {"metadata": 1, "status": 2, "message": 3, "reason": 4, "details": 5, "code": 6},
    "kubeupgrade.storage.k8s.StatusDetails": {"name": 1, "group": 2, "kind": 3, "causes": 4, "retryAfterSeconds": 5,
                                              "uid": 6},
    "kubeupgrade.storage.k8s.StatusCause": {"reason": 1, "message": 2, "field": 3},
    "kubeupgrade.storage.k8s.Namespace": {"metadata": 1},
    "kubeupgrade.storage.k8s.Object": {"metadata": 1},
    "kubeupgrade.storage.k8s.List": {"metadata": 1, "items": 2},
}
MODULES = {"mvccpb": kv_pb2, "etcdserverpb": rpc_pb2, "kubeupgrade": k8s_pb2}


@pytest.mark.parametrize("message", sorted(FIELDS))
def test_field_numbers_are_etcds(message):
    descriptor = MODULES[message.split(".")[0]].DESCRIPTOR.message_types_by_name[message.rsplit(".", 1)[1]]
    assert descriptor.full_name == message
    assert {name: descriptor.fields_by_name[name].number for name in FIELDS[message]} == FIELDS[message]


def test_method_paths_are_etcds():
    services = {s.full_name: [m.name for m in s.methods] for s in rpc_pb2.DESCRIPTOR.services_by_name.values()}
    assert services == {"etcdserverpb.KV": ["Range", "Txn"], "etcdserverpb.Maintenance": ["Status", "Snapshot"]}
    assert (etcd_client.RANGE_METHOD, etcd_client.STATUS_METHOD, etcd_client.SNAPSHOT_METHOD, scratch.TXN_METHOD) == (
        "/etcdserverpb.KV/Range", "/etcdserverpb.Maintenance/Status", "/etcdserverpb.Maintenance/Snapshot", "/etcdserverpb.KV/Txn")


def test_a_range_answer_round_trips():
    answer = rpc_pb2.RangeResponse(header=rpc_pb2.ResponseHeader(revision=123456789), more=True, count=5,
                                   kvs=[kv_pb2.KeyValue(key=b"/registry/a", value=b"\x00\xff", mod_revision=7)])
    page = etcd_client._page(rpc_pb2.RangeResponse.FromString(answer.SerializeToString()))
    assert (page.revision, page.pairs, page.more, page.count) == (123456789, [(b"/registry/a", b"\x00\xff")], True, 5)


@pytest.mark.slow
def test_the_committed_files_are_a_fresh_generation(tmp_path):
    python = shutil.which("python3.11") or shutil.which("python3.12")
    if not python or subprocess.run([python, "-m", "pip", "--version"], capture_output=True, check=False).returncode:
        pytest.skip("scripts/generate_etcd_protos.sh needs a Python 3.8 to 3.12 with pip for grpcio-tools 1.62.3")
    copy = tmp_path / "repo"
    for part in ("proto", "scripts/generate_etcd_protos.sh", "plugins/module_utils/_etcd/etcdpb", "plugins/module_utils/_http/k8spb"):
        (copy / part).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (REPO / part).is_dir() else shutil.copy)(REPO / part, copy / part)
    run = subprocess.run(["bash", str(copy / "scripts/generate_etcd_protos.sh")], env={"GRPC_TOOLS_PYTHON": python, "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=False, timeout=600)
    if run.returncode and "grpcio-tools" in run.stderr and ("No matching distribution" in run.stderr or "Could not" in run.stderr):
        pytest.skip(f"grpcio-tools 1.62.3 cannot be installed here: {run.stderr[-300:]}")
    assert run.returncode == 0, run.stderr
    for name in ("_etcd/etcdpb/kv_pb2.py", "_etcd/etcdpb/rpc_pb2.py", "_http/k8spb/k8s_pb2.py"):
        generated = (copy / "plugins/module_utils" / name).read_text(encoding="utf-8")
        assert generated == (REPO / "plugins/module_utils" / name).read_text(encoding="utf-8"), name


class _Workspace:
    def file(self, name):
        return f"/nonexistent/{name}"


@pytest.mark.parametrize("call", [
    lambda reader: list(reader.scan(ScanOptions())),
    lambda reader: reader.status(),
    lambda reader: reader.snapshot(lambda _piece: None),
    lambda _reader: scratch.ScratchEtcd(_Workspace(), "etcd")._status(2.0),  # the scratch etcd's wait ...
    lambda _reader: scratch.ScratchEtcd(_Workspace(), "etcd").put_all([(b"k", b"v")]),  # ... and its writes
], ids=["scan", "status", "snapshot", "scratch-status", "scratch-put"])
def test_without_grpcio_the_error_names_the_packages_and_how_to_install_them(monkeypatch, call):
    monkeypatch.setattr(etcd_client, "GRPC_IMPORT_ERROR", ImportError("No module named 'grpc'"))
    reader = etcd_client.EtcdReader(EtcdSettings(endpoints=["http://127.0.0.1:2379"]))
    with pytest.raises(etcd_client.ConfigurationError) as raised:
        call(reader)
    assert "grpcio and protobuf are required" in str(raised.value) and "pip install grpcio protobuf" in str(raised.value)


def test_without_protobuf_a_protobuf_value_is_a_configuration_error_not_an_undecodable_one(monkeypatch):
    value = b"k8s\x00" + k8s_pb2.Unknown(typeMeta=k8s_pb2.TypeMeta(apiVersion=b"v1", kind=b"ConfigMap")).SerializeToString()
    monkeypatch.setitem(sys.modules, "google.protobuf.message", None)  # what a host without protobuf gets on import
    monkeypatch.setattr(envelope, "_PROTO_CACHE", {})
    protobuf.messages.cache_clear()
    try:
        for read in (envelope.decode_value, envelope.protobuf_uid):
            with pytest.raises(etcd_client.ConfigurationError) as raised:
                read(value)
            assert "protobuf is required" in str(raised.value) and "pip install protobuf" in str(raised.value)
    finally:
        protobuf.messages.cache_clear()
