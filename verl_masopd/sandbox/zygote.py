"""The parent's side of the sandbox zygote (bootstrap.py): start runs without an interpreter start.

One zygote per process, started lazily by the first run with a scrubbed environment (it is
exec'd, never forked from the caller, so it holds none of the caller's memory or secrets) and
its source on stdin (so that no command line carries it), restarted when it has died, forgotten
by forked children (which start their own), closed at exit. Concurrent runs share it: a request
is one atomic message on a SOCK_SEQPACKET socket that carries the run's fds, and the zygote only
forks, so it serves them one after another in microseconds while the runs themselves proceed in
parallel.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

logger = logging.getLogger(__name__)

_BOOTSTRAP = Path(__file__).with_name("bootstrap.py").read_bytes()
# The zygote's last argument, ignored: it names the zygote in the host's process list (runs do not
# see it: each supervisor blanks its command line, bootstrap.py).
ZYGOTE_MARK = "verl-masopd-sandbox-zygote"
_START_TIMEOUT_S = 30.0
_CLOSE_TIMEOUT_S = 5.0
_REPLY_BYTES = 4096
# The zygote's whole environment, fixed at its start: every run's interpreter settings.
ZYGOTE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONHASHSEED": "0",
    "PYTHONIOENCODING": "utf-8",
}


class SandboxError(RuntimeError):
    """The sandbox itself (not the program) failed."""


class Run:
    """One run started on the zygote: the channel to its supervisor and the supervisor's pidfd."""

    def __init__(self, channel: socket.socket):
        self.channel = channel
        channel.settimeout(_START_TIMEOUT_S)
        try:
            message, fds, _, _ = socket.recv_fds(channel, _REPLY_BYTES, 1)
        except TimeoutError:
            message, fds = b"", []
        if message != b"started" or len(fds) != 1:
            channel.close()
            for fd in fds:
                os.close(fd)
            raise SandboxError(f"the run's supervisor did not start: {message.decode(errors='replace') or 'no reply'}")
        self.supervisor = fds[0]

    def reply(self, deadline: float) -> dict | None:
        """The supervisor's last message ({"status": wait status} or {"error": reason}), or None
        when the deadline passes first."""
        self.channel.settimeout(max(deadline - time.monotonic(), 0.0))
        try:
            message = self.channel.recv(_REPLY_BYTES)
        except (TimeoutError, BlockingIOError):
            return None
        if not message:
            return {"error": "the run's supervisor ended without a status"}
        return json.loads(message)

    def stop(self) -> None:
        """Ask the supervisor to kill every process of the run now."""
        self.channel.shutdown(socket.SHUT_WR)

    def kill_supervisor(self, grace: float) -> None:
        """Last resort for a supervisor that does not answer: SIGKILL it and wait for its end."""
        logger.warning("sandbox supervisor did not report in time; killing it")
        signal.pidfd_send_signal(self.supervisor, signal.SIGKILL)
        ended = select.poll()
        ended.register(self.supervisor, select.POLLIN)
        ended.poll(grace * 1000)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc_info) -> None:
        self.channel.close()
        os.close(self.supervisor)


class Zygote:
    """A started zygote process and the parent's end of its control socket; the zygote joins the
    cgroup whose cgroup.procs file is `cgroup` (when given) before it serves a run."""

    def __init__(self, cgroup: str | None):
        self.control, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with zygote_end:
            self.process = subprocess.Popen(
                [sys.executable, "-s", "-B", "-", str(zygote_end.fileno()), ZYGOTE_MARK],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=[zygote_end.fileno()],
                env=ZYGOTE_ENV,
                cwd="/",
            )
        try:
            if cgroup:
                with open(cgroup, "w") as procs:
                    procs.write(str(self.process.pid))
            with self.process.stdin as source:
                source.write(_BOOTSTRAP)
        except OSError:
            self.control.close()
            self.process.kill()
            self.process.wait()
            raise

    def alive(self) -> bool:
        return self.process.poll() is None

    def request(self, config: dict, stdio: tuple[int, int, int]) -> socket.socket:
        """Send one run request; the returned socket is the channel to the run's supervisor."""
        channel, supervisor_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with supervisor_end:
            try:
                socket.send_fds(self.control, [json.dumps(config).encode()], [supervisor_end.fileno(), *stdio])
            except OSError:
                channel.close()
                raise
        return channel

    def close(self) -> None:
        self.control.close()
        try:
            self.process.wait(_CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_lock = threading.Lock()
_zygote: Zygote | None = None


def start_run(config: dict, stdio: tuple[int, int, int], cgroup: str | None) -> Run:
    """Start one run (config as bootstrap.py reads it; stdin, stdout, stderr fds) on this
    process's zygote, (re)starting the zygote, in `cgroup` (a cgroup.procs file, or None), when
    there is none or it has died."""
    global _zygote
    with _lock:
        for attempt in range(2):
            if _zygote is None or not _zygote.alive():
                if _zygote is not None:
                    logger.warning("sandbox zygote exited with %s; starting a new one", _zygote.process.returncode)
                    _zygote.close()
                _zygote = Zygote(cgroup)
            try:
                channel = _zygote.request(config, stdio)
                break
            except OSError:
                if attempt:
                    raise
                _zygote.close()
                _zygote = None
    return Run(channel)


@atexit.register
def close() -> None:
    """Stop this process's zygote (runs in flight are unaffected; a later run starts a new one)."""
    global _zygote
    with _lock:
        if _zygote is not None:
            _zygote.close()
            _zygote = None


def _forget_after_fork() -> None:
    """A forked child must not share its parent's zygote or a lock some parent thread held."""
    global _lock, _zygote
    _lock = threading.Lock()
    if _zygote is not None:
        _zygote.control.close()
        _zygote = None


os.register_at_fork(after_in_child=_forget_after_fork)
