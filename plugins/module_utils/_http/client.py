# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one place that speaks HTTP to apiservers.

Requests go over the shared keep-alive connections of ``transport.py`` and return raw JSON, because discovery
and migration need the documents as the server wrote them, not typed models. Every response body is
parsed here, once: an error status, a body that is not JSON (an HTML proxy or login page, a cut-off
answer) and an unreachable endpoint each become an ``ApiError`` or ``EndpointUnreachable`` naming the
apiserver, the request and the next step. ``get_or_none`` and ``list_all`` hold the two read
patterns every capability shares (missing means None: ``is_missing``, ``none_if_missing``; a paged LIST that
survives an expired token).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Callable, List, Mapping, Optional
from urllib.parse import urlencode

from ansible_collections.kubeupgrade.storage.plugins.module_utils._http import diagnosis, paths, protobuf
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.settings import ConnectionSettings, check_url
from ansible_collections.kubeupgrade.storage.plugins.module_utils._http.transport import transport_for
from ansible_collections.kubeupgrade.storage.plugins.module_utils.errors import (
    ApiError,
    EndpointUnreachable,
    is_decode_failure,
)

LIST_CHUNK = 500


@dataclass
class ApiResponse:
    """One 2xx answer; ``endpoint``, ``method`` and ``path`` say where it came from, for error messages."""

    status: int
    headers: Mapping[str, str]
    data: bytes
    endpoint: Optional[str] = None
    method: Optional[str] = None
    path: Optional[str] = None
    certificate: Optional[bytes] = None  # DER, of the TLS connection that carried this answer (``RawResponse``)

    def json(self):
        return parse_json_body(self, self.endpoint, self.method, self.path)

    @property
    def server_certificate(self) -> Optional[str]:
        """The SHA-256 of the certificate the answering apiserver served (``sha256:`` and 16 hex digits), or None (http,
        a proxy): with the address it advertises, what tells one apiserver from another behind one URL."""
        return f"sha256:{hashlib.sha256(self.certificate).hexdigest()[:16]}" if self.certificate else None

    @property
    def content_type(self) -> str:
        for key, value in (self.headers or {}).items():
            if key.lower() == "content-type":
                return value
        return ""


def _query_string(query: dict) -> str:
    """``query`` URL-encoded, its None values left out; a query sent again (a migration's field manager on every
    write) is encoded once."""
    try:
        return _encoded(tuple((key, value, type(value)) for key, value in query.items()))  # 1 and True are two keys
    except TypeError:  # a value that cannot be a cache key
        return urlencode({k: v for k, v in query.items() if v is not None})


@functools.lru_cache(maxsize=64)
def _encoded(items: tuple) -> str:
    return urlencode({key: value for key, value, _type in items if value is not None})


def parse_json_body(response: ApiResponse, endpoint: Optional[str], method: Optional[str], path: Optional[str]) -> dict:
    """The JSON object in a 2xx body, or an ApiError naming the apiserver, the request, status and content type.

    Every body the collection reads passes here: a proxy's HTML page, a login page, a truncated or
    empty answer must never reach a caller as a half-parsed document (or as a JSONDecodeError).
    """
    if response.status == 204:
        return {}
    problem = ""
    try:
        if not response.data:
            problem = "an empty body"
        else:
            document = json.loads(response.data)
            if isinstance(document, dict):
                return document
            problem = f"a JSON {type(document).__name__}, not an object"
    except ValueError as exc:
        problem = f"a body that is not JSON ({_short(exc)})"
    where = endpoint or "the apiserver"
    content_type = response.content_type or "no content type"
    preview = response.data[:80].decode("utf-8", "replace").strip() if response.data else ""
    text = (f"{method or 'GET'} {path or ''} on apiserver {where} answered HTTP {response.status} with {problem} "
            f"(Content-Type: {content_type}, {len(response.data or b'')} bytes")
    text += f", starting {preview!r})" if preview else ")"
    text += (". Expected a Kubernetes API JSON document: check that the URL points at the apiserver itself and not "
             "at a proxy, load balancer or login page, and that nothing between them cuts answers short.")
    raise ApiError(text, endpoint=endpoint, method=method, path=path, status=response.status,
                   reason="InvalidBody", api_message=problem, problem=diagnosis.NOT_JSON)


