# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark the first verified all-current state after a roll 1.35 -> 1.36 on real binaries: the collection against
its peers, each method on its own fresh copy of one store, in the same run (issue 30, items 1 and 3).

The store: kube-apiserver 1.35.3 on etcd 3.5.30 (tests/realcp, the beta APIs on as ``RELEASE_FLAGS`` sets them for
1.35, etcd plain HTTP, no encryption at rest), seeded through the API by keep-alive connections:
  ``--objects`` ConfigMaps and Secrets (half each, about 400 bytes of data, across ``--namespaces`` namespaces),
  ``--old-objects`` VolumeAttributesClasses written through storage.k8s.io/v1beta1 (1.35 stores v1beta1, 1.36 stores
  v1: the one built-in resource whose storage version 1.36 changes and whose old version 1.36 still decodes; compare
  tests/fixtures/k8s-storage-profiles.json; scheduling.k8s.io workloads v1alpha1 also changes, but 1.36 cannot decode
  v1alpha1, so no method migrates them and none are created),
  ``--crd-objects`` custom resources of gizmos.bench.example.com, half written while the CRD stored v1alpha1 and half
  after its storage version became v1 (status.storedVersions [v1alpha1, v1]),
  and real_binaries.seed_135's objects (one in every version 1.35 stores).
etcd is stopped and its data directory copied. For each method the copy is restored (the identical store: same keys,
same revision), etcd started, and kube-apiserver 1.36.2 started in place of 1.35.3 with 1.36's flags, as a roll does.
Then the method brings the store to all-current:
  a-playbook   ``ansible-playbook playbooks/migrate.yml`` with the etcd settings (``kubeupgrade_etcd``, as
               tests/integration/real_binaries.py ``etcd_extra`` gives them, no become), everything else at its
               defaults (``--playbook-vars`` adds variables, and the row is then not at the defaults), inventory as
               ``write_inventory`` builds it: the operator's command; done when it exits 0
  a-audit      the collection's modules in a child process, in-process through their real ``main()``:
               ``storage_version_audit`` (default throttle, ``names_limit: -1``, ``readable_versions`` each resource's
               1.36 storage version from the profiles and each CRD's storage version: so it lists exactly the objects
               stored in another version), then ``storage_migration`` with ``objects_from_audit`` (defaults otherwise);
               done when it returns
  b-ksvm       kube-storage-version-migrator 5c8923c (github.com/kubernetes-sigs/kube-storage-version-migrator): its
               two CRDs applied as its manifests/storage_migration_crd.yaml and manifests/storage_state_crd.yaml ship
               them (read from the directory ``KUBEUPGRADE_KSVM_MANIFESTS`` names; b-ksvm is refused without them),
               ``trigger`` and ``migrator --kube-api-qps 50 --kube-api-burst 100`` started. That client rate is
               this benchmark's choice, not upstream's: the binary's defaults are 5 and 10 (``migrator --help``), and
               the project's manifests/migrator.yaml deploys it with
               ``--kube-api-qps=40 --kube-api-burst=1000`` (manifests/trigger.yaml gives the trigger no flags). The
               migrator lists and rewrites every object of every resource through that one client, so its seconds
               are bounded below by its requests / 50 (run 1: 24,369 API writes, about 490 s of its 536.5 s);
               done when every StorageVersionMigration says Succeeded and every StorageState says
               ``persistedStorageVersionHashes == [currentStorageVersionHash]`` (the trigger's own settled record)
  c-intree-all kube-controller-manager 1.36.2 (every default controller and the gate StorageVersionMigrator, as
               ``ControlPlane.start_controller_manager`` runs it; started before the clock and left to settle: it
               runs in any cluster), then one ``storagemigration.k8s.io/v1beta1`` StorageVersionMigration per resource
               the 1.36 discovery gives a storageVersionHash (with list and update) but events (both groups: the
               controller never finishes them, ``INTREE_NEVER_FINISHES``): what an operator who cannot see etcd must
               ask for; done when every one says Succeeded (or Failed) and the controller is done with it
               (``plan.finished_by_controller``: for a CRD after it pruned storedVersions)
  d-intree-changed the same controller given only the resources whose storage version changed: the
               VolumeAttributesClasses and the custom resource whose CRD changed its storage version (what an operator
               who reads every release note would give it)
Per method: ``seconds`` from the method's start (process start, or the migrations' creation) to its own completion
signal; then every method is checked by the collection's audit (``storage_version_audit`` unthrottled, in this
process, not timed): ``old after`` counts objects stored with a storage version hash other than the one the 1.36
discovery advertises (0 = verified all-current); ``old before`` is the same count on the fresh copy before the method.
``etcd writes`` is how far etcd's header revision moved during the method (every write moves it by one; the
apiserver's own lease renewals add about ``bg rev/s`` x seconds, measured while idle before the method).
kube-apiserver does not write an update that changes nothing to etcd, so a rewrite of an object already stored in
the current version costs a request and apiserver CPU but no etcd write: ``etcd writes`` stays close to ``old before``
for every method, and how much each method rewrote shows in ``requests``: the delta of the sum of
``apiserver_request_total`` on the apiserver's /metrics (every client's requests, the apiserver's loopback ones
included), ``writes`` the non-read verbs of it. A second table says where the writes went: the non-read requests of
``apiserver_request_total`` by resource and verb, and the apiserver's own requests to etcd (``etcd_requests_total``) by
resource and operation (an update found unchanged counts in the first, not in the second). For ``a-playbook`` the
junit callback of ansible-core notes each task's seconds (``detail.task_seconds``; the slowest four in the notes).
``peak MiB`` is the largest sum of VmRSS over the method's process tree (ansible-playbook and its workers and module
processes; the audit child; trigger + migrator; kube-controller-manager - its whole process, all controllers),
sampled every 0.2 s from /proc (psutil is not in the venv). ``apiserver CPU`` / ``etcd CPU`` are their CPU seconds
during the method.

