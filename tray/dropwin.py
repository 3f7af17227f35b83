"""The drop window: a small Tk window that accepts files from a file manager (XDND via tkinterdnd2).

It shows the daemon's state, the format files are saved as and a "Speakers" toggle (who said what), one row per
file (queued / running with progress / done / failed with the reason; the rows scroll, the state's words wrap,
the buttons always stay), and buttons for every menu action,
so it stands in for the menu where the tray backend has none (xorg). A dropped folder is the audio and video
in it. Everything here runs on the Tk main thread; other threads go through ``App.ui()``.
"""

from __future__ import annotations

import logging
import tkinter as tk
from collections.abc import Callable
from tkinter import filedialog, ttk
from typing import Any

from PIL import ImageTk

from tray import icons, menu
from tray.jobs import DONE, FAILED, RUNNING, Job
from tray.output import FORMATS
from tray.state import View

log = logging.getLogger("hasr.tray.dropwin")

TITLE = "hasr — drop audio files"
MAX_ROWS = 200  # rows kept (the newest); they scroll
AUDIO_TYPES = [("Audio and video", "*.wav *.mp3 *.flac *.ogg *.opus *.m4a *.aac *.webm *.mp4 *.mkv *.mov"),
               ("All files", "*")]
_STATE_COLORS = {RUNNING: "#2f7de1", DONE: "#2fb344", FAILED: "#d93a3a"}


def make_root() -> tuple[tk.Tk, bool]:
    """A Tk root with XDND support when tkinterdnd2 loads; the bool says whether drops work."""
    try:
        from tkinterdnd2 import TkinterDnD

        return TkinterDnD.Tk(className="hasr"), True
    except Exception as e:  # ImportError, or TclError when the bundled tkdnd library cannot load
        log.warning("drag and drop unavailable (%s); the window still offers 'Transcribe file…'", e)
        return tk.Tk(className="hasr"), False


