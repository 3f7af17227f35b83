"""``hasrd``: the daemon. Sockets (activated or bound), sd_notify, the HTTP server, idle exit and the exit path
(docs/ARCHITECTURE.md "Sockets and systemd": STOPPING=1, close our listener copy, finish what was accepted, stop
the worker, exit 0; SIGTERM and ``POST /api/stop`` take the same path)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import grp
import logging
import os
import signal
import socket
import stat
import sys
import time
from typing import Any
from collections.abc import Callable

import uvicorn

from hasrd import __version__, config, modelspec, placement
from hasrd import systemd as sd
from hasrd.app import make_app
from hasrd.context import Daemon
from hasrd.connections import BurstFilter, PeerProtocol, PeerWebSocket, RateLimited, raise_nofile
from hasrd.events import Broadcaster
from hasrd.scheduler import Pool
from hasrd.status import PoolStatus, State
from hasrd.gpu import Inventory
from hasrd.spawn import make_runner_factory

log = logging.getLogger("hasrd")


def check_socket_dir(parent: str) -> None:
    """Refuse a socket directory another user controls (e.g. a planted /tmp/hasr-UID when XDG_RUNTIME_DIR
    is unset): they could swap the socket and receive the audio. Our own directory must be 0700."""
    st = os.lstat(parent)
    if not stat.S_ISDIR(st.st_mode):
        raise SystemExit(f"hasrd: {parent} is not a directory")
    if st.st_uid != os.getuid():
        if st.st_mode & stat.S_ISVTX:  # sticky, like /tmp itself: others cannot replace our socket
            return
        raise SystemExit(f"hasrd: {parent} belongs to uid {st.st_uid}, not to us ({os.getuid()}); "
                         f"refusing to put the socket there")
    default_dir = os.path.dirname(config.default_socket())
    if os.path.abspath(parent) != os.path.abspath(default_dir):
        return
    # The default place: $XDG_RUNTIME_DIR/hasr, or /tmp/hasr-UID/hasr without it. Our hasr directory must be
    # ours and private; so must /tmp/hasr-UID (whoever owns it could swap our directory for theirs). The
    # runtime directory that systemd or the session gave us is never changed, only checked.
    if os.environ.get("XDG_RUNTIME_DIR"):
        rt = os.lstat(str(config.runtime_dir()))
        if rt.st_uid not in (os.getuid(), 0) and not rt.st_mode & stat.S_ISVTX:
            raise SystemExit(f"hasrd: XDG_RUNTIME_DIR={config.runtime_dir()} belongs to uid {rt.st_uid}")
        private = [parent]
    else:
        private = [str(config.runtime_dir()), parent]
    for d in private:
        st = os.lstat(d)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077:
            log.warning("%s had mode %04o; made it private (0700)", d, stat.S_IMODE(st.st_mode))
            os.chmod(d, 0o700)
            st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise SystemExit(f"hasrd: {d} must be a directory of ours with mode 0700 (it is uid {st.st_uid}, "
                             f"mode {stat.S_IMODE(st.st_mode):04o}); fix it or set XDG_RUNTIME_DIR")


_BOUND: dict[str, tuple[int, int]] = {}  # socket files we bound: path -> (st_dev, st_ino)


def bind_socket(path: str) -> socket.socket:
    """Bind our own listening socket: parent dir 0700, socket 0600; refuse to steal a live one."""
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, mode=0o700, exist_ok=True)
    except OSError as e:
        raise SystemExit(f"hasrd: cannot create the socket's directory {parent}: {e.strerror or e}") from None
    check_socket_dir(parent)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise SystemExit(f"hasrd: {path} exists and is not a socket; remove it or choose another --socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
            raise SystemExit(f"hasrd: another daemon already listens on {path}")
        except (ConnectionRefusedError, FileNotFoundError):
            os.unlink(path)  # a stale socket left by a crashed daemon
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    except OSError as e:
        sock.close()
        raise SystemExit(f"hasrd: cannot listen on {path}: {e.strerror or e}") from None
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    st = os.lstat(path)
    sock.listen(4096)  # a burst of connections waits in the kernel, not refused (EAGAIN); somaxconn caps it
    _BOUND[path] = (st.st_dev, st.st_ino)
    return sock


def unlink_if_ours(path: str) -> None:
    """Remove the socket file we bound, but not one that a newer daemon (or systemd) has put there since."""
    bound = _BOUND.get(path)
    try:
        st = os.lstat(path)
    except OSError:
        return
    if bound is not None and (st.st_dev, st.st_ino) == bound:
        os.unlink(path)


def exiting_status(reason: str, doing: str = "") -> str:
    """The STATUS line of a daemon on its way out: why it exits ("idle for 1800 s, exiting"), after what it
    still does ("unloading (idle for 1800 s, exiting)"). systemd keeps the last STATUS after the process is
    gone, so the last one must be the reason, not whatever the pool said before."""
    why = f"{reason or 'stopping'}, exiting"
    return f"{doing} ({why})" if doing else why


class HasrServer(uvicorn.Server):
    """uvicorn's server with our exit path: STOPPING=1 first, then uvicorn's graceful drain."""

    def __init__(self, cfg: uvicorn.Config, notifier: sd.Notifier) -> None:
        super().__init__(cfg)
        self.notifier = notifier
        self.exit_reason = ""
        self.on_started: Callable[[], None] | None = None
        self.on_exit: Callable[[], None] | None = None
        self.on_force: Callable[[], None] | None = None
        self.signals = 0
        self.busy: Callable[[], bool] = lambda: False
        self.stop_max_sec = 3600.0
        self.working: Callable[[], int] = lambda: 0  # open connections that hold the daemon up
        self.last_work: Callable[[], float] = lambda: 0.0  # when the last of them closed (monotonic)

    def request_exit(self, reason: str) -> None:
        if not self.should_exit:
            log.info("exiting: %s", reason)
            self.exit_reason = reason
            self.notifier.stopping(exiting_status(reason))
            self.should_exit = True
            if self.on_exit is not None:
                self.on_exit()  # end the event streams so their connections close
            asyncio.get_running_loop().create_task(self._bound_the_stop())

    def force(self, reason: str) -> None:
        """Stop now: the worker is killed, so running and queued requests fail with worker_crashed."""
        self.request_exit(reason)  # a no-op when it is exiting already
        log.warning("forced exit: %s", reason)
        self.force_exit = True
        if self.on_force is not None:
            self.on_force()

    async def _bound_the_stop(self) -> None:
        """Finishing accepted work may outlast TimeoutStopSec on long files: ask systemd for more time while
        requests run, up to HASR_STOP_MAX_SEC; then give up on them."""
        started = time.monotonic()
        while True:
            if time.monotonic() - started >= self.stop_max_sec:
                self.force(f"accepted work still running after {self.stop_max_sec:g} s (HASR_STOP_MAX_SEC)")
                return
            if self.busy():
                self.notifier.extend_timeout(60)
            await asyncio.sleep(max(0.05, min(30.0, self.stop_max_sec - (time.monotonic() - started))))

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.on_started is not None and not self.should_exit:
            self.on_started()  # READY=1 as soon as the socket is served, before the first request is read

    def handle_exit(self, sig: int, frame: Any) -> None:
        # A signal handler must not touch the loop's state directly: hand over to the loop.
        name = signal.Signals(sig).name
        loop = asyncio.get_event_loop()
        self.signals += 1
        if self.signals > 1 or self.should_exit:  # a signal while stopping: stop waiting for accepted work
            loop.call_soon_threadsafe(self.force, f"second {name}")
        else:
            loop.call_soon_threadsafe(self.request_exit, f"signal {name}")


async def idle_watch(server: HasrServer, pool: Pool, idle_exit: float, poke: asyncio.Event) -> None:
    """Exit ``idle_exit`` seconds after the last work: a request's end, a load, or the close of a connection
    that carried anything but observation (/health, /api/ps, /api/version, /api/events: a tray or a monitor
    polling never holds the daemon up). Counted from then, not from the worker's TTL unload; a worker kept loaded
    past it holds the daemon until it is unloaded. Woken by every state change and connection, no polling."""
    started = time.monotonic()
    while not server.should_exit:
        now = time.monotonic()
        left = pool.idle_exit_in(now, idle_exit, None if server.working() else max(started, server.last_work()))
        if left is not None and left <= 0:
            server.request_exit(f"idle for {idle_exit:g} s")
            return
        poke.clear()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(poke.wait(), left)


def shared_gid(group: str) -> int | None:
    """HASR_SHARED_GROUP's gid (a name or a number); its members may use a group-accessible socket."""
    if not group:
        return None
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        log.warning("HASR_SHARED_GROUP=%s: no such group; only uid %d and root may use this daemon", group,
                    os.getuid())
        return None


