"""Injected faults, per apiserver, matched on method and path, optionally limited to a number of uses."""

import itertools
import re
import threading

KINDS = ("status", "drop", "slow", "restart_during_list", "deny_update")
REASONS = {429: ("TooManyRequests", "Too many requests, please try again later."),
           500: ("InternalError", "Internal error occurred: injected by the simulator"),
           503: ("ServiceUnavailable", "The server is currently unable to handle the request")}


class Fault:
    def __init__(self, fault_id, kind, apiserver, params):
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(KINDS)}")
        self.id = fault_id
        self.kind = kind
        self.apiserver = apiserver
        self.params = params
        self.remaining = params.get("count")
        self.method = params.get("method")
        self.path_regex = re.compile(params["path_regex"]) if params.get("path_regex") else None
        self.seen = 0

    def matches(self, index, method, path):
        if self.apiserver is not None and self.apiserver != index:
            return False
        if self.method and self.method.upper() != method:
            return False
        return not self.path_regex or bool(self.path_regex.search(path))


class Faults:
    """The fault table shared by every apiserver of a control plane."""

    def __init__(self):
        self._lock = threading.Lock()
        self._faults = []
        self._ids = itertools.count(1)

    def add(self, kind, apiserver=None, **params):
        with self._lock:
            fault = Fault(next(self._ids), kind, apiserver, params)
            self._faults.append(fault)
            return fault.id

    def clear(self):
        with self._lock:
            self._faults.clear()

    def take(self, kinds, index, method, path, predicate=None):
        """The first matching fault of ``kinds``, consuming one use of it."""
        if not self._faults:
            return None
        with self._lock:
            for fault in self._faults:
                if fault.kind in kinds and fault.matches(index, method, path) and (
                        predicate is None or predicate(fault)):
                    if fault.remaining is not None:
                        fault.remaining -= 1
                        if fault.remaining <= 0:
                            self._faults.remove(fault)
                    return fault
        return None

    def denial(self, index, resource, namespace, name):
        """The deny_update fault covering an object, if any (not consumed)."""
        with self._lock:
            for fault in self._faults:
                p = fault.params
                if fault.kind == "deny_update" and (fault.apiserver is None or fault.apiserver == index) and \
                        p.get("resource") == resource and p.get("namespace") in (None, namespace) and \
                        p.get("name") in (None, name):
                    return fault
        return None
