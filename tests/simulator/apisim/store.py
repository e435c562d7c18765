"""The shared in-memory "etcd": objects per resource bucket, each remembering the apiVersion it is encoded in."""

import bisect
import collections
import threading
import time


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

    def __init__(self, compaction_window=300.0):
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