_NEXT_STEPS = {
    401: "The apiserver rejected the credentials: check 'api_key', the kubeconfig user, or client certificates.",
    403: "The user is not allowed to do this: grant it with RBAC (see the collection README for the required rules).",
    404: "The resource or API group is not served by this apiserver.",
    409: "The object changed while it was being written.",
    410: "The list or continue token expired; start the list again.",
    422: "The apiserver refused the object as invalid.",
    429: "The apiserver is overloaded; retry later.",
    503: "The apiserver is not ready; retry once it is.",
}

_DECODE_HINT = ("The object is stored in etcd in a version this apiserver cannot decode; "
                "no API call can read, rewrite or delete it. Restore it with an apiserver release that can read it, "
                "or remove the key from etcd.")

_REQUEST_OPTIONS = ("content_type", "accept", "timeout")


class ApiClient:
    """Requests against one apiserver endpoint; ``for_endpoint`` reuses credentials and the pool.

    ``option`` names the module option the endpoint came from, so a malformed URL is blamed on it.
    """

    def __init__(self, settings: ConnectionSettings, endpoint: Optional[str] = None, maxsize: int = 10, option: str = "endpoints"):
        self.settings = settings
        self.endpoint = check_url(option if endpoint else "host", endpoint or settings.host)
        self.maxsize = maxsize
        self._transport = transport_for(settings, self.endpoint, maxsize)
        self._headers = [(name, value) for name, value in settings.headers.items() if name.lower() != "accept"]
        self._headers += [("Impersonate-Group", group) for group in settings.impersonate_groups]

    def for_endpoint(self, endpoint: str, option: str = "endpoints") -> ApiClient:
        return ApiClient(self.settings, endpoint, self.maxsize, option)

    def request(self, method: str, path: str, query=None, body=None, **options) -> ApiResponse:
        """Send one request; return the response for 2xx, raise ``ApiError``/``EndpointUnreachable`` otherwise.

        ``options``: ``content_type`` of the body, ``accept``, and ``timeout`` in seconds (default: the settings').
        """
        unknown = set(options) - set(_REQUEST_OPTIONS)
        if unknown:
            raise TypeError(f"unknown request options: {', '.join(sorted(unknown))}")
        target = path
        if query:
            target += "?" + _query_string(query)
        headers = self._headers + [("Accept", options.get("accept") or "application/json")]
        payload = None
        if body is not None:
            payload = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode("utf-8")
            headers.append(("Content-Type", options.get("content_type") or "application/json"))
        raw = self._transport.send(method, self.endpoint, path, target,
                                   (headers, payload, options.get("timeout") or self.settings.timeout))
        response = ApiResponse(raw.status, raw.headers, raw.data or b"", self.endpoint, method, path, raw.certificate)
        if raw.status >= 400:
            raise self._error(method, path, response)
        return response

    def _error(self, method: str, path: str, response: ApiResponse) -> ApiError:
        body, message = _error_body(response)
        reason = (body.get("reason") or "") if body else ""
        retry_after = _retry_after(response, body)
        hint = _DECODE_HINT if is_decode_failure(response.status, message) else _NEXT_STEPS.get(response.status, "")
        problem = diagnosis.of_status(response.status, message)
        if problem == diagnosis.FORBIDDEN:
            hint = (f"The user may not {method} {path}: grant it with an RBAC rule {paths.rbac_rule(method, path)} "
                    "(the collection's rbac/ directory has ClusterRoles for each use).")
        elif problem == diagnosis.ANONYMOUS:
            hint = diagnosis.step(problem, self.endpoint)
            hint = hint[:1].upper() + hint[1:] + "."
        text = f"{method} {path} on apiserver {self.endpoint} failed: HTTP {response.status}"
        text += f" {reason}" if reason else ""
        text += f": {message}" if message else ""
        text += f". {hint}" if hint else ""
        return ApiError(text, endpoint=self.endpoint, method=method, path=path, status=response.status,
                        reason=reason, api_message=message, retry_after=retry_after, body=body, problem=problem)

    def parse(self, method: str, path: str, response: ApiResponse) -> dict:
        return parse_json_body(response, self.endpoint, method, path)

    def get(self, path: str, query=None, accept: str = "application/json") -> dict:
        return self.parse("GET", path, self.request("GET", path, query=query, accept=accept))

    def get_or_none(self, path: str, query=None) -> Optional[dict]:
        """The object at ``path``, or None when the apiserver answers 404 (``none_if_missing``)."""
        return none_if_missing(lambda: self.get(path, query=query))

    def list_all(self, path: str, query=None, chunk: int = LIST_CHUNK) -> List[dict]:
        """Every item of a LIST, in chunks of ``chunk`` with ``continue``; an expired token (410) restarts once."""
        return paged_items(lambda where, params: self.get(where, query=params), path, query, chunk)

    def get_text(self, path: str, query=None) -> str:
        return self.request("GET", path, query=query, accept="text/plain, application/json").data.decode("utf-8", "replace")

    def post(self, path: str, body, query=None) -> dict:
        return self.parse("POST", path, self.request("POST", path, query=query, body=body))

    def put(self, path: str, body, query=None) -> dict:
        return self.parse("PUT", path, self.request("PUT", path, query=query, body=body))

    def patch(self, path: str, body, content_type: str = "application/merge-patch+json") -> dict:
        return self.parse("PATCH", path, self.request("PATCH", path, body=body, content_type=content_type))

    def delete(self, path: str, query=None, body=None) -> dict:
        return self.parse("DELETE", path, self.request("DELETE", path, query=query, body=body))


