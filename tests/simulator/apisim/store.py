"""The shared in-memory "etcd": objects per resource bucket, each remembering the apiVersion it is encoded in.

Optionally every write is also made, synchronously, to a real etcd (``EtcdMirror``) in the kube-apiserver's key
layout and value envelope, so that what an etcd audit reads is exactly what the simulator stored. Reads stay in
memory: the in-memory index keeps the simulator's semantics (resourceVersions, chunked LISTs) unchanged.
"""

import base64
import bisect
import collections
import http.client
import json
import ssl
import threading
import time
import urllib.parse


class Entry:
    """One stored object. ``obj`` holds everything but apiVersion/kind; ``encoded`` is its encoding apiVersion."""

    __slots__ = ("namespace", "name", "encoded", "rv", "obj")

    def __init__(self, namespace, name, encoded, rv, obj):
        self.namespace = namespace
        self.name = name
        self.encoded = encoded
        self.rv = rv
        self.obj = obj


class Bucket:
    """Objects of one resource, with keys ("ns/name" or "name") kept sorted for chunked LISTs."""

    def __init__(self):
        self.keys = []
        self.items = {}
        self.by_encoding = collections.defaultdict(set)
        self.generation = 0

    def scan(self, namespace, start):
        """Yield (relative key, entry, keys left) in key order from ``start`` within ``namespace`` (or all)."""
        prefix = f"{namespace}/" if namespace else ""
        index = bisect.bisect_left(self.keys, prefix + start)
        keys = self.keys
        while index < len(keys):
            key = keys[index]
            if prefix and not key.startswith(prefix):
                return
            entry = self.items.get(key)
            index += 1
            if entry is not None:
                yield key[len(prefix):], entry, len(keys) - index

    def count_from(self, namespace, start):
        prefix = f"{namespace}/" if namespace else ""
        lo = bisect.bisect_left(self.keys, prefix + start)
        hi = bisect.bisect_left(self.keys, prefix + "\U0010ffff") if prefix else len(self.keys)
        return hi - lo


def object_key(namespace, name):
    return f"{namespace}/{name}" if namespace else name


class Store:
    """Every apiserver's view of storage; ``lock`` serialises writes and compound reads."""

    def __init__(self, compaction_window=300.0, mirror=None):
        self.mirror = mirror
        self.lock = threading.RLock()
        self.buckets = collections.defaultdict(Bucket)
        self.rv = 1
        self.compaction_window = compaction_window
        self.compacted_rv = 0
        self._history = collections.deque()

    def next_rv(self):
        self.rv += 1
        self._history.append((time.monotonic(), self.rv))
        return self.rv

    def get(self, bucket, namespace, name):
        return self.buckets[bucket].items.get(object_key(namespace, name))

    def put(self, bucket, entry):
        with self.lock:
            if self.mirror is not None:
                self.mirror.put(bucket, entry)
            target = self.buckets[bucket]
            key = object_key(entry.namespace, entry.name)
            old = target.items.get(key)
            if old is None:
                bisect.insort(target.keys, key)
            else:
                target.by_encoding[old.encoded].discard(key)
            target.items[key] = entry
            target.by_encoding[entry.encoded].add(key)
            target.generation += 1

    def delete(self, bucket, namespace, name):
        with self.lock:
            target = self.buckets[bucket]
            key = object_key(namespace, name)
            if self.mirror is not None and key in target.items:
                self.mirror.delete(bucket, namespace, name)
            entry = target.items.pop(key, None)
            if entry is not None:
                del target.keys[bisect.bisect_left(target.keys, key)]
                target.by_encoding[entry.encoded].discard(key)
                target.generation += 1
            return entry

    def entries(self, bucket, namespace=None):
        return [entry for _unused, entry, _unused in self.buckets[bucket].scan(namespace, "")]

    def compact(self):
        """Expire every resourceVersion issued so far (admin compaction)."""
        with self.lock:
            self.compacted_rv = self.next_rv()

    def expired(self, rv):
        """Whether a list at ``rv`` has been compacted away (older than the compaction window)."""
        horizon = time.monotonic() - self.compaction_window
        with self.lock:
            while self._history and self._history[0][0] < horizon:
                self.compacted_rv = max(self.compacted_rv, self._history.popleft()[1])
        return rv < self.compacted_rv


