"""``/v1/realtime``: live audio over a WebSocket, OpenAI's Realtime transcription protocol (docs/API.md "Live
transcription" has its events, errors, close codes and limits; realtime_events.py its vocabulary).

One :class:`Live` per connection: a reader of client events, a sender that stops reading a client that does not
read its events, and the session itself, admitted at connect (a lease: no TTL unload and no idle exit while it is
open) and put on a worker at its first audio, ahead of queued files (Pool.live). A stopping daemon lets it finish
the speech it received (:meth:`Live.wind_down`)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import itertools
import json
import logging
import time
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from hasrd import errors, transcript
from hasrd.context import Daemon, check_access, resolve_model
from hasrd.connections import SHUTDOWN_HOOK
from hasrd.jobevents import JobEvent
from hasrd.options import Options
from hasrd.protocol import Progress
from hasrd.realtime_events import OUT_BYTES_PER_S, BadEvent, Config, ItemEvents, Pcm16To16k, error_event, event
from hasrd.workerlive import LiveSession
from hasrd.transcript import Transcript

log = logging.getLogger("hasrd.realtime")

_sessions = itertools.count(1)
WIND_DOWN_CAP = 4  # a stopping daemon's live session finishes its speech within this many HASR_STOP_GRACE_SEC
OUT_HIGH, OUT_LOW = 256, 64  # events waiting for a client that does not read: past HIGH it is not read either


class Live:
    """One WebSocket connection: reads client events, feeds the worker, translates the worker's events."""

    def __init__(self, d: Daemon, ws: WebSocket) -> None:
        self.d, self.ws = d, ws
        self.sid = f"sess_hasr_{next(_sessions)}"
        # the beta protocol (transcription_session.*): ?intent=transcription alone; GA clients (the SDK) name a model
        q = ws.query_params
        self.cfg = Config(beta=q.get("intent") == "transcription" and "model" not in q,
                          resolve=lambda name: resolve_model(d, ws, name))
        # hasr's own events only when asked for: the OpenAI SDK parses every event as one of its own types
        self.hasr_events = ws.query_params.get("hasr_events", "").lower() in ("1", "true", "yes")
        self.inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()  # audio, commit, finish, gone
        self.out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.out_room = asyncio.Event()  # clear while a client that does not read has OUT_HIGH events waiting
        self.out_room.set()
        self.last_input = time.monotonic()
        self.last_worker = 0.0  # the last event of the worker for this session (results still coming)
        self.ended = False  # the session's last event (an error that closes it) was sent
        self.pending = 0  # bytes of audio (16 kHz float32) received and not yet handed to the worker
        self.sent = 0  # bytes of it handed to the worker
        self.decoded_s = 0.0  # how far the worker has decoded (its progress)
        self.dropped_s = 0.0
        self.refused_at = 0.0
        self.items = ItemEvents(self.sid)
        self.resample = Pcm16To16k()
        self.closed = False
        self.close_code = 1000
        self.session: LiveSession | None = None
        self.task: asyncio.Future[None] | None = None  # run(), the session's own task
        self.stopping = False

    def send(self, ev: dict[str, Any]) -> None:
        self.out.put_nowait(ev)
        if self.out.qsize() >= OUT_HIGH:
            self.out_room.clear()

    async def sender(self) -> None:
        try:
            while True:
                ev = await self.out.get()
                if self.out.qsize() <= OUT_LOW:
                    self.out_room.set()
                if ev is None:
                    return
                await self.ws.send_text(json.dumps(ev, ensure_ascii=False))
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.closed = True
        finally:
            self.out_room.set()  # nothing will drain the queue any more: the reader must not wait on it

    async def reader(self) -> None:
        """Client events -> inbox ("audio", bytes) / ("commit",) / ("finish",) / ("gone",); the rest here.

        Every event that cannot be applied is answered with an ``error`` event and the session goes on."""
        try:
            while True:
                await self.out_room.wait()  # a client that does not read its events is not read either
                msg = await self.ws.receive()
                if msg["type"] == "websocket.disconnect":
                    break
                self.last_input = time.monotonic()
                if self.stopping:
                    continue  # the daemon is stopping: what was received is being finished
                text = msg.get("text")
                if text is None:
                    self.send(error_event("invalid_event", "send JSON text frames (client events); a binary "
                                          "frame is not one"))
                    continue
                try:
                    await self.handle(text)
                except BadEvent as e:
                    self.send(error_event(e.code, e.message, e.param))
                except Exception as e:  # a case no check foresaw: said, logged, and the session goes on
                    log.warning("live session %s: a client event could not be applied: %r", self.sid, e)
                    log.debug("live session %s: the event's traceback", self.sid, exc_info=True)
                    self.send(error_event("invalid_event", f"this event could not be applied: {e}"))
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass
        self.inbox.put_nowait(("gone", None))

    async def handle(self, text: str) -> None:
        try:
            ev = json.loads(text)
        except ValueError as e:
            raise BadEvent("invalid_json", f"not JSON: {e}") from None
        if not isinstance(ev, dict) or not isinstance(ev.get("type"), str):
            raise BadEvent("invalid_event", "a client event is a JSON object with a string \"type\"", "type")
        kind = ev["type"]
        if kind in ("transcription_session.update", "session.update"):
            self.cfg.update(ev)
            self.cfg.beta = kind == "transcription_session.update"
            updated = "transcription_session.updated" if self.cfg.beta else "session.updated"
            self.send(event(updated, session=self.cfg.session(self.sid)))
        elif kind == "input_audio_buffer.append":
            audio = ev.get("audio")
            if not isinstance(audio, str):
                raise BadEvent("invalid_value", "input_audio_buffer.append needs \"audio\": base64 PCM16", "audio")
            try:
                raw = base64.b64decode(audio, validate=True)
            except (binascii.Error, ValueError):
                raise BadEvent("invalid_audio", "\"audio\" is not valid base64", "audio") from None
            self.take_audio(self.resample.convert(raw))
        elif kind == "input_audio_buffer.commit":  # the open utterance ends: its committed event follows
            self.inbox.put_nowait(("commit", None))
        elif kind == "input_audio_buffer.clear":
            self.send(event("input_audio_buffer.cleared"))
        elif kind == "hasr.finish":
            self.inbox.put_nowait(("finish", None))
        else:
            raise BadEvent("unknown_event", f"unknown client event type {kind!r}", "type")

    def backlog_s(self) -> float:
        """Audio received and not yet decoded, wherever it waits: here, in the socket, in the worker's inbox or
        in its session. Counting only what waited here, a session sending at 10x real time grew its worker from
        328 MB to 1.4 GB and was never told (issue 31 #3); the worker's progress says how far it decoded."""
        return max(0.0, (self.sent + self.pending) / OUT_BYTES_PER_S - self.decoded_s)

    def take_audio(self, pcm: bytes) -> None:
        """Queue audio for the worker, up to HASR_LIVE_MAX_PENDING_SEC received and not yet decoded; past that it
        is dropped, and the client hears so at most once a second (how much so far)."""
        limit = self.d.settings.live_max_pending_sec
        if limit > 0 and self.backlog_s() + len(pcm) / OUT_BYTES_PER_S > limit:
            self.dropped_s += len(pcm) / OUT_BYTES_PER_S
            now = time.monotonic()
            if now - self.refused_at >= 1.0:
                self.refused_at = now
                raise BadEvent("input_audio_buffer_full", f"{self.backlog_s():.0f} s of audio already "
                               f"wait for the worker (HASR_LIVE_MAX_PENDING_SEC="
                               f"{self.d.settings.live_max_pending_sec:g}): audio is dropped until it catches up "
                               f"({self.dropped_s:.1f} s so far)", "audio")
            return
        self.pending += len(pcm)
        self.inbox.put_nowait(("audio", pcm))

    def on_event(self, ev: JobEvent) -> None:
        """The worker's events (on the loop's thread) -> Realtime events."""
        # the worker still owes this session results (drafts, finals, a completed utterance): not idle. A client
        # that commits and waits for `completed`, as OpenAI's do, was closed for idleness while they came
        if self.ended:
            return
        self.last_worker = time.monotonic()
        if isinstance(ev, Progress):  # received: all the audio the session took
            self.decoded_s = ev.done_s
            received = max(ev.total_s, self.sent / OUT_BYTES_PER_S) + self.pending / OUT_BYTES_PER_S
            out = [event("hasr.progress", done_s=ev.done_s, received_s=round(received, 3),
                         lag_s=round(max(0.0, received - ev.done_s), 3))]
        else:
            out = self.items.events(ev)
        for e in out:
            if self.hasr_events or not e["type"].startswith("hasr."):
                self.send(e)

    async def next_input(self) -> tuple[str, Any]:
        """The next audio/commit/finish/gone; ("stop", None) once the daemon stops; ("idle", None) after
        HASR_LIVE_IDLE_SEC without any client event or any result of the worker's."""
        while True:
            if self.stopping:
                return "stop", None
            quiet_since = max(self.last_input, self.last_worker)  # the client's input or the worker's results
            left = self.d.settings.live_idle_sec - (time.monotonic() - quiet_since)
            if left <= 0:
                return "idle", None
            try:
                return await asyncio.wait_for(self.inbox.get(), left)
            except asyncio.TimeoutError:
                continue

    async def to_worker(self, session: LiveSession, pcm: bytes) -> None:
        try:
            await session.audio(pcm)
            self.sent += len(pcm)
        finally:
            self.pending -= len(pcm)

    async def run(self) -> None:
        pool = self.d.pool
        created = "transcription_session.created" if self.cfg.beta else "session.created"
        self.send(event(created, session=self.cfg.session(self.sid)))
        try:
            lease = pool.admit()
        except errors.HasrError as e:
            self.fail(e)
            return
        try:
            while True:  # nothing runs until there is audio: the session's settings come first
                kind, first = await self.next_input()
                if kind == "audio":
                    break
                if kind in ("gone", "finish", "stop"):
                    if kind == "finish":
                        nothing = Transcript(live=True, turns=[], segments=0, language_detected=False)
                        self.send(event("hasr.done", result=transcript.to_json(nothing)))
                    if kind == "stop":
                        self.stopped(True)
                    return
                if kind == "idle":
                    self.idle()
                    return
            options = Options(silence_ms=self.cfg.silence_ms, prompt=self.cfg.prompt)
            async with pool.live(language=self.cfg.language, options=options, on_event=self.on_event,
                                lease=lease, max_wait=self.d.settings.live_queue_sec,
                                model=self.cfg.spec) as session:
                self.session = session
                await self.to_worker(session, first)  # what came while the worker loaded waits in the inbox
                while True:
                    getter: asyncio.Future[Any] = asyncio.ensure_future(self.next_input())
                    done: asyncio.Future[Any] = session.done
                    await asyncio.wait([getter, done], return_when=asyncio.FIRST_COMPLETED)
                    if not getter.done():
                        getter.cancel()
                        session.done.result()  # the session failed: raises its error
                        return
                    kind, value = getter.result()
                    if kind == "audio":
                        await self.to_worker(session, value)
                    elif kind == "commit":
                        await session.commit()
                    elif kind == "finish":
                        result = await session.end()
                        self.send(event("hasr.done", result=transcript.to_json(result)))
                        return
                    elif kind == "stop":
                        await self.wind_down(session)
                        return
                    elif kind == "idle":
                        self.idle()
                        return
                    else:  # gone: the session is cancelled on the way out
                        return
        except errors.HasrError as e:
            self.fail(e)
        finally:
            self.session = None
            lease.release()

    def on_shutdown(self) -> float:
        """The daemon is stopping (uvicorn's shutdown, through connections.PeerWebSocket): a running session
        winds down (:meth:`wind_down`); one that has not started yet ends now. Returns the seconds it may take."""
        if not self.stopping:
            self.stopping = True
            self.inbox.put_nowait(("stop", None))  # wakes next_input, which then says "stop"
            if self.session is None and self.task is not None:
                self.task.cancel()
        return WIND_DOWN_CAP * self.d.settings.stop_grace_sec

    async def wind_down(self, session: LiveSession) -> None:
        """The audio already received goes to the worker, the utterance in flight is closed and its finals are
        sent, all within HASR_STOP_GRACE_SEC; then the client hears why the session ends."""
        async def finish() -> Transcript:
            while not self.inbox.empty():
                kind, value = self.inbox.get_nowait()
                if kind == "audio":
                    await self.to_worker(session, value)
            return await session.end()

        finished = False
        grace = self.d.settings.stop_grace_sec
        task = asyncio.ensure_future(finish())
        started = time.monotonic()
        try:
            # HASR_STOP_GRACE_SEC of silence from the worker, not of work: the grace runs on while the worker
            # still sends results for this session, up to WIND_DOWN_CAP times the grace (issue 31 #6)
            while not task.done():
                now = time.monotonic()
                left = min(max(self.last_worker, started) + grace, started + WIND_DOWN_CAP * grace) - now
                if left <= 0:
                    break
                await asyncio.wait([task], timeout=left)
            if task.done():
                result = task.result()
                if self.hasr_events:
                    self.send(event("hasr.done", result=transcript.to_json(result)))
                finished = True
        except errors.HasrError as e:
            log.info("live session %s: not finished as the daemon stops: %r", self.sid, e)
        finally:
            if not task.done():
                log.info("live session %s: the speech in flight was not finished as the daemon stops", self.sid)
                task.cancel()
        self.stopped(finished)

    def stopped(self, finished: bool) -> None:
        grace = self.d.settings.stop_grace_sec
        how = ("the speech received was transcribed and sent" if finished else
               f"the speech in flight could not be finished within {grace:g} s (HASR_STOP_GRACE_SEC)")
        self.send(error_event("shutting_down", f"the daemon is stopping: {how}; the session is closed "
                              f"(reconnect to go on once it is back)", kind="server_error"))
        self.ended = True  # the error is the last event: what the worker still sends is not this session's now
        self.close_code = 1012  # service restart: the client may reconnect

    def fail(self, e: errors.HasrError) -> None:
        self.send(error_event(e.code, e.message, kind="server_error"))
        self.close_code = 1008 if e.status < 500 else 1013 if e.status == 503 else 1011  # RFC 6455's codes

    def idle(self) -> None:
        secs = self.d.settings.live_idle_sec
        self.send(error_event("idle_timeout", f"nothing arrived for {secs:g} s (HASR_LIVE_IDLE_SEC): the "
                              f"session is closed; send audio (silence included) to keep one open"))
        self.ended = True


async def realtime(ws: WebSocket) -> None:
    d: Daemon = ws.app.state.daemon
    try:
        check_access(d, ws)  # type: ignore[arg-type]
    except errors.HasrError as e:
        await ws.close(code=1008, reason=e.message[:120])
        return
    await ws.accept()
    live = Live(d, ws)
    ws.scope[SHUTDOWN_HOOK] = live.on_shutdown
    sender = asyncio.ensure_future(live.sender())
    reader = asyncio.ensure_future(live.reader())
    live.task = task = asyncio.ensure_future(live.run())
    try:
        await task
    except asyncio.CancelledError:
        if not (live.stopping and task.cancelled()):
            raise
        live.stopped(False)  # it had not started: nothing was in flight
    except Exception:
        log.exception("live session %s failed", live.sid)
        live.send(error_event("internal_error", "the live session failed in the daemon (see its log)",
                              kind="server_error"))
    finally:
        ws.scope.pop(SHUTDOWN_HOOK, None)
        live.out.put_nowait(None)
        await sender
        reader.cancel()
        if not live.closed:
            # the client left first: nothing to close, nothing to log
            with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
                await ws.close(code=live.close_code)