async def watchdog(notifier: sd.Notifier, interval: float) -> None:
    while True:
        notifier.watchdog()
        await asyncio.sleep(interval)


async def serve(settings: config.Settings, sockets: list[socket.socket], *, activated: bool,
                idle_exit: float | None, owned_path: str | None) -> int:
    notifier = sd.Notifier()
    poke = asyncio.Event()
    events = Broadcaster(on_status=notifier.status, on_subscribers=poke.set)
    inventory = Inventory(settings.gpu)

    def changed(snap: PoolStatus) -> None:
        events.publish(snap)
        poke.set()

    gpus = inventory.gpus()
    max_workers = settings.max_workers or placement.default_max_workers(len(gpus))
    pool = Pool(settings, make_runner_factory(settings, lambda: bool(inventory.gpus())),
                modelspec.default_spec(settings), inventory=inventory, max_workers=max_workers, on_change=changed,
                default_device=gpus[0].uuid if gpus else placement.CPU)
    group_socket = False
    for s in sockets:
        if s.family == socket.AF_UNIX:
            name = s.getsockname()
            if isinstance(name, str) and name and os.path.exists(name):
                group_socket = group_socket or bool(os.stat(name).st_mode & 0o060)
    daemon = Daemon(settings, pool, events, group_socket=group_socket, shared_gid=shared_gid(settings.shared_group))
    app = make_app(daemon)
    nofile = raise_nofile()
    cap = max(16, min(settings.max_connections, nofile - 64))  # fds left for the worker, memfds and logs
    protocol = PeerProtocol.configure(cap, settings.read_timeout_sec, on_activity=poke.set)
    logging.getLogger("asyncio").addFilter(RateLimited("socket.accept() out of system resource"))
    logging.getLogger("uvicorn.error").addFilter(BurstFilter("Invalid HTTP request", "invalid HTTP requests"))
    # python-multipart warns once per malformed body (each is also a 400 "malformed form"): bursts too
    multipart = BurstFilter("", "malformed multipart bodies")
    for name in ("python_multipart.multipart", "multipart.multipart"):
        logging.getLogger(name).addFilter(multipart)
    # backlog: asyncio listen()s again on the sockets it is given, with uvicorn's 2048 unless told otherwise;
    # that would shrink our 4096 (and systemd's SOMAXCONN), and a burst of connects would fail with EAGAIN.
    cfg = uvicorn.Config(app, http=protocol, ws=PeerWebSocket, lifespan="off", log_config=None,
                         access_log=settings.debug, timeout_keep_alive=5, timeout_graceful_shutdown=None,
                         server_header=False, backlog=4096)
    server = HasrServer(cfg, notifier)
    daemon.request_stop = lambda now: (server.force if now else server.request_exit)("stop requested over the API")
    tasks = []
    if idle_exit is not None and idle_exit >= 0:
        tasks.append(asyncio.create_task(idle_watch(server, pool, idle_exit, poke)))
    wd = sd.watchdog_interval()
    if wd:
        tasks.append(asyncio.create_task(watchdog(notifier, wd)))

    def announce_ready() -> None:
        events.publish(pool.snapshot())
        notifier.ready(status="idle")
        where = ", ".join(str(s.getsockname()) for s in sockets)
        log.info("hasrd %s ready on %s (engine %s%s)", __version__, where, settings.engine,
                 ", socket-activated" if activated else "")

    def exiting() -> None:
        # The work being finished still shows ("transcribing x.wav 80% (signal SIGTERM, exiting)").
        events.on_status = lambda text: notifier.status(exiting_status(server.exit_reason, text))
        events.close()

    server.on_started = announce_ready
    server.on_exit = exiting
    server.on_force = pool.kill_now
    server.busy = lambda: pool.in_flight > 0
    server.stop_max_sec = settings.stop_max_sec
    server.working = protocol.working
    server.last_work = protocol.last_work
    if EARLY_SIGNALS:  # a stop asked for before uvicorn took the signals over: the same path, now
        asyncio.get_running_loop().call_soon(server.request_exit, f"signal {EARLY_SIGNALS[0]} during start-up")
    try:
        await server.serve(sockets=sockets)
    finally:
        # uvicorn gave the signals back to their defaults: a SIGTERM now (systemd, a second `hasrctl stop`)
        # would kill us half-way through stopping the worker; we are stopping already, so a first one is noted
        # and a second one forces the worker down.
        loop = asyncio.get_running_loop()
        hold_signals(lambda name: loop.call_soon_threadsafe(pool.kill_now)
                     if len(EARLY_SIGNALS) + server.signals > 1 else None)
        for t in tasks:
            t.cancel()
        loaded = pool.state in (State.STARTING, State.READY, State.STOPPING)
        notifier.stopping(exiting_status(server.exit_reason, "unloading" if loaded else ""))
        await pool.close()
        notifier.status(exiting_status(server.exit_reason))  # the last word, which systemd keeps: why
        if server.force_exit:  # let the handlers write their error events before the loop goes away
            deadline = time.monotonic() + 2.0
            while server.server_state.tasks and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        if owned_path:
            unlink_if_ours(owned_path)
        notifier.close()
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="hasrd",
        description="hasr daemon: local speech-to-text over a Unix socket. Normally started by systemd "
                    "(`systemctl --user start hasrd.socket`); the GPU worker starts on the first request and "
                    "is unloaded after HASR_IDLE_TTL_SEC idle seconds.",
        epilog="Examples:\n"
               "  hasrd                                   # bind $XDG_RUNTIME_DIR/hasr/hasrd.sock\n"
               "  hasrd --socket /tmp/h.sock --engine fake --idle-exit 30\n"
               "  curl --unix-socket $XDG_RUNTIME_DIR/hasr/hasrd.sock http://hasr/health\n\n"
               "Every setting is also an environment variable (HASR_*) or a key in "
               "$XDG_CONFIG_HOME/hasr/config.toml; `hasrctl doctor` prints the effective values.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", help="bind this Unix socket when not socket-activated "
                                     "(default $XDG_RUNTIME_DIR/hasr/hasrd.sock; HASR_SOCKET)")
    ap.add_argument("--engine", help="auto | hybrid | whisper | r2t2 | fake (HASR_ENGINE; default auto)")
    ap.add_argument("--idle-exit", type=float, metavar="SEC",
                    help="exit after SEC idle seconds (always on when socket-activated: HASR_IDLE_EXIT_SEC)")
    ap.add_argument("--ttl", type=float, metavar="SEC", help="unload the worker after SEC idle seconds "
                                                              "(HASR_IDLE_TTL_SEC; default 900)")
    ap.add_argument("--debug", action="store_true", help="debug logs and access log (HASR_DEBUG)")
    ap.add_argument("--version", action="version", version=f"hasrd {__version__}")
    return ap.parse_args(argv)