# The kube-apiserver's etcd key layout for the resources whose prefix is not simply "<resource>" (built-ins are
# stored without their group; pkg/registry/core/*/storage and the default storage factory's overrides).
_KEY_OVERRIDES = {
    ("", "nodes"): "minions",
    ("", "services"): "services/specs",
    ("", "endpoints"): "services/endpoints",
    ("", "replicationcontrollers"): "controllers",
    ("networking.k8s.io", "ingresses"): "ingress",
}
# Stored under "<group>/<resource>" and as JSON: CRDs, APIServices (and every custom resource).
_GROUPED_BUILTINS = {("apiextensions.k8s.io", "customresourcedefinitions"), ("apiregistration.k8s.io", "apiservices")}


class EtcdMirror:
    """Writes each stored object to a real etcd, as a kube-apiserver would lay it out.

    ``kind_of(bucket)`` names the kind of a bucket's objects, ``builtin(bucket)`` whether it is a built-in (stored
    under its resource name, in the protobuf envelope ``k8s\\x00`` + runtime.Unknown{TypeMeta, raw}; the raw
    bytes are the object as JSON, the simulator's own encoding) or not (custom resources: JSON under
    ``<group>/<resource>``). A failed write raises: the simulator's request then fails, as the apiserver's would.
    """

    def __init__(self, etcd, kind_of, builtin):
        """``etcd``: {endpoint, prefix (default /registry), ca_file, cert_file, key_file}."""
        parts = urllib.parse.urlsplit(etcd["endpoint"])
        self.endpoint = etcd["endpoint"]
        self.prefix = "/" + (etcd.get("prefix") or "/registry").strip("/")
        self.kind_of = kind_of
        self.builtin = builtin
        from . import k8s_protobuf  # protobuf: imported by a simulator that keeps its store in etcd, and by no other

        self._envelope = k8s_protobuf.envelope
        self._host, self._port, self._https = parts.hostname, parts.port or 2379, parts.scheme == "https"
        self._context = None
        if self._https:
            self._context = ssl.create_default_context(cafile=etcd.get("ca_file"))
            if etcd.get("cert_file"):
                self._context.load_cert_chain(etcd["cert_file"], etcd.get("key_file"))
        self._connection = None

    def key(self, bucket, namespace, name):
        group, resource = bucket
        if bucket in _GROUPED_BUILTINS or not self.builtin(bucket):
            head = f"{group}/{resource}"
        else:
            head = _KEY_OVERRIDES.get(bucket, resource)
        return f"{self.prefix}/{head}/" + (f"{namespace}/{name}" if namespace else name)

    def value(self, bucket, entry):
        kind = self.kind_of(bucket)
        if bucket in _GROUPED_BUILTINS or not self.builtin(bucket):
            return json.dumps({"apiVersion": entry.encoded, "kind": kind, **entry.obj}, separators=(",", ":")).encode() + b"\n"
        return self._envelope(entry.encoded, kind, json.dumps(entry.obj, separators=(",", ":")).encode())

    def put(self, bucket, entry):
        key = self.key(bucket, entry.namespace, entry.name).encode()
        self._call("/v3/kv/put", {"key": _b64(key), "value": _b64(self.value(bucket, entry))})

    def delete(self, bucket, namespace, name):
        self._call("/v3/kv/deleterange", {"key": _b64(self.key(bucket, namespace, name).encode())})

    def _call(self, path, body):
        data = json.dumps(body).encode()
        for attempt in (1, 2):  # one reconnect: etcd may have closed an idle keep-alive connection
            try:
                if self._connection is None:
                    self._connection = (http.client.HTTPSConnection(self._host, self._port, context=self._context, timeout=30)
                                        if self._https else http.client.HTTPConnection(self._host, self._port, timeout=30))
                self._connection.request("POST", path, body=data, headers={"Content-Type": "application/json"})
                response = self._connection.getresponse()
                payload = response.read()
            except (OSError, http.client.HTTPException):
                self._connection = None
                if attempt == 2:
                    raise
                continue
            if response.status != 200:
                raise OSError(f"etcd {self.endpoint}{path} answered {response.status}: {payload[:200]!r}")
            return


def _b64(data):
    return base64.b64encode(data).decode("ascii")
