"""One HTTP request to an ASGI app on the running loop (functions_framework.aio's Starlette
app), without a server or an HTTP client library."""

from __future__ import annotations

import asyncio
import json
from typing import Any


async def post_json(app: Any, body: object, headers: dict[str, str]) -> tuple[int, bytes]:
    """POST ``body`` as JSON to ``/``; the status and the body of the answer."""
    raw = json.dumps(body).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/",
        "raw_path": b"/",
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        + [(b"content-length", str(len(raw)).encode())],
        "server": ("test", 80),
        "client": ("test", 1),
    }
    pending = [{"type": "http.request", "body": raw, "more_body": False}]
    never = asyncio.Event()  # the client never disconnects

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop(0)
        await never.wait()
        return {"type": "http.disconnect"}

    answer: dict[str, Any] = {"body": b""}

    async def send(event: dict[str, Any]) -> None:
        if event["type"] == "http.response.start":
            answer["status"] = event["status"]
        elif event["type"] == "http.response.body":
            answer["body"] += event.get("body", b"")

    await app(scope, receive, send)
    return int(answer["status"]), bytes(answer["body"])
