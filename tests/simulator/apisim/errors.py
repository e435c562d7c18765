"""Status bodies shaped like the real kube-apiserver's, raised as ApiError and rendered by the server."""

import json

TEXT_404 = b"404 page not found\n"


class ApiError(Exception):
    """An HTTP error response; ``body`` is a dict (JSON Status) or bytes (text/plain)."""

    def __init__(self, code, body, headers=None):
        super().__init__(code)
        self.code = code
        self.body = body
        self.headers = headers or {}

    def payload(self):
        if isinstance(self.body, bytes):
            return "text/plain; charset=utf-8", self.body
        return "application/json", json.dumps(self.body, separators=(",", ":")).encode()


def status(code, message, reason=None, details=None, metadata=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": metadata or {}, "status": "Failure", "message": message}
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def failure(code, message, reason=None, details=None, metadata=None, headers=None):
    return ApiError(code, status(code, message, reason, details, metadata), headers)


def page_not_found():
    return ApiError(404, TEXT_404)


def qualified(group, resource):
    return f"{resource}.{group}" if group else resource


def _details(group, resource, name):
    details = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    return details


def not_found(group, resource, name):
    return failure(404, f'{qualified(group, resource)} "{name}" not found', "NotFound",
                   _details(group, resource, name))


def already_exists(group, resource, name):
    return failure(409, f'{qualified(group, resource)} "{name}" already exists', "AlreadyExists",
                   _details(group, resource, name))


def conflict(group, resource, name, why="the object has been modified; please apply your changes to the latest "
             "version and try again"):
    return failure(409, f'Operation cannot be fulfilled on {qualified(group, resource)} "{name}": {why}', "Conflict",
                   _details(group, resource, name))


def invalid(group, kind, name, causes):
    """422 Invalid; ``causes`` is a list of (field, reason, message-without-field)."""
    joined = ", ".join(f"{field}: {message}" for field, _unused, message in causes)
    prefix = f"{kind}.{group}" if group else kind
    details = {"name": name, "group": group, "kind": kind,
               "causes": [{"reason": reason, "message": message, "field": field} for field, reason, message in causes]}
    if not group:
        del details["group"]
    return failure(422, f'{prefix} "{name}" is invalid: {joined}', "Invalid", details)


def bad_request(message):
    return failure(400, message, "BadRequest")


def decode_failure(message):
    """The real apiserver reports storage decode errors as a 500 without a reason."""
    return failure(500, message)
