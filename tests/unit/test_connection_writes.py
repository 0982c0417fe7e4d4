"""broker/connection.py's writes: the responses to requests that arrive in one read
(pipelined) go out in one writelines call, in request order, and responses written
before an asynchronous request's are sent before it starts; file slices keep their place
between bytes chunks."""

from __future__ import annotations

import asyncio
import struct

from broker.connection import KafkaConnection


class Transport:
    def __init__(self):
        self.calls: list = []

    def write(self, data):
        self.calls.append(("write", [bytes(data)]))

    def writelines(self, chunks):
        self.calls.append(("writelines", [bytes(c) for c in chunks]))

    def get_extra_info(self, name, default=None):
        return default

    def get_write_buffer_size(self):
        return 0

    def close(self):
        pass

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


class Dispatcher:
    socket_request_max_bytes = 1 << 20
    memory_pool = None

    def __init__(self, asynchronous=()):
        self.connections = set()
        self.asynchronous = set(asynchronous)
        self.futures = {}

    def connection_opened(self, conn, ssl_object):
        return True

    def connection_closed(self, conn):
        pass

    def lane_for(self, session):  # no compiled lane: every frame through dispatch
        return None, None

    def dispatch(self, conn, frame):
        name = bytes(frame)
        if name in self.asynchronous:
            fut = asyncio.get_event_loop().create_future()
            self.futures[name] = fut
            return fut
        return [b"resp-" + name]


def frames(*names):
    return b"".join(struct.pack(">i", len(n)) + n for n in names)


def feed(conn, data: bytes):
    buf = conn.get_buffer(len(data))
    buf[:len(data)] = data
    conn.buffer_updated(len(data))


def connect(dispatcher):
    conn = KafkaConnection(dispatcher, listener=None)
    t = Transport()
    conn.connection_made(t)
    return conn, t


def test_pipelined_responses_are_one_writelines_in_order():
    conn, t = connect(Dispatcher())
    feed(conn, frames(b"a", b"b", b"c"))
    assert t.calls == [("writelines", [b"resp-a", b"resp-b", b"resp-c"])]
    feed(conn, frames(b"d"))
    assert t.calls[-1] == ("write", [b"resp-d"])


def test_responses_before_an_asynchronous_request_go_first():
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        d = Dispatcher(asynchronous={b"slow"})
        conn, t = connect(d)
        feed(conn, frames(b"a", b"slow", b"b"))
        assert t.calls == [("write", [b"resp-a"])]  # b waits behind the slow one
        d.futures[b"slow"].set_result([b"resp-slow"])
        loop.run_until_complete(asyncio.sleep(0))
        loop.run_until_complete(asyncio.sleep(0))
        assert [c for _, cs in t.calls for c in cs] == [b"resp-a", b"resp-slow", b"resp-b"]
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def test_a_file_slice_keeps_its_place_between_bytes_chunks():
    class Slice:  # a large one: sendfile
        def __len__(self):
            return 1 << 20

    class Conn(KafkaConnection):  # the sendfile path recorded instead of run
        def _write_file_slice(self, fs):
            self._transport.calls.append(("slice", [b"<file>"]))

    conn = Conn(Dispatcher(), listener=None)
    t = Transport()
    conn.connection_made(t)
    conn.write_chunks([b"h1", b"h2", Slice(), b"t1"])
    assert t.calls == [("writelines", [b"h1", b"h2"]), ("slice", [b"<file>"]), ("write", [b"t1"])]


def test_a_small_file_slice_goes_in_the_same_send(tmp_path):
    from storage.file_slice import FileSlice

    f = open(tmp_path / "seg", "w+b")
    f.write(b"0123456789")
    f.flush()
    conn, t = connect(Dispatcher())
    conn.write_chunks([b"hdr", FileSlice(f, 2, 5), b"tail"])
    assert t.calls == [("writelines", [b"hdr", b"23456", b"tail"])]
    # a slice the file no longer holds (truncated underneath): the connection closes
    conn.write_chunks([b"hdr", FileSlice(f, 8, 5)])
    assert conn._closed
    f.close()


class PausingTransport(Transport):
    def __init__(self):
        super().__init__()
        self.reading = True
        self.pauses = 0

    def pause_reading(self):
        self.reading = False
        self.pauses += 1

    def resume_reading(self):
        self.reading = True


def test_a_connection_that_keeps_reading_yields_the_loop_turn_after_each_mib():
    """libuv reads a socket that stays readable up to 32 times a turn: a connection stops
    reading once it has read _YIELD_BYTES (256 KiB) since it last yielded, and reads
    again from the next turn, so other connections' requests wait for that much work."""
    from broker.connection import _YIELD_BYTES

    async def main():
        conn = KafkaConnection(Dispatcher(), listener=None)
        t = PausingTransport()
        conn.connection_made(t)
        chunk = frames(*[b"r%06d" % i + b"x" * 4000 for i in range(16)])  # 16 requests, about 64 KiB
        fed = 0
        while fed + len(chunk) < _YIELD_BYTES:
            feed(conn, chunk)
            fed += len(chunk)
        assert fed and t.reading and t.pauses == 0  # under the bound: reading on
        feed(conn, chunk)  # past it: reading stops for the rest of this turn
        assert not t.reading and t.pauses == 1
        await asyncio.sleep(0)  # the loop's next turn
        assert t.reading
        answered = [c for _, cs in t.calls for c in cs]
        assert len(answered) == 16 * (fed // len(chunk) + 1) and answered[0] == b"resp-r000000" + b"x" * 4000
        return conn, t

    asyncio.run(main())


def test_a_yield_does_not_resume_reading_another_reason_stopped():
    """Reading stopped by the memory pool (queued.max.request.bytes) stays stopped when the
    yielded turn is over; the pool's memory_available resumes it."""

    async def main():
        conn = KafkaConnection(Dispatcher(), listener=None)
        t = PausingTransport()
        conn.connection_made(t)
        conn._yield_turn()
        assert not t.reading
        conn._memory_paused = True  # the pool ran out meanwhile (set as _process_frames sets it)
        await asyncio.sleep(0)
        assert not t.reading  # still stopped: the pool's reason holds
        conn.memory_available()
        assert t.reading

    asyncio.run(main())
