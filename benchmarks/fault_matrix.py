# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fault matrix: the client-side migration (``storage_migration``, backend client) of one store on real binaries
under each fault, every run on its own fresh copy of the same store, every object checked afterwards.

The store: two kube-apiservers 1.36 (tests/realcp, the beta APIs on as ``RELEASE_FLAGS`` sets them) on etcd 3.5 with
TLS (client certificates), seeded through the API by keep-alive connections:
  ``--configmaps`` ConfigMaps (label ``bench=faults``, about 330 bytes of data, across ``--namespaces`` namespaces)
  and ``--crs`` custom resources of gizmos.faults.example.com, all written while the CRD stored v1alpha1; then the
  CRD's storage version becomes v1 (status.storedVersions [v1alpha1, v1]): every custom resource needs a migration.
Both apiservers and etcd are stopped and etcd's data directory copied once. For each fault the copy is restored (the
identical store), etcd and both apiservers started (ready, and both serving the CRD), and the migration run as
Ansible runs a module (tests/integration/test_migration_faults.py ``_module_process``): its own process,
``python plugins/modules/storage_migration.py <args file>``, with ``resources: [configmaps, gizmos.faults.example.com]``,
``backend: client``, its own ``checkpoint_dir``, everything else at the module's defaults (``--qps`` 0: no limit).
The faults:
  etcd-frozen          etcd SIGSTOPped for 10 s, then SIGCONT (its ports stay bound, the apiservers' requests hang)
  etcd-restarted       etcd SIGKILLed, started again on its data dir 20 s later
  apiserver-restarted  apiserver 0 (the kubeconfig's) stopped (SIGTERM) and started again, waited ready
  killed-resumed       the module process SIGKILLed, then the same migration run again (same checkpoint_dir): it waits
                       out the killed run's Leases (90 s), resumes from the checkpoint and verifies every object
  concurrent-updates   from the migration's start, 2 writer threads (one per apiserver, each its own half of the
                       objects) merge-patch random objects with a counter (``data.counter`` / ``spec.counter``) until the
                       migration ends or ``--updates`` were sent
  delete-recreate      from the migration's start, random objects deleted and created again with new content
                       (``recreated``; the custom resources through v1), alternately through each apiserver, until the
                       migration ends or ``--recreate`` were re-created
  two-runs             two migrations started at once, one through each apiserver (a kubeconfig each)
  token-revoked        the run's token is a ServiceAccount's (cluster-admin); the ServiceAccount is deleted mid-run.
                       The apiserver caches an accepted token for 10 s: this run is paced (``qps`` per resource: the
                       ConfigMaps / 40, at least 10) so that the 401 lands before the end. Expected to stop, with
                       "HTTP 401" and "fix the credentials" in its message.
The first four (and token-revoked) strike when the migration is under way: a checkpoint (saved after each finished
chunk, ``objects_migrated``) shows ``--trigger`` of a resource's objects done, or the resource done (its checkpoint
removed). ``landed`` says whether the fault began before the migration process exited.

