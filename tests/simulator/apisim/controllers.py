"""In-process controllers: the in-tree storage version migrator (storagemigration.k8s.io) and the
kube-storage-version-migrator (migration.k8s.io/v1alpha1), both talking to the first running apiserver."""

import copy
import threading
import time

from . import crds, errors
from .api import now
from .profiles import builtin_resources

SVM_GROUP = "storagemigration.k8s.io"
SIGS_GROUP = "migration.k8s.io"
TERMINAL = ("Succeeded", "Failed")


def _conditions(obj):
    return (obj.get("status") or {}).get("conditions") or []


def _finished(obj):
    return any(c.get("type") in TERMINAL and c.get("status") == "True" for c in _conditions(obj))


class Controllers:
    """Polls the store every few milliseconds and drives migrations forward, one step per object per tick."""

    def __init__(self, plane, interval=0.05):
        self.plane = plane
        self.interval = interval
        self._stop = threading.Event()
        self._seen = {}
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()

    def stop(self):
        self._stop.set()

    def _run(self):
        while not self._stop.wait(self.interval):
            api = self.plane.api()
            if api is None:
                continue
            self._intree(api)
            self._sigs(api)

    def _due(self, obj):
        """Whether ``migrator_delay`` has passed since the controller first saw this object."""
        uid = obj["metadata"]["uid"]
        first = self._seen.setdefault(uid, time.monotonic())
        return time.monotonic() - first >= self.plane.migrator_delay

    @staticmethod
    def _write_status(api, rtype, entry, status, spec=None):
        obj = copy.deepcopy(entry.obj)
        obj["status"] = status
        if spec is not None:
            obj["spec"] = spec
        with api.store.lock:
            current = api.store.get(rtype.bucket, entry.namespace, entry.name)
            if current is None or current.obj["metadata"]["uid"] != obj["metadata"]["uid"]:
                return None
            return api._store(rtype, obj, entry.namespace, entry.name)

    # -- in-tree storagemigration.k8s.io ---------------------------------------------------------------------
    def _intree(self, api):
        info = builtin_resources(api.server.release).get((SVM_GROUP, "storageversionmigrations"))
        if info is None:
            return
        version = info.served[0]
        svm_type = api.resolve(SVM_GROUP, version, "storageversionmigrations")
        for entry in api.store.entries(svm_type.bucket):
            if svm_type.decode_error(entry.encoded) or _finished(entry.obj) or not self._due(entry.obj):
                continue
            self._intree_step(api, svm_type, version, entry)

    def _intree_step(self, api, svm_type, version, entry):
        alpha = version == "v1alpha1"
        spec = entry.obj.get("spec", {}).get("resource", {})
        group, resource = spec.get("group", ""), spec.get("resource", "")
        target = self._intree_target(api, group, spec.get("version"), resource, alpha)
        status = copy.deepcopy(entry.obj.get("status") or {})
        if group == "" and resource == "events":
            status.setdefault("resourceVersion", str(api.store.rv))
            status["conditions"] = [self._condition(alpha, "Failed", "True", "StorageVersionMigrationFailed",
                                                    "resource not found")]
            self._write_status(api, svm_type, entry, status)
            return
        if target is None:
            return
        if "resourceVersion" not in status:
            status["resourceVersion"] = str(api.store.rv)
            self._write_status(api, svm_type, entry, status)
            return
        try:
            api._check_decodable(target, api.store.buckets[target.bucket], None)
        except errors.ApiError:
            return
        crd_generation = self._crd_generation(api, group, resource)
        running = self._condition(alpha, "Running", "True", "StorageVersionMigrationInProgress")
        status["conditions"] = [running]
        entry = self._write_status(api, svm_type, entry, status)
        if entry is None:
            return
        failed = False
        for obj_entry in api.store.entries(target.bucket):
            meta = obj_entry.obj["metadata"]
            patch = {"apiVersion": target.api_version, "kind": target.kind, "metadata": {
                "name": obj_entry.name, "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}}
            try:
                api._apply(target, obj_entry.namespace, obj_entry.name, patch, None)
            except errors.ApiError as error:
                if error.code not in (404, 409):
                    failed = True
                    break
        running = self._condition(alpha, "Running", "False", "StorageVersionMigrationInProgress")
        if failed:
            final = self._condition(alpha, "Failed", "True", "StorageVersionMigrationFailed",
                                    "migration encountered unhandled error")
        else:
            final = self._condition(alpha, "Succeeded", "True", "StorageVersionMigrationSucceeded")
        status["conditions"] = [running, final]
        if self._write_status(api, svm_type, entry, status) and not failed and not alpha:
            self._prune_stored_versions(api, group, resource, crd_generation)

    @staticmethod
    def _intree_target(api, group, version, resource, alpha):
        if alpha:
            return api.resolve(group, version, resource) if version else None
        info = builtin_resources(api.server.release).get((group, resource))
        if info is not None:
            return api.resolve(group, info.served[0], resource)
        custom = crds.registry(api.store).get((group, resource))
        return api.resolve(group, custom.served[0], resource) if custom and custom.served else None

    @staticmethod
    def _condition(alpha, kind, state, reason, message=None):
        if alpha:
            condition = {"type": kind, "status": state, "lastUpdateTime": now(), "reason": reason}
            if message:
                condition["message"] = message
            return condition
        return {"type": kind, "status": state, "lastTransitionTime": now(), "reason": reason,
                "message": message or ""}

    @staticmethod
    def _crd_generation(api, group, resource):
        crd = api.store.get(crds.CRD_BUCKET, None, f"{resource}.{group}")
        return crd.obj["metadata"].get("generation") if crd else None

    def _prune_stored_versions(self, api, group, resource, generation):
        """From v1beta1 on, a successful migration sets the CRD's storedVersions to [storage version]."""
        entry = api.store.get(crds.CRD_BUCKET, None, f"{resource}.{group}")
        if entry is None or entry.obj["metadata"].get("generation") != generation:
            return
        rtype = api.resolve(crds.CRD_GROUP, "v1", "customresourcedefinitions")
        status = copy.deepcopy(entry.obj.get("status") or {})
        status["storedVersions"] = [crds.storage_version(entry.obj)]
        self._write_status(api, rtype, entry, status)

    # -- kube-storage-version-migrator ---------------------------------------------------------------------------
    def _sigs(self, api):
        svm_type = api.resolve(SIGS_GROUP, "v1alpha1", "storageversionmigrations")
        if svm_type is None:
            return
        pending = [e for e in api.store.entries(svm_type.bucket) if not _finished(e.obj)]
        if not pending:
            return
        running = [e for e in pending if any(c.get("type") == "Running" for c in _conditions(e.obj))]
        entry = running[0] if running else min(
            pending, key=lambda e: (e.obj["metadata"].get("creationTimestamp", ""), e.name))
        if self._due(entry.obj):
            self._sigs_step(api, svm_type, entry)

    def _sigs_step(self, api, svm_type, entry):
        if not _conditions(entry.obj):
            entry = self._write_status(api, svm_type, entry, {"conditions": [
                {"lastUpdateTime": now(), "status": "True", "type": "Running"}]})
            if entry is None:
                return
        spec = copy.deepcopy(entry.obj.get("spec") or {})
        resource = spec.get("resource") or {}
        target = api.resolve(resource.get("group", ""), resource.get("version", ""), resource.get("resource", ""))
        if target is None:
            self._write_status(api, svm_type, entry, {"conditions": [{
                "lastUpdateTime": now(),
                "message": "failed to list resources: the server could not find the requested resource",
                "status": "True", "type": "Failed"}]})
            return
        token = spec.get("continueToken")
        while True:
            try:
                chunk = api.list(target, None, {"limit": "500", "continue": token} if token else {"limit": "500"})
            except errors.ApiError as error:
                if error.code == 410 and isinstance(error.body, dict):
                    token = error.body["metadata"].get("continue")
                    continue
                return
            for item in chunk["items"]:
                if not self._sigs_put(api, target, item):
                    return
            token = chunk["metadata"].get("continue")
            if not token:
                break
            spec["continueToken"] = token
            entry = api.store.get(svm_type.bucket, None, entry.name)
            obj = copy.deepcopy(entry.obj)
            obj["spec"] = spec
            entry = api._store(svm_type, obj, None, entry.name)
        self._write_status(api, svm_type, entry, {"conditions": [
            {"lastUpdateTime": now(), "status": "True", "type": "Succeeded"}]})

    @staticmethod
    def _sigs_put(api, target, item):
        """PUT an object back as listed; on 409 re-read and retry; 404 means it is gone. False: retry later."""
        meta = item["metadata"]
        namespace = meta.get("namespace")
        for _unused in range(5):
            try:
                api.update(target, namespace, meta["name"], item)
                return True
            except errors.ApiError as error:
                if error.code == 404:
                    return True
                if error.code != 409:
                    return False
            try:
                item = api.get(target, namespace, meta["name"])
            except errors.ApiError as error:
                return error.code == 404
        return False
