"""One TCP relay in front of a real S3 server with a per-request hook (real sockets, a real server behind).

:class:`Relay` forwards bytes both ways. Each chunk a client sends is scanned for HTTP request lines (``GET /``,
``PUT /`` ...; clients keep connections alive, so requests are counted, not connections) and
:meth:`Relay.on_request` is called once per request found, before the chunk is forwarded. Its answer decides:

* None: forward the chunk (after whatever the hook did: :class:`LatencyRelay` sleeps there);
* ``"stall"``: forward nothing more on this connection and hold both sockets open (the client waits for an
  answer that never comes); later connections are held unanswered too;
* ``"cut"``: forward the request, then close the connection after the first 200 bytes of its answer.

:class:`FaultyRelay` (issue 24's bad-input cases) stalls or cuts the (K+1)-th request; :class:`LatencyRelay`
(issue 25's benchmark) adds a fixed delay to every request.
"""

from __future__ import annotations

import socket
import threading
import time

_METHODS = (b"GET /", b"PUT /", b"HEAD /", b"POST /", b"DELETE /")


class _Stall(Exception):
    """Raised inside the relay to stop answering."""


class Relay:
    """Forward 127.0.0.1:``port`` to 127.0.0.1:``target_port``, calling :meth:`on_request` per request."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(128)
        self.port = self.srv.getsockname()[1]
        self.connections = 0
        self.stalled = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def on_request(self, method: str) -> str | None:
        """Called for each request (``"GET"``, ``"PUT"`` ...) before it is forwarded: None, ``"stall"`` or ``"cut"``."""
        return None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Relay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.srv.close()
        self._thread.join(5)
        for s in self._held:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        self.srv.settimeout(0.3)
        while not self._stop.is_set():
            try:
                client, _ = self.srv.accept()
            except OSError:
                continue
            self.connections += 1
            self._held.append(client)
            if self.stalled:
                continue  # stalled already: hold the socket, read nothing, answer nothing
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
        except OSError:
            client.close()
            return
        self._held.append(upstream)
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cut = threading.Event()  # the answer now relayed is to be cut after 200 bytes

        def requests_in(data: bytes) -> None:
            for m in _METHODS:
                for _ in range(data.count(m)):
                    action = self.on_request(m.split()[0].decode())
                    if action == "stall":
                        self.stalled = True
                        raise _Stall
                    if action == "cut":
                        cut.set()

        def pump(a: socket.socket, b: socket.socket, upstream_side: bool) -> None:
            sent = 0
            try:
                while True:
                    data = a.recv(65536)
                    if not data:
                        break
                    if not upstream_side:
                        requests_in(data)
                    elif cut.is_set():
                        b.sendall(data[:max(0, 200 - sent)])
                        sent += len(data)
                        if sent >= 200:
                            break
                        continue
                    b.sendall(data)
            except _Stall:
                return  # hold both sockets open: the client waits for an answer that never comes
            except OSError:
                pass
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                try:
                    s.close()
                except OSError:
                    pass

        threading.Thread(target=pump, args=(client, upstream, False), daemon=True).start()
        pump(upstream, client, True)


class FaultyRelay(Relay):
    """The first ``after`` requests relayed faithfully; at the (after+1)-th, ``mode="stall"`` stops answering (and
    answers no new connection), ``mode="close"`` relays it and closes the connection after 200 bytes of its answer.
    ``requests`` counts the requests seen, ``faulted`` the faults made (at most one)."""

    def __init__(self, target_port: int, mode: str, after: int = 0) -> None:
        assert mode in ("stall", "close")
        super().__init__(target_port)
        self.mode, self.after = mode, after
        self.requests = 0
        self.faulted = 0

    def on_request(self, method: str) -> str | None:
        with self._lock:
            self.requests += 1
            fault = self.requests > self.after and not self.faulted
            if fault:
                self.faulted += 1
        if not fault:
            return None
        return "stall" if self.mode == "stall" else "cut"


class LatencyRelay(Relay):
    """Every request waits ``delay_s`` before it is forwarded (a real bucket's latency on loopback); ``counts``
    holds the requests by method."""

    def __init__(self, target_port: int, delay_s: float = 0.05) -> None:
        super().__init__(target_port)
        self.delay_s = float(delay_s)
        self.counts: dict[str, int] = {}

    def on_request(self, method: str) -> str | None:
        with self._lock:
            self.counts[method] = self.counts.get(method, 0) + 1
        time.sleep(self.delay_s)
        return None

    def requests(self) -> int:
        with self._lock:
            return sum(self.counts.values())
