"""CloudFormation's pre-signed ResponseURL, played on 127.0.0.1: a custom
resource's answer is a PUT of JSON there; this records each one."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ResponseUrl:
    def __init__(self) -> None:
        answers: list[dict[str, Any]] = []
        self.answers = answers

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:  # noqa: N802 - http.server's naming
                answers.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/response?X-Amz-Signature=x"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def __enter__(self) -> ResponseUrl:
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
