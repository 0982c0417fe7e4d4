"""A window of bytes of an open segment file, handed to the network layer.

``FileSlice(file, position, length)``: ``file`` is any object with ``fileno()`` (the
segment's log-file holder); the broker passes the slice to ``os.sendfile`` (zero copy)
using ``fileno()``, ``position`` and ``length``, or calls ``read()`` (``os.pread``) when
it needs the bytes (down-conversion, tests).
"""

from __future__ import annotations

import os

__all__ = ["FileSlice"]


class FileSlice:
    __slots__ = ("file", "position", "length")

    def __init__(self, file, position: int, length: int):
        if position < 0 or length < 0:
            raise ValueError(f"FileSlice: position={position} and length={length} must be >= 0")
        self.file = file
        self.position = position
        self.length = length

    def __len__(self) -> int:
        return self.length

    def fileno(self) -> int:
        return self.file.fileno()

    def read(self) -> bytes:
        """The slice's bytes (short only if the file was truncated underneath)."""
        fd = self.file.fileno()
        chunks = []
        pos, remaining = self.position, self.length
        while remaining > 0:
            chunk = os.pread(fd, remaining, pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
            remaining -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def __bytes__(self) -> bytes:
        return self.read()

    def __repr__(self) -> str:
        return f"FileSlice(fd={self.file.fileno()}, position={self.position}, length={self.length})"
