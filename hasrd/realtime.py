"""``/v1/realtime?intent=transcription``: live audio over a WebSocket, OpenAI's Realtime transcription protocol.

Client events (``?intent=transcription`` alone selects the beta protocol's ``transcription_session.*``
events; GA clients, which name a ``model``, get ``session.*``): ``transcription_session.update`` (beta shape: ``input_audio_format``,
``input_audio_transcription{model, language, prompt}``, ``turn_detection{silence_duration_ms}``) or
``session.update`` (GA shape: ``session.audio.input.{format, transcription, turn_detection}``),
``input_audio_buffer.append`` (base64 PCM16, 24 kHz mono little-endian, OpenAI's only PCM format),
``input_audio_buffer.commit`` (end the current utterance now), ``input_audio_buffer.clear`` (accepted; audio
already fed is not taken back), and hasr's ``hasr.finish`` (close the last utterance, send every final, then
``hasr.done`` with the whole result, and close).

Server events: ``transcription_session.created`` / ``session.created`` and ``.updated``;
``input_audio_buffer.speech_started`` / ``speech_stopped`` / ``committed`` and ``conversation.item.created``
per utterance (item ``item_<session>_<n>``); ``conversation.item.input_audio_transcription.delta`` per final
sentence (deltas concatenate to the item's transcript) and ``.completed``; ``error`` (``error.code``,
``error.message``, ``error.param``; the connection stays open unless the error ends the session). hasr's own:
``hasr.draft`` (the utterance's current unstable text), ``hasr.sentence`` (a final sentence with engine
draft|fw and times), ``hasr.progress`` (audio received and processed, seconds), ``hasr.queued`` and
``hasr.loading``, with the query parameter ``hasr_events=true`` (off by default: the OpenAI SDK parses every
event as one of its own types). Deviation: a sentence can be final (and its delta sent) before its utterance
has ended.

Lifecycle: the session is admitted at connect (a lease: no TTL unload and no idle exit while it is open),
loads the worker at the first audio, and takes the worker ahead of queued files (supervisor.live). A client
that goes away ends it (the worker stays loaded); one that sends nothing for HASR_LIVE_IDLE_SEC is told so
and closed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import json
import logging
from typing import Any

import av
from starlette.websockets import WebSocket, WebSocketDisconnect

from hasrd import errors, formats
from hasrd.api import Daemon, check_access
from hasrd.audio import frames_bytes, s16_mono_frame
from hasrd.languages import UnknownLanguage, resolve
from hasrd.openai_api import MODEL_IDS

log = logging.getLogger("hasrd.realtime")

IN_RATE = 24000
_sessions = itertools.count(1)
_events = itertools.count(1)


class BadEvent(Exception):
    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param


class Pcm16To16k:
    """24 kHz PCM16 mono in, 16 kHz float32 mono out, streaming (FFmpeg's resampler through PyAV)."""

    def __init__(self) -> None:
        self.resampler = av.AudioResampler(format="flt", layout="mono", rate=16000)

    def convert(self, data: bytes) -> bytes:
        if len(data) % 2:
            raise BadEvent("invalid_audio", f"PCM16 audio is 2 bytes a sample; this chunk has {len(data)} bytes",
                           "audio")
        if not data:
            return b""
        return frames_bytes(self.resampler.resample(s16_mono_frame(data, IN_RATE)), 4)


def _event(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "event_id": f"event_{next(_events)}", **fields}


def error_event(code: str, message: str, param: str | None = None, kind: str = "invalid_request_error",
                event_id: str | None = None) -> dict[str, Any]:
    return _event("error", error={"type": kind, "code": code, "message": message, "param": param,
                                  "event_id": event_id})


class Config:
    """What the client asked for in its session updates."""

    def __init__(self, beta: bool) -> None:
        self.beta = beta
        self.model = "gpt-4o-transcribe"
        self.language = ""
        self.prompt = ""
        self.silence_ms = 500

    def update(self, event: dict[str, Any]) -> None:
        s = event.get("session")
        if not isinstance(s, dict):
            raise BadEvent("invalid_value", "session must be an object", "session")
        if event["type"] == "session.update":
            audio = ((s.get("audio") or {}).get("input") or {})
            fmt = audio.get("format")
            tr = audio.get("transcription")
            td = audio.get("turn_detection")
            if fmt is not None:
                if not isinstance(fmt, dict) or fmt.get("type") != "audio/pcm" or int(fmt.get("rate") or IN_RATE) != IN_RATE:
                    raise BadEvent("unsupported_audio_format", f"hasr takes audio/pcm at 24000 Hz (PCM16 mono), "
                                   f"not {fmt!r}", "session.audio.input.format")
        else:
            fmt = s.get("input_audio_format")
            tr = s.get("input_audio_transcription")
            td = s.get("turn_detection")
            if fmt is not None and fmt != "pcm16":
                raise BadEvent("unsupported_audio_format", f"hasr takes input_audio_format pcm16 (24 kHz mono), "
                               f"not {fmt!r}", "session.input_audio_format")
        if tr is not None:
            if not isinstance(tr, dict):
                raise BadEvent("invalid_value", "transcription settings must be an object")
            model = tr.get("model")
            if model and model not in MODEL_IDS:
                raise BadEvent("model_not_found", f"the model {model!r} does not exist; this daemon serves "
                               f"{', '.join(MODEL_IDS)}", "model")
            self.model = model or self.model
            lang = str(tr.get("language") or "")
            try:
                resolve(lang)
            except UnknownLanguage as e:  # refused at the update, not at the first audio as invalid_audio
                raise BadEvent("unknown_language", str(e), "language") from None
            self.language = lang
            self.prompt = str(tr.get("prompt") or "")
        if isinstance(td, dict) and td.get("silence_duration_ms") is not None:
            try:
                ms = int(td["silence_duration_ms"])
            except (TypeError, ValueError):
                raise BadEvent("invalid_value", "silence_duration_ms must be a number", "turn_detection") from None
            if not 100 <= ms <= 10000:
                raise BadEvent("invalid_value", f"silence_duration_ms must be 100-10000, not {ms}",
                               "turn_detection.silence_duration_ms")
            self.silence_ms = ms

    def session(self, sid: str) -> dict[str, Any]:
        tr = {"model": self.model, "language": self.language or None, "prompt": self.prompt}
        td = {"type": "server_vad", "silence_duration_ms": self.silence_ms, "prefix_padding_ms": 300}
        if self.beta:
            return {"id": sid, "object": "realtime.transcription_session", "input_audio_format": "pcm16",
                    "input_audio_transcription": tr, "turn_detection": td}
        return {"id": sid, "object": "realtime.transcription_session", "type": "transcription",
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": IN_RATE}, "transcription": tr,
                                    "turn_detection": td}}}


