# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rehearsal's waits go through the API layer's one wait loop and one Deadline, on a fake clock: the scratch etcd
answering, the target apiserver's /readyz, the copy's CRDs being served; and its 404s are the client's ``is_missing``.

A process that exits ends its wait at once (the caller then names the log's error lines); a wait that runs out sleeps
its interval up to the timeout and never past it."""

from __future__ import annotations

import pytest
from kube_fakes import FakeApiClient, FakeClock

from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import keys as keys_mod
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd import scratch
from ansible_collections.kubeupgrade.storage.plugins.module_utils._etcd.client import EtcdError
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import paths
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.poll import Deadline
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse import reader, runner
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rehearse.model import ResourceRead
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import EndpointUnreachable

API = "https://127.0.0.1:6443"


class Process:
    """A child that exits (with ``code``) once ``exits_after`` polls have seen it running; never when None."""

    def __init__(self, exits_after=None, code=1):
        self.polls, self.exits_after, self.code = 0, exits_after, code

    def poll(self):
        self.polls += 1
        return self.code if self.exits_after is not None and self.polls > self.exits_after else None


# --- the scratch etcd ------------------------------------------------------------------------------------------


class Workspace:
    def __init__(self, log=""):
        self.log = log

    def file(self, name):
        return f"/nonexistent/{name}"

    def log_text(self, _name):
        return self.log


def _etcd(process, answers_after=None, log=""):
    """A ScratchEtcd whose status call fails until ``answers_after`` calls have failed (never answers when None)."""
    etcd = scratch.ScratchEtcd(Workspace(log), "etcd")
    etcd.process = process
    calls = []

    def status(timeout):
        calls.append(timeout)
        if answers_after is None or len(calls) <= answers_after:
            raise EtcdError(f"etcd at {etcd.url} is unreachable (gRPC UNAVAILABLE: connection refused)")
        return {"header": {}}

    etcd._status = status
    return etcd, calls


def test_the_scratch_etcd_is_waited_for_until_it_answers():
    fake = FakeClock()
    etcd, calls = _etcd(Process(), answers_after=3)
    assert etcd._wait(60.0, clock=fake, sleep=fake.sleep) is True
    assert fake.slept == [0.2, 0.2, 0.2] and calls == [2.0] * 4


def test_a_scratch_etcd_not_listening_yet_is_an_etcd_error_at_once():
    """The real status call (gRPC, a new channel each time) on a port nothing listens on: what the wait takes for
    "starting"."""
    etcd = scratch.ScratchEtcd(Workspace(), "etcd")
    with pytest.raises(EtcdError, match=r"is unreachable"):
        etcd._status(2.0)


def test_a_scratch_etcd_that_never_answers_is_waited_for_until_the_timeout_and_no_longer():
    fake = FakeClock()
    etcd, calls = _etcd(Process(), answers_after=None)
    assert etcd._wait(1.0, clock=fake, sleep=fake.sleep) is False
    assert fake.now == pytest.approx(1.0) and max(fake.slept) == pytest.approx(0.2)
    assert len(calls) == len(fake.slept) + 1


def test_a_scratch_etcd_that_exits_ends_the_wait_at_once():
    fake = FakeClock()
    etcd, calls = _etcd(Process(exits_after=2), answers_after=None)
    assert etcd._wait(60.0, clock=fake, sleep=fake.sleep) is False
    assert fake.slept == [0.2, 0.2] and len(calls) == 2


def test_a_scratch_etcd_whose_port_was_taken_ends_the_wait_at_once():
    fake = FakeClock()
    etcd, calls = _etcd(Process(), answers_after=None, log=f"listen tcp 127.0.0.1:2379: bind: {scratch.PORT_TAKEN}")
    assert etcd._wait(60.0, clock=fake, sleep=fake.sleep) is False
    assert fake.slept == [] and calls == []


# --- the target apiserver's /readyz ----------------------------------------------------------------------------


class Apiserver:
    def __init__(self, ca_cert, process):
        self.ca_cert, self.process = str(ca_cert), process

    def exit_code(self):
        return self.process.poll()


@pytest.fixture
def readyz(monkeypatch):
    """/readyz answers 500 ``not_ready`` times, then 200; ``made`` counts the clients made."""
    state = {"not_ready": 0, "asked": 0, "made": 0}

    def answer(_method, _path, _query, _body):
        state["asked"] += 1
        return (500, "[-]poststarthook/crd-informer-synced failed") if state["asked"] <= state["not_ready"] else (200, "ok")

    def client(_apiserver):
        state["made"] += 1
        return FakeApiClient(API, {paths.READYZ: answer})

    monkeypatch.setattr(runner, "_client", client)
    return state


def test_the_apiserver_is_asked_once_its_certificate_exists_and_until_it_is_ready(tmp_path, readyz):
    fake = FakeClock()
    readyz["not_ready"] = 2
    cert = tmp_path / "apiserver.crt"
    apiserver = Apiserver(cert, Process())

    def sleep(seconds):
        fake.sleep(seconds)
        if len(fake.slept) == 3:
            cert.write_text("certificate")  # written a little while after the start

    assert runner._wait_ready(apiserver, 120.0, clock=fake, sleep=sleep) is True
    assert fake.slept == [0.25] * 5 and readyz["asked"] == 3 and readyz["made"] == 1


def test_an_apiserver_that_exits_ends_the_wait_at_once(tmp_path, readyz):
    fake = FakeClock()
    (tmp_path / "apiserver.crt").write_text("certificate")
    readyz["not_ready"] = 100
    assert runner._wait_ready(Apiserver(tmp_path / "apiserver.crt", Process(exits_after=3)), 120.0,
                              clock=fake, sleep=fake.sleep) is False
    assert fake.slept == [0.25] * 3 and readyz["asked"] == 3


def test_an_apiserver_never_ready_is_waited_for_until_the_timeout_and_no_longer(tmp_path, readyz):
    fake = FakeClock()
    (tmp_path / "apiserver.crt").write_text("certificate")
    readyz["not_ready"] = 10 ** 6
    assert runner._wait_ready(Apiserver(tmp_path / "apiserver.crt", Process()), 5.0, clock=fake, sleep=fake.sleep) is False
    assert fake.now == pytest.approx(5.0) and set(fake.slept) == {0.25}


def test_a_given_deadline_bounds_the_readiness_wait(tmp_path, readyz):
    fake = FakeClock(100.0)
    readyz["not_ready"] = 10 ** 6
    assert runner._wait_ready(Apiserver(tmp_path / "apiserver.crt", Process()), Deadline(101.0, fake), sleep=fake.sleep) is False
    assert fake.now == pytest.approx(101.0) and readyz["made"] == 0, "no certificate: no client, no request"


# --- the copy's CRDs being served ------------------------------------------------------------------------------


def _stored(*names):
    return reader.StoredKeys(counts={name: 1 for name in names})


@pytest.fixture
def discoveries(monkeypatch):
    """``served_from``: the discovery from which on widgets.example.com is served (never when None)."""
    state = {"served_from": None, "count": 0}

    def discover(_client):
        state["count"] += 1
        served = reader.Served(resources={"configmaps": ("", "v1", True)})
        if state["served_from"] is not None and state["count"] >= state["served_from"]:
            served.resources["widgets.example.com"] = ("example.com", "v1", True)
        return served

    monkeypatch.setattr(reader, "discover", discover)
    return state


def _crd_client(*crds):
    return FakeApiClient(API, {paths.crd(name): (200, {"metadata": {"name": name}}) for name in crds})


def test_discovery_is_repeated_until_every_stored_custom_resource_with_a_crd_is_served(discoveries):
    fake = FakeClock()
    discoveries["served_from"] = 3
    served = reader.wait_for_custom_resources(_crd_client("widgets.example.com"), _stored("configmaps", "widgets.example.com"),
                                              timeout=30.0, sleep=fake.sleep, clock=fake)
    assert "widgets.example.com" in served.resources and fake.slept == [0.5, 0.5]


def test_a_custom_resource_never_served_leaves_the_last_discovery_at_the_timeout(discoveries):
    fake = FakeClock()
    served = reader.wait_for_custom_resources(_crd_client("widgets.example.com"), _stored("widgets.example.com"),
                                              timeout=5.0, sleep=fake.sleep, clock=fake)
    assert set(served.resources) == {"configmaps"} and fake.now == pytest.approx(5.0)
    assert set(fake.slept) == {0.5} and discoveries["count"] == len(fake.slept) + 1


def test_a_stored_custom_resource_without_a_crd_in_the_copy_is_not_waited_for(discoveries):
    fake = FakeClock()
    served = reader.wait_for_custom_resources(_crd_client(), _stored("widgets.example.com", "pods"), timeout=30.0,
                                              sleep=fake.sleep, clock=fake)
    assert "widgets.example.com" not in served.resources and fake.slept == [] and discoveries["count"] == 1


# --- what a 404 of the rehearsed apiserver means ---------------------------------------------------------------


def test_a_group_version_the_target_does_not_serve_is_not_a_failed_discovery():
    routes = {
        paths.GROUP_DISCOVERY: (200, {"groups": [
            {"name": "gone.example.com", "versions": [{"version": "v1"}], "preferredVersion": {"version": "v1"}},
            {"name": "broken.example.com", "versions": [{"version": "v1"}], "preferredVersion": {"version": "v1"}}]}),
        paths.group_version("", "v1"): (200, {"resources": [{"name": "configmaps", "namespaced": True, "kind": "ConfigMap",
                                                             "verbs": ["get", "list"]}]}),
        paths.group_version("broken.example.com", "v1"): (503, "service unavailable"),
    }  # gone.example.com/v1 answers 404: an APIService of another release left in the copy
    served = reader.discover(FakeApiClient(API, routes))
    assert served.resources == {"configmaps": ("", "v1", True)}
    assert list(served.failed) == ["broken.example.com/v1"]


def test_an_unreachable_target_stops_the_discovery():
    with pytest.raises(EndpointUnreachable):
        reader.discover(FakeApiClient(API, {paths.GROUP_DISCOVERY: (200, {"groups": []}),
                                            paths.group_version("", "v1"): EndpointUnreachable("connection refused")}))


def test_an_object_deleted_since_the_copy_is_skipped_and_one_that_fails_to_decode_is_named():
    def info(name):
        return keys_mod.KeyInfo(kind=keys_mod.OBJECT, resource="configmaps", group="", namespace="default", name=name)

    routes = {paths.resource_object("", "v1", "configmaps", "good", "default"): (200, {"metadata": {"name": "good"}}),
              paths.resource_object("", "v1", "configmaps", "bad", "default"): (500, {"kind": "Status", "message": "no key"})}
    read = ResourceRead(resource="configmaps", keys=3)
    reader._read_one_by_one(FakeApiClient(API, routes), read, ("", "v1", True), iter([info("good"), info("gone"), info("bad")]), 20)
    assert read.objects_read == 1 and read.undecodable == 1 and read.undecodable_names == ["default/bad"]
    assert read.error is None