After each run, with the plane up (both apiservers ready again), every seeded object is read through etcd (its key,
the uid in its value, a custom resource's stored apiVersion and content) and through apiserver 0 (uid, labels,
annotations, finalizers, owners, data / spec), and compared with the same reads made before the run:
  lost        present before, absent after (in etcd or the API), or another uid, and not deleted by the fault
  changed     content differs, the writer's counter left out; a re-created object is judged by ``clobbered`` instead
  false cur   a StorageState record saying [current] (persistedStorageVersionHashes == [currentStorageVersionHash])
              while etcd (``storage_version_audit``, unthrottled) holds an object of that resource in another hash, or
              the CRD's status.storedVersions pruned to [v1] while a custom resource is still stored as v1alpha1
  old left    custom resources still stored as v1alpha1 (0 expected after a run that ended with success; the totals
              row leaves out token-revoked, which stops on purpose)
  upd lost    acknowledged writer updates (200) whose counter is not in the object afterwards (a later ack of the
              same object counts the earlier one as kept): the migration's stale rewrite clobbered it
  clobbered   re-created objects absent afterwards, with another uid, or with content other than re-created
  ok          whether the run ended as it should: rc 0, every migration succeeded and verified (killed-resumed: the
              re-run's, which resumed; two-runs: both; token-revoked: rc != 0 with the credentials diagnosis)
``s`` is the wall clock of the fault's migration run(s), from the first start to the last end. A row per fault and
a totals row; JSON to benchmarks/results/faults-<stamp>.json (printed as the last line).

    export PATH=$PWD/.venv/bin:$PATH KUBEUPGRADE_TEST_K8S_ASSETS=$PWD/.cache/k8s-assets
    python benchmarks/fault_matrix.py                                   # 20,000 ConfigMaps + 2,000 custom resources
    python benchmarks/fault_matrix.py --configmaps 1000 --crs 200       # a quick check
    python benchmarks/fault_matrix.py --configmaps 1000 --crs 200 --faults etcd-frozen two-runs

Not a test: nothing is asserted; the exit status is 1 when a row is not clean (anything lost, changed, clobbered, a
false record, a lost update, or a run that did not end as it should).

Results, run by run: benchmarks/README.md, section fault_matrix.py.
"""

import argparse
import base64
import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import HERE, REPO, on_path, run_module, run_parallel, wait_for
from bench_real_apiserver import Connections

on_path("tests/integration", "tests", "collections")

RELEASE, ETCD = "1.36", "3.5"
SEED_THREADS = 8
GROUP, PLURAL = "faults.example.com", "gizmos"
CRD_NAME = f"{PLURAL}.{GROUP}"
RESOURCES = ["configmaps", CRD_NAME]
LABEL = "bench=faults"
SCHEMA = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
MODULE = os.path.join(REPO, "plugins", "modules", "storage_migration.py")
STATES = "/apis/migration.k8s.io/v1alpha1/storagestates"
EXPECTED_TO_STOP = {"token-revoked"}  # its objects not rewritten yet stay in v1alpha1, rightly
FAULTS = ["etcd-frozen", "etcd-restarted", "apiserver-restarted", "killed-resumed", "concurrent-updates",
          "delete-recreate", "two-runs", "token-revoked"]
TRIGGERED = {"etcd-frozen", "etcd-restarted", "apiserver-restarted", "killed-resumed", "token-revoked"}


# --- talking to the plane -----------------------------------------------------------------------------------


def conn_state(plane, index=0, token="admin-token"):
    return {"endpoint": plane.endpoints[index], "token": token, "ca_file": plane.ca_cert}


def send(conns, method, path, body=None, content_type="application/json"):
    """One request on this thread's keep-alive connection; once more on a fresh one when that was closed."""
    data = json.dumps(body).encode() if body is not None else None
    for attempt in range(2):
        try:
            return conns.send(method, path, data, content_type)
        except (OSError, http.client.HTTPException):
            conns.local.conn = None
            if attempt:
                raise
    raise AssertionError("unreachable")


def call(conns, method, path, body=None, tries=1):
    """The JSON answer; RuntimeError on another status (429 and 5xx retried ``tries`` times, 1 s apart)."""
    for attempt in range(tries):
        try:
            status, raw = send(conns, method, path, body)
        except (OSError, http.client.HTTPException) as error:
            status, raw = 0, str(error).encode()
        if status in (200, 201):
            return json.loads(raw) if raw else {}
        if attempt + 1 < tries and (status in (0, 429) or status >= 500):
            time.sleep(1.0)
            continue
        raise RuntimeError(f"{method} {path}: {status} {raw[:300]!r}")
    raise AssertionError("unreachable")


def list_all(conns, path):
    """Every item of a collection, in pages of 500 (a 429 of an apiserver still initialising is waited out)."""
    items, token = [], ""
    while True:
        sep = "&" if "?" in path else "?"
        page = call(conns, "GET", f"{path}{sep}limit=500" + (f"&continue={token}" if token else ""), tries=60)
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


def served(plane, index, path):
    try:
        return send(Connections(conn_state(plane, index)), "GET", path)[0] == 200
    except (OSError, http.client.HTTPException):
        return False


def etcd_range(plane, prefix, page=2000):
    """[(key, value)] under ``prefix`` (bytes), paged (etcd's JSON gateway, the plane's TLS client certificate)."""
    prefix = prefix.encode()
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    found, start = [], prefix
    while True:
        body = {"key": base64.b64encode(start).decode(), "range_end": base64.b64encode(end).decode(), "limit": page}
        answer = json.loads(plane.etcd._request("POST", "/v3/kv/range", body))
        kvs = answer.get("kvs") or []
        found += [(base64.b64decode(kv["key"]), base64.b64decode(kv.get("value", ""))) for kv in kvs]
        if not answer.get("more") or not kvs:
            return found
        start = base64.b64decode(kvs[-1]["key"]) + b"\x00"


# --- the store ----------------------------------------------------------------------------------------------


def gizmos_crd(storage):
    versions = [{"name": v, "served": True, "storage": v == storage, "schema": SCHEMA} for v in ("v1alpha1", "v1")]
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": CRD_NAME},
            "spec": {"group": GROUP, "scope": "Namespaced", "versions": versions,
                     "names": {"plural": PLURAL, "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList"}}}


def parallel(count, work, threads=SEED_THREADS):
    run_parallel(count, work, threads)


def post_retrying(conns, path, body):
    answer = (0, b"")
    for _attempt in range(8):
        try:
            answer = send(conns, "POST", path, body)
        except (OSError, http.client.HTTPException) as error:
            answer = (0, str(error).encode())
        if answer[0] in (201, 409):
            return
        time.sleep(0.5)
    raise RuntimeError(f"POST {path}: {answer[0]} {answer[1][:300]!r}")


def namespaces(args):
    return [f"fault-{i:03d}" for i in range(args.namespaces)]