def is_missing(error: Exception) -> bool:
    """The apiserver answered 404: the object, resource or group/version is not there. "Missing" is decided here,
    once (never for an apiserver that did not answer); ``none_if_missing`` and ``get_or_none`` use it."""
    return isinstance(error, ApiError) and not isinstance(error, EndpointUnreachable) and error.status == 404


def none_if_missing(call: Callable[[], dict]):
    """``call()``, or None when the apiserver answers 404 (``is_missing``): for every client that GETs its own way
    (with retries or not), and for a LIST or DELETE where a missing collection or object is not a failure."""
    try:
        return call()
    except ApiError as error:
        if is_missing(error):
            return None
        raise


def paged_items(get: Callable[[str, dict], dict], path: str, query=None, chunk: int = LIST_CHUNK) -> List[dict]:
    """The one paging loop, for every client that GETs its own way (with retries or not): every item of a LIST in
    chunks of ``chunk`` with ``continue``; an expired continue token (410) restarts the list once."""
    for attempt in (1, 2):
        items: List[dict] = []
        token = None
        try:
            while True:
                params = dict(query or {}, limit=chunk)
                if token:
                    params["continue"] = token
                page = get(path, params)
                items.extend(page.get("items") or [])
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    return items
        except ApiError as error:
            if error.status != 410 or attempt == 2:
                raise
    return []  # not reached


def _error_body(response: ApiResponse):
    """(Status document or None, message) of an error answer; a text body is its own message. An answer to a request
    that accepted protobuf is a Status in protobuf: read as the JSON document it stands for."""
    if protobuf.served(response):
        document = protobuf.status_document(response.data)
        if document is not None:
            return document, document.get("message") or ""
    try:
        body = json.loads(response.data) if response.data else None
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body, body.get("message") or ""
    return None, response.data.decode("utf-8", "replace").strip()


def _retry_after(response: ApiResponse, body) -> Optional[float]:
    header = response.headers.get("Retry-After") or response.headers.get("retry-after")
    if header:
        try:
            return float(header)
        except ValueError:
            pass
    if isinstance(body, dict):
        return (body.get("details") or {}).get("retryAfterSeconds")
    return None


def _short(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc)[:300]
