"""Request handling of one apiserver endpoint: authentication, routing, CRUD on the shared store, LIST chunking.

Everything here is independent of HTTP so that the in-process controllers go through the same code paths (and the
same faults) as clients do.
"""

import base64
import binascii
import copy
import datetime
import json
import re
import uuid
from dataclasses import dataclass

from . import crds, discovery, errors
from .profiles import api_version, builtin_resources
from .store import Entry

ANONYMOUS_PATHS = ("/version", "/readyz", "/livez", "/healthz")
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
NAME_MESSAGE = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list.")
SVM_GROUP = "storagemigration.k8s.io"
VERB_OF = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Request:
    """A parsed request; ``query`` keeps the first value of each parameter."""

    __slots__ = ("method", "path", "query", "headers", "body")

    def __init__(self, method, path, query=None, headers=None, body=b""):
        self.method = method
        self.path = path
        self.query = query or {}
        self.headers = headers or {}
        self.body = body


@dataclass(eq=False)
class ResourceType:
    """One resource in one served version, as an endpoint sees it (built-in or custom)."""

    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool
    bucket: tuple
    storage_api_version: str
    has_status: bool
    custom: object = None
    builtin: object = None

    def __post_init__(self):
        self.api_version = api_version(self.group, self.version)

    def decode_error(self, encoded):
        """The message the real apiserver gives when it cannot decode an object encoded as ``encoded``."""
        if self.custom is not None:
            group, _unused, version = encoded.rpartition("/")
            if group != self.custom.group or version not in self.custom.versions:
                return f"request to convert CR from an invalid group/version: {encoded}"
            return None
        if self.builtin.can_decode(encoded):
            return None
        return (f'no kind "{self.kind}" is registered for version "{encoded}" in scheme '
                '"pkg/api/legacyscheme/scheme.go:30"')

    def render(self, entry, typed=True):
        if not typed:
            return entry.obj
        out = {"kind": self.kind, "apiVersion": self.api_version}
        out.update(entry.obj)
        return out


def builtin_type(release, group, version, resource):
    info = builtin_resources(release).get((group, resource))
    if info is None or version not in info.served:
        return None
    return ResourceType(group, version, resource, info.kind, info.namespaced, (info.storage_group, resource),
                        info.storage_api_version, info.has_status, builtin=info)


def custom_type(store, group, version, resource):
    custom = crds.registry(store).get((group, resource))
    if custom is None or version not in custom.served:
        return None
    return ResourceType(group, version, resource, custom.kind, custom.namespaced, (group, resource),
                        api_version(group, custom.storage), custom.has_status.get(version, False), custom=custom)


def encode_token(rv, start):
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_token(token):
    """Parse a continue token, failing with the real 400 texts."""
    alphabet = re.compile(r"[^A-Za-z0-9_-]")
    bad = alphabet.search(token)
    if bad or len(token) % 4 == 1:
        index = bad.start() if bad else len(token) - 1
        raise errors.bad_request(
            f"invalid continue token: continue key is not valid: illegal base64 data at input byte {index}")
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        return int(data["rv"]), str(data["start"])
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise errors.bad_request(f"invalid continue token: continue key is not valid: {exc}") from None


def parse_selector(text):
    """Label selector terms as (key, op, values); supports =, ==, !=, in, notin, exists and !exists."""
    terms = []
    for part in re.split(r",(?![^(]*\))", text or ""):
        part = part.strip()
        if not part:
            continue
        match = re.match(r"^([^\s!=]+)\s+(in|notin)\s+\((.*)\)$", part)
        if match:
            terms.append((match.group(1), match.group(2), {v.strip() for v in match.group(3).split(",")}))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            terms.append((key.strip(), "notin", {value.strip()}))
        elif "=" in part:
            key, value = re.split(r"==?", part, maxsplit=1)
            terms.append((key.strip(), "in", {value.strip()}))
        elif part.startswith("!"):
            terms.append((part[1:], "!exists", None))
        else:
            terms.append((part, "exists", None))
    return terms


