"""A delaying HTTP reverse proxy: every request waits a uniform 20-40 ms, then goes to the upstream verbatim.

Put it in front of SeaweedFS on loopback and the store answers about as late as AWS S3 does (first-byte
latency of small objects in one region), so latencies measured through it are S3-like:

    with DelayProxy(server.endpoint_url) as proxy:
        store = open_store(url, **{**server.store_options(), "endpoint_url": proxy.url})

Method, path, query, headers (``Host`` included, so SigV4 signatures still hold) and body go upstream as
they came; the response's status, headers and body come back streamed. Each client connection keeps its own
keep-alive connection upstream. A threaded server (one thread per client connection): enough for the few
dozen connections a benchmark's clients open.
"""

from __future__ import annotations

import http.client
import random
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: Hop-by-hop headers (RFC 9110 7.6.1): about one connection, never forwarded.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
#: Not forwarded either: this server answered the client's ``Expect: 100-continue`` itself (SigV4 does not sign it).
NOT_FORWARDED = HOP_BY_HOP | {"expect"}
CHUNK = 64 * 1024


class DelayProxy:
    """Serve on a free loopback port, forwarding to ``upstream`` after ``delay`` seconds (uniform in the range)."""

    def __init__(self, upstream: str, delay: tuple[float, float] = (0.020, 0.040), seed: int | None = None) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.delay = delay
        self.requests = 0
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> DelayProxy:
        self._thread = threading.Thread(target=self._server.serve_forever, name="delay-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> DelayProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next_delay(self) -> float:
        with self._lock:
            self.requests += 1
            return self._random.uniform(*self.delay)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Forward(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive with the client
            upstream: http.client.HTTPConnection | None = None

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
                pass

            def _body(self) -> bytes | None:
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    parts = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline().strip():  # trailers
                                pass
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else None

            def _forward(self) -> None:
                body = self._body()
                time.sleep(proxy._next_delay())
                headers = [(k, v) for k, v in self.headers.items() if k.lower() not in NOT_FORWARDED]
                if body is not None and "Content-Length" not in self.headers:
                    headers.append(("Content-Length", str(len(body))))
                for attempt in (0, 1):  # a kept-alive upstream connection may have been closed meanwhile
                    if self.upstream is None:
                        self.upstream = http.client.HTTPConnection(*proxy.upstream, timeout=300)
                    try:
                        self.upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                        for k, v in headers:
                            self.upstream.putheader(k, v)
                        self.upstream.endheaders(body)
                        response = self.upstream.getresponse()
                        break
                    except (TimeoutError, ConnectionError, http.client.HTTPException):
                        self.upstream.close()
                        self.upstream = None
                        if attempt:
                            raise
                self.send_response_only(response.status, response.reason)
                length = response.getheader("Content-Length")
                chunked = length is None and self.command != "HEAD" and response.status not in (204, 304)
                for k, v in response.getheaders():
                    if k.lower() not in HOP_BY_HOP:
                        self.send_header(k, v)
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while data := response.read(CHUNK):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                if chunked:
                    self.wfile.write(b"0\r\n\r\n")
                if response.will_close:
                    self.upstream.close()
                    self.upstream = None

            def finish(self) -> None:
                super().finish()
                if self.upstream is not None:
                    self.upstream.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _forward

        return Forward
