"""The decoded audio that waiting requests hold is bounded (issue 39 #2): 20 queued files of half an hour each held
2.3 GB. A real daemon (fake engine), real uploads and paths; the budget is lowered to a few MB so the files stay
short. benchmarks/queued_audio.py measures it with 20 long uploads.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from tests.conftest import wait_until
from tests.daemon import Hasrd, write_wav
from tests.test_audio import write_media

MB = 2**20


def send(sock_path: str, body: dict[str, object]) -> socket.socket:
    """A /transcribe request whose answer is not read (closing the socket cancels it)."""
    raw = json.dumps(body).encode()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    s.sendall(f"POST /transcribe HTTP/1.1\r\nHost: hasr\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
    return s


def test_requests_whose_waiting_audio_would_pass_the_budget_get_503_and_retry_after(short_tmp: str) -> None:
    thirty = write_wav(os.path.join(short_tmp, "30s.wav"), 30.0)  # 1.83 MB decoded
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_WORKER_PARALLEL": "1", "HASR_MAX_QUEUED_AUDIO_MB": "5"})
    held: list[socket.socket] = []
    try:
        held.append(send(d.sock, {"audio_path": thirty, "options": {"fake": {"rtf": 1.0}}}))
        assert wait_until(lambda: d.get("/api/ps")["running"] == 1, 60)  # on the worker: holds nothing here
        assert d.get("/api/ps")["queued_audio_mb"] == 0
        held += [send(d.sock, {"audio_path": thirty}) for _ in range(2)]
        assert wait_until(lambda: d.get("/api/ps")["queued_audio_mb"] >= 3.6, 60)  # both decoded, waiting
        ps = d.get("/api/ps")
        assert ps["queued_audio_mb"] == 3.7 and ps["max_queued_audio_mb"] == 5 and ps["queue"] == 2, ps
        with d.client() as c:  # a third would hold 5.5 MB: refused, and told when to come back
            r = c.post("/transcribe", json={"audio_path": thirty})
            assert r.status_code == 503 and r.headers["retry-after"] == "10", r.text
            error = r.json()["error"]
            assert error["code"] == "queue_full" and "HASR_MAX_QUEUED_AUDIO_MB" in error["message"], error
            assert "hold 4 MB of decoded audio" in error["message"], error
            with open(thirty, "rb") as f:  # an upload alike
                r = c.post("/v1/audio/transcriptions", files={"file": ("a.wav", f)})
            assert r.status_code == 503 and r.json()["error"]["code"] == "queue_full", r.text
        assert d.get("/api/ps")["queued_audio_mb"] == 3.7  # what was refused let its audio go
        for s in held:  # the clients leave: every request ends, and what they held goes
            s.close()
        assert wait_until(lambda: d.get("/api/ps")["in_flight"] == 0, 60)
        assert d.get("/api/ps")["queued_audio_mb"] == 0
        # alone, a request is never refused for its length (7.3 MB over a 5 MB budget)
        two_minutes = write_wav(os.path.join(short_tmp, "120s.wav"), 120.0)
        with d.client() as c:
            assert c.post("/transcribe", json={"audio_path": two_minutes}).status_code == 200
        assert d.get("/api/ps")["queued_audio_mb"] == 0
    finally:
        for s in held:
            s.close()
        d.stop()


def test_a_request_whose_decode_fails_midway_lets_go_of_the_audio_it_held(short_tmp: str) -> None:
    """An MP2's length is only estimated, so it is refused as too long only once 60 s of it are decoded (3.7 MB
    counted by then): the failure lets go of them, or the budget would creep until it refused everything."""
    mp2 = write_media(Path(short_tmp) / "70s.mp2", "mp2", rate=16000, seconds=70.0)
    d = Hasrd(os.path.join(short_tmp, "s.sock"), env={"HASR_MAX_AUDIO_SEC": "60"})
    try:
        with d.client() as c:
            for _ in range(3):
                r = c.post("/transcribe", json={"audio_path": str(mp2)})
                assert r.status_code == 400 and r.json()["error"]["code"] == "audio_too_long", r.text
                assert d.get("/api/ps")["queued_audio_mb"] == 0
    finally:
        d.stop()