def seed(plane, args):
    """The store of the docstring, through apiserver 0."""
    conns = Connections(conn_state(plane))
    spaces = namespaces(args)
    for namespace in spaces:
        post_retrying(conns, "/api/v1/namespaces", {"metadata": {"name": namespace}})
    payload = "x" * 300

    def configmap(i):
        post_retrying(conns, f"/api/v1/namespaces/{spaces[i % len(spaces)]}/configmaps",
                      {"metadata": {"name": f"cm-{i:06d}", "labels": {"bench": "faults"}}, "data": {"i": str(i), "v": payload}})

    def gizmo(i):
        post_retrying(conns, f"/apis/{GROUP}/v1alpha1/namespaces/{spaces[i % len(spaces)]}/{PLURAL}",
                      {"apiVersion": f"{GROUP}/v1alpha1", "kind": "Gizmo",
                       "metadata": {"name": f"g-{i:06d}", "labels": {"bench": "faults"}},
                       "spec": {"size": i, "note": "y" * 100}})

    started = time.perf_counter()
    parallel(args.configmaps, configmap)
    call(conns, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", gizmos_crd("v1alpha1"))
    wait_for(lambda: send(conns, "GET", f"/apis/{GROUP}/v1alpha1/{PLURAL}?limit=1")[0] == 200, "the gizmos CRD")
    parallel(args.crs, gizmo)
    crd = call(conns, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
    for version in crd["spec"]["versions"]:
        version["storage"] = version["name"] == "v1"
    call(conns, "PUT", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}", crd)
    crd = call(conns, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
    return {"configmaps": args.configmaps, "crs": args.crs, "stored_versions": crd["status"].get("storedVersions"),
            "seconds": time.perf_counter() - started}


class Store:
    """The plane whose etcd data directory is replaced by the pristine copy before each run."""

    def __init__(self, plane, pristine):
        self.plane, self.pristine = plane, pristine
        self.data = os.path.join(plane.etcd.workdir, "data")
        self.extra = []  # Popen of the processes a run started

    def save(self):
        self.stop()
        shutil.copytree(self.data, self.pristine)

    def stop(self):
        for process in self.extra:
            if process.poll() is None:
                process.kill()
                process.wait()
        self.extra = []
        if self.plane.etcd.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.plane.etcd.process.pid, signal.SIGCONT)  # a run that stopped while etcd was frozen
        for index in range(len(self.plane.endpoints)):
            with contextlib.suppress(Exception):
                self.plane.stop(index)
        self.plane.etcd.stop()

    def fresh(self):
        """etcd on a copy of the pristine data, both apiservers on it, ready and serving the gizmos CRD."""
        shutil.rmtree(self.data, ignore_errors=True)
        shutil.copytree(self.pristine, self.data)
        self.restart_etcd(0)
        for index in range(len(self.plane.endpoints)):
            self.plane.start_one(index, RELEASE, wait=False)
        self.ready()

    def restart_etcd(self, pause):
        from realcp.plane import locked_state, process_start
        if self.plane.etcd.process is not None:
            self.plane.etcd.process.kill()
            self.plane.etcd.process.wait()
            self.plane.etcd.stop()  # closes its log; the same data dir and ports below
        time.sleep(pause)
        self.plane.etcd.start(timeout=120)
        with locked_state(self.plane.state_file) as state:
            state["etcd_process"] = {"pid": self.plane.etcd.process.pid, "pid_start": process_start(self.plane.etcd.process.pid)}

    def ready(self, timeout=300.0):
        """Every apiserver answers /readyz and serves the gizmos as v1."""
        from realcp.plane import wait_ready
        for index in range(len(self.plane.endpoints)):
            wait_ready(self.plane.state(), index, timeout, self.plane._processes.get(index))
        for index in range(len(self.plane.endpoints)):
            wait_for(lambda i=index: served(self.plane, i, f"/apis/{GROUP}/v1/{PLURAL}?limit=1"),
                     f"apiserver {index} serving {CRD_NAME}", timeout)


# --- what is stored: before and after -------------------------------------------------------------------------


def project(item):
    """What a rewrite must not change: uid, labels, annotations, finalizers, owners, data / binaryData / spec (the
    writer's ``counter`` left out); and the counter."""
    meta = item.get("metadata") or {}
    body = dict(item.get("data") or {}) if "spec" not in item else dict(item.get("spec") or {})
    counter = body.pop("counter", None)
    content = {"uid": meta.get("uid"), "labels": meta.get("labels") or {}, "annotations": meta.get("annotations") or {},
               "finalizers": meta.get("finalizers") or [], "owners": meta.get("ownerReferences") or [],
               "deleting": meta.get("deletionTimestamp"), "body": body, "binary": item.get("binaryData") or {}}
    return content, counter


def key_of(kind, item):
    meta = item["metadata"]
    return (kind, meta.get("namespace"), meta["name"])


def read_api(plane):
    """{(kind, namespace, name): (content, counter)} of every seeded object, through apiserver 0."""
    conns = Connections(conn_state(plane))
    found = {}
    for kind, path in (("cm", f"/api/v1/configmaps?labelSelector={LABEL}"), ("cr", f"/apis/{GROUP}/v1/{PLURAL}")):
        for item in list_all(conns, path):
            found[key_of(kind, item)] = project(item)
    return found


def read_etcd(plane, spaces):
    """{(kind, namespace, name): (stored apiVersion, value)} of every object in the seeded namespaces, from etcd."""
    found = {}
    for kind, prefix in (("cm", "/registry/configmaps/"), ("cr", f"/registry/{GROUP}/{PLURAL}/")):
        for key, value in etcd_range(plane, prefix):
            namespace, _sep, name = key[len(prefix):].decode().partition("/")
            if namespace not in spaces:
                continue
            version = "v1"
            if kind == "cr":
                with contextlib.suppress(ValueError):
                    version = json.loads(value).get("apiVersion")
            found[(kind, namespace, name)] = (version, value)
    return found


def etcd_content(kind, value):
    """A custom resource's content as etcd holds it (JSON); None for a ConfigMap (protobuf: only its uid is checked)."""
    if kind != "cr":
        return None
    try:
        return project(json.loads(value))[0]
    except ValueError:
        return "unreadable"


def snapshot(plane, spaces):
    return {"api": read_api(plane), "etcd": read_etcd(plane, spaces)}


def audit(plane):
    from ansible_collections.kubeupgrade.storage.plugins.modules import storage_version_audit
    settings = plane.etcd_settings
    params = {"etcd_endpoints": settings["endpoints"], "etcd_ca_cert": settings["ca_cert"],
              "etcd_client_cert": settings["client_cert"], "etcd_client_key": settings["client_key"],
              "pages_per_second": 0, "names_limit": 0}
    result = run_module(storage_version_audit, params)
    if result.get("failed"):
        raise RuntimeError(f"audit failed: {result.get('msg')}")
    return result


def false_current(plane):
    """(StorageState records and CRD storedVersions that claim [current] while etcd holds another version, and the
    records that say [current] at all), as ([text], [resource])."""
    conns = Connections(conn_state(plane))
    found = audit(plane)
    problems, current = [], []
    status, raw = send(conns, "GET", STATES)
    records = json.loads(raw).get("items") or [] if status == 200 else []
    for record in records:
        name = record["metadata"]["name"]
        state = record.get("status") or {}
        persisted, hash_now = state.get("persistedStorageVersionHashes"), state.get("currentStorageVersionHash")
        if not hash_now or persisted != [hash_now]:
            continue
        current.append(name)
        stored = set(((found.get("resources") or {}).get(name) or {}).get("hashes") or [])
        if stored - {hash_now}:
            problems.append(f"{name} says [{hash_now}], etcd holds {sorted(stored)}")
    crd = call(conns, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}", tries=30)
    stored_versions = crd["status"].get("storedVersions")
    versions = {v["api_version"] for v in ((found.get("resources") or {}).get(CRD_NAME) or {}).get("versions") or []}
    if stored_versions == ["v1"] and versions - {f"{GROUP}/v1"}:
        problems.append(f"{CRD_NAME} storedVersions [v1], etcd holds {sorted(versions)}")
    return problems, current, stored_versions


def compare(before, after, fault_state):
    """The checks of the docstring, as counts (and a few names of each)."""
    deleted_only = fault_state.get("deleted_only", set())
    recreated = fault_state.get("recreated", {})
    lost, changed, clobbered = [], [], []
    keys = set(before["api"]) | set(before["etcd"])
    for key in sorted(keys):
        if key in deleted_only:
            continue
        api_before, api_after = before["api"].get(key), after["api"].get(key)
        etcd_before, etcd_after = before["etcd"].get(key), after["etcd"].get(key)
        if key in recreated:
            want = recreated[key]
            if api_after is None or etcd_after is None:
                clobbered.append(key)
            elif api_after[0] != want or want["uid"].encode() not in etcd_after[1] \
                    or etcd_content(key[0], etcd_after[1]) not in (None, want):
                clobbered.append(key)
            continue
        if api_after is None or etcd_after is None:
            lost.append(key)
            continue
        uid = (api_before or api_after)[0]["uid"]
        if api_before is None or api_after[0]["uid"] != uid or uid.encode() not in etcd_after[1]:
            lost.append(key)  # another object under the same name: the one before is gone
            continue
        if api_after[0] != api_before[0] or (etcd_before and etcd_content(key[0], etcd_after[1]) != etcd_content(key[0], etcd_before[1])):
            changed.append(key)
    updates_lost = 0
    for key, value in fault_state.get("acks", []):
        final = after["api"].get(key)
        counter = final[1] if final else None
        if counter is None or int(counter) < value:
            updates_lost += 1
    old_left = sum(1 for (kind, _ns, _name), (version, _v) in after["etcd"].items() if kind == "cr" and version != f"{GROUP}/v1")
    return {"lost": len(lost), "changed": len(changed), "clobbered": len(clobbered), "updates_lost": updates_lost,
            "old_left": old_left, "examples": {"lost": lost[:5], "changed": changed[:5], "clobbered": clobbered[:5]}}


# --- a migration run ------------------------------------------------------------------------------------------


class Migration:
    """storage_migration in its own process, as Ansible runs it; ``result()`` waits and reads its answer."""

    def __init__(self, ctx, name, kubeconfig=None, **extra):
        self.name = name
        params = {"kubeconfig": kubeconfig or ctx.plane.kubeconfig, "endpoints": ctx.plane.endpoints,
                  "resources": RESOURCES, "backend": "client", "checkpoint_dir": ctx.checkpoints,
                  "qps": ctx.args.qps, "timeout": ctx.args.run_timeout, **extra}
        args_file = os.path.join(ctx.rundir, f"args-{name}.json")
        with open(args_file, "w", encoding="utf-8") as handle:
            json.dump({"ANSIBLE_MODULE_ARGS": params}, handle)
        self.out_path = os.path.join(ctx.rundir, f"module-{name}.out")
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "collections"))
        self.started = time.monotonic()
        with open(self.out_path, "w", encoding="utf-8") as out:
            self.process = subprocess.Popen([sys.executable, MODULE, args_file], stdout=out, stderr=subprocess.STDOUT,
                                            env=env, cwd=ctx.rundir)
        ctx.store.extra.append(self.process)
        self.ended = None

    def running(self):
        if self.process.poll() is None:
            return True
        self.ended = self.ended or time.monotonic()
        return False

    def wait(self, timeout):
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.ended = self.ended or time.monotonic()

    def result(self):
        text = Path(self.out_path).read_text(encoding="utf-8", errors="replace")
        lines = [line for line in text.splitlines() if line.startswith("{")]
        try:
            answer = json.loads(lines[-1]) if lines else {}
        except ValueError:
            answer = {}
        if not answer and self.process.returncode == -signal.SIGKILL:
            answer = {"failed": True, "msg": "(killed: SIGKILL, no answer)"}
        elif not answer:
            answer = {"failed": True, "msg": f"no JSON answer (rc {self.process.returncode}): {text[-300:]}"}
        return {"rc": self.process.returncode, "seconds": (self.ended or time.monotonic()) - self.started,
                "failed": bool(answer.get("failed")), "msg": answer.get("msg") or "",
                "migrations": [{k: m.get(k) for k in ("resource", "status", "verified", "objects_migrated", "objects_failed",
                                                      "storage_hash")}
                               | {k: (m.get("progress") or {}).get(k) for k in ("resumed", "verification_pass", "conflicts", "retries")}
                               for m in answer.get("migrations") or []],
                "skipped": [s.get("resource") for s in answer.get("skipped_resources") or []]}