Item 3 (``--scale``): on one more fresh copy (1.36, nothing migrated), the client migrator (``ClientMigrator``
in-process in a child, ``bench_real_apiserver.module_migrator``) against the bare keep-alive LIST+PUT loop
(``bench_real_apiserver.bare_loop``) and end to end (``ansible-playbook`` of one ``storage_migration`` task,
``bench_real_apiserver.ansible_child``: Ansible's start included), each over every ConfigMap (``--objects`` / 2,
listed across namespaces; already in the current version, so the apiserver skips each write to etcd) at each
``--scale-concurrency``, taking turns for ``--scale-repeat`` rounds (median shown, as a ratio to the bare loop at the
same concurrency); then the audit (``storage_version_audit``) over the whole store, unthrottled, at its default
throttle and at its default rate without the burst (``burst_pages: 0``), with etcd's CPU seconds, beside etcd's CPU
seconds while kube-apiserver started on that copy (its watch caches list every resource from etcd; each method's row
notes the same, ``etcd_cpu_apiserver_start``). ``--scale-repeat 0`` leaves the migrator rows out.

    export PATH=$PWD/.venv/bin:$PATH KUBEUPGRADE_TEST_K8S_ASSETS=$PWD/.cache/k8s-assets
    python benchmarks/bench_peers.py --objects 20000
    python benchmarks/bench_peers.py --objects 2000 --methods a-audit d-intree-changed   # a quick look

etcd, the apiserver, the methods and this process share the machine; on 2 cores with other work running the
seconds are noisy: compare the ratios within one run. JSON goes to benchmarks/results/peers-<stamp>.json and is
printed as the last line. Not a test: nothing is asserted.

Results, run by run: benchmarks/README.md, section bench_peers.py.
"""

import argparse
import base64
import contextlib
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import HERE, REPO, TreeRss, ansible_env, cpu_seconds, on_path, rss_kib, run_child, run_module, run_parallel, wait_for
from bench_real_apiserver import Connections

on_path("tests/integration", "tests", "collections")

FROM, TO, ETCD = "1.35", "1.36", "3.5"
SEED_THREADS = 8
# storage_migration_crd.yaml and storage_state_crd.yaml as kubernetes-sigs/kube-storage-version-migrator ships them in
# its manifests/ directory: the directory holding them is KUBEUPGRADE_KSVM_MANIFESTS (b-ksvm only).
KSVM_MANIFESTS = os.environ.get("KUBEUPGRADE_KSVM_MANIFESTS", "")
KSVM_CRD_FILES = ("storage_migration_crd.yaml", "storage_state_crd.yaml")
PROFILES = os.path.join(REPO, "tests", "fixtures", "k8s-storage-profiles.json")
CRD_NAME, CRD_GROUP, CRD_PLURAL = "gizmos.bench.example.com", "bench.example.com", "gizmos"
INTREE_API = "storagemigration.k8s.io/v1beta1"
KSVM_API = "migration.k8s.io/v1alpha1"
# The garbage collector, whose informers the in-tree controller migrates through, ignores events: their migrations
# stay Running for good (seen here with 1.36.2: both still Running after 10 minutes while 68 others had finished).
INTREE_NEVER_FINISHES = {("", "events"), ("events.k8s.io", "events")}
METHODS = ["a-playbook", "a-audit", "b-ksvm", "c-intree-all", "d-intree-changed"]
SCHEMA = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}


# --- talking to the plane -----------------------------------------------------------------------------------


def conn_state(plane):
    return {"endpoint": plane.endpoints[0], "token": "admin-token", "ca_file": plane.ca_cert, "kubeconfig": plane.kubeconfig}


def send(conns, method, path, body=None):
    """``conns.send`` once more on a fresh connection when this thread's keep-alive one was closed while idle (the
    server closes idle connections: the main thread's sits idle while the seeding threads or a long method work)."""
    try:
        return conns.send(method, path, body)
    except (OSError, http.client.HTTPException):
        conns.local.conn = None
        return conns.send(method, path, body)


def call(conns, method, path, body=None, ok=(200, 201)):
    status, raw = send(conns, method, path, json.dumps(body).encode() if body is not None else None)
    if status not in ok:
        raise RuntimeError(f"{method} {path}: {status} {raw[:300]!r}")
    return json.loads(raw) if raw else {}


def etcd_revision(plane):
    key = base64.b64encode(b"/registry/").decode()
    answer = json.loads(plane.etcd._request("POST", "/v3/kv/range", {"key": key, "limit": 1, "keys_only": True}))
    return int(answer["header"]["revision"])


READ_VERBS = ("GET", "LIST", "WATCH", "CONNECT")
LABEL = re.compile(r'(\w+)="([^"]*)"')


def request_totals(conns):
    """From the apiserver's /metrics (None when unreachable): ``verbs`` {verb: count} summed over
    apiserver_request_total; ``writes`` {"resource.group VERB": count} of its non-read verbs; ``etcd`` {"type operation":
    count} of etcd_requests_total (the apiserver's requests to etcd; an update it finds unchanged sends none)."""
    try:
        status, raw = send(conns, "GET", "/metrics")
    except (OSError, http.client.HTTPException):
        return None
    if status != 200:
        return None
    totals = {"verbs": {}, "writes": {}, "etcd": {}}
    for line in raw.decode(errors="replace").splitlines():
        if not line.startswith(("apiserver_request_total{", "etcd_requests_total{")):
            continue
        text, _sep, value = line.rpartition(" ")
        labels = dict(LABEL.findall(text))
        if line.startswith("etcd_requests_total{"):
            kind = labels.get("type") or ".".join(part for part in (labels.get("resource"), labels.get("group")) if part)
            key = f"{kind or '?'} {labels.get('operation', '?')}"
            totals["etcd"][key] = totals["etcd"].get(key, 0.0) + float(value)
            continue
        verb = labels.get("verb", "?")
        totals["verbs"][verb] = totals["verbs"].get(verb, 0.0) + float(value)
        if verb not in READ_VERBS:
            resource = ".".join(part for part in (labels.get("resource"), labels.get("group")) if part) or "?"
            key = f"{resource} {verb}" + (f" {labels['subresource']}" if labels.get("subresource") else "")
            totals["writes"][key] = totals["writes"].get(key, 0.0) + float(value)
    return totals


def _changed(before, after):
    """{key: after - before} of the keys that moved, largest first."""
    delta = {key: int(round(value - before.get(key, 0.0))) for key, value in after.items()}
    return dict(sorted(((k, v) for k, v in delta.items() if v), key=lambda item: -item[1]))


