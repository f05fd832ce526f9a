"""The door of the HTTP app: the API key and the size of a request body, checked before any route runs.

A pure ASGI middleware, so that streamed responses and disconnects pass through untouched. Its
settings sit in `app.state.door` (set by the Ingress from the typed config): `keys` (empty: open)
and `max_body_bytes`. Keys are compared in constant time and never logged; a digest of the
caller's key is handed to the routes in the scope, for the per-key limit.
"""
import hashlib
import hmac
import json
import os

OPEN_PATHS = {"/health"}


def api_keys(variable: str | None) -> list[bytes]:
    """The API keys in the named environment variable, comma-separated (several: rotation, or one
    per client); none where it is unset or empty."""
    value = os.environ.get(variable, "") if variable else ""
    return [key.strip().encode() for key in value.split(",") if key.strip()]


class Door:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        door = scope["app"].state.door
        headers = dict(scope["headers"])
        if door["keys"] and scope["path"] not in OPEN_PATHS:
            presented = _bearer(headers.get(b"authorization", b""))
            # every key compared, in constant time each: the time taken tells nothing about which one is near
            matches = [hmac.compare_digest(presented or b"", key) for key in door["keys"]]
            if presented is None or not any(matches):
                return await _reject(send, 401, "a valid API key is required (Authorization: Bearer KEY)",
                                     "invalid_api_key", {b"www-authenticate": b"Bearer"})
            scope["hedgespec.api_key"] = hashlib.sha256(presented).hexdigest()[:16]  # the per-key limit's bucket
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        limit = door["max_body_bytes"]
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            return await _too_large(send, limit, declared)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                return await _too_large(send, limit, None)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay():
            """The buffered body once, then the client's own messages (a disconnect, say)."""
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)


def _bearer(header: bytes) -> bytes | None:
    scheme, _, token = header.partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" and token.strip() else None


async def _too_large(send, limit: int, declared: bytes | None):
    if declared is not None and not declared.isdigit():
        return await _reject(send, 400, "the Content-Length header is not a number", "invalid_request")
    return await _reject(send, 413, f"the request body is larger than this server's limit of {limit} bytes",
                         "request_too_large")


async def _reject(send, status: int, message: str, code: str, headers: dict | None = None):
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                 "code": code}}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": head + list((headers or {}).items())})
    await send({"type": "http.response.body", "body": body})
