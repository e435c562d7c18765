# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fake apiserver for unit tests: the real ``ApiClient`` with ``request()`` answered from a table.

Only ``request`` is replaced, so error parsing (text/plain 404, Status bodies, Retry-After) is the
client's own code. Routes map ``(method, path)`` or ``path`` to a recorded exchange, a
``(status, body)`` pair, a callable ``(method, path, query, body) -> (status, body)``, or an
exception to raise (a dropped connection).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from urllib.parse import urlsplit

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.client import ApiClient, ApiResponse
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings, check_url
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import EndpointUnreachable

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "real-apiserver-1.32"


def recorded(relative: str) -> dict:
    return json.loads((FIXTURES / relative).read_text())


def recorded_route(relative: str):
    """(status, body, headers) of a recorded exchange; text bodies stay text."""
    exchange = recorded(relative)
    return exchange["status"], exchange["body"], exchange.get("headers") or {}


def discovery_routes() -> dict:
    """Every legacy discovery document recorded from apiserver1, by path, plus /version and /readyz."""
    routes = {}
    for path in sorted((FIXTURES / "discovery").glob("*.json")):
        exchange = json.loads(path.read_text())
        request = exchange["request"]
        accept = request.get("accept") or ""
        if "apidiscovery" in accept or "?" in request["path"] or request["server"].endswith(":16444"):
            continue
        routes[request["path"]] = (exchange["status"], exchange["body"], exchange.get("headers") or {})
    return routes


NOT_FOUND_TEXT = (404, "404 page not found\n", {"Content-Type": "text/plain; charset=utf-8"})


class FakeApiClient(ApiClient):
    """An ApiClient whose answers come from ``routes``; records every request it was asked for."""

    def __init__(self, endpoint: str, routes=None, shared_log=None):
        super().__init__(ConnectionSettings(host=endpoint, verify=False), endpoint)
        self.routes = dict(routes or {})
        self.log = shared_log if shared_log is not None else []
        self._lock = threading.Lock()

    def for_endpoint(self, endpoint: str, option: str = "endpoints"):
        check_url(option, endpoint)
        return FakeApiClient(endpoint, self.routes, self.log)

    def requests_to(self, method: str = None) -> list:
        return [(m, p) for e, m, p, _q, _b in self.log if e == self.endpoint and (method is None or m == method)]

    def request(self, method, path, query=None, body=None, content_type="application/json",
                accept="application/json", timeout=None):
        with self._lock:
            self.log.append((self.endpoint, method, path, dict(query or {}), body))
        route = self.routes.get((method, path), self.routes.get(path) if method == "GET" else None)
        if route is None:
            route = NOT_FOUND_TEXT
        if callable(route):
            route = route(method, path, query or {}, body)
        if isinstance(route, Exception):
            if isinstance(route, EndpointUnreachable):
                raise EndpointUnreachable(str(route), endpoint=self.endpoint, method=method, path=path)
            raise route
        status, payload = route[0], route[1]
        headers = dict(route[2]) if len(route) > 2 else {}
        payload = _advertised_here(payload, self.endpoint) if path == "/api" else payload
        if isinstance(payload, (dict, list)):
            data = json.dumps(payload).encode()
            headers.setdefault("Content-Type", "application/json")
        else:
            data = (payload or "").encode()
        response = ApiResponse(status, headers, data)
        if status >= 400:
            raise self._error(method, path, response)
        return response


RECORDED_ADDRESS = "127.0.0.1:16443"  # what the recorded apiserver advertised in /api


def _advertised_here(payload, endpoint: str):
    """/api as the apiserver at ``endpoint`` answers it: the address it advertises is its own (the recording's was
    one apiserver's, shared by every fake endpoint). A route a test gave with another address is left as it is."""
    addresses = payload.get("serverAddressByClientCIDRs") if isinstance(payload, dict) else None
    if not addresses or addresses[0].get("serverAddress") != RECORDED_ADDRESS:
        return payload
    answer = dict(payload)
    answer["serverAddressByClientCIDRs"] = [{"clientCIDR": "0.0.0.0/0", "serverAddress": urlsplit(endpoint).netloc}]
    return answer


def unreachable(message: str = "connection refused"):
    return EndpointUnreachable(message)


class FakeClock:
    """A clock and a sleep for the waits under test: sleeping moves the clock; ``slept`` lists every sleep.
    Pass ``clock`` (or the instance itself: it is callable) and ``sleep``."""

    def __init__(self, now: float = 0.0):
        self.now = now
        self.slept = []

    def __call__(self):
        return self.now

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds
