"""The control plane process: one HTTP(S) server per apiserver on its own loopback port, a round-robin front
address, an admin interface, and the controllers, all sharing one in-memory store."""

import base64
import collections
import hashlib
import http.server
import itertools
import json
import os
import socket
import ssl
import threading
import time
import urllib.parse
import uuid

from . import controllers, errors, seeds, tls
from .api import Api, Request, audit_key, now
from .faults import Faults
from .profiles import api_version, builtin_resources, release_data, storage_key
from .store import Entry, EtcdMirror, Store


class _Server(http.server.ThreadingHTTPServer):
    """ThreadingHTTPServer doing the TLS handshake in the connection's thread, not in the accept loop."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    ssl_context = None

    def finish_request(self, request, client_address):
        if self.ssl_context is not None:
            try:
                request.settimeout(10)
                request = self.ssl_context.wrap_socket(request, server_side=True)
                request.settimeout(None)
            except (ssl.SSLError, OSError):
                return
        try:
            self.RequestHandlerClass(request, client_address, self)
        finally:
            if self.ssl_context is not None:
                request.close()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    apiserver = None

    def log_message(self, *args):
        """Silence per-request logging; stats are available through the admin interface."""

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.apiserver.connections.add(self.connection)

    def finish(self):
        self.apiserver.connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def _serve(self):
        apiserver = self.apiserver
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        method = self.command
        apiserver.count(url.path, method, query, length)
        fault = apiserver.plane.faults.take(("drop", "slow", "status"), apiserver.index, method, url.path)
        if fault is not None and fault.kind == "drop":
            self.close_connection = True
            return
        if fault is not None and fault.kind == "slow":
            time.sleep(float(fault.params.get("delay", 1.0)))
        if method == "GET" and ("limit" in query or "continue" in query):
            restart = apiserver.plane.faults.take(("restart_during_list",), apiserver.index, method, url.path,
                                                  _chunk_counter)
            if restart is not None:
                self.close_connection = True
                threading.Thread(target=apiserver.restart, daemon=True).start()
                return
        if fault is not None and fault.kind == "status":
            code = int(fault.params.get("code", 500))
            reason, message = fault_text(code)
            headers = {}
            details = {}
            if fault.params.get("retry_after") is not None:
                headers["Retry-After"] = str(int(fault.params["retry_after"]))
                details["retryAfterSeconds"] = int(fault.params["retry_after"])
            error = errors.failure(code, message, reason, details, headers=headers)
            content_type, payload = error.payload()
            return self._write(code, content_type, payload, error.headers)
        headers = {k.lower(): v for k, v in self.headers.items()}
        code, content_type, payload, extra = apiserver.dispatch(Request(method, url.path, query, headers, body))
        self._write(code, content_type, payload, extra)

    def _write(self, code, content_type, payload, headers):
        lines = [f"HTTP/1.1 {code} {self.responses.get(code, ('',))[0]}", f"Content-Type: {content_type}",
                 f"Content-Length: {len(payload)}", f"Audit-Id: {uuid.uuid4()}",
                 f"Date: {self.date_time_string()}"]
        lines.extend(f"{k}: {v}" for k, v in headers.items())
        if self.close_connection:
            lines.append("Connection: close")
        self.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        self.apiserver.bytes_out += len(payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


def _chunk_counter(fault):
    fault.seen += 1
    return fault.seen > int(fault.params.get("after_chunks", 1))


def fault_text(code):
    from .faults import REASONS
    return REASONS.get(code, ("InternalError", f"injected status {code}"))


def identity_lease_name(hostname):
    """apiserver-<26 base32 chars of sha256(hostname)[:16]>, as kube-apiserver names its identity Lease."""
    digest = hashlib.sha256(hostname.encode()).digest()[:16]
    return "apiserver-" + base64.b32encode(digest).decode().rstrip("=").lower()


class ApiServer:
    """One apiserver endpoint: a release profile, a port, and a server thread that can be stopped and restarted."""

    def __init__(self, plane, index, release, port, ssl_context):
        self.plane = plane
        self.store = plane.store
        self.token = plane.token
        self.index = index
        self.release = release
        self.port = port
        self.ssl_context = ssl_context
        self.hostname = f"host-{index}"
        self.identity = identity_lease_name(self.hostname)
        self.api = Api(self)
        self.connections = set()
        self.httpd = None
        self.ready = False
        self.requests = 0
        self.by_path = collections.Counter()
        self.bytes_in = 0
        self.bytes_out = 0
        self._lock = threading.Lock()

    @property
    def running(self):
        return self.httpd is not None

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    @property
    def url(self):
        return f"{'https' if self.ssl_context else 'http'}://{self.address}"

    def count(self, path, method="GET", query=None, length=0):
        self.requests += 1
        self.by_path[path] += 1
        self.bytes_in += length
        self.plane.audit[audit_key(method, path, query or {})] += 1

    def version_info(self):
        major, minor = self.release.split(".")
        return {"major": major, "minor": minor, "gitVersion": f"v{self.release}.0",
                "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
                "buildDate": "1970-01-01T00:00:00Z", "goVersion": "apisim", "compiler": "gc",
                "platform": "linux/amd64"}

    def check_admission(self, rtype, namespace, name):
        resource = f"{rtype.resource}.{rtype.group}" if rtype.group else rtype.resource
        fault = self.plane.faults.denial(self.index, resource, namespace, name)
        if fault is None:
            return
        code = int(fault.params.get("code", 422))
        text = ("ValidatingAdmissionPolicy 'apisim-deny-updates' with binding 'apisim-deny-updates' denied request: "
                + fault.params.get("message", "updates are denied"))
        details = {"name": name}
        if rtype.group:
            details["group"] = rtype.group
        details.update({"kind": rtype.resource, "causes": [{"message": text}]})
        raise errors.failure(code, f'{resource} "{name}" is forbidden: {text}',
                             "Invalid" if code == 422 else "Forbidden", details)

    def dispatch(self, request):
        try:
            return self.api.handle(request)
        except errors.ApiError as error:
            content_type, payload = error.payload()
            return error.code, content_type, payload, error.headers

    def start(self):
        with self._lock:
            if self.httpd is not None:
                return
            handler = type("Handler", (_Handler,), {"apiserver": self})
            httpd = _Server(("127.0.0.1", self.port), handler)
            httpd.ssl_context = self.ssl_context
            self.port = httpd.server_address[1]
            self.httpd = httpd
            threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
            self.ready = True

    def drop_connections(self):
        for connection in list(self.connections):
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stop(self):
        with self._lock:
            httpd, self.httpd = self.httpd, None
            self.ready = False
            if httpd is not None:
                httpd.shutdown()
                httpd.server_close()
            self.drop_connections()

    def restart(self, pause=0.2):
        self.stop()
        time.sleep(pause)
        self.start()


class FrontProxy:
    """A TCP load balancer: each client connection goes to the next running apiserver (TLS passes through)."""

    def __init__(self, plane, port=0):
        self.plane = plane
        self.sock = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self.port = self.sock.getsockname()[1]
        self._next = itertools.count()
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._stopped:
            try:
                client, _unused = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client):
        running = [s for s in self.plane.apiservers if s.running]
        if not running:
            client.close()
            return
        target = running[next(self._next) % len(running)]
        try:
            upstream = socket.create_connection(("127.0.0.1", target.port), timeout=5)
            upstream.settimeout(None)
        except OSError:
            client.close()
            return
        # Small TLS records relayed with Nagle on stall ~40 ms each against the peer's delayed ACK.
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
        _pump(client, upstream)

    def stop(self):
        self._stopped = True
        self.sock.close()


def _pump(source, sink):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


class _AdminHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    plane = None

    def log_message(self, *args):
        """Silence per-request logging."""

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            params = json.loads(self.rfile.read(length) or b"{}")
            operation = getattr(self.plane, "admin_" + self.path.strip("/"), None)
            if operation is None:
                raise ValueError(f"unknown admin operation {self.path!r}")
            code, reply = 200, {"result": operation(**params)}
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            code, reply = 400, {"error": f"{type(exc).__name__}: {exc}"}
        payload = json.dumps(reply).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def _kubectl_name(name):
    resource, _unused, group = name.partition(".")
    return group, resource


class ControlPlane:
    """Every apiserver, the shared store, the faults and the controllers of one simulated control plane."""

    def __init__(self, state_dir, apiservers=3, releases=("1.32",), tls_enabled=True, storage_version_api=False,
                 compaction_window=300.0, migrator_delay=0.2, port_base=0, admin_port=0, token=None, etcd=None):
        releases = list(releases) if not isinstance(releases, str) else [releases]
        if len(releases) == 1:
            releases *= apiservers
        if len(releases) != apiservers:
            raise ValueError(f"{len(releases)} releases given for {apiservers} apiservers")
        for release in releases:
            builtin_resources(release)
        self.state_dir = os.path.abspath(state_dir)
        self.store = Store(compaction_window, mirror=self._etcd_mirror(etcd) if etcd else None)
        self.faults = Faults()
        self.audit = collections.Counter()  # (verb, group, resource, subresource) -> requests
        self.token = token or uuid.uuid4().hex
        self.storage_version_api = storage_version_api
        self.migrator_delay = migrator_delay
        self.tls_paths = tls.generate(os.path.join(self.state_dir, "pki")) if tls_enabled else None
        context = None
        if tls_enabled:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tls_paths["server.crt"], self.tls_paths["server.key"])
        self.apiservers = [ApiServer(self, i, release, port_base + i if port_base else 0, context)
                           for i, release in enumerate(releases)]
        self.admin_port = admin_port
        self.front = None
        self.admin_httpd = None
        self.controllers = controllers.Controllers(self)
        self.aggregated = {}  # group -> versions of aggregated APIServices whose backend is down

    def _etcd_mirror(self, etcd):
        """``etcd``: {endpoint, prefix, ca_file, cert_file, key_file}; every write then also goes to that etcd."""
        kinds = {}
        for release in release_data():
            for (group, resource), info in builtin_resources(release).items():
                kinds.setdefault(storage_key(group, resource), info.kind)

        def kind_of(bucket):
            if bucket in kinds:
                return kinds[bucket]
            crd = self.store.buckets[("apiextensions.k8s.io", "customresourcedefinitions")].items.get(f"{bucket[1]}.{bucket[0]}")
            if crd is None:
                raise ValueError(f"no kind known for {bucket}: create its CRD first")
            return crd.obj["spec"]["names"]["kind"]

        return EtcdMirror(etcd, kind_of, lambda bucket: bucket in kinds)

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self, seed_names=()):
        for apiserver in self.apiservers:
            apiserver.start()
        self.front = FrontProxy(self)
        handler = type("AdminHandler", (_AdminHandler,), {"plane": self})
        self.admin_httpd = _Server(("127.0.0.1", self.admin_port), handler)
        threading.Thread(target=self.admin_httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        self._bootstrap()
        for name in seed_names:
            self.admin_seed(name)
        self.controllers.start()
        self._write_state()

    def stop(self):
        self.controllers.stop()
        for apiserver in self.apiservers:
            apiserver.stop()
        if self.front:
            self.front.stop()
        if self.admin_httpd:
            self.admin_httpd.shutdown()
            self.admin_httpd.server_close()

    def api(self):
        """The Api of the first running apiserver (the one the in-process controllers talk to)."""
        for apiserver in self.apiservers:
            if apiserver.running:
                return apiserver.api
        return None

    def _bootstrap(self):
        api = self.apiservers[0].api
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.ensure(api, "", "v1", "namespaces", None, {"metadata": {"name": name}})
        for apiserver in self.apiservers:
            self.ensure(api, "coordination.k8s.io", "v1", "leases", "kube-system", {
                "metadata": {"name": apiserver.identity, "labels": {
                    "apiserver.kubernetes.io/identity": "kube-apiserver",
                    "kubernetes.io/hostname": apiserver.hostname}},
                "spec": {"holderIdentity": f"{apiserver.identity}_{uuid.uuid4()}", "leaseDurationSeconds": 3600,
                         "renewTime": now().replace("Z", ".000000Z")}})
        self.refresh_storage_versions()

    @staticmethod
    def ensure(api, group, version, resource, namespace, obj):
        rtype = api.resolve(group, version, resource)
        if api.store.get(rtype.bucket, namespace, obj["metadata"]["name"]) is None:
            api.create(rtype, namespace, obj)

    def refresh_storage_versions(self):
        """Write internal.apiserver.k8s.io StorageVersion objects from every apiserver's release profile."""
        if not self.storage_version_api:
            return
        api = self.apiservers[0].api
        rtype = api.resolve("internal.apiserver.k8s.io", "v1alpha1", "storageversions")
        if rtype is None:
            return
        per_resource = collections.defaultdict(list)
        for apiserver in self.apiservers:
            for (group, resource), info in builtin_resources(apiserver.release).items():
                per_resource[(group, resource)].append({
                    "apiServerID": apiserver.identity, "encodingVersion": info.storage_api_version,
                    "decodableVersions": sorted(api_version(info.storage_group, v) for v in info.decodable),
                    "servedVersions": [api_version(group, v) for v in info.served]})
        with self.store.lock:
            for (group, resource), versions in per_resource.items():
                name = f"{group or 'core'}.{resource}"
                encodings = {v["encodingVersion"] for v in versions}
                status = {"storageVersions": versions}
                common = len(encodings) == 1
                if common:
                    status["commonEncodingVersion"] = encodings.pop()
                status["conditions"] = [{
                    "type": "AllEncodingVersionsEqual", "status": "True" if common else "False",
                    "lastTransitionTime": now(),
                    "reason": "CommonEncodingVersionSet" if common else "CommonEncodingVersionUnset",
                    "message": "Common encoding version set" if common else "Common encoding version unset"}]
                entry = self.store.get(rtype.bucket, None, name)
                if entry is None:
                    api.create(rtype, None, {"metadata": {"name": name}, "spec": {}})
                    entry = self.store.get(rtype.bucket, None, name)
                if entry.obj.get("status", {}).get("storageVersions") != versions:
                    obj = dict(entry.obj, status=status)
                    api._store(rtype, obj, None, name)

    def kubeconfig(self, server_url, name):
        cluster = {"server": server_url}
        if self.tls_paths:
            with open(self.tls_paths["ca.crt"], "rb") as handle:
                cluster["certificate-authority-data"] = base64.b64encode(handle.read()).decode()
        config = {"apiVersion": "v1", "kind": "Config", "current-context": name, "preferences": {},
                  "clusters": [{"name": name, "cluster": cluster}],
                  "users": [{"name": "admin", "user": {"token": self.token}}],
                  "contexts": [{"name": name, "context": {"cluster": name, "user": "admin"}}]}
        path = os.path.join(self.state_dir, f"kubeconfig-{name}")
        with open(path, "w") as handle:
            json.dump(config, handle, indent=1)
        return path

    def front_url(self):
        return f"{'https' if self.tls_paths else 'http'}://127.0.0.1:{self.front.port}"

    def _write_state(self):
        state = {
            "endpoints": [s.url for s in self.apiservers],
            "front": self.front_url(),
            "admin": f"http://127.0.0.1:{self.admin_httpd.server_address[1]}",
            "token": self.token,
            "ca_file": self.tls_paths["ca.crt"] if self.tls_paths else None,
            "kubeconfig": self.kubeconfig(self.front_url(), "front"),
            "endpoint_kubeconfigs": [self.kubeconfig(s.url, f"apiserver-{s.index}") for s in self.apiservers],
            "releases": [s.release for s in self.apiservers],
            "pid": os.getpid(),
        }
        path = os.path.join(self.state_dir, "control-plane.json")
        with open(path + ".tmp", "w") as handle:
            json.dump(state, handle, indent=1)
        os.replace(path + ".tmp", path)

    # -- admin operations --------------------------------------------------------------------------------------
    def _apiserver(self, index):
        if not 0 <= int(index) < len(self.apiservers):
            raise IndexError(f"no apiserver {index}; there are {len(self.apiservers)}")
        return self.apiservers[int(index)]

    def admin_status(self):
        return [{"index": s.index, "url": s.url, "release": s.release, "running": s.running, "ready": s.ready}
                for s in self.apiservers]

    def admin_set_release(self, index, release):
        if release not in release_data():
            raise ValueError(f"unknown release {release!r}")
        apiserver = self._apiserver(index)
        apiserver.release = release
        apiserver.drop_connections()
        self.refresh_storage_versions()
        return self.admin_status()[apiserver.index]

    def admin_stop(self, index):
        self._apiserver(index).stop()

    def admin_start(self, index):
        self._apiserver(index).start()

    def admin_restart(self, index):
        self._apiserver(index).restart()

    def admin_fault(self, kind, apiserver=None, **params):
        if apiserver is not None:
            self._apiserver(apiserver)
        return self.faults.add(kind, apiserver, **params)

    def admin_clear_faults(self):
        self.faults.clear()

    def admin_put_raw(self, resource, namespace, name, encoded_version, obj):
        group, plural = _kubectl_name(resource)
        if "/" not in encoded_version and group:
            encoded_version = f"{group}/{encoded_version}"
        obj = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        meta = obj.setdefault("metadata", {})
        meta["name"] = name
        if namespace:
            meta["namespace"] = namespace
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now())
        with self.store.lock:
            rv = self.store.next_rv()
            meta["resourceVersion"] = str(rv)
            self.store.put(storage_key(group, plural), Entry(namespace or None, name, encoded_version, rv, obj))
        return str(rv)

    def admin_stored_objects(self, resource):
        group, plural = _kubectl_name(resource)
        with self.store.lock:
            return [{"namespace": e.namespace, "name": e.name, "encoded_version": e.encoded,
                     "resource_version": str(e.rv), "object": e.obj}
                    for e in self.store.entries(storage_key(group, plural))]

    def admin_compact(self):
        self.store.compact()

    def admin_stats(self):
        return {"apiservers": [{"index": s.index, "requests": s.requests, "by_path": dict(s.by_path),
                                "bytes_in": s.bytes_in, "bytes_out": s.bytes_out} for s in self.apiservers]}

    def admin_reset_stats(self):
        for apiserver in self.apiservers:
            apiserver.requests = 0
            apiserver.by_path.clear()
            apiserver.bytes_in = apiserver.bytes_out = 0

    def admin_audit(self):
        """Every (verb, group, resource, subresource) requested since the start, with counts."""
        return [{"verb": k[0], "group": k[1], "resource": k[2], "subresource": k[3], "count": n}
                for k, n in sorted(self.audit.items())]

    def admin_add_apiservice(self, group, version, service="kube-system/metrics-server", available=False):
        """Register an aggregated APIService (an APIService object with spec.service). Its backend is down: the
        group is listed in /apis and its discovery answers 503, as a real aggregator's does."""
        namespace, _unused, name = service.partition("/")
        api = self.apiservers[0].api
        condition = {"type": "Available", "status": "True" if available else "False",
                     "reason": "Passed" if available else "FailedDiscoveryCheck",
                     "message": "all checks passed" if available else f"failing or missing response from https://{name}:443"}
        self.ensure(api, "apiregistration.k8s.io", "v1", "apiservices", None, {
            "metadata": {"name": f"{version}.{group}"},
            "spec": {"group": group, "version": version, "service": {"namespace": namespace, "name": name, "port": 443},
                     "groupPriorityMinimum": 100, "versionPriority": 100, "insecureSkipTLSVerify": True},
            "status": {"conditions": [condition]}})
        if not available:
            self.aggregated.setdefault(group, []).append(version)
        return f"{version}.{group}"

    def admin_delete_raw(self, resource, namespace, name):
        """Delete one object's key from the store, as etcdctl del does (no API call, no decoding)."""
        group, plural = _kubectl_name(resource)
        with self.store.lock:
            return self.store.delete(storage_key(group, plural), namespace or None, name) is not None

    def admin_seed(self, name):
        return seeds.seed(self, name)