EARLY_SIGNALS: list[str] = []  # SIGTERM / SIGINT received while uvicorn did not hold the handlers


def hold_signals(then: Callable[[str], object] = lambda name: None) -> None:
    """Note SIGTERM and SIGINT instead of dying of them (start-up before uvicorn's handlers, and the stop after
    them): either way the daemon is on its way out, through its own exit path, with exit status 0."""

    def note(sig: int, frame: Any) -> None:
        name = signal.Signals(sig).name
        EARLY_SIGNALS.append(name)
        log.info("%s while starting or stopping: the exit path is already under way", name)
        then(name)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, note)


def main(argv: list[str] | None = None) -> int:
    hold_signals()
    args = parse_args(argv)
    try:
        settings = config.load(socket=args.socket, engine=args.engine, idle_ttl_sec=args.ttl,
                               debug=True if args.debug else None)
    except config.ConfigError as e:
        print(f"hasrd: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.DEBUG if settings.debug else logging.INFO, stream=sys.stderr,
                        format="%(name)s: %(levelname)s %(message)s" if os.environ.get("INVOCATION_ID")
                        else "%(asctime)s %(name)s: %(levelname)s %(message)s")
    for line in config.unknown_env(os.environ):
        log.warning("%s", line)
    try:
        sockets = sd.listen_fds()
    except sd.SocketActivationError as e:
        print(f"hasrd: {e}", file=sys.stderr)
        return 2
    activated = bool(sockets)
    owned_path = None if activated else settings.socket_path()
    if owned_path is not None:
        sockets = [bind_socket(owned_path)]
    idle_exit = args.idle_exit if args.idle_exit is not None else (settings.idle_exit_sec if activated else None)
    code = asyncio.run(serve(settings, sockets, activated=activated, idle_exit=idle_exit, owned_path=owned_path))
    # Python's finalization gives the signals back to their defaults: a SIGTERM arriving in those last
    # milliseconds (a stop racing an idle exit) would turn a clean exit into death by signal. Stopped already.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    return code


if __name__ == "__main__":
    raise SystemExit(main())
