"""A minimal synchronous client of the worker protocol, for driving ``python -m hasrd.worker`` in tests."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from typing import Any

import msgspec
import numpy as np

from hasrd import protocol as p
from hasrd.options import Options


class WorkerClient:
    def __init__(self, engine: str = "fake", env: dict[str, str] | None = None, protocol: int | None = None) -> None:
        self.sock, child = socket.socketpair()
        argv = [sys.executable, "-m", "hasrd.worker", "--engine", engine, "--fd", str(child.fileno()),
                "--parent-pid", str(os.getpid())]
        if protocol is not None:
            argv += ["--protocol", str(protocol)]
        full_env = dict(os.environ)
        full_env.update(env or {})
        self.proc = subprocess.Popen(argv, pass_fds=(child.fileno(),), env=full_env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        child.close()
        self.buf = bytearray()
        self.sock.settimeout(30)

    def recv(self) -> p.WorkerMsg:
        while True:
            frames = p.split_frames(self.buf)
            if frames:
                # put back the rest: split_frames consumed all complete frames
                first, rest = frames[0], frames[1:]
                for body in reversed(rest):
                    self.buf[:0] = len(body).to_bytes(4, "big") + body
                return p.decode_worker(first)
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("worker closed the channel")
            self.buf += data

    def send(self, msg: p.Msg, fds: tuple[int, ...] = ()) -> None:
        data = p.encode(msg)
        if fds:
            socket.send_fds(self.sock, [data], list(fds))
        else:
            self.sock.sendall(data)

    def handshake(self) -> list[p.WorkerMsg]:
        seen = []
        while True:
            m = self.recv()
            seen.append(m)
            if isinstance(m, (p.Ready, p.LoadFailed)):
                return seen

    def transcribe(self, req_id: int, pcm: np.ndarray, options: dict[str, Any] | None = None,
                   language: str = "") -> tuple[list[p.WorkerMsg], p.WorkerMsg]:
        self.submit(req_id, pcm, options, language)
        return self.collect(req_id)

    def submit(self, req_id: int, pcm: np.ndarray, options: dict[str, Any] | None = None, language: str = "") -> None:
        fd = os.memfd_create("t")
        os.write(fd, np.ascontiguousarray(pcm, dtype="<f4").tobytes())
        try:
            self.send(p.Transcribe(id=req_id, pcm="fd", frames=len(pcm), language=language,
                                   options=msgspec.convert(options or {}, Options)), fds=(fd,))
        finally:
            os.close(fd)

    def collect(self, req_id: int) -> tuple[list[p.WorkerMsg], p.WorkerMsg]:
        events: list[p.WorkerMsg] = []
        while True:
            m = self.recv()
            if isinstance(m, (p.Result, p.Failed)) and m.id == req_id:
                return events, m
            events.append(m)

    def close(self) -> int:
        with contextlib.suppress(OSError):
            self.send(p.Shutdown())
        try:
            return self.proc.wait(10)
        finally:
            self.sock.close()
            if self.proc.poll() is None:
                self.proc.kill()
            for f in (self.proc.stdout, self.proc.stderr):
                if f:
                    f.close()
