#!/usr/bin/env python3
"""A reference implementation of the host platform's registry endpoint (contract.md §11.3 "HTTP source"), stdlib only.

It serves ``GET /internal/mcp/config[?user_id=U]`` from a JSON document (a dict, or a file re-read on every
request so a test or the demo can edit it):

    {"servers": [ROW, ...],                                  # mcp_servers rows (JSON columns as values or text)
     "system_credentials": {"<server>": {...}},              # mcp_credentials
     "user_credentials": {"<user>": {"<server>": {...}}},    # mcp_user_credentials, per user
     "tokens": {"<user>": "<access token>"}}                 # what each user must send as Authorization: Bearer

With ``user_id=U`` the request must carry ``Authorization: Bearer <tokens[U]>``: none or an unknown token is 401,
another user's token is 403. The answer is ``{"servers": every row, "system_credentials": all,
"user_credentials": U's own}``. Without ``user_id`` no token is checked and the answer has the public servers
(``isolation`` absent or ``"public"``), their system credentials and no user credentials.

Every request is logged (method, path, user_id, headers, status); ``GET /__log`` returns the log as a JSON array
and ``POST /__reset`` clears it (neither is logged). Faults for tests: ``fault`` = ``{"status": N}`` (answer N),
``{"redirect": URL}`` (302), ``{"body": TEXT}`` (200 with that body), ``{"delay_ms": N}`` (then answer normally).

    python3 mock_server/registry_source.py --port 0 --config FILE.json [--log FILE]

prints ``LISTENING http://127.0.0.1:<port>/internal/mcp/config`` when ready and serves until SIGTERM/SIGINT.
In-process: ``with RegistrySource(document) as src: src.url; src.requests()``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

CONFIG_PATH = "/internal/mcp/config"


def build_answer(document: dict, user_id: str | None) -> dict:
    """What the platform answers for ``user_id`` (None: the no-user request of init / list_servers)."""
    servers = list(document.get("servers") or [])
    system = dict(document.get("system_credentials") or {})
    if user_id is None:
        public = [
            row for row in servers if not isinstance(row, dict) or row.get("isolation", "public") in (None, "public")
        ]
        names = {row.get("name") for row in public if isinstance(row, dict)}
        return {
            "servers": public,
            "system_credentials": {k: v for k, v in system.items() if k in names},
            "user_credentials": {},
        }
    own = (document.get("user_credentials") or {}).get(user_id) or {}
    return {"servers": servers, "system_credentials": system, "user_credentials": own}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, address: tuple, source: RegistrySource) -> None:
        self.source = source
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client hanging up is normal in tests


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "registry-source/1.0"
    disable_nagle_algorithm = True
    timeout = 30
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._serve()

    def do_POST(self) -> None:  # noqa: N802
        self._serve()

    def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _serve(self) -> None:
        source = self.server.source
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        parts = urlsplit(self.path)
        if parts.path == "/__log" and self.command == "GET":
            self._send(200, json.dumps(source.log).encode())
            return
        if parts.path == "/__reset" and self.command == "POST":
            source.reset_log()
            self._send(200, b'{"ok":true}')
            return
        query = parse_qs(parts.query, keep_blank_values=True)
        user_id = query["user_id"][0] if "user_id" in query else None
        entry = {
            "time": time.time(),
            "http_method": self.command,
            "path": self.path,
            "user_id": user_id,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "status": None,
        }
        source.record(entry)
        status, body, headers = source.answer(self.command, parts.path, user_id, self.headers.get("Authorization"))
        entry["status"] = status
        self._send(status, body, headers)


class RegistrySource:
    """In-process reference registry: ``url = src.start()``, ``src.requests()``, ``src.update(...)``, ``src.stop()``."""

    def __init__(self, document: dict | None = None, *, path: str | None = None, log_path: str | None = None) -> None:
        self._document = document if document is not None else {}
        self._path = path
        self._lock = threading.Lock()
        self._log: list[dict] = []
        self._log_file = open(log_path, "a", encoding="utf-8") if log_path else None  # noqa: SIM115
        self.fault: dict = {}
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""
        self.port = 0

    # -- the document ------------------------------------------------------------------------------------
    @property
    def document(self) -> dict:
        if self._path is not None:
            with open(self._path, encoding="utf-8") as handle:
                return json.load(handle)
        with self._lock:
            return json.loads(json.dumps(self._document))

    def update(self, document: dict | None = None, *, fault: dict | None = None) -> None:
        """Replace the served document and/or the fault (``{}`` clears it) while running."""
        with self._lock:
            if document is not None:
                self._document = document
            if fault is not None:
                self.fault = dict(fault)

    def answer(self, method: str, path: str, user_id: str | None, authorization: str | None) -> tuple:
        if method != "GET" or path != CONFIG_PATH:
            return 404, b'{"error":"not found"}', {}
        with self._lock:
            fault = dict(self.fault)
        if fault.get("delay_ms"):
            time.sleep(min(float(fault["delay_ms"]), 30_000) / 1000)
        if "status" in fault:
            return int(fault["status"]), b'{"error":"fault"}', {}
        if "redirect" in fault:
            return 302, b"", {"Location": str(fault["redirect"])}
        if "body" in fault:
            return 200, str(fault["body"]).encode(), {}
        try:
            document = self.document
        except (OSError, ValueError):
            return 500, b'{"error":"the registry document cannot be read"}', {}
        if user_id is not None:
            tokens = document.get("tokens") or {}
            scheme, _, token = (authorization or "").partition(" ")
            if scheme.lower() != "bearer" or not token:
                return 401, b'{"error":"access token required"}', {"WWW-Authenticate": "Bearer"}
            if tokens.get(user_id) != token:
                if token in tokens.values():
                    return 403, b'{"error":"this token belongs to another user"}', {}
                return 401, b'{"error":"invalid access token"}', {"WWW-Authenticate": "Bearer"}
        return 200, json.dumps(build_answer(document, user_id)).encode(), {}

    # -- the log -----------------------------------------------------------------------------------------
    def record(self, entry: dict) -> None:
        with self._lock:
            entry["seq"] = len(self._log) + 1
            self._log.append(entry)
            if self._log_file is not None:
                self._log_file.write(json.dumps(entry) + "\n")
                self._log_file.flush()

    @property
    def log(self) -> list[dict]:
        with self._lock:
            return [dict(e) for e in self._log]

    def requests(self, user_id: Any = ...) -> list[dict]:
        """Logged config requests; ``user_id=None`` selects the no-user ones, a string that user's."""
        entries = [e for e in self.log if urlsplit(e["path"]).path == CONFIG_PATH]
        return entries if user_id is ... else [e for e in entries if e["user_id"] == user_id]

    def reset_log(self) -> None:
        with self._lock:
            self._log.clear()

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self, port: int = 0, host: str = "127.0.0.1") -> str:
        if self._httpd is None:
            self._httpd = _Server((host, port), self)
            self.port = self._httpd.server_address[1]
            self.url = f"http://{host}:{self.port}{CONFIG_PATH}"
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="registry-source", daemon=True
            )
            self._thread.start()
        return self.url

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> RegistrySource:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="reference HTTP registry source for bkmcp --resident")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--config", required=True, help="JSON document (re-read on every request)")
    parser.add_argument("--log", help="append one JSON line per request")
    args = parser.parse_args(argv)
    source = RegistrySource(path=args.config, log_path=args.log)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    url = source.start(port=args.port)
    print(f"LISTENING {url}", flush=True)
    try:
        while not stop.wait(0.2):
            pass
    finally:
        source.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