def selector_matches(terms, labels):
    for key, op, values in terms:
        present = key in labels
        if op == "in" and not (present and labels[key] in values):
            return False
        if op == "notin" and present and labels[key] in values:
            return False
        if op == "exists" and not present:
            return False
        if op == "!exists" and present:
            return False
    return True


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target, operations):
    """RFC 6902 JSON patch (add, remove, replace, test)."""
    doc = copy.deepcopy(target)
    for op in operations:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if op["op"] == "add":
                parent.insert(index, op["value"])
            elif op["op"] == "remove":
                del parent[index]
            elif op["op"] == "replace":
                parent[index] = op["value"]
            elif op["op"] == "test" and parent[index] != op["value"]:
                raise ValueError(f"test failed at {op['path']}")
        elif op["op"] in ("add", "replace"):
            parent[last] = op["value"]
        elif op["op"] == "remove":
            del parent[last]
        elif op["op"] == "test" and parent.get(last) != op["value"]:
            raise ValueError(f"test failed at {op['path']}")
    return doc


PARTIAL_LIST = "as=PartialObjectMetadataList"


def partial_metadata_list(result):
    """A LIST as ``Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`` asks: metadata only."""
    items = [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": item.get("metadata", {})}
             for item in result["items"]]
    return {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": result["metadata"],
            "items": items}


def audit_key(method, path, query):
    """(verb, group, resource, subresource) of a resource request as RBAC sees it; ("get", "", path, "") otherwise."""
    parts = path.rstrip("/").strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return (VERB_OF.get(method, "get").lower() if method != "GET" else "get", "", "nonresource:" + path, "")
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        rest = rest[2:]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else ""
    if method == "GET":
        verb = "get" if name else ("watch" if query.get("watch") in ("1", "true") else "list")
    elif method == "DELETE" and not name:
        verb = "deletecollection"
    else:
        verb = VERB_OF.get(method, method.lower())
    return (verb, group, rest[0], sub)


def _without_volatile(obj):
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")}
    return {**{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}, "metadata": meta}