class DropWindow:
    """The root window's contents; ``on_files`` gets dropped or chosen paths, ``on_action`` a menu key."""

    def __init__(self, root: tk.Tk, dnd: bool, on_files: Callable[[list[str]], None],
                 on_action: Callable[[str], None], fmt: tk.StringVar, speakers: tk.BooleanVar) -> None:
        self.root, self.on_files, self.on_action = root, on_files, on_action
        root.title(TITLE)
        root.geometry("520x340+40+80")
        root.minsize(360, 240)
        self._photos = {s: ImageTk.PhotoImage(icons.draw(s, 20), master=root) for s in icons.STATES}

        # Packed in this order so that what is packed first keeps its room: the header's choices (the format at the
        # top right corner, the speakers toggle under it), then the buttons at the bottom, then whatever is left
        # for the state's words (wrapped) and the rows (scrolled).
        top = ttk.Frame(root, padding=(10, 8, 10, 4))
        top.pack(fill="x")
        choices = ttk.Frame(top)
        choices.pack(side="right", anchor="n")
        ttk.Label(choices, text="Save as").grid(row=0, column=0, sticky="e", padx=(0, 4))
        ttk.OptionMenu(choices, fmt, fmt.get(), *FORMATS).grid(row=0, column=1, sticky="e")
        # who said what: the next files are transcribed with speakers="auto" and saved in speaker turns (A: …)
        ttk.Checkbutton(choices, text="Speakers", variable=speakers).grid(row=1, column=0, columnspan=2, sticky="e",
                                                                          pady=(2, 0))
        self.state_icon = ttk.Label(top, image=self._photos["offline"])
        self.state_icon.pack(side="left", anchor="n")
        self.state_text = ttk.Label(top, text="Connecting…", anchor="w", width=1)
        self.state_text.pack(side="left", anchor="n", fill="x", expand=True, padx=(6, 0), pady=(1, 0))
        self.state_text.bind("<Configure>", lambda e: self.state_text.configure(wraplength=max(40, e.width)))

        bar = ttk.Frame(root, padding=(10, 4, 10, 8))
        bar.pack(fill="x", side="bottom")
        self.buttons: dict[str, ttk.Button] = {}
        for key, label in ((menu.TRANSCRIBE, "Transcribe file…"), (menu.DICTATE, "Dictate"),
                           (menu.UNLOAD, "Unload model"),
                           (menu.OPEN_LAST, "Open last"), (menu.QUIT, "Quit")):
            b = ttk.Button(bar, text=label, command=self._command(key))
            b.pack(side="left", padx=(0, 4))
            self.buttons[key] = b

        hint = "Drop audio or video files here" if dnd else "Drag and drop unavailable: use Transcribe file…"
        self.zone = tk.Label(root, text=hint, relief="groove", borderwidth=2, height=3, fg="#555555")
        self.zone.pack(fill="x", padx=10, pady=4)

        # what a running dictation hears: its final sentences, then the current draft (replaced as it changes)
        self.live = tk.Label(root, text="", anchor="w", justify="left", wraplength=480, fg="#333333")
        self.live.pack(fill="x", padx=10)

        area = ttk.Frame(root, padding=(10, 2))  # the rows, in a canvas that scrolls
        area.pack(fill="both", expand=True)
        self.canvas = tk.Canvas(area, highlightthickness=0, borderwidth=0)
        scroll = ttk.Scrollbar(area, orient="vertical", command=self.canvas.yview)
        self.canvas.configure(yscrollcommand=scroll.set)
        scroll.pack(side="right", fill="y")
        self.canvas.pack(side="left", fill="both", expand=True)
        self.rows_frame = ttk.Frame(self.canvas)
        self.rows_frame.columnconfigure(0, weight=1)
        inner = self.canvas.create_window(0, 0, window=self.rows_frame, anchor="nw")
        self.rows_frame.bind("<Configure>", self._rows_resized)
        self.canvas.bind("<Configure>", lambda e: self.canvas.itemconfigure(inner, width=e.width))
        for widget in (self.canvas, self.rows_frame):  # the wheel (X11 buttons 4 and 5)
            widget.bind("<Button-4>", lambda e: self._scroll(-1))
            widget.bind("<Button-5>", lambda e: self._scroll(1))
        self._rows: dict[int, tuple[Any, Any, Any]] = {}  # name label, status label, progress bar
        self._order: list[int] = []
        self._follow = False

        if dnd:
            from tkinterdnd2 import DND_FILES

            targets: list[Any] = [root, self.zone, self.canvas, self.rows_frame]  # tkinterdnd2 adds these methods
            for widget in targets:
                widget.drop_target_register(DND_FILES)
                widget.dnd_bind("<<Drop>>", self._on_drop)
                widget.dnd_bind("<<DropEnter>>", self._on_enter)
                widget.dnd_bind("<<DropLeave>>", self._on_leave)

    def _rows_resized(self, event: object) -> None:
        self.canvas.configure(scrollregion=self.canvas.bbox("all"))
        if self._follow:  # the newest rows in sight, until the wheel scrolls back
            self.canvas.yview_moveto(1.0)

    def _scroll(self, step: int) -> None:
        self.canvas.yview_scroll(step, "units")
        self._follow = self.canvas.yview()[1] >= 1.0

    def _command(self, key: str) -> Callable[[], None]:
        return lambda: self.on_action(key)

    def _on_enter(self, event: object) -> str:
        self.zone.configure(bg="#dbe8fb")
        return "copy"

    def _on_leave(self, event: object) -> None:
        self.zone.configure(bg=self.root.cget("bg"))

    def _on_drop(self, event: object) -> str:
        self._on_leave(event)
        data = getattr(event, "data", "") or ""
        paths = [p for p in self.root.tk.splitlist(data) if p]
        paths = [p[len("file://"):] if p.startswith("file://") else p for p in paths]
        log.info("dropped %d file(s): %s", len(paths), paths)
        if paths:
            self.on_files(paths)
        return "copy"

    def choose_files(self) -> None:
        """The Transcribe file… dialog (several files may be picked)."""
        self.show()
        names = filedialog.askopenfilenames(parent=self.root, title="Transcribe with hasr", filetypes=AUDIO_TYPES)
        if names:
            self.on_files(list(self.root.tk.splitlist(names)) if isinstance(names, str) else list(names))

    def show(self) -> None:
        self.root.deiconify()
        self.root.lift()

    def hide(self) -> None:
        self.root.withdraw()

    def set_view(self, v: View, items: list[menu.Item | None]) -> None:
        self.state_icon.configure(image=self._photos[v.icon])
        self.state_text.configure(text=v.line)
        for key, item in menu.actions(items).items():
            if key in self.buttons:
                self.buttons[key].state(["!disabled"] if item.enabled else ["disabled"])
                if key == menu.DICTATE:
                    self.buttons[key].configure(text=item.label)

    def set_live(self, finals: str, draft: str) -> None:
        """The dictation's text: final sentences, then the draft after an ellipsis (empty: nothing heard)."""
        text = (finals + (" … " + draft if draft else "")).strip()
        self.live.configure(text=text[-400:])

    def set_job(self, job: Job) -> None:
        """Add or update the row of ``job`` (only the newest MAX_ROWS are kept)."""
        if job.id not in self._rows:
            name = ttk.Label(self.rows_frame, text=job.path.name, anchor="w", width=26)
            status = tk.Label(self.rows_frame, anchor="w", justify="left", width=26, wraplength=200)
            progress = ttk.Progressbar(self.rows_frame, length=90, maximum=1.0, mode="determinate")
            self._rows[job.id] = (name, status, progress)
            self._order.append(job.id)
            while len(self._order) > MAX_ROWS:
                for w in self._rows.pop(self._order.pop(0)):
                    w.destroy()
            for row, jid in enumerate(self._order):
                for col, w in enumerate(self._rows[jid]):
                    w.grid(row=row, column=col, sticky="we", padx=2, pady=1)
            self._follow = True
        name, status, progress = self._rows[job.id]
        if job.state == DONE:
            text = f"done {job.detail}"
        elif job.state == FAILED:
            text = f"failed: {job.detail}"
        elif job.state == RUNNING:
            text = job.detail or "running"
        else:
            text = "queued"
        status.configure(text=text, fg=_STATE_COLORS.get(job.state, "#555555"))
        progress.configure(value=job.progress or 0.0)