def request_delta(before, after):
    """(requests, write requests, {"api_writes": {resource verb: n}, "etcd": {type operation: n}}) during a method."""
    if before is None or after is None:
        return None, None, None
    delta = _changed(before["verbs"], after["verbs"])
    total = sum(delta.values())
    writes = sum(v for verb, v in delta.items() if verb not in READ_VERBS)
    etcd = {k: v for k, v in _changed(before["etcd"], after["etcd"]).items() if not k.endswith((" get", " list", " listWithCount", " count", " getList"))}
    return total, writes, {"api_writes": _changed(before["writes"], after["writes"]), "etcd": etcd}


def discovery(conns):
    """{kubectl-style name: {"group", "resource", "hash", "verbs", "namespaced", "version"}} of every persisted resource."""
    found = {}
    group_versions = [("", "v1", "/api/v1")]
    for group in call(conns, "GET", "/apis")["groups"]:
        group_versions += [(group["name"], v["version"], f"/apis/{v['groupVersion']}") for v in group["versions"]]
    for group, version, path in group_versions:
        status, raw = send(conns, "GET", path)
        if status != 200:
            continue
        for item in json.loads(raw).get("resources") or []:
            if "/" in item["name"] or not item.get("storageVersionHash"):
                continue
            name = f"{item['name']}.{group}" if group else item["name"]
            entry = found.setdefault(name, {"group": group, "resource": item["name"], "hash": item["storageVersionHash"],
                                            "verbs": item.get("verbs") or [], "namespaced": item.get("namespaced"),
                                            "version": version})
            entry["hash"] = item["storageVersionHash"]
    return found


# --- the store ----------------------------------------------------------------------------------------------


def parallel(count, work, threads=SEED_THREADS):
    run_parallel(count, work, threads)


def post_retrying(conns, path, body):
    answer = (0, b"")
    for _attempt in range(8):
        answer = send(conns, "POST", path, json.dumps(body).encode())
        if answer[0] in (201, 409):
            return
        time.sleep(0.5)
    raise RuntimeError(f"POST {path}: {answer[0]} {answer[1][:300]!r}")


def gizmos_crd(storage):
    versions = [{"name": v, "served": True, "storage": v == storage, "schema": SCHEMA} for v in ("v1alpha1", "v1")]
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": {"name": CRD_NAME},
            "spec": {"group": CRD_GROUP, "scope": "Namespaced", "versions": versions,
                     "names": {"plural": CRD_PLURAL, "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList"}}}


