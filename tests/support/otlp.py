"""A real OTLP/HTTP trace receiver on loopback: decodes every ExportTraceServiceRequest with
opentelemetry-proto (the collector's own message types) and answers as a collector does."""

from __future__ import annotations

import gzip
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


class _Handler(http.server.BaseHTTPRequestHandler):
    requests: list[Any]
    status: int

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        ok = self.path == "/v1/traces" and self.status == 200
        if ok:
            req = trace_service_pb2.ExportTraceServiceRequest()
            req.ParseFromString(body)
            self.requests.append(req)
        payload = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200 if ok else (self.status if self.status != 200 else 404))
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return


@contextmanager
def otlp_receiver(status: int = 200) -> Iterator[tuple[str, list[Any]]]:
    """(endpoint URL, decoded requests); `status` != 200 makes it refuse every export."""
    got: list[Any] = []
    handler = type("Otlp", (_Handler,), {"requests": got, "status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", got
    finally:
        server.shutdown()
        server.server_close()


def spans_of(requests: list[Any]) -> list[Any]:
    return [s for req in requests for rs in req.resource_spans for ss in rs.scope_spans
            for s in ss.spans]  # fmt: skip


def attributes(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None
    return out