def succeeded(result, resources=None):
    """rc 0 and every resource migrated, succeeded and verified (or skipped: another run recorded it)."""
    resources = RESOURCES if resources is None else resources
    done = {m["resource"] for m in result["migrations"] if m["status"] == "succeeded" and m["verified"]}
    return result["rc"] == 0 and not result["failed"] and set(resources) <= done | set(result["skipped"])


def progress(ctx):
    """{resource: objects_migrated} of the checkpoints now, and the resources whose checkpoint came and went."""
    now = {}
    for path in Path(ctx.checkpoints).glob("storage-migration-*.json"):
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(path.read_text(encoding="utf-8"))
            now[data["resource"]] = int(data.get("objects_migrated") or 0)
    for resource in now:
        ctx.seen.add(resource)
    return now, {r for r in ctx.seen if r not in now}


def wait_trigger(ctx, migration):
    """Block until the migration is under way (``--trigger`` of a resource's objects done, or a resource done); the
    progress then, as text, or None when the process exited first."""
    totals = {"configmaps": ctx.args.configmaps, CRD_NAME: ctx.args.crs}
    while migration.running():
        now, done = progress(ctx)
        if done or any(count >= ctx.args.trigger * totals.get(r, 1) for r, count in now.items()):
            text = ", ".join(f"{r.split('.')[0]} {c}/{totals.get(r)}" for r, c in sorted(now.items()))
            return (text + (f"; done: {', '.join(sorted(r.split('.')[0] for r in done))}" if done else "")) or "-"
        time.sleep(0.05)
    return None


