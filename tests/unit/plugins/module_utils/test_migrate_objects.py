# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Object-level migration from an etcd audit: the plan (pure) and the object-list loop (fake apiserver)."""

import copy

import pytest
from test_migrate_migrator import ENDPOINT, FAST, TARGET, FakeApiserver, _resp, api_error

from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import plan
from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as mig
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import ConfigurationError
from ansible_collections.kubeupgrade.storage.plugins.module_utils.hashing import storage_version_hash

V1 = storage_version_hash("apps", "v1", "Deployment")
V1BETA1 = storage_version_hash("apps", "v1beta1", "Deployment")
V1BETA2 = storage_version_hash("apps", "v1beta2", "Deployment")


def version(api_version, count):
    return {"api_version": api_version, "kind": "Deployment", "count": count,
            "hash": storage_version_hash("apps", api_version.rpartition("/")[2], "Deployment")}


def entry(versions, names, readable=("v1",), unreadable=0, not_readable=None):
    return {"objects": sum(v["count"] for v in versions) + unreadable, "versions": versions, "judged": True,
            "readable_versions": list(readable), "unreadable": unreadable, "unreadable_names": [],
            "not_readable": len(names) if not_readable is None else not_readable, "not_readable_names": list(names)}


def audit(resources):
    return {"keys_scanned": 10, "endpoint": "http://127.0.0.1:2379", "measured_at": "2026-11-21T14:00:00Z",
            "not_readable": sum(e["not_readable"] or 0 for e in resources.values()), "resources": resources}


OLD = entry([version("apps/v1", 3), version("apps/v1beta1", 2)], ["a/web", "b/api"])
CLEAN = entry([version("apps/v1", 3)], [])


@pytest.mark.parametrize("resources, requested, objects, skipped", [
    pytest.param({"deployments.apps": OLD, "pods": entry([], [])}, None, {"deployments.apps": ["a/web", "b/api"]}, [],
                 id="only-resources-with-listed-objects"),
    pytest.param({"deployments.apps": CLEAN}, None, {}, [], id="nothing-listed"),
    pytest.param({"deployments.apps": OLD}, ["pods"], {}, ["deployments.apps"], id="narrowed-by-resources"),
])
def test_object_plan(resources, requested, objects, skipped):
    result = plan.objects_from_audit(audit(resources), requested)
    assert result.objects == objects
    assert [s["resource"] for s in result.skipped] == skipped


@pytest.mark.parametrize("value, fragment", [
    pytest.param("{{ audit }}", "objects_from_audit must be a dict", id="string"),
    pytest.param({"failed": True}, "objects_from_audit is a failed or skipped audit", id="failed"),
    pytest.param({"resources": {}}, "objects_from_audit is not a storage_version_audit result", id="not-an-audit"),
])
def test_object_plan_refuses_what_is_not_an_audit_naming_the_option(value, fragment):
    """The audit's own parser (``_audit/result.parse``), which names the option: the module does not wrap it."""
    with pytest.raises(ConfigurationError) as info:
        plan.objects_from_audit(value)
    assert fragment in str(info.value)


@pytest.mark.parametrize("value, fragment", [
    pytest.param({**audit({}), "resources": {"pods": {"objects": 1, "judged": False}}, "not_readable": None},
                 "was not judged", id="not-judged"),
    pytest.param(audit({"deployments.apps": entry([version("apps/v1beta1", 30)], ["a/x"], not_readable=30)}),
                 "first names of deployments.apps", id="truncated-names-refused-by-name"),
])
def test_object_plan_refuses(value, fragment):
    with pytest.raises(ValueError) as info:
        plan.objects_from_audit(value)
    assert fragment in str(info.value)


@pytest.mark.parametrize("found, current, complete, why", [
    pytest.param(OLD, V1, True, "", id="every-old-object-listed"),
    pytest.param(entry([version("apps/v1beta1", 2), version("apps/v1beta2", 1)], ["a/x", "a/y"], readable=("v1", "v1beta2")),
                 V1, False, "apps/v1beta2", id="readable-old-version-not-listed"),
    pytest.param(entry([version("apps/v1beta1", 2)], ["a/x", "a/y"], unreadable=1), V1, False, "could not be read",
                 id="unreadable"),
    pytest.param(entry([version("apps/v1beta1", 3)], ["a/x"], not_readable=3), V1, False, "first names", id="truncated"),
    pytest.param(None, V1, False, "no entry", id="absent"),
])
def test_record_only_when_the_audit_listed_every_old_object(found, current, complete, why):
    got, reason = plan.audit_listed_every_old_object(found, current)
    assert got is complete and why in reason


class ObjectApiserver(FakeApiserver):
    """Adds GET of one object (whole, or its metadata for the PartialObjectMetadata Accept) to the fake; a LIST is a
    failure here: object mode never lists."""

    def _list(self, path, query, accept=None):
        parts = path.split("/")
        assert len(parts) == 7, f"object mode must not LIST: {path}"
        key = f"{parts[4]}/{parts[6]}"
        if key not in self.objects:
            raise api_error(404, "not found", "NotFound", path=path)
        if "PartialObjectMetadata" in (accept or ""):
            return _resp({"kind": "PartialObjectMetadata", "metadata": copy.deepcopy(self.objects[key]["metadata"])})
        return _resp({"apiVersion": "v1", "kind": "ConfigMap", **self._item(self.objects[key], True)})


