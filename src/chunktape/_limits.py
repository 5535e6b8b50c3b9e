"""The bounds on what chunktape reads: the files a user names, and compressed bodies.

**Files.** Every path a user gives (a cassette, a journal, a scenario file, a vcrpy cassette, a messages file) is
read by ``read_user_file``: it must be a regular file (not a directory, ``/dev/zero``, a FIFO or a socket) of at
most ``max_file_bytes()`` bytes, both checked on the opened file before a byte is read (a FIFO is opened without
blocking), and the read stops one byte past the limit, so a file growing meanwhile is refused too.

**Compressed bodies.** A ``gzip`` or ``deflate`` body (a vcrpy cassette's, a provider's answer) is decoded by
``BodyDecoder``: incrementally, each piece it hands on at most ``PIECE_BYTES``, the whole at most
``MAX_DECODED_BYTES``, so a decompression bomb (a gigabyte of zeros behind a megabyte of gzip) stops at the cap
with one line instead of filling memory; and a body that ends before its compressed stream does (truncated or
corrupt) is an error, never an empty or a short answer.
"""

from __future__ import annotations

import os
import stat
import zlib
from pathlib import Path

__all__ = [
    "ENV_MAX_FILE_BYTES",
    "MAX_DECODED_BYTES",
    "MAX_ERROR_BODY_BYTES",
    "MAX_EVENT_CHARS",
    "MAX_FILE_BYTES",
    "PIECE_BYTES",
    "BodyDecodeError",
    "BodyDecoder",
    "UnreadableFile",
    "decode_body",
    "max_file_bytes",
    "read_user_file",
]

MAX_FILE_BYTES = 1 << 30
"""The largest file a user may name (1 GiB): a million-chunk cassette is some 60 MB; a file past this is no
cassette chunktape wrote, and decoding it would need several times its size in memory."""
ENV_MAX_FILE_BYTES = "CHUNKTAPE_MAX_FILE_BYTES"
"""Environment variable that replaces ``MAX_FILE_BYTES`` (a whole number of bytes)."""
MAX_DECODED_BYTES = 64 << 20
"""The most a compressed body may decode to (64 MiB): a streamed 128k-token answer is some 30 MB of SSE."""
MAX_ERROR_BODY_BYTES = 64 << 10
"""The most of an error answer's body a recording keeps (64 KiB): a provider's error message is a few hundred
bytes; what is past it still reaches the client, and the recorded message says how long the body was."""
MAX_EVENT_CHARS = 64 << 20
"""The longest one server-sent event may be (64 Mi characters, its data lines together, or one line alone): a
stream is read for as long as it lasts, but an event that never ends is a broken or hostile server, not an answer;
the largest real events (a Responses ``response.completed`` carrying the whole answer, a base64 image) are a few
MB."""
PIECE_BYTES = 64 << 10
"""The most one step of decoding produces (64 KiB), so a body passed on piece by piece never balloons."""


class UnreadableFile(Exception):
    """A path a user named that is not read: ``reason`` is ``missing``, ``directory``, ``special``, ``too-large``
    or ``unreadable``; ``str()`` says so in one line, naming the path."""

    def __init__(self, path: Path, reason: str, message: str) -> None:
        super().__init__(f"{path} {message}")
        self.path = path
        self.reason = reason


def max_file_bytes() -> int:
    """``MAX_FILE_BYTES``, or the whole number in ``CHUNKTAPE_MAX_FILE_BYTES`` (ignored unless it is one >= 1)."""
    raw = os.environ.get(ENV_MAX_FILE_BYTES, "").strip()
    return int(raw) if raw.isdigit() and int(raw) >= 1 else MAX_FILE_BYTES


_KINDS = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