class Context:
    def __init__(self, plane, store, args, rundir, keys):
        self.plane, self.store, self.args, self.rundir, self.keys = plane, store, args, rundir, keys
        self.checkpoints = os.path.join(rundir, "checkpoints")
        self.seen = set()
        self.state = {}


# --- the faults -------------------------------------------------------------------------------------------------


def struck_run(ctx, row, strike, name="run", wait=None, **extra):
    """One migration run (``Migration(ctx, name, **extra)``) struck by ``strike(migration)`` once it is under way
    (``wait_trigger``; ``row`` notes whether and when the fault landed), then waited for (``wait`` seconds, by default
    the run's timeout and 120 s more); its result."""
    migration = Migration(ctx, name, **extra)
    at = wait_trigger(ctx, migration)
    row["landed"], row["fault_at"] = at is not None, at
    if at is not None:
        strike(migration)
    migration.wait(ctx.args.run_timeout + 120 if wait is None else wait)
    return migration.result()


def fault_etcd(ctx, row, how):
    def strike(_migration):
        pid = ctx.plane.etcd.process.pid
        if how == "frozen":
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(10)
            finally:
                os.kill(pid, signal.SIGCONT)
        else:
            ctx.store.restart_etcd(20)

    result = struck_run(ctx, row, strike)
    return [result], succeeded(result)


def fault_apiserver(ctx, row):
    def strike(_migration):
        started = time.monotonic()
        ctx.plane.restart(0, RELEASE, wait=True, timeout=300)
        row["notes"].append(f"apiserver 0 back in {time.monotonic() - started:.0f} s")

    result = struck_run(ctx, row, strike)
    return [result], succeeded(result)