class Live:
    """One WebSocket connection: reads client events, feeds the worker, translates the worker's events."""

    def __init__(self, d: Daemon, ws: WebSocket) -> None:
        self.d = d
        self.ws = ws
        self.sid = f"sess_hasr_{next(_sessions)}"
        # the beta protocol (transcription_session.*): ?intent=transcription alone; GA clients (the SDK) name a model
        q = ws.query_params
        self.cfg = Config(beta=q.get("intent") == "transcription" and "model" not in q)
        # hasr's own events only when asked for: the OpenAI SDK parses every event as one of its own types
        self.hasr_events = ws.query_params.get("hasr_events", "").lower() in ("1", "true", "yes")
        self.inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.joiners: dict[int, formats.DeltaJoiner] = {}
        self.resample = Pcm16To16k()
        self.closed = False

    def item(self, seg: int) -> str:
        return f"item_{self.sid[10:]}_{seg}"

    async def send(self, ev: dict[str, Any]) -> None:
        await self.out.put(ev)

    async def sender(self) -> None:
        while True:
            ev = await self.out.get()
            if ev is None:
                return
            try:
                await self.ws.send_text(json.dumps(ev, ensure_ascii=False))
            except (WebSocketDisconnect, RuntimeError, OSError):
                self.closed = True
                return

    async def reader(self) -> None:
        """Client events -> inbox ("audio", bytes) / ("commit",) / ("finish",) / ("gone",); the rest here."""
        try:
            while True:
                msg = await self.ws.receive()
                if msg["type"] == "websocket.disconnect":
                    break
                await self.inbox.put(("activity", None))
                text = msg.get("text")
                if text is None:
                    await self.send(error_event("invalid_event", "send JSON text frames (client events); a binary "
                                                "frame is not one"))
                    continue
                try:
                    await self.handle(text)
                except BadEvent as e:
                    await self.send(error_event(e.code, e.message, e.param))
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass
        await self.inbox.put(("gone", None))

    async def handle(self, text: str) -> None:
        try:
            event = json.loads(text)
        except ValueError as e:
            raise BadEvent("invalid_json", f"not JSON: {e}") from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise BadEvent("invalid_event", "a client event is a JSON object with a string \"type\"", "type")
        kind = event["type"]
        if kind in ("transcription_session.update", "session.update"):
            self.cfg.beta = kind == "transcription_session.update"
            self.cfg.update(event)
            updated = "transcription_session.updated" if self.cfg.beta else "session.updated"
            await self.send(_event(updated, session=self.cfg.session(self.sid)))
        elif kind == "input_audio_buffer.append":
            audio = event.get("audio")
            if not isinstance(audio, str):
                raise BadEvent("invalid_value", "input_audio_buffer.append needs \"audio\": base64 PCM16", "audio")
            try:
                raw = base64.b64decode(audio, validate=True)
            except (binascii.Error, ValueError):
                raise BadEvent("invalid_audio", "\"audio\" is not valid base64", "audio") from None
            await self.inbox.put(("audio", self.resample.convert(raw)))
        elif kind == "input_audio_buffer.commit":  # the open utterance ends: its committed event follows
            await self.inbox.put(("commit", None))
        elif kind == "input_audio_buffer.clear":
            await self.send(_event("input_audio_buffer.cleared"))
        elif kind == "hasr.finish":
            await self.inbox.put(("finish", None))
        else:
            raise BadEvent("unknown_event", f"unknown client event type {kind!r}", "type")

    def on_event(self, ev: dict[str, Any]) -> None:
        """The worker's events (on the loop's thread) -> Realtime events."""
        kind = ev.get("event")
        out: list[dict[str, Any]] = []
        if kind == "turn":
            seg, item = int(ev["segment"]), self.item(int(ev["segment"]))
            if ev["kind"] == "started":
                self.joiners[seg] = formats.DeltaJoiner()
                out.append(_event("input_audio_buffer.speech_started", item_id=item,
                                  audio_start_ms=int(ev["start_s"] * 1000)))
            elif ev["kind"] == "stopped":
                prev = self.item(seg - 1) if seg else None
                out += [_event("input_audio_buffer.speech_stopped", item_id=item,
                               audio_end_ms=int(ev["end_s"] * 1000)),
                        _event("input_audio_buffer.committed", item_id=item, previous_item_id=prev),
                        _event("conversation.item.created", previous_item_id=prev,
                               item={"id": item, "object": "realtime.item", "type": "message", "status": "completed",
                                     "role": "user", "content": [{"type": "input_audio", "transcript": None}]})]
            else:
                joiner = self.joiners.pop(seg, formats.DeltaJoiner())
                out.append(_event("conversation.item.input_audio_transcription.completed", item_id=item,
                                  content_index=0, transcript=joiner.text or ev.get("text", "")))
        elif kind == "sentence":
            seg = int(ev.get("segment", 0))
            item = self.item(seg)
            delta = self.joiners.setdefault(seg, formats.DeltaJoiner()).add(ev["text"])
            out.append(_event("hasr.sentence", item_id=item, index=ev["index"], text=ev["text"], engine=ev["engine"],
                              start_s=ev["start_s"], end_s=ev["end_s"]))
            if delta:
                out.append(_event("conversation.item.input_audio_transcription.delta", item_id=item,
                                  content_index=0, delta=delta))
        elif kind == "draft":
            out.append(_event("hasr.draft", item_id=self.item(int(ev.get("segment", 0))), text=ev["text"]))
        elif kind == "progress":
            out.append(_event("hasr.progress", done_s=ev["done_s"], received_s=ev["total_s"],
                              lag_s=round(max(0.0, ev["total_s"] - ev["done_s"]), 3)))
        elif kind == "queued":
            out.append(_event("hasr.queued", position=ev["position"]))
        elif kind == "loading":
            out.append(_event("hasr.loading", phase=ev.get("phase", ""), elapsed_s=ev.get("elapsed_s", 0.0)))
        for e in out:
            if self.hasr_events or not e["type"].startswith("hasr."):
                self.out.put_nowait(e)

    async def next_input(self) -> tuple[str, Any]:
        """The next audio/commit/finish/gone, or ("idle", None) after HASR_LIVE_IDLE_SEC without any event."""
        while True:
            try:
                kind, value = await asyncio.wait_for(self.inbox.get(), self.d.settings.live_idle_sec)
            except asyncio.TimeoutError:
                return "idle", None
            if kind != "activity":
                return kind, value

    async def run(self) -> None:
        sup = self.d.supervisor
        created = "transcription_session.created" if self.cfg.beta else "session.created"
        await self.send(_event(created, session=self.cfg.session(self.sid)))
        try:
            lease = sup.admit()
        except errors.HasrError as e:
            await self.send(error_event(e.code, e.message, kind="server_error"))
            return
        try:
            while True:  # nothing runs until there is audio: the session's settings come first
                kind, first = await self.next_input()
                if kind == "audio":
                    break
                if kind in ("gone", "finish"):
                    if kind == "finish":
                        await self.send(_event("hasr.done", result={"final": "", "per_sentence": []}))
                    return
                if kind == "idle":
                    await self.idle()
                    return
            options: dict[str, Any] = {"silence_ms": self.cfg.silence_ms}
            if self.cfg.prompt:
                options["prompt"] = self.cfg.prompt
            async with sup.live(language=self.cfg.language, options=options, on_event=self.on_event,
                                lease=lease) as session:
                await session.audio(first)  # what came while the worker loaded waits in the inbox
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
                        await session.audio(value)
                    elif kind == "commit":
                        await session.commit()
                    elif kind == "finish":
                        result = await session.end()
                        await self.send(_event("hasr.done", result=result))
                        return
                    elif kind == "idle":
                        await self.idle()
                        return
                    else:  # gone: the session is cancelled on the way out
                        return
        except errors.HasrError as e:
            await self.send(error_event(e.code, e.message, kind="server_error"))
        finally:
            lease.release()

    async def idle(self) -> None:
        secs = self.d.settings.live_idle_sec
        await self.send(error_event("idle_timeout", f"nothing arrived for {secs:g} s (HASR_LIVE_IDLE_SEC): the "
                                    f"session is closed; send audio (silence included) to keep one open"))


async def realtime(ws: WebSocket) -> None:
    d: Daemon = ws.app.state.daemon
    try:
        check_access(d, ws)  # type: ignore[arg-type]
    except errors.HasrError as e:
        await ws.close(code=1008, reason=e.message[:120])
        return
    await ws.accept()
    live = Live(d, ws)
    sender = asyncio.ensure_future(live.sender())
    reader = asyncio.ensure_future(live.reader())
    try:
        await live.run()
    except Exception:
        log.exception("live session %s failed", live.sid)
        live.out.put_nowait(error_event("internal_error", "the live session failed in the daemon (see its log)",
                                        kind="server_error"))
    finally:
        live.out.put_nowait(None)
        await sender
        reader.cancel()
        if not live.closed:
            try:
                await ws.close(code=1000)
            except (RuntimeError, OSError):
                pass
