"""A small HTTP/1.1 client over AF_UNIX, on a plain socket.

Why not httpx or http.client: importing them costs 40 ms and 16 ms (the email package) of the 150 ms budget
of ``hasrctl status``. The daemon speaks HTTP/1.1 with Content-Length or chunked bodies (its NDJSON and SSE
streams); one request per connection (Connection: close) is all the CLI needs. Errors become the CLI's exit
codes here, at one boundary.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hasrd.status import PoolStatus

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


class CliError(Exception):
    """An error the CLI reports as one line and turns into an exit code."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(CliError):
    exit_code = EXIT_USAGE


class Unreachable(CliError):
    exit_code = EXIT_UNREACHABLE


class DaemonError(CliError):
    """The daemon answered with ``{"error": {code, message}}``: a 4xx is the caller's fault (exit 2)."""

    def __init__(self, code: str, message: str, status: int | None = None,
                 partial: dict[str, Any] | None = None) -> None:
        self.code = code
        self.status = status if status is not None else status_of(code)
        super().__init__(f"{message} ({code})", EXIT_USAGE if 400 <= self.status < 500 else EXIT_FAILED)
        self.detail = message
        self.partial = partial if isinstance(partial, dict) else None  # the sentences a failed job made final


def status_of(code: str) -> int:
    """HTTP status of an error code, for errors that arrive inside a stream (no status line of their own)."""
    from hasrd import errors

    if code.startswith("audio_") or code in errors.AUDIO_CODES:
        return 400

    todo: list[type[errors.HasrError]] = [errors.HasrError]
    while todo:
        cls = todo.pop()
        if cls.code == code:
            return cls.status
        todo.extend(cls.__subclasses__())
    return 500


def pool_status(obj: Any) -> PoolStatus:
    """A snapshot of /api/ps or /api/events as hasrd.status's Struct (imported only once the daemon answered: a
    status without a daemon stays light); CliError when a daemon of another version sent it."""
    from hasrd.status import PoolStatus, decode

    try:
        return decode(obj, PoolStatus)
    except ValueError as e:
        raise CliError(str(e)) from None


