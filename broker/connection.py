"""One client connection: Kafka framing over an asyncio Protocol.

A Kafka frame is ``int32 size`` followed by ``size`` bytes of request. Requests on one
connection are answered strictly in order, one at a time (Kafka mutes a channel while a
request is in flight, and clients rely on the order). Handlers are synchronous except
where they must wait (Fetch long polling); an asynchronous handler pauses the
connection's request processing until its response is written.

Bad framing (a negative size, a size over ``socket.request.max.bytes``) closes the
connection with a log line; it never affects other connections.

TLS listeners accept with :class:`TlsServer`, which runs each handshake with the
listener's context of the moment, logs and counts a failed one with the peer and
OpenSSL's reason, and hands the encrypted transport to a KafkaConnection.

Memory: the receive buffer grows as a frame's bytes arrive (doubling), never to the
declared frame size at once, so a peer that announces a large frame and sends part of it
holds only what it sent.  With ``queued.max.request.bytes`` > 0 an incomplete frame
first reserves its declared size in the broker's ``RequestMemoryPool``; when the pool is
exhausted the connection stops reading until memory comes back (Kafka mutes the
channel the same way).  While an asynchronous handler is in flight the buffer is never
rewritten in place (its request may still point into it): new bytes go after it, or
into a new buffer.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import os
import socket
import ssl
import struct
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from broker.dispatcher import Dispatcher

log = logging.getLogger("chronolog.connection")

_SIZE = struct.Struct(">i")
_now = time.monotonic
_BUFFERED_HIGH_WATER = 64 * 1024 * 1024
_INITIAL_BUFFER = 256 * 1024
_MIN_READ = 64 * 1024
_SHRINK_ABOVE = 8 * 1024 * 1024
# responses of pipelined requests written together, at most this many chunks at a time
_COALESCE_CHUNKS = 64
# file slices up to this size are read and sent with the response's bytes, larger ones
# go with sendfile
_INLINE_SLICE = 16 * 1024
# a connection that has read this much since it last yielded stops reading until the
# loop's next turn (KafkaConnection._yield_turn)
_YIELD_BYTES = 256 * 1024
# reads smaller than this are not counted (libuv reads a socket 32 times a turn at most,
# and the count costs a one-record produce 400 instructions)
_COUNTED_READ = 16 * 1024
# Dispatcher.lane_for's answer when a read gets no lane: (lane, writable)
_NO_LANE = (None, None)


def _new_buffer(size: int):
    """A receive buffer: anonymous memory (mmap), whose pages become resident only when a
    read reaches them. A bytearray is zero-filled, so all of it is resident at once: 256
    KiB per connection, 250 MiB for 1,000 idle connections that each sent one small
    request. Freed when the last view of it goes (the codec hands out views)."""
    return mmap.mmap(-1, size)


class KafkaConnection(asyncio.BufferedProtocol):
    """Reads go straight into a reusable per-connection buffer (BufferedProtocol), so a
    produce request's record batches are never copied on their way to the log: the
    codec hands out memoryviews of this buffer, the validator patches offsets in place
    and the segment writes from it. Handlers must not keep references to request bytes
    after they return (asynchronous handlers - Fetch - keep none)."""

    __slots__ = (
        "_dispatcher",
        "_transport",
        "_buf",
        "_view",
        "_start",
        "_end",
        "_busy",
        "_closed",
        "_peer",
        "peer_host",
        "_max_frame",
        "_write_paused",
        "_reading_paused",
        "_sock_fd",
        "_pool",
        "_reserved",
        "_memory_paused",
        "_unyielded",
        "_yielded",
        "listener",
        "session",
        "last_active",
    )

    def __init__(self, dispatcher: "Dispatcher", listener) -> None:
        self._dispatcher = dispatcher
        self.listener = listener  # broker.security.listeners.Listener it was accepted on
        self.session = None  # broker.security.authenticator.Session, set when connected
        self.last_active = 0.0  # loop time of the last byte read or written (connections.max.idle.ms)
        self._transport: asyncio.Transport | None = None
        self._buf = _new_buffer(_INITIAL_BUFFER)
        self._view = memoryview(self._buf)
        self._start = 0  # first unprocessed byte
        self._end = 0  # end of received bytes
        self._busy = False
        self._closed = False
        self._peer = "?"
        self.peer_host = "?"  # the client's address, as Kafka reports it ("/127.0.0.1")
        self._max_frame = dispatcher.socket_request_max_bytes
        self._write_paused = False
        self._reading_paused = False
        self._sock_fd = -1
        self._pool = getattr(dispatcher, "memory_pool", None)
        self._reserved = 0  # bytes reserved in the pool for the frame at _start
        self._memory_paused = False
        self._unyielded = 0  # bytes read since the connection last yielded the loop turn
        self._yielded = False  # reading paused until the loop's next turn

    # -- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self.last_active = _now()
        peer = transport.get_extra_info("peername")
        if peer:
            self._peer = f"{peer[0]}:{peer[1]}"
            self.peer_host = f"/{peer[0]}"
        sock = transport.get_extra_info("socket")
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            sock = None  # TLS: sendfile would bypass the encryption; file slices are read and written
        if sock is not None:
            try:
                self._sock_fd = sock.fileno()
            except Exception:  # pragma: no cover - defensive
                self._sock_fd = -1
        self._dispatcher.connections.add(self)
        if not self._dispatcher.connection_opened(self, ssl_object):
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._dispatcher.connections.discard(self)
        self._dispatcher.connection_closed(self)
        if self._pool is not None:
            self._pool.forget(self)
            self._release()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if not self._busy:
            self._process()

    def get_buffer(self, sizehint: int) -> memoryview:
        end = self._end
        if not end:  # nothing unread in it (the usual case): the whole buffer, no slice made
            return self._view
        if len(self._buf) - end < _MIN_READ:
            self._make_room()
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        self.last_active = _now()
        if not self._busy and not self._write_paused:
            self._process()
        # requests queued behind one in flight: stop reading past the high-water mark (an
        # idle connection's unprocessed bytes are one incomplete frame: read it whole)
        if self._busy and self._end - self._start > _BUFFERED_HIGH_WATER and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()
        if nbytes >= _COUNTED_READ:  # (small reads: at most 32 of them a turn, 512 KiB)
            self._unyielded += nbytes
            if self._unyielded >= _YIELD_BYTES:
                self._yield_turn()

    def _yield_turn(self) -> None:
        """Stop reading until the loop's next turn, so that the other connections' requests
        are read and answered first. libuv reads a socket that stays readable up to 32
        times in one turn, and each read's requests are answered before the next read: a
        producer sending 1 MB batches held the loop for 160 ms that way, and another
        client's one-record produce waited as long (p99 250 ms beside a bulk produce, 5 ms
        on Tansu). A connection yields after each 256 KiB it has read (one read at least):
        a millisecond or two of work, and one pause and resume per 256 KiB."""
        self._unyielded = 0
        if self._yielded or self._reading_paused or self._memory_paused or self._closed:
            return  # already not reading (its resumption reads again from the next turn)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - driven without a loop (bench/instructions.py)
            return
        self._yielded = True
        self._transport.pause_reading()
        loop.call_soon(self._turn_over)

    def _turn_over(self) -> None:
        self._yielded = False
        self._resume_reading()

    def _resume_reading(self) -> None:
        """Reading resumes once none of its three pauses holds: the high-water mark's, the
        memory pool's and the loop turn's (each clears its own flag, then calls this)."""
        if not (self._closed or self._reading_paused or self._memory_paused or self._yielded):
            self._transport.resume_reading()

    # -- queued.max.request.bytes ----------------------------------------------------
    def _release(self) -> None:
        if self._reserved:
            n, self._reserved = self._reserved, 0
            self._pool.release(n)

    def memory_available(self) -> None:
        """The pool has memory again (called by RequestMemoryPool.release)."""
        if self._closed:
            return
        self._memory_paused = False
        self._resume_reading()
        if not self._busy and not self._write_paused:
            self._process()

    def eof_received(self) -> bool:
        return False

    # -- framing -----------------------------------------------------------------------
    def close(self) -> None:
        if not self._closed and self._transport is not None:
            self._closed = True
            self._transport.close()

    def _make_room(self) -> None:
        """Free space at the tail: move the unprocessed bytes to the front, or move them
        into a larger buffer when a frame needs it. The old buffer is never resized
        (memoryviews of it may still exist), only replaced."""
        pending = self._end - self._start
        needed = pending + _MIN_READ
        if pending >= 4:
            (size,) = _SIZE.unpack_from(self._buf, self._start)
            if 0 <= size <= self._max_frame:
                # grow toward the frame as its bytes arrive, not to its declared size
                needed = max(needed, min(4 + size, 2 * len(self._buf)))
        if needed <= len(self._buf) and not self._busy:
            if self._start:
                self._buf[:pending] = self._buf[self._start : self._end]
        else:
            new = _new_buffer(max(needed, len(self._buf)) if self._busy else max(needed, 2 * len(self._buf)))
            new[:pending] = self._view[self._start : self._end]
            self._buf = new
            self._view = memoryview(new)
        self._start, self._end = 0, pending

    def _process(self) -> None:
        """Answer the complete frames in the buffer, in order, until one is left to
        finish asynchronously or the connection stops reading. The responses to the
        requests of one read are written together (one send for pipelined requests),
        before anything that could write after them. (One method, not two: a Python
        call costs a one-record produce about 400 instructions.)"""
        out: list = []
        try:
            dispatcher = self._dispatcher
            # consecutive Produce frames answered in one call (Dispatcher.lane_for); a frame
            # reserved in the memory pool is released by the steps below
            lane, writable = dispatcher.lane_for(self.session) if not self._reserved else _NO_LANE
            while not self._closed and not self._busy and not self._write_paused:
                start = self._start
                if lane is not None:
                    r = lane(self._view, start, self._end, out, writable)
                    if r.__class__ is int:
                        if r != start:  # frames answered, their chunks in out
                            self._start = r
                            if len(out) > _COALESCE_CHUNKS:
                                self.write_chunks(out)
                                out.clear()
                            if r == self._end:  # all read is answered
                                break
                            continue
                        # the frame at start is not the lane's: the steps below take it
                    else:  # a frame the lane began and left to the dispatcher
                        self._start = r[0]
                        self._answered(dispatcher.lane_rest(self, r, r[0] - start - 4), out)
                        continue
                if self._end - start < 4:
                    break
                (size,) = _SIZE.unpack_from(self._buf, start)
                if size < 0 or size > self._max_frame:
                    tls = self._buf[start] == 0x16 and self._buf[start + 1] == 0x03 and self.listener is not None \
                        and not self.listener.tls
                    log.warning(
                        "closing connection from %s: frame size %d is %s (socket.request.max.bytes=%d)%s",
                        self._peer,
                        size,
                        "negative" if size < 0 else "too large",
                        self._max_frame,
                        f"; these bytes are a TLS handshake: is the client using SSL on the {self.listener.protocol} "
                        f"listener {self.listener.name}?" if tls else "",
                    )
                    self._transport.abort()
                    self._closed = True
                    return
                if self._end - start < 4 + size:
                    pool = self._pool
                    if pool is not None and not self._reserved:
                        if pool.try_reserve(self, 4 + size):
                            self._reserved = 4 + size
                        elif not self._memory_paused:
                            self._memory_paused = True
                            self._transport.pause_reading()
                    break
                frame = self._view[start + 4 : start + 4 + size]
                self._start = start + 4 + size
                # what that request may have changed (its session, the quotas) is not the
                # lane's to see: the rest of this read takes these steps
                lane = None
                self._answered(dispatcher.dispatch(self, frame), out)
            if self._start == self._end and not self._busy:
                self._start = self._end = 0
                if len(self._buf) > _SHRINK_ABOVE:
                    self._buf = _new_buffer(_INITIAL_BUFFER)
                    self._view = memoryview(self._buf)
            if (self._reading_paused and not self._closed
                    and (not self._busy or self._end - self._start < _BUFFERED_HIGH_WATER // 2)):
                self._reading_paused = False
                self._resume_reading()
        finally:
            if out:
                self.write_chunks(out)

    def _answered(self, result, out: list) -> None:
        """A request's result (Dispatcher.dispatch): none, chunks gathered in ``out``, or
        an awaitable, which stops processing until it completes."""
        if result is None:
            if self._reserved:
                self._release()
            return
        if isinstance(result, list):
            if self._reserved:
                self._release()
            out += result
            if len(out) > _COALESCE_CHUNKS:
                self.write_chunks(out)
                out.clear()
            return
        # an awaitable: stop processing until it completes (the responses before it go
        # out first)
        if out:
            self.write_chunks(out)
            out.clear()
        self._busy = True
        # a future (a parked Fetch's answer) as it is; a coroutine becomes a task
        task = result if isinstance(result, asyncio.Future) else asyncio.ensure_future(result)
        task.add_done_callback(self._on_async_done)

    def _on_async_done(self, task: asyncio.Future) -> None:
        self._busy = False
        if self._reserved:
            self._release()
        if self._closed:
            return
        try:
            chunks = task.result()
        except Exception:
            log.exception("request from %s failed; closing the connection", self._peer)
            self.close()
            return
        if chunks:
            self.write_chunks(chunks)
        self._process()

    # -- writing -----------------------------------------------------------------------
    def write_chunks(self, chunks: list) -> None:
        """Write an encoded response. bytes are queued on the transport; file slices go
        straight from the page cache to the socket with os.sendfile when the transport
        has nothing queued (so ordering is kept), else they are read with os.pread."""
        transport = self._transport
        if self._closed or transport is None:
            return
        self.last_active = _now()
        if len(chunks) == 1 and chunks[0].__class__ is bytearray:  # one encoded response, whole
            transport.write(chunks[0])
            return
        run: list = []  # consecutive bytes-like chunks: one writelines, one send
        for chunk in chunks:
            if isinstance(chunk, (bytes, bytearray, memoryview)):
                if chunk:
                    run.append(chunk)
                continue
            if len(chunk) <= _INLINE_SLICE:
                # small records (a long poll woken by one batch): read from the page
                # cache and sent with the bytes around them, one send instead of two
                data = chunk.read()
                if len(data) != len(chunk):
                    log.error("file slice shorter than announced for %s; closing", self._peer)
                    self.close()
                    return
                run.append(data)
                continue
            if run:
                self._write_run(transport, run)
                run = []
            self._write_file_slice(chunk)
        if run:
            self._write_run(transport, run)

    @staticmethod
    def _write_run(transport, run: list) -> None:
        if len(run) == 1:
            transport.write(run[0])
        else:
            transport.writelines(run)

    def _write_file_slice(self, fs) -> None:
        transport = self._transport
        position = fs.position
        remaining = fs.length
        if self._sock_fd >= 0 and transport.get_write_buffer_size() == 0:
            in_fd = fs.fileno()
            try:
                while remaining > 0:
                    sent = os.sendfile(self._sock_fd, in_fd, position, remaining)
                    if sent == 0:
                        break
                    position += sent
                    remaining -= sent
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as exc:
                log.info("sendfile to %s failed (%s); closing the connection", self._peer, exc)
                self.close()
                return
        if remaining > 0:
            data = type(fs)(fs.file, position, remaining).read()
            if len(data) != remaining:
                # The file shrank under us (truncation): the response size is already on
                # the wire, so the only honest thing is to close the connection.
                log.error("file slice shorter than announced for %s; closing", self._peer)
                self.close()
                return
            transport.write(data)


def _tls_failure_reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"client certificate rejected: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or str(exc)
        if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL"):
            return f"not a TLS client ({reason}; plaintext on a TLS listener?)"
        if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
            return "no client certificate (ssl.client.auth=required)"
        if "ALERT_" in reason and ("CERTIFICATE" in reason or "UNKNOWN_CA" in reason):
            return (f"the client refused the broker's certificate ({reason}: its truststore, the host name "
                    "it connects to, the certificate's dates)")
        if "ALERT_" in reason:
            return f"the client ended the handshake ({reason})"
        return reason
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "handshake timed out"
    return str(exc) or type(exc).__name__


class TlsServer:
    """A TLS listener: its own accept loop, each accepted socket's handshake run by
    ``loop.connect_accepted_socket`` with the listener's context of the moment.

    asyncio's (and uvloop's) ``ssl=`` servers drop a failed handshake silently; here the
    handshake's exception comes back, so an untrusted, expired or missing client
    certificate, plaintext on the TLS port or no common protocol is logged with the
    peer and the reason and counted as a failed authentication. A keystore replaced at
    run time serves the next handshake; open connections keep theirs. Handshakes in
    progress are in ``dispatcher.handshakes`` (cancelled at shutdown). Offers what the
    server uses of ``asyncio.Server``: ``sockets``, ``close()`` and ``wait_closed()``."""

    def __init__(self, dispatcher: "Dispatcher", listener, sockets: list, handshake_timeout: float = 60.0) -> None:
        self._dispatcher = dispatcher
        self._listener = listener
        self.sockets = sockets
        self._timeout = handshake_timeout
        loop = asyncio.get_running_loop()
        self._accepting = [loop.create_task(self._accept(sock)) for sock in sockets]

    @classmethod
    async def start(cls, dispatcher: "Dispatcher", listener, host: str, port: int, backlog: int = 1024) -> "TlsServer":
        """Bind every address ``host`` resolves to (all interfaces for an empty host), as
        ``loop.create_server`` does."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        sockets, seen = [], set()
        try:
            for family, kind, proto, _name, addr in infos:
                if (family, addr) in seen:
                    continue
                seen.add((family, addr))
                sock = socket.socket(family, kind, proto)
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((addr[0], port) + tuple(addr[2:]))
                if port == 0:  # the other addresses bind the same ephemeral port
                    port = sock.getsockname()[1]
                sock.listen(backlog)
                sock.setblocking(False)
        except OSError:
            for sock in sockets:
                sock.close()
            raise
        return cls(dispatcher, listener, sockets)

    async def _accept(self, server_sock) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, addr = await loop.sock_accept(server_sock)
            except asyncio.CancelledError:
                raise
            except OSError as exc:  # out of file descriptors, a connection reset before accept
                log.warning("listener %s: accept failed: %s", self._listener.name, exc)
                await asyncio.sleep(0.1)
                continue
            task = loop.create_task(self._handshake(sock, addr))
            self._dispatcher.handshakes.add(task)
            task.add_done_callback(self._dispatcher.handshakes.discard)

    async def _handshake(self, sock, addr) -> None:
        listener = self._listener
        peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        dispatcher = self._dispatcher
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: KafkaConnection(dispatcher, listener), sock, ssl=listener.ssl_context,
                ssl_handshake_timeout=self._timeout)
        except asyncio.CancelledError:
            sock.close()
            raise
        except Exception as exc:
            sock.close()
            log.info("TLS handshake with %s on listener %s failed: %s", peer, listener.name, _tls_failure_reason(exc))
            if dispatcher.ctx.metrics is not None:
                dispatcher.ctx.metrics.authentication(listener.name, "SSL", False)
            return
        if listener.protocol == "SSL" and dispatcher.ctx.metrics is not None:
            dispatcher.ctx.metrics.authentication(listener.name, "SSL", True)

    def close(self) -> None:
        for task in self._accepting:
            task.cancel()
        for sock in self.sockets:
            sock.close()

    async def wait_closed(self) -> None:
        await asyncio.gather(*self._accepting, return_exceptions=True)
