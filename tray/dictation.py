"""The tray's "Dictate" entry: the microphone to /v1/realtime, each final sentence typed into the focused window.

It is ``hasrctl dictate`` on a thread (the same :class:`hasrctl.livesession.Session`, microphone source and typing
tool), with what it hears reported to the drop window: the final sentences so far and the current draft. Seams
(the audio source and the typist) are constructor arguments, so tests drive it with a file and a recorder.
"""

from __future__ import annotations

import logging
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hasrctl.transcribe import Event

log = logging.getLogger("hasr.tray.dictation")

Source = Callable[[threading.Event], Iterator[bytes]]


def microphone(stop: threading.Event) -> Iterator[bytes]:
    from hasrctl.livesession import microphone_source

    return microphone_source(None, stop)


def keyboard() -> Callable[[str], None]:
    """Types into the focused window with xdotool, wtype or ydotool (hasrctl.livesession.typist picks)."""
    from hasrctl.livesession import typist

    command = typist()

    def type_text(text: str) -> None:
        if text:
            subprocess.run([*command, text], check=False)

    return type_text


class Dictation:
    """One dictation at a time: :meth:`start`, :meth:`stop` (finals still come), ``active``.

    ``on_text(finals, draft)`` and ``on_end(error or None)`` run on the dictation's thread: the app hands
    them to its UI thread.
    """

    def __init__(self, socket_path: Callable[[], str], on_text: Callable[[str, str], None],
                 on_end: Callable[[str | None], None], *, source: Source = microphone,
                 typist: Callable[[], Callable[[str], None]] = keyboard, language: str = "") -> None:
        self.socket_path, self.on_text, self.on_end = socket_path, on_text, on_end
        self.source, self.typist, self.language = source, typist, language
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.finals: list[str] = []

    @property
    def active(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self) -> None:
        if self.active:
            return
        self.stop_event = threading.Event()
        self.finals = []
        self.thread = threading.Thread(target=self._run, name="hasr-dictation", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()

    def _run(self) -> None:
        from hasrctl.livesession import run

        error: str | None = None
        try:
            type_text = self.typist()

            def on_sentence(ev: Event) -> None:
                text = (ev.text or "").strip()
                if text:
                    type_text(text + " ")
                    self.finals.append(text)
                    self.on_text(" ".join(self.finals), "")

            def on_draft(text: str, _segment: int) -> None:
                self.on_text(" ".join(self.finals), text)

            run(self.socket_path(), self.source(self.stop_event), self.stop_event, self.language, "", 500,
                on_sentence, on_draft)
        except Exception as e:  # CliError (no daemon, no typing tool, no microphone) or anything else
            error = getattr(e, "message", None) or str(e) or type(e).__name__
            log.warning("dictation ended: %s", error)
        finally:
            self.stop_event.set()
            self.on_end(error)