class Api:
    """The API of one apiserver endpoint; ``server`` gives its release, index, faults and the shared store."""

    def __init__(self, server):
        self.server = server
        self.store = server.store

    # -- entry point -------------------------------------------------------------------------------------------
    def handle(self, request):
        """Return (status, content_type, body bytes, headers) or raise errors.ApiError."""
        path = request.path.rstrip("/") or "/"
        if path in ANONYMOUS_PATHS or path.startswith(("/readyz/", "/livez/", "/healthz/")):
            return self._health(path)
        self._authenticate(request, path)
        if request.method == "GET" and discovery.is_discovery_path(path):
            return discovery.serve(self, path, request.headers.get("accept", ""))
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 3 and parts[1] == "v1":
            group, version, rest = "", "v1", parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.page_not_found()
        return self._resource_request(request, group, version, rest)

    def _health(self, path):
        if path == "/version":
            return self._json(200, self.server.version_info())
        if path.startswith(("/readyz", "/livez", "/healthz")):
            if not self.server.ready and path.startswith("/readyz"):
                return 500, "text/plain; charset=utf-8", b"readyz check failed\n", {}
            return 200, "text/plain; charset=utf-8", b"ok", {}
        raise errors.page_not_found()

    def _authenticate(self, request, path):
        header = request.headers.get("authorization", "")
        if header:
            if header != f"Bearer {self.server.token}":
                raise errors.failure(401, "Unauthorized", "Unauthorized")
            return
        parts = path.strip("/").split("/")
        resource_request = (parts[0] == "api" and len(parts) >= 3) or (parts[0] == "apis" and len(parts) >= 4)
        if not resource_request:
            raise errors.failure(403, f'forbidden: User "system:anonymous" cannot get path "{path}"', "Forbidden", {})
        group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        resource, name = rest[0], rest[1] if len(rest) > 1 else None
        if len(rest) > 2:
            resource = f"{resource}/{rest[2]}"
        verb = VERB_OF.get(request.method) or ("get" if name else "list")
        if request.method == "DELETE" and not name:
            verb = "deletecollection"
        subject = f'{rest[0]} "{name}"' if name else rest[0]
        where = "in the namespace" if namespace else "at"
        scope = f'"{namespace}"' if namespace else "the cluster scope"
        details = {"name": name} if name else {}
        if group:
            details["group"] = group
        details["kind"] = rest[0]
        raise errors.failure(
            403, f'{subject} is forbidden: User "system:anonymous" cannot {verb} resource "{resource}" in API group '
                 f'"{group}" {where} {scope}', "Forbidden", details)

    @staticmethod
    def _json(code, obj, headers=None):
        return code, "application/json", json.dumps(obj, separators=(",", ":")).encode(), headers or {}

    # -- routing -----------------------------------------------------------------------------------------------
    def resolve(self, group, version, resource):
        return (builtin_type(self.server.release, group, version, resource)
                or custom_type(self.store, group, version, resource))

    def _resource_request(self, request, group, version, rest):
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise errors.page_not_found()
        rtype = self.resolve(group, version, rest[0])
        if rtype is None:
            raise errors.page_not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and (sub != "status" or not rtype.has_status):
            raise errors.page_not_found()
        if rtype.namespaced != bool(namespace) and (name or request.method == "POST" or not rtype.namespaced):
            raise errors.page_not_found()
        method = request.method
        if method == "GET" and request.query.get("watch") in ("1", "true"):
            raise errors.failure(405, "watch is not supported by the simulator", "MethodNotAllowed", {})
        if method == "GET":
            result = self.get(rtype, namespace, name) if name else self.list(rtype, namespace, request.query)
            if not name and PARTIAL_LIST in request.headers.get("accept", "").replace(" ", ""):
                result = partial_metadata_list(result)
            return self._json(200, result)
        if method == "POST" and not name:
            return self._json(201, self.create(rtype, namespace, self._body(request, rtype)))
        if method == "PUT" and name:
            return self._json(200, self.update(rtype, namespace, name, self._body(request, rtype), sub))
        if method == "PATCH" and name:
            with self.store.lock:  # server-side apply of a missing object creates it: 201
                existed = self.store.get(rtype.bucket, namespace, name) is not None
                return self._json(200 if existed else 201, self.patch(rtype, namespace, name, request, sub))
        if method == "DELETE" and name:
            return self._json(200, self.delete(rtype, namespace, name))
        raise errors.failure(405, "the server does not allow this method on the requested resource",
                             "MethodNotAllowed", {})

    def _body(self, request, rtype=None):
        try:
            body = json.loads(request.body or b"null")
            if not isinstance(body, dict):
                raise ValueError
            return body
        except ValueError:
            snippet = request.body[:30].decode(errors="replace")
            kind = rtype.kind if rtype else "object"
            raise errors.bad_request(
                f"the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; json parse "
                f"error: unexpected end of JSON input ({snippet} ...)") from None

    # -- reads -------------------------------------------------------------------------------------------------
    def _entry(self, rtype, namespace, name):
        entry = self.store.get(rtype.bucket, namespace, name)
        if entry is None:
            raise errors.not_found(rtype.group, rtype.resource, name)
        message = rtype.decode_error(entry.encoded)
        if message:
            raise errors.decode_failure(message)
        return entry

    def get(self, rtype, namespace, name):
        return rtype.render(self._entry(rtype, namespace, name))

    def list(self, rtype, namespace, query):
        store = self.store
        limit = int(query.get("limit") or 0)
        start = ""
        token = query.get("continue")
        requested_rv = query.get("resourceVersion")
        with store.lock:
            list_rv = store.rv
            if token:
                token_rv, start = decode_token(token)
                if token_rv != -1:
                    if store.expired(token_rv):
                        raise errors.failure(410, EXPIRED_MESSAGE, "Expired",
                                             metadata={"continue": encode_token(-1, start)})
                    list_rv = token_rv
            elif requested_rv and requested_rv != "0" and (query.get("resourceVersionMatch") == "Exact" or limit):
                if store.expired(int(requested_rv)):
                    raise errors.failure(410, "The resourceVersion for the provided list is too old.", "Expired")
            bucket = store.buckets[rtype.bucket]
            self._check_decodable(rtype, bucket, namespace)
            terms = parse_selector(query.get("labelSelector"))
            fields = parse_selector(query.get("fieldSelector"))
            typed = rtype.custom is not None
            items = []
            last = None
            more = False
            for key, entry, _unused in bucket.scan(namespace, start):
                if limit and len(items) >= limit:
                    more = True
                    break
                last = key
                obj = entry.obj
                if terms and not selector_matches(terms, obj["metadata"].get("labels") or {}):
                    continue
                if fields and not selector_matches(fields, {"metadata.name": entry.name,
                                                            "metadata.namespace": entry.namespace or ""}):
                    continue
                items.append(rtype.render(entry, typed))
            metadata = {"resourceVersion": str(list_rv)}
            if more:
                metadata["continue"] = encode_token(list_rv, last + "\x00")
                if not terms and not fields:
                    metadata["remainingItemCount"] = bucket.count_from(namespace, last + "\x00")
            kind = rtype.custom.list_kind if rtype.custom else rtype.kind + "List"
            return {"kind": kind, "apiVersion": rtype.api_version, "metadata": metadata, "items": items}

    @staticmethod
    def _check_decodable(rtype, bucket, namespace):
        """A LIST fails if any object it covers cannot be decoded (found through the per-encoding index)."""
        prefix = f"{namespace}/" if namespace else ""
        for encoded, keys in bucket.by_encoding.items():
            if keys and rtype.decode_error(encoded):
                if not prefix or any(key.startswith(prefix) for key in keys):
                    raise errors.decode_failure(rtype.decode_error(encoded))

    # -- writes ------------------------------------------------------------------------------------------------
    def _check_type(self, rtype, body):
        kind = body.get("kind")
        version = (body.get("apiVersion") or "").rpartition("/")[2]
        if kind and kind != rtype.kind:
            raise errors.bad_request(
                f'{kind} in version "{version}" cannot be handled as a {rtype.kind}: converting ({version}.{kind}) '
                f"to ({rtype.group or 'core'}.{rtype.kind}): unknown conversion")

    def _validate_name(self, rtype, name):
        if not name:
            raise errors.failure(422, f'{rtype.kind} "" is invalid: metadata.name: Required value: name or '
                                      f"generateName is required", "Invalid",
                                 {"kind": rtype.kind, "causes": [{"reason": "FieldValueRequired", "message":
                                  "Required value: name or generateName is required", "field": "metadata.name"}]})
        if not NAME_RE.match(name) or len(name) > 253:
            raise errors.invalid(rtype.group, rtype.kind, name, [(
                "metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {NAME_MESSAGE}')])

    def _store(self, rtype, obj, namespace, name):
        rv = self.store.next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        entry = Entry(namespace, name, rtype.storage_api_version, rv, obj)
        self.store.put(rtype.bucket, entry)
        return entry

    def create(self, rtype, namespace, body):
        self._check_type(rtype, body)
        obj = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = meta.get("name")
        self._validate_name(rtype, name)
        with self.store.lock:
            if namespace and self.store.get(("", "namespaces"), None, namespace) is None:
                raise errors.not_found("", "namespaces", namespace)
            if self.store.get(rtype.bucket, namespace, name) is not None:
                raise errors.already_exists(rtype.group, rtype.resource, name)
            for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
                meta.pop(key, None)
            if namespace:
                meta["namespace"] = namespace
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            if "spec" in obj or rtype.custom:
                meta["generation"] = 1
            self._admit_create(rtype, obj)
            return rtype.render(self._store(rtype, obj, namespace, name))

    def _admit_create(self, rtype, obj):
        if rtype.bucket == crds.CRD_BUCKET:
            crds.prepare_create(obj, now())
        elif rtype.group == SVM_GROUP:
            _validate_svm(rtype, obj)
            obj.setdefault("status", {})
        elif rtype.custom and rtype.has_status:
            obj.pop("status", None)

    def update(self, rtype, namespace, name, body, sub=None, preconditions=None):
        self._check_type(rtype, body)
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})")
        with self.store.lock:
            self._check_put_uid(rtype, namespace, name, meta.get("uid"))
            entry = self._entry(rtype, namespace, name)
            self.server.check_admission(rtype, namespace, name)
            old = entry.obj
            preconditions = preconditions or {}
            if preconditions.get("resourceVersion") and old["metadata"].get("resourceVersion") != str(preconditions["resourceVersion"]):
                raise errors.conflict(rtype.group, rtype.resource, name)
            uid = preconditions.get("uid")
            if uid and old["metadata"].get("uid") != uid:  # apply sets metadata.uid: a changed one is invalid
                raise errors.invalid(rtype.group, rtype.kind, name,
                                     [("metadata.uid", "FieldValueInvalid", f'Invalid value: "{uid}": field is immutable')])
            rv = meta.get("resourceVersion")
            if rv and rv != old["metadata"].get("resourceVersion"):
                raise errors.conflict(rtype.group, rtype.resource, name)
            new = {k: copy.deepcopy(v) for k, v in body.items() if k not in ("apiVersion", "kind")}
            new_meta = new.setdefault("metadata", {})
            for key in ("uid", "creationTimestamp", "generation", "namespace"):
                if key in old["metadata"]:
                    new_meta[key] = old["metadata"][key]
                else:
                    new_meta.pop(key, None)
            new_meta["name"] = name
            new_meta.pop("managedFields", None)
            new = self._admit_update(rtype, old, new, sub)
            if _without_volatile(new) == _without_volatile(old) and entry.encoded == rtype.storage_api_version:
                return rtype.render(entry)
            if "generation" in old["metadata"] and new.get("spec") != old.get("spec"):
                new["metadata"]["generation"] = old["metadata"]["generation"] + 1
            return rtype.render(self._store(rtype, new, namespace, name))

    def _check_put_uid(self, rtype, namespace, name, uid):
        """A body's metadata.uid is a precondition checked before anything else, also against a missing object (so a
        PUT of a deleted object is a 409, never a create or a 404), as the real storage layer's GuaranteedUpdate."""
        if not uid:
            return
        existing = self.store.get(rtype.bucket, namespace, name)
        current = existing.obj["metadata"].get("uid", "") if existing is not None else ""
        if current == uid:
            return
        head = f"{rtype.group}/{rtype.resource}" if rtype.group else rtype.resource
        key = f"/registry/{head}/" + (f"{namespace}/{name}" if namespace else name)
        raise errors.conflict(rtype.group, rtype.resource, name,
                              f"StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: "
                              f"Precondition failed: UID in precondition: {uid}, UID in object meta: {current}")

    def _admit_update(self, rtype, old, new, sub):
        if rtype.bucket == crds.CRD_BUCKET:
            return crds.prepare_status_update(old, new) if sub else crds.prepare_update(old, new)
        if rtype.group == SVM_GROUP and not sub and new.get("spec") != old.get("spec"):
            _svm_immutable(rtype, old, new)
        if rtype.has_status:
            if sub:
                result = copy.deepcopy(old)
                if "status" in new:
                    result["status"] = new["status"]
                else:
                    result.pop("status", None)
                return result
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        return new

    def patch(self, rtype, namespace, name, request, sub=None):
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        if content_type not in ("application/merge-patch+json", "application/strategic-merge-patch+json",
                                "application/json-patch+json", "application/apply-patch+yaml"):
            raise errors.failure(415, "415: Unsupported Media Type", "UnsupportedMediaType", {})
        try:
            patch = json.loads(request.body or b"null")
        except ValueError:
            raise errors.bad_request("error decoding patch: invalid JSON (the simulator accepts JSON only)") from None
        with self.store.lock:
            if content_type == "application/apply-patch+yaml":
                if not request.query.get("fieldManager"):
                    raise errors.invalid("meta.k8s.io", "PatchOptions", "", [
                        ("fieldManager", "FieldValueRequired", "Required value: is required for apply patch")])
                return self._apply(rtype, namespace, name, patch, sub)
            current = self.get(rtype, namespace, name)
            try:
                if content_type == "application/json-patch+json":
                    merged = json_patch(current, patch)
                else:
                    merged = merge_patch(current, patch)
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise errors.failure(422, f"the server rejected our request due to an error in our request: {exc}",
                                     "Invalid", {}) from None
            merged.setdefault("metadata", {}).setdefault("resourceVersion", current["metadata"]["resourceVersion"])
            return self.update(rtype, namespace, name, merged, sub)

    def _apply(self, rtype, namespace, name, patch, sub):
        """Server-side apply, simplified to a merge honouring metadata.uid/resourceVersion preconditions."""
        meta = patch.get("metadata") or {}
        existing = self.store.get(rtype.bucket, namespace, name)
        if existing is None:
            if meta.get("uid"):
                raise errors.conflict(rtype.group, rtype.resource, name, f"uid mismatch: the provided object specified "
                                      f"uid {meta['uid']}, and no existing object was found")
            if meta.get("resourceVersion"):
                raise errors.conflict(rtype.group, rtype.resource, name,
                                      "Precondition failed: UID in precondition: "
                                      f"{meta.get('uid')}, UID in object meta: ")
            return self.create(rtype, namespace, {**patch, "metadata": {**meta, "name": name}})
        current = self.get(rtype, namespace, name)
        merged = merge_patch(current, {k: v for k, v in patch.items() if k != "metadata"})
        merged["metadata"] = merge_patch(current["metadata"],
                                         {k: v for k, v in meta.items() if k not in ("uid", "resourceVersion")})
        return self.update(rtype, namespace, name, merged, sub,
                           preconditions={"uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")})

    def delete(self, rtype, namespace, name):
        with self.store.lock:
            entry = self._entry(rtype, namespace, name)
            self.store.delete(rtype.bucket, namespace, name)
            self.store.next_rv()
            if rtype.bucket == crds.CRD_BUCKET:
                spec = entry.obj["spec"]
                for child in self.store.entries((spec["group"], spec["names"]["plural"])):
                    self.store.delete((spec["group"], spec["names"]["plural"]), child.namespace, child.name)
        details = {"name": name}
        if rtype.group:
            details["group"] = rtype.group
        details.update({"kind": rtype.resource, "uid": entry.obj["metadata"].get("uid")})
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def _validate_svm(rtype, obj):
    resource = (obj.get("spec") or {}).get("resource") or {}
    causes = []
    if not resource.get("resource"):
        causes.append(("spec.resource.resource", "FieldValueRequired", "Required value: resource is required"))
    if rtype.version == "v1alpha1" and not resource.get("version"):
        causes.append(("spec.resource.version", "FieldValueRequired", "Required value: version is required"))
    if causes:
        error = errors.invalid(SVM_GROUP, rtype.kind, obj["metadata"]["name"], causes)
        if len(causes) > 1:
            head, _unused, _unused = error.body["message"].partition(": ")
            error.body["message"] = head + ": [" + ", ".join(f"{f}: {m}" for f, _unused, m in causes) + "]"
        raise error


def _svm_immutable(rtype, old, new):
    old_resource = (old.get("spec") or {}).get("resource") or {}
    new_resource = (new.get("spec") or {}).get("resource") or {}
    for field in ("version", "group", "resource"):
        if old_resource.get(field) != new_resource.get(field):
            raise errors.invalid(SVM_GROUP, rtype.kind, old["metadata"]["name"], [(
                field, "FieldValueInvalid", f'Invalid value: "{new_resource.get(field)}": field is immutable')])
