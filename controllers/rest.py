"""The E3 controller's REST API: a plain WSGI application over ``ControllerCore``.

    GET    /status                 controller status (ready, switches, circuits)
    GET    /reservations           all on-demand reservations
    POST   /reservations           {"src": IP, "dst": IP} -> 201 reservation (granted or queued)
    GET    /reservations/<id>      one reservation ("installed": its circuit is in place)
    DELETE /reservations/<id>      release it (the transfer completed)

Errors are JSON ``{"error": "<why>"}`` with a 4xx status (400 malformed, 404 unknown,
405 method, 409 wrong scheduler or already released, 503 not ready). The os-ken app
serves it with os_ken.lib.hub.WSGIServer on the management address only (127.0.0.1 by
default); tests serve it with wsgiref.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from controllers.core import ControllerCore
from controllers.schedulers import SchedulerError

MAX_BODY = 64 * 1024
REASONS = {200: "OK", 201: "Created", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           409: "Conflict", 413: "Payload Too Large", 503: "Service Unavailable"}


class RestApp:
    """WSGI callable; see the module docstring."""

    def __init__(self, core: ControllerCore) -> None:
        self.core = core

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        try:
            status, body = self.route(environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "/"), environ)
        except SchedulerError as exc:
            status, body = exc.status, {"error": str(exc)}
        data = json.dumps(body).encode()
        start_response(f"{status} {REASONS.get(status, '')}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    def route(self, method: str, path: str, environ: dict[str, Any]) -> tuple[int, Any]:
        parts = [p for p in path.split("/") if p]
        if parts == ["status"]:
            self._allow(method, "GET")
            return 200, self.core.status()
        if parts == ["reservations"]:
            self._allow(method, "GET", "POST")
            if method == "GET":
                return 200, self.core.reservations()
            body = self._json_body(environ)
            src, dst = body.get("src"), body.get("dst")
            if not isinstance(src, str) or not isinstance(dst, str):
                raise SchedulerError('body must be {"src": "<host IPv4>", "dst": "<host IPv4>"}')
            return 201, self.core.request(src, dst)
        if len(parts) == 2 and parts[0] == "reservations":
            self._allow(method, "GET", "DELETE")
            if not parts[1].isdigit():
                raise SchedulerError(f"reservation id {parts[1]!r} is not a positive integer")
            rid = int(parts[1])
            return 200, self.core.reservation(rid) if method == "GET" else self.core.release(rid)
        raise SchedulerError(f"no resource {path!r}; see GET /status, /reservations", status=404)

    @staticmethod
    def _allow(method: str, *allowed: str) -> None:
        if method not in allowed:
            raise SchedulerError(f"method {method} not allowed here; use {' or '.join(allowed)}", status=405)

    @staticmethod
    def _json_body(environ: dict[str, Any]) -> dict[str, Any]:
        try:
            n = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise SchedulerError("bad Content-Length") from None
        if n > MAX_BODY:
            raise SchedulerError(f"body of {n} bytes exceeds {MAX_BODY}", status=413)
        raw = environ["wsgi.input"].read(n) if n else b""
        try:
            body = json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise SchedulerError(f"body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise SchedulerError('body must be a JSON object {"src": ..., "dst": ...}')
        return body
