"""A model server started inside the job: spawned with its log, waited for until ``/health`` answers,
and stopped (whole process group, TERM then KILL) on :meth:`ServerProcess.stop`, at interpreter exit,
and on SIGTERM / SIGUSR2 (SLURM pre-emption), after which the previous signal handler runs.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)

_Handler = Callable[[int, FrameType | None], Any] | int | None


class ServerProcess:
    """One server process (``name`` in log lines); :attr:`proc` is None when none is running."""

    def __init__(self, name: str, startup_timeout_s: float, stop_timeout_s: float) -> None:
        self.name = name
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self._previous: dict[int, _Handler] = {}

    async def start(self, argv: list[str], env: Mapping[str, str], log_path: Path, health_url: str) -> None:
        """Run ``argv`` (``env`` added to this environment; output appended to ``log_path``) and wait until
        ``health_url`` answers 200; a server that exits or stalls is stopped and raises, with its log's tail."""
        self._spawn(argv, env, log_path)
        try:
            await self._wait_healthy(health_url)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the server's process group: SIGTERM, then SIGKILL after ``stop_timeout_s``. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        atexit.unregister(self.stop)
        self._restore_handlers()
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s: server ignored SIGTERM for %gs; killing it", self.name, self.stop_timeout_s)
        _signal_group(proc.pid, signal.SIGKILL)  # stragglers in the group (engine workers) too
        proc.wait()
        log.info("%s: server stopped (exit %s)", self.name, proc.returncode)

    def _spawn(self, argv: list[str], env: Mapping[str, str], log_path: Path) -> None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        log.info("%s: starting %s (log %s)", self.name, " ".join(argv), log_path)
        with open(log_path, "ab") as out:
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=os.environ | dict(env),
                start_new_session=True,
            )
        self._install_handlers()
        atexit.register(self.stop)

    async def _wait_healthy(self, health_url: str) -> None:
        """Poll ``health_url`` until it answers 200; fail with the log's tail if the server dies or stalls."""
        assert self.proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        async with httpx.AsyncClient(timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise self._startup_failure(f"server exited with {self.proc.returncode}")
                try:
                    if (await client.get(health_url)).status_code == 200:
                        log.info("%s: server ready at %s", self.name, health_url.removesuffix("/health"))
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.5)
        raise self._startup_failure(f"server not healthy after {self.startup_timeout_s:g}s")

    def _install_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.debug("%s: not the main thread; signal handlers not installed", self.name)
            return
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def _restore_handlers(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """Stop the server, then do what the handler we replaced would have done."""
        previous = self._previous.get(signum, signal.SIG_DFL)
        log.warning("%s: got %s; stopping the server", self.name, signal.Signals(signum).name)
        self.stop()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _startup_failure(self, what: str) -> RuntimeError:
        """A failed start as one line: what happened, the log, and its last line that names an error (else
        its last line); the log's tail rides along as a note, shown with the traceback (``--debug``)."""
        tail = self._log_tail()
        lines = [line.strip() for line in tail.splitlines() if line.strip()]
        telling = next((line for line in reversed(lines) if "rror" in line), lines[-1] if lines else "")
        error = RuntimeError(f"{self.name}: {what} (log {self.log_path}): {telling}")
        if tail:
            error.add_note(tail)
        return error

    def _log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
