"""Reading a member of a zip archive (an `.npz`) directly: where its data lies, and its
bytes inflated in small pieces."""

from __future__ import annotations

import struct
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO


def seek_member(f: BinaryIO, info: zipfile.ZipInfo) -> None:
    """Put `f`, the open archive, at the first byte of member `info`'s stored data."""
    f.seek(info.header_offset)
    local = f.read(30)
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise ValueError("bad local file header")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    f.seek(info.header_offset + 30 + name_len + extra_len)


class Inflated:
    """A deflated member's bytes, read from the start, inflated by zlib a quarter MiB of
    input at a time and checked against the member's CRC at the end. zipfile's own reader
    copies its unconsumed input under the GIL on every read, which stalls a thread that
    converts beside it (`compact.build`); zlib here holds the GIL only to hand over
    bytes."""

    PIECE = 1 << 18  # compressed bytes per zlib call

    def __init__(self, path: Path, info: zipfile.ZipInfo):
        self.info = info
        self.f = open(path, "rb")
        self.seek(0)

    def seek(self, pos: int) -> None:
        """Start again, and skip `pos` bytes (build's second pass; the .npy header)."""
        seek_member(self.f, self.info)
        self.left, self.pos, self.crc = self.info.compress_size, 0, 0
        self.zlib, self.pending = zlib.decompressobj(-zlib.MAX_WBITS), memoryview(b"")
        while self.pos < pos and self.read(min(pos - self.pos, 1 << 24)):
            pass

    def tell(self) -> int:
        return self.pos

    def read(self, n: int) -> bytes | bytearray:
        out, got = bytearray(n), 0
        while got < n:
            if not self.pending:
                piece = self.f.read(min(self.PIECE, self.left))
                self.left -= len(piece)
                data = self.zlib.decompress(piece) if piece else self.zlib.flush()
                if not data:
                    if self.crc != self.info.CRC:
                        raise zipfile.BadZipFile(f"bad CRC-32 for {self.info.filename}")
                    break
                self.crc = zlib.crc32(data, self.crc)
                self.pending = memoryview(data)
            k = min(n - got, len(self.pending))
            out[got:got + k] = self.pending[:k]
            self.pending, got = self.pending[k:], got + k
        self.pos += got
        return out if got == n else bytes(out[:got])

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> Inflated:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