def seed(plane, args):
    """The store of the docstring, through the 1.35 apiserver; returns what was created, by kind."""
    import real_binaries

    conns = Connections(conn_state(plane))
    namespaces = [f"bench-{i:03d}" for i in range(args.namespaces)]
    for namespace in namespaces:
        post_retrying(conns, "/api/v1/namespaces", {"metadata": {"name": namespace}})
    half = args.objects // 2
    payload = "x" * 360

    def configmap(i):
        namespace = namespaces[i % len(namespaces)]
        post_retrying(conns, f"/api/v1/namespaces/{namespace}/configmaps",
                      {"metadata": {"name": f"cm-{i:07d}", "labels": {"bench": "peers"}}, "data": {"i": str(i), "v": payload}})

    def secret(i):
        namespace = namespaces[i % len(namespaces)]
        post_retrying(conns, f"/api/v1/namespaces/{namespace}/secrets",
                      {"metadata": {"name": f"s-{i:07d}"}, "type": "Opaque", "stringData": {"i": str(i), "v": payload}})

    def vac(i):
        post_retrying(conns, "/apis/storage.k8s.io/v1beta1/volumeattributesclasses",
                      {"metadata": {"name": f"vac-{i:06d}"}, "driverName": "csi.example.com",
                       "parameters": {"iops": str(1000 + i), "throughput": "125"}})

    def gizmo(version):
        def create(i):
            namespace = namespaces[i % len(namespaces)]
            post_retrying(conns, f"/apis/{CRD_GROUP}/{version}/namespaces/{namespace}/{CRD_PLURAL}",
                          {"apiVersion": f"{CRD_GROUP}/{version}", "kind": "Gizmo",
                           "metadata": {"name": f"g-{version}-{i:06d}"}, "spec": {"size": i}})
        return create

    started = time.perf_counter()
    parallel(half, configmap)
    parallel(args.objects - half, secret)
    parallel(args.old_objects, vac)
    call(conns, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", gizmos_crd("v1alpha1"))
    wait_for(lambda: send(conns, "GET", f"/apis/{CRD_GROUP}/v1alpha1/{CRD_PLURAL}?limit=1")[0] == 200, "the gizmos CRD")
    parallel(args.crd_objects // 2, gizmo("v1alpha1"))
    crd = call(conns, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
    for version in crd["spec"]["versions"]:
        version["storage"] = version["name"] == "v1"
    call(conns, "PUT", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}", crd)
    time.sleep(3)  # the apiserver's CRD handler picks up the new storage version
    parallel(args.crd_objects - args.crd_objects // 2, gizmo("v1"))
    real_binaries.seed_135(plane)
    return {"configmaps": half, "secrets": args.objects - half, "volumeattributesclasses": args.old_objects,
            CRD_NAME: args.crd_objects, "seed_135": "one object in every version 1.35 stores",
            "seconds": time.perf_counter() - started}


# --- fresh copies -------------------------------------------------------------------------------------------


class Store:
    """The plane whose etcd data directory is replaced by the pristine copy before each method."""

    def __init__(self, plane, pristine):
        self.plane, self.pristine = plane, pristine
        self.data = os.path.join(plane.etcd.workdir, "data")
        self.extra = []  # (pid, start) of processes a method started

    def stop(self):
        from realcp.plane import terminate
        terminate(self.extra)
        self.extra = []
        with contextlib.suppress(Exception):
            self.plane.stop(0)
        cm = self.plane.state().get("controller_manager") or {}
        if cm.get("pid"):
            terminate([(cm["pid"], cm.get("pid_start"))])
        self.plane.etcd.stop()

    def fresh(self, release):
        """etcd on a copy of the pristine data, the apiserver of ``release`` on it, ready; returns etcd's CPU seconds
        while that apiserver started (it lists every resource into its watch cache): the load an audit is compared to."""
        from realcp.plane import locked_state, process_start
        shutil.rmtree(self.data, ignore_errors=True)
        shutil.copytree(self.pristine, self.data)
        self.plane.etcd.start()
        with locked_state(self.plane.state_file) as state:
            state["etcd_process"] = {"pid": self.plane.etcd.process.pid, "pid_start": process_start(self.plane.etcd.process.pid)}
            state["controller_manager"] = None
        before = cpu_seconds(self.plane.etcd.process.pid)
        self.plane.start_one(0, release, timeout=240)
        after = cpu_seconds(self.plane.etcd.process.pid)
        return after - before if None not in (before, after) else None

    def track(self, process):
        from realcp.plane import process_start
        self.extra.append((process.pid, process_start(process.pid)))


def idle_rate(plane, seconds=6.0):
    """etcd revisions per second while no method runs."""
    before, started = etcd_revision(plane), time.monotonic()
    time.sleep(seconds)
    return (etcd_revision(plane) - before) / (time.monotonic() - started)


def settle(plane, quiet=1.5, window=4.0, timeout=90.0):
    """Wait until etcd's revision moves at most ``quiet`` per second over ``window`` (bounded): a started process's
    own first writes (a controller manager's per-namespace ConfigMaps, say) are done."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if idle_rate(plane, window) <= quiet:
            return True
    return False


# --- the collection's audit (verification, and a-audit's selection) --------------------------------------------


def audit(plane, **extra):
    from ansible_collections.kubeupgrade.storage.plugins.modules import storage_version_audit
    params = {"etcd_endpoints": [plane.etcd.url], "pages_per_second": 0, "names_limit": 0, **extra}
    result = run_module(storage_version_audit, params)
    if result.get("failed"):
        raise RuntimeError(f"audit failed: {result.get('msg')}")
    return result


def old_objects(result, served):
    """(objects stored with a hash other than discovery's, {resource: count}, objects of resources not served)."""
    old, per, unserved = 0, {}, 0
    for name, item in (result.get("resources") or {}).items():
        current = served.get(name, {}).get("hash")
        if current is None:
            unserved += item.get("objects", 0)
            continue
        count = sum(v["count"] for v in item.get("versions") or [] if v.get("hash") != current)
        count += item.get("unreadable", 0)
        if count:
            per[name] = count
            old += count
    return old, per, unserved


def readable_versions(crd_storage):
    """{resource: [1.36 storage version]} from the profiles, plus each CRD's storage version."""
    with open(PROFILES, encoding="utf-8") as handle:
        profile = json.load(handle)[TO]
    readable = {}
    for key, entry in profile.items():
        group, _sep, resource = key.partition("/")
        name = f"{resource}.{group}" if group else resource
        readable[name] = [entry["storage"]]
    readable.update({name: [version] for name, version in crd_storage.items()})
    return readable


# --- the methods ----------------------------------------------------------------------------------------------


@dataclass
class Run:
    """What every method needs: the plane, its store, the options, where files go."""

    plane: object
    store: object
    args: object
    workdir: str
    logdir: str
    crd_storage: dict = field(default_factory=dict)


def a_playbook(run):
    import real_binaries
    tmp = Path(run.workdir) / "a-playbook"
    tmp.mkdir(parents=True, exist_ok=True)
    inventory = real_binaries.write_inventory(run.plane, tmp)
    extra = {"kubeupgrade_etcd": run.plane.etcd_settings, "kubeupgrade_etcd_become": False,
             "kubeupgrade_report_dir": str(tmp / "reports"), **run.args.playbook_vars}
    argv = ["ansible-playbook", "-i", str(inventory), str(Path(REPO) / "playbooks" / "migrate.yml"),
            "-e", json.dumps(extra)]
    log = os.path.join(run.logdir, "a-playbook.log")
    # ansible-core's junit callback notes each task's seconds (where the play's time goes); it changes no output.
    env = dict(ansible_env(), ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.junit", JUNIT_OUTPUT_DIR=str(tmp / "junit"),
               JUNIT_HIDE_TASK_ARGUMENTS="True")
    with open(log, "w", encoding="utf-8") as handle:
        process = subprocess.Popen(argv, env=env, cwd=REPO, stdout=handle, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    run.store.track(process)
    return process, log


def a_audit_child(config):
    """In the child: audit (default throttle, every name, readable = current storage versions), then
    storage_migration with objects_from_audit at its defaults. Prints one JSON line."""
    from ansible_collections.kubeupgrade.storage.plugins.modules import storage_migration, storage_version_audit
    started = time.perf_counter()
    found = run_module(storage_version_audit, {"etcd_endpoints": config["etcd_endpoints"], "names_limit": -1,
                                               "readable_versions": config["readable_versions"]})
    audit_seconds = time.perf_counter() - started
    if found.get("failed"):
        print(json.dumps({"failed": True, "msg": found.get("msg"), "step": "audit"}))
        return
    migrated = run_module(storage_migration, {"kubeconfig": config["kubeconfig"], "endpoints": config["endpoints"],
                                              "objects_from_audit": found,
                                              "checkpoint_dir": config["checkpoint_dir"]})
    keys = ("resource", "status", "objects", "objects_from_audit", "record", "seconds")
    print(json.dumps({"failed": bool(migrated.get("failed")), "msg": migrated.get("msg"), "step": "migration",
                      "audit_seconds": audit_seconds, "not_readable": found.get("not_readable"),
                      "seconds": time.perf_counter() - started,
                      "migrations": [{k: m.get(k) for k in keys} for m in migrated.get("migrations") or []]}))


def a_audit(run):
    plane = run.plane
    config = {"etcd_endpoints": [plane.etcd.url], "kubeconfig": plane.kubeconfig, "endpoints": plane.endpoints,
              "readable_versions": readable_versions(run.crd_storage),
              "checkpoint_dir": os.path.join(run.workdir, "a-audit-checkpoints")}
    log = os.path.join(run.logdir, "a-audit.log")
    with open(log, "w", encoding="utf-8") as handle:
        process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", json.dumps(config)],
                                   env=ansible_env(), cwd=REPO, stdout=handle, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    run.store.track(process)
    return process, log


def apply_ksvm_crds(conns):
    import yaml
    for name in KSVM_CRD_FILES:
        with open(os.path.join(KSVM_MANIFESTS, name), encoding="utf-8") as handle:
            for doc in yaml.safe_load_all(handle):
                if doc:
                    call(conns, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc, ok=(201, 409))
    for plural in ("storageversionmigrations", "storagestates"):
        wait_for(lambda p=plural: send(conns, "GET", f"/apis/{KSVM_API}/{p}?limit=1")[0] == 200, f"{plural} served", 120)


def start_ksvm(run, conns):
    from realcp.plane import binary
    assets = os.path.dirname(os.path.dirname(binary(TO)))
    apply_ksvm_crds(conns)
    processes = []
    for name, flags in (("trigger", []), ("migrator", ["--kube-api-qps", "50", "--kube-api-burst", "100"])):
        with open(os.path.join(run.logdir, f"b-ksvm-{name}.log"), "w", encoding="utf-8") as handle:
            process = subprocess.Popen([os.path.join(assets, "ksvm", name), "--kubeconfig", run.plane.kubeconfig, *flags],
                                       stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        run.store.track(process)
        processes.append(process)
    return processes


def _true(item, kind):
    return any(c.get("type") == kind and c.get("status") == "True" for c in ((item or {}).get("status") or {}).get("conditions") or [])


def ksvm_state(conns):
    """{migrations, succeeded, failed, storage_states, settled}."""
    svms = call(conns, "GET", f"/apis/{KSVM_API}/storageversionmigrations")["items"]
    states = call(conns, "GET", f"/apis/{KSVM_API}/storagestates")["items"]
    settled = sum(1 for s in states if (s.get("status") or {}).get("persistedStorageVersionHashes")
                  == [(s.get("status") or {}).get("currentStorageVersionHash")])
    return {"migrations": len(svms), "succeeded": sum(1 for m in svms if _true(m, "Succeeded")),
            "failed": sum(1 for m in svms if _true(m, "Failed")), "storage_states": len(states), "settled": settled}


def intree_create(conns, resources):
    names = []
    for group, resource in resources:
        body = {"apiVersion": INTREE_API, "kind": "StorageVersionMigration",
                "metadata": {"generateName": f"{resource}.{group or 'core'}-"[:200]},
                "spec": {"resource": {"group": group, "resource": resource}}}
        names.append(call(conns, "POST", f"/apis/{INTREE_API}/storageversionmigrations", body)["metadata"]["name"])
    return names


def intree_state(conns, names):
    """{migrations, finished (the controller is done with it), succeeded, failed}."""
    from ansible_collections.kubeupgrade.storage.plugins.module_utils._migrate import plan
    items = {i["metadata"]["name"]: i for i in call(conns, "GET", f"/apis/{INTREE_API}/storageversionmigrations")["items"]}
    found = [items.get(name) for name in names]
    return {"migrations": len(names), "finished": sum(1 for obj in found if plan.finished_by_controller(obj)),
            "succeeded": sum(1 for obj in found if _true(obj, "Succeeded")),
            "failed": sum(1 for obj in found if _true(obj, "Failed"))}


# --- one method on one fresh copy -----------------------------------------------------------------------------


def run_client(run, method, row, roots):
    """a-playbook / a-audit: done when the process exits (0)."""
    started = time.perf_counter()
    process, log = (a_playbook if method == "a-playbook" else a_audit)(run)
    roots.append(process.pid)
    try:
        process.wait(timeout=run.args.method_timeout)
    except subprocess.TimeoutExpired:
        row["error"] = f"timed out after {run.args.method_timeout} s"
    row["seconds"] = time.perf_counter() - started
    row["returncode"] = process.poll()
    text = Path(log).read_text(encoding="utf-8", errors="replace")
    if method == "a-audit":
        lines = [line for line in text.splitlines() if line.startswith("{")]
        row["detail"] = json.loads(lines[-1]) if lines else {}
        row["completed"] = process.returncode == 0 and bool(lines) and not row["detail"].get("failed")
    else:
        row["completed"] = process.returncode == 0
        row["detail"] = {"recap": [line for line in text.splitlines() if ": ok=" in line],
                         "resources_migrated": summary_resources(text),
                         "task_seconds": junit_tasks(Path(run.workdir) / "a-playbook" / "junit")}
    if not row["completed"]:
        row.setdefault("error", text[-1500:])


def poll(row, check, done, alive, timeout):
    """Poll ``check()`` every second until ``done(status)``; a dead process or the timeout ends it unfinished."""
    started, deadline = time.perf_counter(), time.monotonic() + timeout
    status, first_done = None, None
    while time.monotonic() < deadline:
        status = check()
        if status.get("migrations") and status.get("succeeded", 0) + status.get("failed", 0) == status["migrations"]:
            first_done = first_done or time.perf_counter() - started
        if done(status):
            row["completed"] = True
            break
        if not alive():
            row["error"] = "a process of the method exited"
            break
        time.sleep(1.0)
    row["detail"] = dict(status or {}, all_succeeded_seconds=first_done)
    if not row["completed"]:
        row.setdefault("error", f"timed out after {timeout} s")


def run_ksvm(run, conns, row, roots):
    started = time.perf_counter()
    processes = start_ksvm(run, conns)
    roots.extend(p.pid for p in processes)

    def done(s):
        return (s["migrations"] and s["succeeded"] + s["failed"] == s["migrations"]
                and s["storage_states"] >= s["migrations"] and s["settled"] == s["storage_states"])

    poll(row, lambda: ksvm_state(conns), done, lambda: all(p.poll() is None for p in processes), run.args.method_timeout)
    row["seconds"] = time.perf_counter() - started


def run_intree(run, method, conns, row, context):
    served, kcm = context
    if method == "c-intree-all":
        wanted = sorted((e["group"], e["resource"]) for e in served.values()
                        if "list" in e["verbs"] and ("update" in e["verbs"] or "patch" in e["verbs"])
                        and (e["group"], e["resource"]) not in INTREE_NEVER_FINISHES)
    else:
        wanted = [("storage.k8s.io", "volumeattributesclasses"), (CRD_GROUP, CRD_PLURAL)]
    started = time.perf_counter()
    names = intree_create(conns, wanted)
    poll(row, lambda: intree_state(conns, names), lambda s: s["finished"] == s["migrations"],
         lambda: kcm.poll() is None, run.args.method_timeout)
    row["seconds"] = time.perf_counter() - started


class Counters:
    """etcd revision, apiserver requests, apiserver and etcd CPU: before, then the deltas into a row."""

    def __init__(self, plane, conns):
        self.plane, self.conns = plane, conns
        self.pids = (plane.apiserver(0)["pid"], plane.etcd.process.pid)
        self.cpu = [cpu_seconds(pid) for pid in self.pids]
        self.requests = request_totals(conns)
        self.revision = etcd_revision(plane)

    def into(self, row):
        row["etcd_writes"] = etcd_revision(self.plane) - self.revision
        totals = request_totals(self.conns)
        row["requests"], row["request_writes"], row["writes_by_resource"] = request_delta(self.requests, totals)
        for name, pid, before in zip(("apiserver", "etcd"), self.pids, self.cpu):
            after = cpu_seconds(pid)
            row[f"{name}_cpu_seconds"] = after - before if None not in (after, before) else None


def measure(run, method):
    plane = run.plane
    row = {"method": method, "completed": False}
    row["etcd_cpu_apiserver_start"] = run.store.fresh(TO)
    conns = Connections(conn_state(plane))
    served = discovery(conns)
    before_audit = audit(plane)
    row["old_before"], row["old_before_per_resource"], row["unserved_objects"] = old_objects(before_audit, served)
    row["keys"] = before_audit.get("keys_scanned")
    kcm = None
    if method.startswith(("c-", "d-")):
        started = time.perf_counter()
        kcm = plane.start_controller_manager(release=TO, settle=2.0)
        run.store.track(kcm)
        row["kcm_settled"] = settle(plane)
        row["kcm_settle_seconds"] = time.perf_counter() - started
        row["kcm_rss_before_mib"] = rss_kib(kcm.pid) / 1024.0
    row["background_revs_per_s"] = idle_rate(plane, 6.0)
    counters = Counters(plane, conns)
    roots = [kcm.pid] if kcm else []
    with TreeRss(lambda: list(roots)) as rss:
        if method in ("a-playbook", "a-audit"):
            run_client(run, method, row, roots)
        elif method == "b-ksvm":
            run_ksvm(run, conns, row, roots)
        else:
            run_intree(run, method, conns, row, (served, kcm))
        rss.sample()
    row["peak_mib"] = rss.peak_mib
    counters.into(row)
    if kcm is not None:
        row["kcm_rss_after_mib"] = rss_kib(kcm.pid) / 1024.0
    after = audit(plane)
    row["old_after"], row["old_after_per_resource"], _unused = old_objects(after, served)
    row["crd_stored_versions_after"] = ((after.get("crds") or {}).get(CRD_NAME) or {}).get("stored_versions")
    row["verified"] = row["old_after"] == 0
    return row


def junit_tasks(directory):
    """[task name, seconds] of every task the junit callback reported (run and skipped), in play order."""
    import xml.etree.ElementTree as ET
    tasks = []
    for path in sorted(Path(directory).glob("*.xml")):
        for case in ET.parse(path).getroot().iter("testcase"):
            name = re.sub(r"^\[[^]]*\] [^:]*: ", "", case.get("name", ""))  # "[host] play: task"
            tasks.append([name, round(float(case.get("time") or 0.0), 2)])
    return tasks


SUMMARY_ROW = re.compile(r"^\s*\"?\s*(\S+)\s+(succeeded|failed|started|stopped|skipped)\s+(client|intree|sigs)\s+(\S+)\s+(\d+)")


def summary_resources(text):
    """(resource, status, objects) rows of the migration summary the play printed."""
    rows = []
    for line in text.splitlines():
        match = SUMMARY_ROW.match(line.strip().rstrip(",").strip('"'))
        if match:
            rows.append([match.group(1), match.group(2), int(match.group(4)) if match.group(4).isdigit() else 0])
    return rows


# --- item 3: scale ------------------------------------------------------------------------------------------


def scale(plane, args, logdir):
    """The client migrator against the bare loop (every ConfigMap), and the audit over the whole store."""
    import bench_real_apiserver as real
    state = dict(conn_state(plane), logdir=logdir)
    real.LIST_PATH = "/api/v1/configmaps"  # every namespace; the child sets its own copy from the config
    rows = []
    for concurrency in args.scale_concurrency:
        runs = {method: [] for method in SCALE_METHODS}
        for _round in range(args.scale_repeat):
            for method in SCALE_METHODS:  # the methods take turns, so that a change in the load hits them alike
                config = {"kind": "scale", "state": state, "list_path": real.LIST_PATH, "method": method,
                          "concurrency": concurrency}
                try:
                    runs[method].append(run_child(__file__, ["--child", json.dumps(config)], ansible_env(),
                                                  f"scale {method} c{concurrency}", args.method_timeout))
                except RuntimeError as error:
                    print(str(error)[-800:], flush=True)
        for method, results in runs.items():
            if results:
                ordered = sorted(results, key=lambda r: r["seconds"])
                rows.append(dict(ordered[len(ordered) // 2], part="migrator", method=method, concurrency=concurrency,
                                 all_seconds=[round(r["seconds"], 2) for r in results]))
                print(json.dumps(rows[-1]), flush=True)
    for label, read in (("audit unthrottled", audit),
                        ("audit default throttle", audit_default),
                        ("audit default rate, no burst (burst_pages 0)", lambda plane_: audit_default(plane_, burst_pages=0))):
        etcd_cpu = cpu_seconds(plane.etcd.process.pid)
        started = time.perf_counter()
        result = read(plane)
        rows.append({"part": "audit", "method": label, "keys": result.get("keys_scanned"),
                     "seconds": time.perf_counter() - started, "pages": result.get("pages"),
                     "etcd_cpu_seconds": cpu_seconds(plane.etcd.process.pid) - etcd_cpu})
        print(json.dumps(rows[-1]), flush=True)
    return rows


SCALE_METHODS = ("bare", "module", "ansible")


def scale_child(config):
    """In the child: one bare loop or ClientMigrator run over ``list_path``, as bench_real_apiserver's child runs it."""
    import resource

    import bench_real_apiserver as real
    from _common import PeakRss
    real.LIST_PATH = config["list_path"]
    if config["method"] == "ansible":  # ansible-playbook of one storage_migration task (configmaps, every namespace)
        print(json.dumps(real.ansible_child(config["state"], config["concurrency"], "ansible")))
        return
    if config["method"] == "module":
        from ansible_collections.kubeupgrade.storage.plugins.module_utils._rewrite import migrator as _unused  # noqa: F401
    with PeakRss() as rss:
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        if config["method"] == "module":
            count = real.module_migrator(config["state"], config["concurrency"])
        else:
            count = real.bare_loop(config["state"], config["concurrency"])
        elapsed = time.perf_counter() - started
        used = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"objects": count, "seconds": elapsed, "rss_mib": rss.growth_mib,
                      "client_cpu_seconds": used.ru_utime - cpu.ru_utime + used.ru_stime - cpu.ru_stime}))


def audit_default(plane, **extra):
    from ansible_collections.kubeupgrade.storage.plugins.modules import storage_version_audit
    return run_module(storage_version_audit, {"etcd_endpoints": [plane.etcd.url], "names_limit": 0, **extra})


# --- output ---------------------------------------------------------------------------------------------------


def fmt(value, pattern="{:.1f}"):
    return pattern.format(value) if isinstance(value, (int, float)) else "-"


def print_table(results):
    rows = results["rows"]
    print()
    print(f"Roll {results['from']} -> {results['to']} on etcd {results['etcd']}: {results.get('keys')} keys, "
          f"{results['objects']} ConfigMaps+Secrets, {results['old_objects']} VolumeAttributesClasses (v1beta1), "
          f"{results['crd_objects']} {CRD_NAME} (half v1alpha1); each method on its own copy of the same store")
    print("| method | seconds | verified (old after) | old before | etcd writes | writes / old | requests (writes) "
          "| peak MiB | apiserver CPU s | etcd CPU s | bg rev/s | notes |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for row in rows:
        notes = []
        detail = row.get("detail") or {}
        if row["method"] == "b-ksvm":
            notes.append(f"{detail.get('succeeded')}/{detail.get('migrations')} SVM succeeded "
                         f"(all at {fmt(detail.get('all_succeeded_seconds'))} s), {detail.get('settled')}/"
                         f"{detail.get('storage_states')} records settled")
        if row["method"].startswith(("c-", "d-")):
            notes.append(f"{detail.get('succeeded')}/{detail.get('migrations')} SVM succeeded, {detail.get('failed')} failed; "
                         f"kcm settled {fmt(row.get('kcm_settle_seconds'))} s before, RSS {fmt(row.get('kcm_rss_before_mib'), '{:.0f}')}"
                         f"->{fmt(row.get('kcm_rss_after_mib'), '{:.0f}')} MiB")
        if row["method"] == "a-audit":
            notes.append(f"audit {fmt(detail.get('audit_seconds'))} s; migrated "
                         + ", ".join(f"{m['resource']}: {m.get('objects_from_audit', m.get('objects'))}" for m in detail.get("migrations") or []))
        if row["method"] == "a-playbook":
            migrated = detail.get("resources_migrated") or []
            notes.append(f"{len(migrated)} resources in its summary, {sum(r[2] for r in migrated)} objects")
            slowest = sorted(detail.get("task_seconds") or [], key=lambda t: -t[1])[:4]
            if slowest:
                notes.append("slowest tasks: " + ", ".join(f"{name.rpartition(' : ')[2][:40]} {sec:.1f} s" for name, sec in slowest))
        if row.get("crd_stored_versions_after"):
            notes.append(f"CRD storedVersions {row['crd_stored_versions_after']}")
        if not row.get("completed"):
            notes.append("NOT COMPLETED: " + str(row.get("error", ""))[:160].replace("\n", " ").replace("|", "/"))
        ratio = row["etcd_writes"] / row["old_before"] if row.get("old_before") else None
        requests = f"{row['requests']} ({row['request_writes']})" if row.get("requests") is not None else "-"
        print(f"| {row['method']} | {fmt(row.get('seconds'))} | {'yes' if row.get('verified') else 'NO'} ({row.get('old_after')}) "
              f"| {row.get('old_before')} | {row.get('etcd_writes')} | {fmt(ratio, '{:.2f}')} | {requests} "
              f"| {fmt(row.get('peak_mib'), '{:.0f}')} | {fmt(row.get('apiserver_cpu_seconds'))} "
              f"| {fmt(row.get('etcd_cpu_seconds'))} | {fmt(row.get('background_revs_per_s'))} | {'; '.join(notes)} |")
    print_writes(rows)
    ratios = results.get("ratios") or {}
    if ratios:
        print()
        for key, value in ratios.items():
            print(f"- {key}: {value}")
    if results.get("scale"):
        print_scale(results)


def print_writes(rows, top=8):
    """Where each method's writes went: API write requests by resource and verb, the apiserver's etcd requests by type
    (an update that changes nothing reaches the API count, not etcd's)."""
    print()
    print("| method | API writes by resource (largest first) | apiserver -> etcd requests by type |")
    print("| --- | --- | --- |")
    for row in rows:
        found = row.get("writes_by_resource") or {}
        cells = []
        for key in ("api_writes", "etcd"):
            items = list((found.get(key) or {}).items())
            text = ", ".join(f"{name} {count}" for name, count in items[:top])
            if len(items) > top:
                text += f", {len(items) - top} more: {sum(c for _n, c in items[top:])}"
            cells.append(text or "-")
        print(f"| {row['method']} | {cells[0]} | {cells[1]} |")


def print_scale(results):
    """Item 3's table: the migrator rows as ratios to the bare loop at the same concurrency, then the audit rows."""
    print()
    print("| part | method | concurrency | objects / keys | seconds | per s | x bare | notes |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    bare = {row["concurrency"]: row for row in results["scale"] if row["method"] == "bare"}
    for row in results["scale"]:
        count = row.get("objects") or row.get("keys") or 0
        rate = count / row["seconds"] if row.get("seconds") else None
        ref = bare.get(row.get("concurrency"))
        ratio = rate / (ref["objects"] / ref["seconds"]) if rate and ref and row["part"] == "migrator" else None
        notes = [f"{k} {row[k]:.2f}" for k in ("rss_mib", "client_cpu_seconds", "etcd_cpu_seconds", "module_seconds")
                 if isinstance(row.get(k), (int, float))]
        if row.get("max_process_rss_mib"):
            notes.append(f"largest process {row['max_process_rss_mib']:.0f} MiB")
        if row.get("all_seconds"):
            notes.append(f"runs {row['all_seconds']} s")
        print(f"| {row['part']} | {row['method']} | {row.get('concurrency', '-')} | {count} | {fmt(row.get('seconds'), '{:.2f}')} "
              f"| {fmt(rate, '{:.0f}')} | {fmt(ratio, '{:.2f}')} | {'; '.join(notes)} |")


def compute_ratios(results):
    rows = {row["method"]: row for row in results["rows"]}
    peers = [rows[m] for m in ("b-ksvm", "c-intree-all", "d-intree-changed") if m in rows and rows[m].get("completed")]
    ratios = {}
    if peers:
        fastest = min(peers, key=lambda r: r["seconds"])
        for name in ("a-playbook", "a-audit"):
            row = rows.get(name)
            if row and row.get("completed"):
                ratios[f"{name} speed-up over the fastest peer ({fastest['method']})"] = \
                    f"{fastest['seconds'] / row['seconds']:.2f}x ({fastest['seconds']:.1f} s / {row['seconds']:.1f} s)"
    for name, row in rows.items():
        if row.get("old_before"):
            ratios[f"{name} etcd writes / objects in an old version"] = \
                f"{row['etcd_writes'] / row['old_before']:.2f} ({row['etcd_writes']} / {row['old_before']})"
    results["ratios"] = ratios


# --- main -----------------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=50000, help="ConfigMaps + Secrets (half each)")
    parser.add_argument("--old-objects", type=int, default=2000, help="VolumeAttributesClasses written as v1beta1")
    parser.add_argument("--crd-objects", type=int, default=1000, help="custom resources, half stored as v1alpha1")
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--methods", nargs="*", default=METHODS, choices=METHODS, help="none (--methods alone): --scale only")
    parser.add_argument("--method-timeout", type=float, default=1800.0, help="seconds each method may take")
    parser.add_argument("--playbook-vars", type=json.loads, default={}, metavar="JSON", help="more extra variables of a-playbook (not "
                        "its defaults: e.g. '{\"kubeupgrade_migrate_concurrency\": 8}')")
    parser.add_argument("--scale", action="store_true", help="item 3: client migrator vs bare loop, audit, on a fresh copy")
    parser.add_argument("--scale-concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--scale-repeat", type=int, default=3, help="rounds of the scale rows (the median is shown)")
    parser.add_argument("--workdir", help="keep the plane's files here (default: a temporary directory)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if "b-ksvm" in args.methods and not all(os.path.isfile(os.path.join(KSVM_MANIFESTS, f)) for f in KSVM_CRD_FILES):
        parser.error(f"b-ksvm needs KUBEUPGRADE_KSVM_MANIFESTS: a directory holding {' and '.join(KSVM_CRD_FILES)} as "
                     "kubernetes-sigs/kube-storage-version-migrator ships them in manifests/ (or leave b-ksvm out of --methods)")
    if args.child:
        config = json.loads(args.child)
        (scale_child if config.get("kind") == "scale" else a_audit_child)(config)
        return
    from realcp.plane import ControlPlane, binary

    results_dir = os.path.join(HERE, "results")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logdir = os.path.join(results_dir, f"peers-{stamp}-logs")
    os.makedirs(logdir, exist_ok=True)
    results = {"from": os.path.basename(os.path.dirname(binary(FROM))), "to": os.path.basename(os.path.dirname(binary(TO))),
               "etcd": ETCD, "playbook_vars": args.playbook_vars, "objects": args.objects,
               "old_objects": args.old_objects, "crd_objects": args.crd_objects,
               "namespaces": args.namespaces, "nproc": os.cpu_count(), "loadavg_before": os.getloadavg(),
               "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": [], "logdir": logdir,
               "command": " ".join(sys.argv)}
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as scratch:
        workdir = args.workdir or scratch
        plane = ControlPlane(os.path.join(workdir, "plane"), releases=[FROM], etcd_version=ETCD)
        try:
            plane.start(timeout=240)
            results["seed"] = seed(plane, args)
            print(f"seeded in {results['seed']['seconds']:.0f} s: {json.dumps(results['seed'])}", flush=True)
            crd_storage = {CRD_NAME: "v1", "gadgets.example.com": "v1"}
            store = Store(plane, os.path.join(workdir, "pristine-etcd-data"))
            plane.stop(0)
            plane.etcd.stop()
            shutil.copytree(store.data, store.pristine)
            results["etcd_data_mib"] = sum(f.stat().st_size for f in Path(store.pristine).rglob("*") if f.is_file()) / 2**20
            for method in args.methods:
                print(f"--- {method} ({time.strftime('%H:%M:%S')}, load {os.getloadavg()[0]:.1f})", flush=True)
                try:
                    row = measure(Run(plane, store, args, workdir, logdir, crd_storage), method)
                except Exception as error:  # one method's failure is reported, the others still run
                    row = {"method": method, "completed": False, "error": f"{type(error).__name__}: {error}"}
                finally:
                    shutil.copy(plane.apiserver(0)["log"], os.path.join(logdir, f"{method}-apiserver.log"))
                    cm_log = os.path.join(plane.workdir, "controller-manager.log")
                    if os.path.exists(cm_log):
                        shutil.move(cm_log, os.path.join(logdir, f"{method}-controller-manager.log"))
                    store.stop()
                row["loadavg"] = os.getloadavg()
                results["keys"] = row.get("keys", results.get("keys"))
                results["rows"].append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "detail"}, default=str), flush=True)
            if args.scale:
                print(f"--- scale ({time.strftime('%H:%M:%S')})", flush=True)
                etcd_cpu_start = store.fresh(TO)
                try:
                    results["scale"] = scale(plane, args, logdir)
                    results["scale"].append({"part": "audit", "method": "kube-apiserver start (for comparison)",
                                             "etcd_cpu_seconds": etcd_cpu_start})
                finally:
                    store.stop()
        finally:
            plane.stop_all()
    results["loadavg_after"] = os.getloadavg()
    compute_ratios(results)
    path = os.path.join(results_dir, f"peers-{stamp}.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2, default=str)
    print_table(results)
    print(f"\nload average before {results['loadavg_before']}, after {results['loadavg_after']}; JSON: {path}")
    print(json.dumps({k: v for k, v in results.items() if k != "scale"}, default=str))


if __name__ == "__main__":
    main()
