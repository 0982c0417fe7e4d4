import os

import pytest

from storage import FileSlice, ManualClock, SystemClock
from storage.clock import Clock


def test_manual_clock():
    c = ManualClock(1000)
    assert isinstance(c, Clock)
    assert c.time_ms() == 1000 and c.monotonic_ms() == 0
    c.advance(250)
    assert c.time_ms() == 1250 and c.monotonic_ms() == 250
    c.set(100)  # wall clock jumps back; monotonic does not
    assert c.time_ms() == 100 and c.monotonic_ms() == 250
    c.set(200)
    assert c.monotonic_ms() == 350
    with pytest.raises(ValueError):
        c.advance(-1)


def test_system_clock():
    c = SystemClock()
    assert isinstance(c, Clock)
    assert c.time_ms() > 1_600_000_000_000
    a = c.monotonic_ms()
    assert c.monotonic_ms() >= a


def test_file_slice(tmp_path):
    p = tmp_path / "f"
    p.write_bytes(bytes(range(256)))
    with open(p, "rb") as f:
        s = FileSlice(f, 10, 20)
        assert len(s) == 20 and s.position == 10 and s.length == 20
        assert s.fileno() == f.fileno()
        assert s.read() == bytes(range(10, 30))
        assert bytes(s) == s.read()
        # sendfile-compatible
        r, w = os.pipe()
        try:
            assert os.sendfile(w, s.fileno(), s.position, len(s)) == 20
            assert os.read(r, 100) == bytes(range(10, 30))
        finally:
            os.close(r)
            os.close(w)
    with pytest.raises(ValueError):
        FileSlice(None, -1, 3)