def _connect(path: str, connect_timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(connect_timeout)
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def probe(path: str, timeout: float = 2.0) -> bool:
    """Whether something accepts connections on ``path`` (a socket unit counts: systemd answers for it)."""
    try:
        _connect(path, timeout).close()
        return True
    except OSError:
        return False


def peer_pid(path: str) -> int | None:
    """The pid of the process that accepted our connection (SO_PEERCRED): the daemon, when it bound the socket."""
    import struct

    try:
        sock = _connect(path, 2.0)
    except OSError:
        return None
    try:
        pid, _uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        return pid or None
    except OSError:
        return None
    finally:
        sock.close()


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` has exited (a zombie counts as exited); False on timeout."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return True
        time.sleep(0.05)
    return False


class Response:
    """A response whose body is read on demand, so streams are consumed line by line as they arrive."""

    def __init__(self, sock: socket.socket, method: str, url: str) -> None:
        self.sock, self.where = sock, f"{method} {url}"
        self.file = sock.makefile("rb")
        status_line = self.file.readline(65537).decode("latin-1")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise CliError(f"hasrd sent no HTTP answer to {self.where}: {status_line.strip()[:80]!r}")
        self.status, self.reason = int(parts[1]), (parts[2].strip() if len(parts) > 2 else "")
        self.headers: dict[str, str] = {}
        while True:
            line = self.file.readline(65537)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self.content_type = self.headers.get("content-type", "").split(";")[0].strip().lower()

    def _chunks(self) -> Iterator[bytes]:
        """The body as it arrives: chunked transfer coding, Content-Length, or up to EOF."""
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            while True:
                size = int(self.file.readline(1026).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    return
                data = self.file.read(size)
                if len(data) < size:
                    raise OSError("connection closed inside a chunk")
                self.file.readline(3)
                yield data
        elif "content-length" in self.headers:
            left = int(self.headers["content-length"])
            while left > 0:
                data = self.file.read1(min(left, 1 << 16))
                if not data:
                    raise OSError(f"connection closed with {left} bytes of the body missing")
                left -= len(data)
                yield data
        else:
            while data := self.file.read1(1 << 16):
                yield data

    def read(self) -> bytes:
        try:
            return b"".join(self._chunks())
        except (OSError, ValueError) as e:
            raise CliError(f"the connection to hasrd broke mid-answer to {self.where}: {e}") from e
        finally:
            self.close()

    def json(self) -> Any:
        body = self.read()
        try:
            return json.loads(body)
        except ValueError:
            raise CliError(f"hasrd sent something that is not JSON: {body[:80]!r}") from None

    def lines(self) -> Iterator[bytes]:
        buf = b""
        try:
            for data in self._chunks():
                buf += data
                while (i := buf.find(b"\n")) >= 0:
                    yield buf[: i + 1]
                    buf = buf[i + 1:]
            if buf:
                yield buf
        except (OSError, ValueError) as e:
            raise CliError(f"the connection to hasrd broke mid-stream: {e}") from e
        finally:
            self.close()

    def ndjson(self) -> Iterator[dict[str, Any]]:
        for line in self.lines():
            if line.strip():
                yield json.loads(line)

    def sse(self) -> Iterator[dict[str, Any]]:
        """The ``data:`` payloads of a Server-Sent Events stream, until ``[DONE]``."""
        for line in self.lines():
            text = line.decode("utf-8").rstrip("\r\n")
            if not text.startswith("data:"):
                continue
            data = text[5:].strip()
            if data == "[DONE]":
                return
            yield json.loads(data)

    def raise_for_error(self) -> None:
        if self.status < 400:
            return
        body = self.read()
        try:
            err = json.loads(body)["error"]
            raise DaemonError(str(err["code"]), str(err["message"]), self.status, err.get("partial"))
        except (ValueError, KeyError, TypeError):
            text = body.decode("utf-8", "replace").strip()[:200] or self.reason
            raise DaemonError("http_error", f"hasrd answered {self.status}: {text}", self.status) from None

    def close(self) -> None:
        self.file.close()
        self.sock.close()


class Client:
    """One daemon at ``path``; each call is one connection (the daemon serves them concurrently)."""

    def __init__(self, path: str, connect_timeout: float = 5.0) -> None:
        self.path = path
        self.connect_timeout = connect_timeout

    def request(self, method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                timeout: float | None = None) -> Response:
        """Send one request; daemon errors raise DaemonError, a dead socket raises Unreachable."""
        try:
            sock = _connect(self.path, self.connect_timeout)
        except OSError as e:
            raise Unreachable(f"hasrd does not answer on {self.path}: {e.strerror or e}") from e
        head = [f"{method} {url} HTTP/1.1", "Host: hasr", "User-Agent: hasrctl", "Connection: close"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body is not None or method in ("POST", "PUT"):
            head.append(f"Content-Length: {len(body or b'')}")
        try:
            sock.settimeout(timeout)
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b""))
            resp = Response(sock, method, url)
        except TimeoutError as e:
            sock.close()
            raise CliError(f"hasrd did not answer {method} {url} within {timeout} s") from e
        except OSError as e:
            sock.close()
            raise CliError(f"the connection to hasrd broke during {method} {url}: {e.strerror or e}") from e
        resp.raise_for_error()
        return resp

    def get(self, url: str, timeout: float | None = 30.0) -> Any:
        return self.request("GET", url, timeout=timeout).json()

    def ps(self) -> PoolStatus:
        """/api/ps: the pool's status, as the daemon's Struct."""
        return pool_status(self.get("/api/ps", timeout=10.0))

    def post(self, url: str, payload: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        body = json.dumps(payload or {}).encode()
        return self.request("POST", url, body, {"Content-Type": "application/json"}, timeout).json()


def multipart(fields: dict[str, str | list[str]], file_field: str, filename: str, data: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body with plain fields (a list: the field once per value, as ``name[]`` fields are
    sent) and one file; returns (body, content type)."""
    boundary = "hasr-" + os.urandom(16).hex()
    parts: list[bytes] = []
    for name, given in fields.items():
        for value in [given] if isinstance(given, str) else given:
            parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
                         .encode())
    safe = os.path.basename(filename).replace('"', "_") or "audio"
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; filename="{safe}"\r\n'
                 f"Content-Type: application/octet-stream\r\n\r\n".encode())
    parts.append(data)
    parts.append(f"\r\n--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"