def fault_killed(ctx, row):
    first = struck_run(ctx, row, lambda migration: migration.process.kill(), name="killed", wait=60)
    left = progress(ctx)[0]
    row["notes"].append("checkpoints left: " + (", ".join(f"{r.split('.')[0]} {c}" for r, c in sorted(left.items())) or "none"))
    again = Migration(ctx, "rerun")
    again.wait(ctx.args.run_timeout + 120)
    second = again.result()
    resumed = sorted(m["resource"].split(".")[0] for m in second["migrations"] if m.get("resumed"))
    row["notes"].append(f"re-run {second['seconds']:.0f} s, resumed: {', '.join(resumed) or 'none'}")
    ok = succeeded(second) and (bool(resumed) or not left)
    return [first, second], ok


def fault_updates(ctx, row):
    cap, threads = ctx.args.updates, 2
    acks, errors, lock = [], {}, threading.Lock()
    counter = iter(range(1, 10**9))
    stop = threading.Event()

    def writer(index):
        conns = Connections(conn_state(ctx.plane, index % len(ctx.plane.endpoints)))
        mine = [key for key in ctx.keys if hash(key) % threads == index]  # each object written by one thread only
        rnd = random.Random(index)
        while not stop.is_set():
            with lock:
                value = next(counter)
            if value > cap:
                return
            kind, namespace, name = key = rnd.choice(mine)
            if kind == "cm":
                path, body = f"/api/v1/namespaces/{namespace}/configmaps/{name}", {"data": {"counter": str(value)}}
            else:
                path, body = f"/apis/{GROUP}/v1/namespaces/{namespace}/{PLURAL}/{name}", {"spec": {"counter": value}}
            try:
                status, _raw = send(conns, "PATCH", path, body, "application/merge-patch+json")
            except (OSError, http.client.HTTPException):
                status = 0
            with lock:
                if status == 200:
                    acks.append((key, value))
                else:
                    errors[status] = errors.get(status, 0) + 1

    migration = Migration(ctx, "run")
    workers = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    row["landed"] = True
    migration.wait(ctx.args.run_timeout + 120)
    during = len(acks)
    stop.set()
    for worker in workers:
        worker.join(timeout=60)
    row["landed"] = during > 0
    ctx.state["acks"] = list(acks)
    row["updates"] = len(acks)
    row["notes"].append(f"{len(acks)} updates acknowledged ({during} while the migration ran)"
                        + (f", refused {errors}" if errors else ""))
    result = migration.result()
    return [result], succeeded(result)


def fault_recreate(ctx, row):
    cap = ctx.args.recreate
    recreated, deleted_only, errors = {}, set(), {}
    stop = threading.Event()

    def churn():
        conns = [Connections(conn_state(ctx.plane, i)) for i in range(len(ctx.plane.endpoints))]
        rnd = random.Random(7)
        order = rnd.sample(ctx.keys, min(cap, len(ctx.keys)))
        for count, key in enumerate(order):
            if stop.is_set():
                return
            kind, namespace, name = key
            c = conns[count % len(conns)]
            if kind == "cm":
                base = f"/api/v1/namespaces/{namespace}/configmaps"
                body = {"metadata": {"name": name, "labels": {"bench": "faults"}}, "data": {"recreated": str(count)}}
            else:
                base = f"/apis/{GROUP}/v1/namespaces/{namespace}/{PLURAL}"
                body = {"apiVersion": f"{GROUP}/v1", "kind": "Gizmo", "metadata": {"name": name, "labels": {"bench": "faults"}},
                        "spec": {"recreated": count}}
            try:
                status, raw = send(c, "DELETE", f"{base}/{name}")
                if status != 200:
                    errors[f"DELETE {status}"] = errors.get(f"DELETE {status}", 0) + 1
                    continue
                deleted_only.add(key)
                status, raw = send(c, "POST", base, body)
                if status == 201:
                    recreated[key] = project(json.loads(raw))[0]
                    deleted_only.discard(key)
                else:
                    errors[f"POST {status}"] = errors.get(f"POST {status}", 0) + 1
            except (OSError, http.client.HTTPException) as error:
                errors[type(error).__name__] = errors.get(type(error).__name__, 0) + 1

    migration = Migration(ctx, "run")
    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    migration.wait(ctx.args.run_timeout + 120)
    during = len(recreated)
    stop.set()
    worker.join(timeout=60)
    row["landed"] = during > 0
    ctx.state.update(recreated=dict(recreated), deleted_only=set(deleted_only))
    row["recreated"] = len(recreated)
    row["notes"].append(f"{len(recreated)} re-created ({during} while the migration ran)"
                        + (f", {len(deleted_only)} deleted only" if deleted_only else "") + (f", errors {errors}" if errors else ""))
    result = migration.result()
    return [result], succeeded(result)