def read_user_file(path: str | os.PathLike[str], *, limit: int | None = None) -> bytes:
    """The bytes of the regular file at ``path`` (``limit``: at most that many; default ``max_file_bytes()``), or
    ``UnreadableFile`` saying why not, decided before anything is read."""
    path = Path(path)
    limit = max_file_bytes() if limit is None else limit
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UnreadableFile(path, "missing", "does not exist") from None
    except IsADirectoryError:
        raise UnreadableFile(path, "directory", "is a directory, not a file") from None
    except OSError as exc:
        raise UnreadableFile(path, "unreadable", f"cannot be read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise UnreadableFile(path, "directory", "is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
            raise UnreadableFile(path, "special", f"is {kind}, not a regular file")
        if info.st_size > limit:
            raise UnreadableFile(path, "too-large", _too_large(info.st_size, limit))
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        size = 0
        # The size it has now, and one byte more, in one read: a file that did not grow is read by one call and
        # returned without a copy (joining 18 MB of pieces cost as much as reading them); one that grows is read on.
        want = max(info.st_size + 1, 1 << 16)
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, want))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            want = 1 << 24
        if size > limit:
            raise UnreadableFile(path, "too-large", _too_large(size, limit, grew=True))
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    except OSError as exc:
        raise UnreadableFile(path, "unreadable", f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _too_large(size: int, limit: int, *, grew: bool = False) -> str:
    what = "grew past" if grew else f"is {size:,} bytes, over"
    return f"{what} the {limit:,}-byte limit for a file chunktape reads (set {ENV_MAX_FILE_BYTES} to raise it)"


# -- compressed bodies --------------------------------------------------------------------------------------


class BodyDecodeError(ValueError):
    """A compressed body that cannot be decoded: ``kind`` is ``corrupt``, ``truncated`` (cut short) or
    ``too-large`` (decoding past its cap)."""

    def __init__(self, message: str, kind: str = "corrupt") -> None:
        super().__init__(message)
        self.kind = kind


_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class BodyDecoder:
    """Decodes a ``gzip`` or ``deflate`` (zlib, or raw as some servers send it) body fed piece by piece.

    ``feed(data)`` returns the decoded pieces (each at most ``PIECE_BYTES``), ``close()`` the rest; both raise
    ``BodyDecodeError`` for corrupt data, a decoded size past ``limit`` (default: ``MAX_DECODED_BYTES``, read when
    the decoder is made), or (``close``) a stream that did not end.
    ``supports(encoding)`` says which ``Content-Encoding`` values it decodes.
    """

    def __init__(self, encoding: str, *, limit: int | None = None) -> None:
        self.encoding = encoding.strip().lower()
        if self.encoding not in _WBITS:
            raise BodyDecodeError(f"unsupported content-encoding {encoding!r}")
        self.limit = MAX_DECODED_BYTES if limit is None else limit
        self.decoded = 0
        self._raw_deflate = False
        self._started = False
        self._object = zlib.decompressobj(_WBITS[self.encoding])

    @staticmethod
    def supports(encoding: str) -> bool:
        return encoding.strip().lower() in _WBITS

    def feed(self, data: bytes) -> list[bytes]:
        pieces: list[bytes] = []
        if not data:
            return pieces
        if self._object.eof:
            if self._object.unused_data or data.strip(b"\0"):
                raise BodyDecodeError(f"the {self.encoding} body goes on after its compressed stream ended")
            return pieces
        try:
            if not self._started and self.encoding == "deflate":
                self._started = True
                try:
                    piece = self._object.decompress(data, PIECE_BYTES)
                except zlib.error:  # no zlib header: a raw deflate stream, as some servers send it
                    self._object = zlib.decompressobj(-zlib.MAX_WBITS)
                    self._raw_deflate = True
                    piece = self._object.decompress(data, PIECE_BYTES)
                self._take(piece, pieces)
            else:
                self._started = True
                self._take(self._object.decompress(data, PIECE_BYTES), pieces)
            while self._object.unconsumed_tail and not self._object.eof:
                self._take(self._object.decompress(self._object.unconsumed_tail, PIECE_BYTES), pieces)
        except zlib.error as exc:
            raise BodyDecodeError(f"the {self.encoding} body is corrupt ({exc})") from None
        return pieces

    def _take(self, piece: bytes, pieces: list[bytes]) -> None:
        if not piece:
            return
        self.decoded += len(piece)
        if self.decoded > self.limit:
            raise BodyDecodeError(
                f"the {self.encoding} body decodes to more than {self.limit:,} bytes (a decompression bomb?); "
                "decoding stopped there",
                "too-large",
            )
        pieces.append(piece)

    def close(self) -> list[bytes]:
        """The end of the body: the last pieces, or ``BodyDecodeError`` if the compressed stream did not end."""
        if not self._started:
            return []
        pieces: list[bytes] = []
        try:
            while self._object.unconsumed_tail and not self._object.eof:
                self._take(self._object.decompress(self._object.unconsumed_tail, PIECE_BYTES), pieces)
            if not self._object.eof:
                self._take(self._object.flush(PIECE_BYTES), pieces)
        except zlib.error as exc:
            raise BodyDecodeError(f"the {self.encoding} body is corrupt ({exc})") from None
        if not self._object.eof:
            raise BodyDecodeError(
                f"the {self.encoding} body ends before its compressed stream does (truncated)", "truncated"
            )
        return pieces


def decode_body(data: bytes, encoding: str, *, limit: int | None = None) -> bytes:
    """``data`` decoded (``BodyDecoder``), whole: at most ``limit`` bytes are ever held."""
    decoder = BodyDecoder(encoding, limit=limit)
    return b"".join([*decoder.feed(data), *decoder.close()])