@pytest.fixture(params=list(mig.WRITES))
def write(request):
    return request.param


def object_migrator(server, **kwargs):
    options = {"chunk_size": 2, "concurrency": 1, "policy": FAST}
    options.update(kwargs)
    return mig.ObjectListMigrator(server, TARGET, mig.ClientOptions(**options), mig.RunIdentity("run", ENDPOINT), None) \
        .configure(sleep=lambda _s: None)


@pytest.mark.parametrize("concurrency", [1, 3])
def test_only_listed_objects_are_read_and_rewritten_two_requests_each(concurrency, write):
    server = ObjectApiserver(count=20)
    listed = ["a/cm-000", "b/cm-001", "a/cm-004"]
    before = {k: copy.deepcopy(v) for k, v in server.objects.items()}
    progress = object_migrator(server, concurrency=concurrency, write=write).run_objects(listed)
    assert sorted(server.writes) == sorted(listed)
    assert len(server.calls) == 2 * len(listed)
    assert {k for k, v in server.objects.items() if v["encoded"] == "v1"} == set(listed)
    assert {k: v["data"] for k, v in server.objects.items()} == {k: v["data"] for k, v in before.items()}
    assert progress.verified and progress.objects_written == 3 and progress.chunks == 2
    assert {m for m, _b in server.bodies} == {"PUT" if write == mig.WRITE_PUT else "PATCH"}


def test_a_listed_object_deleted_since_is_gone_and_never_recreated(write):
    server = ObjectApiserver(count=4)
    progress = object_migrator(server, write=write).run_objects(["a/cm-000", "a/missing"])
    assert progress.gone == 1 and progress.objects_written == 1 and progress.verified
    assert "a/missing" not in server.objects


def test_a_denied_write_is_named_and_not_verified(write):
    server = ObjectApiserver(count=4)
    method = "PUT" if write == mig.WRITE_PUT else "PATCH"
    server.fault(method, api_error(403, "denied by policy", "Forbidden", method=method), count=1)
    progress = object_migrator(server, write=write).run_objects(["a/cm-000", "a/cm-002"])
    assert not progress.verified and progress.failed == 1
    assert progress.failures[0]["object"].startswith("configmaps a/cm-00")


def test_nothing_listed_makes_no_request():
    server = ObjectApiserver(count=4)
    progress = object_migrator(server).run_objects([])
    assert server.calls == [] and progress.verified


@pytest.mark.parametrize("named, stored, listing", [
    pytest.param(2001, 2001, True, id="every-object-named"),
    pytest.param(500, 1000, True, id="half"),
    pytest.param(250, 1000, True, id="a-quarter"),
    pytest.param(249, 1000, False, id="less-than-a-quarter"),
    pytest.param(3, 100000, False, id="a-few-among-many"),
    pytest.param(5, 0, True, id="audit-counted-none"),
    pytest.param(0, 10, False, id="none-named"),
])
def test_named_objects_are_read_by_list_once_they_are_a_quarter_of_the_resource(named, stored, listing):
    assert plan.read_by_list(named, stored) is listing


def test_the_object_plan_keeps_what_the_audit_counted_per_resource():
    result = plan.objects_from_audit(audit({"deployments.apps": OLD, "pods": entry([], [])}))
    assert result.stored == {"deployments.apps": 5}


@pytest.mark.parametrize("concurrency", [1, 3])
def test_listed_by_list_only_the_named_objects_are_written_with_one_list_per_chunk(concurrency, write):
    server = FakeApiserver(count=20)
    named = ["a/cm-000", "b/cm-001", "a/cm-004", "b/cm-019"]
    progress = object_migrator(server, concurrency=concurrency, write=write, chunk_size=5).run_listed(named)
    assert sorted(server.writes) == sorted(named)
    gets = [call for call in server.calls if call[0] == "GET"]
    assert len(gets) == 4 and all(path == "/api/v1/configmaps" for _m, path, _q in gets)  # 20 objects, 5 a page
    assert progress.verified and progress.objects_written == 4 and progress.objects_listed == 4 and progress.gone == 0
    assert progress.bytes_to_rewrite is None  # the audit's plan sized the named objects; a page sizes the resource


def test_listed_by_list_a_named_object_no_page_holds_is_gone_and_never_recreated(write):
    server = FakeApiserver(count=4)
    progress = object_migrator(server, write=write).run_listed(["a/cm-000", "a/missing"])
    assert progress.gone == 1 and progress.objects_written == 1 and progress.verified
    assert "a/missing" not in server.objects and server.writes == ["a/cm-000"]


def test_listed_by_list_an_object_changed_since_the_list_is_a_conflict_never_overwritten(write):
    server = FakeApiserver(count=4)
    server.modified_after_list.add("a/cm-000")
    progress = object_migrator(server, write=write).run_listed(["a/cm-000", "a/cm-002"])
    assert progress.conflicts == 1 and server.writes == ["a/cm-002"] and progress.verified


def test_listed_by_list_a_denied_write_is_named_and_not_verified(write):
    server = FakeApiserver(count=4)
    method = "PUT" if write == mig.WRITE_PUT else "PATCH"
    server.fault(method, api_error(403, "denied by policy", "Forbidden", method=method), count=1)
    progress = object_migrator(server, write=write).run_listed(["a/cm-000", "a/cm-002"])
    assert not progress.verified and progress.failed == 1