def fault_two_runs(ctx, row):
    second_kubeconfig = ctx.plane.write_kubeconfig(os.path.join(ctx.rundir, "apiserver-1.kubeconfig"), index=1)
    first = Migration(ctx, "a")
    second = Migration(ctx, "b", kubeconfig=second_kubeconfig, endpoints=list(reversed(ctx.plane.endpoints)),
                       checkpoint_dir=os.path.join(ctx.rundir, "checkpoints-b"))
    row["landed"] = True
    first.wait(ctx.args.run_timeout + 120)
    second.wait(ctx.args.run_timeout + 120)
    results = [first.result(), second.result()]
    for name, result in zip("ab", results):
        migrated = ", ".join(f"{m['resource'].split('.')[0]} {m['objects_migrated']}" for m in result["migrations"]) or "none"
        skipped = ", ".join(r.split(".")[0] for r in result["skipped"]) or "none"
        row["notes"].append(f"run {name}: {result['seconds']:.0f} s, migrated {migrated}, skipped {skipped}")
    return results, all(succeeded(r) for r in results)


def fault_token(ctx, row):
    conns = Connections(conn_state(ctx.plane))
    call(conns, "POST", "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "migrator"}}, tries=10)
    call(conns, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
         {"metadata": {"name": "fault-migrator"},
          "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
          "subjects": [{"kind": "ServiceAccount", "name": "migrator", "namespace": "default"}]})
    token = call(conns, "POST", "/api/v1/namespaces/default/serviceaccounts/migrator/token",
                 {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})["status"]["token"]
    kubeconfig = ctx.plane.write_kubeconfig(os.path.join(ctx.rundir, "migrator.kubeconfig"), token=token, user="migrator")
    qps = max(10.0, ctx.args.configmaps / 40.0)
    row["notes"].append(f"qps {qps:.0f}")
    result = struck_run(ctx, row, lambda _migration: call(conns, "DELETE", "/api/v1/namespaces/default/serviceaccounts/migrator"),
                        kubeconfig=kubeconfig, qps=qps)
    message = result["msg"]
    ok = result["rc"] != 0 and "HTTP 401" in message and "fix the credentials" in message
    return [result], ok


RUNNERS = {
    "etcd-frozen": lambda ctx, row: fault_etcd(ctx, row, "frozen"),
    "etcd-restarted": lambda ctx, row: fault_etcd(ctx, row, "restarted"),
    "apiserver-restarted": fault_apiserver,
    "killed-resumed": fault_killed,
    "concurrent-updates": fault_updates,
    "delete-recreate": fault_recreate,
    "two-runs": fault_two_runs,
    "token-revoked": fault_token,
}


def one_fault(plane, store, args, workdir, fault):
    row = {"fault": fault, "notes": [], "landed": None}
    rundir = os.path.join(workdir, "runs", fault)
    shutil.rmtree(rundir, ignore_errors=True)
    os.makedirs(rundir)
    started = time.monotonic()
    store.fresh()
    row["start_seconds"] = time.monotonic() - started
    spaces = set(namespaces(args))
    before = snapshot(plane, spaces)
    row["objects"] = len(before["api"])
    row["old_before"] = sum(1 for (kind, _n, _m), (version, _v) in before["etcd"].items() if kind == "cr" and version != f"{GROUP}/v1")
    ctx = Context(plane, store, args, rundir, sorted(before["api"]))
    started = time.monotonic()
    results, ok = RUNNERS[fault](ctx, row)
    row["seconds"] = time.monotonic() - started  # wall clock: two-runs' runs overlap, killed-resumed's follow each other
    row["results"] = results
    row["ok"] = ok
    store.ready()  # an apiserver or etcd restarted by the fault is back before the reads
    after = snapshot(plane, spaces)
    row.update(compare(before, after, ctx.state))
    problems, current, stored_versions = false_current(plane)
    row["false_current"], row["false_current_examples"] = len(problems), problems
    row["records_current"], row["stored_versions_after"] = current, stored_versions
    return row


# --- output -----------------------------------------------------------------------------------------------------


def first_line(text, width=110):
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return (line[:width] + ("..." if len(line) > width else "")).replace("|", "/")


def clean(row):
    return (row.get("ok") and not row.get("error") and not any(row.get(k) for k in
            ("lost", "changed", "clobbered", "updates_lost", "false_current")))


def print_table(results):
    rows = results["rows"]
    print()
    print(f"Fault matrix: {results['configmaps']} ConfigMaps + {results['crs']} {CRD_NAME} (v1alpha1 -> v1), "
          f"2 x kube-apiserver {results['apiserver']} on etcd {results['etcd']} (TLS); each fault on its own copy of the store")
    print("| fault | landed (at) | s | rc | first line of the message | ok | lost | changed | false [current] | old left "
          "| updates lost / acked | clobbered / re-created | notes |")
    print("| --- | --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for row in rows:
        results_ = row.get("results") or []
        rcs = ", ".join(str(r["rc"]) for r in results_) or "-"
        message = " / ".join(first_line(r["msg"], 90 if len(results_) > 1 else 130) for r in results_) or first_line(row.get("error", ""))
        landed = "-" if row.get("landed") is None else ("yes" if row["landed"] else "NO")
        if row.get("fault_at"):
            landed += f" ({row['fault_at']})"
        notes = list(row.get("notes") or [])
        if row.get("error"):
            notes.append("ERROR: " + first_line(row["error"], 200))
        for name in ("lost", "changed", "clobbered"):
            if (row.get("examples") or {}).get(name):
                notes.append(f"{name}: {row['examples'][name]}")
        if row.get("false_current_examples"):
            notes.append("false: " + "; ".join(row["false_current_examples"]))
        migrations = [m for r in results_ for m in r["migrations"]]
        if migrations:
            notes.append(f"409s {sum(m.get('conflicts') or 0 for m in migrations)}, "
                         f"retries {sum(m.get('retries') or 0 for m in migrations)}")
        notes.append(f"[current]: {', '.join(r.split('.')[0] for r in row.get('records_current') or []) or 'none'}; "
                     f"storedVersions {row.get('stored_versions_after')}")
        updates = f"{row.get('updates_lost', '-')} / {row['updates']}" if "updates" in row else f"{row.get('updates_lost', '-')}"
        recreated = f"{row.get('clobbered', '-')} / {row['recreated']}" if "recreated" in row else f"{row.get('clobbered', '-')}"
        print(f"| {row['fault']} | {landed} | {row.get('seconds', 0):.1f} | {rcs} | {message} | {'yes' if row.get('ok') else 'NO'} "
              f"| {row.get('lost', '-')} | {row.get('changed', '-')} | {row.get('false_current', '-')} | {row.get('old_left', '-')} "
              f"| {updates} | {recreated} | {'; '.join(notes).replace('|', '/')} |")
    total = {k: sum(row.get(k) or 0 for row in rows) for k in
             ("lost", "changed", "false_current", "updates_lost", "updates", "clobbered", "recreated")}
    total["old_left"] = sum(row.get("old_left") or 0 for row in rows if row["fault"] not in EXPECTED_TO_STOP)
    ok = sum(1 for row in rows if row.get("ok"))
    landed = sum(1 for row in rows if row.get("landed"))
    print(f"| **total** ({len(rows)} runs) | {landed}/{len(rows)} | {sum(row.get('seconds', 0) for row in rows):.0f} | | "
          f"| {ok}/{len(rows)} | {total['lost']} | {total['changed']} | {total['false_current']} | {total['old_left']} (runs to the end) "
          f"| {total['updates_lost']} / {total['updates']} | {total['clobbered']} / {total['recreated']} | |")


# --- main -----------------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configmaps", type=int, default=20000)
    parser.add_argument("--crs", type=int, default=2000, help="custom resources, all stored as v1alpha1")
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--faults", nargs="+", default=FAULTS, choices=FAULTS)
    parser.add_argument("--qps", type=float, default=0, help="the module's qps (per resource; 0: no limit)")
    parser.add_argument("--trigger", type=float, default=0.25,
                        help="a triggered fault strikes once a checkpoint shows this share of a resource's objects done")
    parser.add_argument("--updates", type=int, default=2000, help="at most this many concurrent updates")
    parser.add_argument("--recreate", type=int, default=200, help="at most this many objects deleted and re-created")
    parser.add_argument("--run-timeout", type=float, default=1800.0, help="the module's timeout")
    parser.add_argument("--workdir", help="keep the plane's files here (default: a temporary directory)")
    args = parser.parse_args()
    from realcp.plane import ControlPlane, binary

    results_dir = os.path.join(HERE, "results")
    os.makedirs(results_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = {"apiserver": os.path.basename(os.path.dirname(binary(RELEASE))).lstrip("v"), "etcd": ETCD,
               "configmaps": args.configmaps, "crs": args.crs, "namespaces": args.namespaces, "nproc": os.cpu_count(),
               "loadavg_before": os.getloadavg(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "command": " ".join(sys.argv), "rows": []}
    begun = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fault-matrix-") as scratch:
        workdir = args.workdir or scratch
        plane = ControlPlane(os.path.join(workdir, "plane"), releases=[RELEASE, RELEASE], etcd_version=ETCD, etcd_tls=True)
        try:
            plane.start(timeout=300)
            results["seed"] = seed(plane, args)
            print(f"seeded in {results['seed']['seconds']:.0f} s: {json.dumps(results['seed'])}", flush=True)
            store = Store(plane, os.path.join(workdir, "pristine-etcd-data"))
            store.save()
            for fault in args.faults:
                print(f"--- {fault} ({time.strftime('%H:%M:%S')}, load {os.getloadavg()[0]:.1f})", flush=True)
                try:
                    row = one_fault(plane, store, args, workdir, fault)
                except Exception as error:  # one fault's failure is reported, the others still run
                    row = {"fault": fault, "ok": False, "error": f"{type(error).__name__}: {error}", "notes": []}
                finally:
                    store.stop()
                row["loadavg"] = os.getloadavg()
                results["rows"].append(row)
                print(json.dumps({k: v for k, v in row.items() if k not in ("results",)}, default=str), flush=True)
        finally:
            plane.stop_all()
    results["seconds"] = time.monotonic() - begun
    results["loadavg_after"] = os.getloadavg()
    path = os.path.join(results_dir, f"faults-{stamp}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2, default=str)
    print_table(results)
    print(f"\n{results['seconds']:.0f} s in all; load average before {results['loadavg_before']}, after "
          f"{results['loadavg_after']}; JSON: {path}")
    print(json.dumps(results, default=str))
    sys.exit(0 if all(clean(row) for row in results["rows"]) else 1)


if __name__ == "__main__":
    main()
