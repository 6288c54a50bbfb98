"""Any OpenAI-compatible chat-completions endpoint (vLLM, Gemini, Seed, DeepSeek), streamed.

:class:`OpenAIBackbone` composes the parts every served engine shares: a context guard (frames cut
to the engine's limits, never silently), a :class:`~apm.backbones.chat_body.ChatBody` (request →
body) and a :class:`~apm.backbones.transport.Transport` (pooled clients, retries, deadlines); what
is its own is the endpoint's identity (``base_url``, ``model``), routing and the contract's checks.
Before a run, :meth:`OpenAIBackbone.preflight` checks the endpoint, the key and the model name, and
:meth:`OpenAIBackbone.check_request` the run's largest request; :meth:`OpenAIBackbone.advice` turns
a failure into one line that names the setting to change. The API key is read from the environment
variable ``api_key_env`` names, at each request, and is never stored on the object, so it cannot leak
into a repr, a log, a record or a saved config.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from apm.backbones.base import (
    Backbone,
    EndpointError,
    GenerationSettings,
    Message,
    Request,
    Response,
    Truncation,
)
from apm.backbones.chat_body import ChatBody, FrameMode, media_items
from apm.backbones.guard import ContextGuard, Policy, text_chars
from apm.backbones.transport import Body, Fatal, Transport
from apm.records.declaration import Declaration
from apm.records.redact import redact, url_userinfo

log = logging.getLogger(__name__)

NOT_THE_MODEL = ("object", "created", "permission", "max_model_len")
"""Fields of a ``GET /models`` entry that name no model: the entry's type, and what a server sets at each
request (vLLM's ``created``, ``permission``) or at each start (``max_model_len``)."""

BODIES_PER_SLOT = 2
"""Requests that may hold a built body at once, per connection slot (``concurrency``): the next bodies
are ready when slots free up, and the bodies in memory stay bounded however many requests wait."""


def url_credentials_problem(url: str, setting: str) -> str | None:
    """Why credentials in ``url`` (``setting`` names it) are refused, or None when it carries none: httpx
    would send them as Basic auth in place of the key, and the URL is saved and logged with the run."""
    if not url_userinfo(url):
        return None
    where = setting.removesuffix("base_url")
    return (f"{setting}: credentials in the URL ({redact(url)}) are refused (they would be sent as Basic auth "
            f"in place of the key); export the key and name its variable in {where}api_key_env")


def plain(value: Any) -> Any:
    """A Hydra/OmegaConf container as plain Python (JSON-serialisable) data; others unchanged."""
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig | ListConfig) else value


@dataclass(frozen=True)
class SettingNames:
    """Where a user sets what the preflight's advice tells them to change: the model name sent in requests
    (``model``) and the engine's limits (``limits_are_options``: this backbone's options, as for a server it
    launched; else the server's own flags, as for one started elsewhere)."""

    model: str = "model"
    limits_are_options: bool = False

    def engine(self, flag: str, where: str) -> str:
        """Where the engine limit ``flag`` (``max_model_len`` …) is set; ``where`` is the backbone's config key."""
        return f"{where}.{flag}" if self.limits_are_options else f"the server's --{flag.replace('_', '-')}"


class OpenAIBackbone(Backbone):
    """Streams chat completions from ``base_url``; see docs/backbones.md for every option.

    Requests are encoded by :class:`~apm.backbones.chat_body.ChatBody` (``frame_mode``,
    ``media_uuids``, the JSON formats, ``extra_body``) and sent by
    :class:`~apm.backbones.transport.Transport` (concurrency, retries, timeouts);
    ``data_parallel_size`` pins each trajectory to one of a data-parallel server's engines
    (``X-data-parallel-rank``), so its probes share one prefix cache; ``setting_names`` (not a YAML option)
    is where its advice says the model and the engine's limits are set.
    """

    declaration = Declaration("general")
    checks_requests = True
    guard: ContextGuard

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        name: str | None = None,
        api_key_env: str | None = None,
        frame_mode: FrameMode = "images",
        max_frames: int | None = None,
        max_context_tokens: int | None = None,
        tokens_per_frame: int = 256,
        tokens_per_still: int | None = None,
        truncation_policy: Policy = "uniform",
        concurrency: int = 16,
        max_attempts: int = 6,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 60.0,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 120.0,
        attempt_timeout_s: float = 600.0,
        deadline_s: float = 1800.0,
        json_response_format: bool = True,
        json_schema_format: bool = False,
        media_uuids: bool = False,
        data_parallel_size: int = 1,
        extra_body: Mapping[str, Any] | None = None,
        setting_names: SettingNames = SettingNames(),
    ) -> None:
        self.encoding = ChatBody(frame_mode, media_uuids, json_response_format, json_schema_format,
                                 dict(plain(extra_body) or {}))
        if problem := url_credentials_problem(base_url, "base_url"):
            raise ValueError(problem)
        self.name = name or model
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.max_frames = max_frames
        self.guard = ContextGuard(max_frames, max_context_tokens, tokens_per_frame, policy=truncation_policy,
                                  tokens_per_still=tokens_per_still)
        self.data_parallel_size = data_parallel_size
        self.setting_names = setting_names
        self.transport = Transport(
            name=self.name, api_key_env=api_key_env, concurrency=concurrency, max_attempts=max_attempts,
            backoff_initial_s=backoff_initial_s, backoff_max_s=backoff_max_s, connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s, attempt_timeout_s=attempt_timeout_s, deadline_s=deadline_s,
        )
        self.served: list[str] | None = None
        """What ``GET /models`` listed at the preflight (None: not asked, or the endpoint lists none)."""
        self._encoder: ThreadPoolExecutor | None = None
        """The one thread that builds request bodies: off the event loop, and one at a time (the encoding
        holds the GIL, so more threads would only contend with the loop reading other answers)."""
        self._bodies: asyncio.Semaphore | None = None
        """Bounds the requests holding a built body to :data:`BODIES_PER_SLOT` per connection slot."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, base_url={self.base_url!r})"

    @property
    def frame_mode(self) -> FrameMode:
        return self.encoding.frame_mode

    @property
    def model_id(self) -> str:
        return self.model

    async def start(self) -> None:
        """Open the HTTP connection pool and the encoder thread; fails fast when the API key variable is unset."""
        self.transport.start()
        if self._encoder is None:
            self._encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"encode-{self.name}")
            self._bodies = asyncio.Semaphore(BODIES_PER_SLOT * self.transport.concurrency)

    async def close(self) -> None:
        await self.transport.close()
        encoder, self._encoder = self._encoder, None
        if encoder is not None:
            encoder.shutdown(wait=False, cancel_futures=True)

    async def generate(self, request: Request) -> Response:
        """One streamed completion, retried on transient failures; errors come back in the Response."""
        response = await self._complete(request)
        if not response.ok:
            log.warning("%s %s: %s", self.name, request.request_id, response.error)
        return response

    async def _complete(self, request: Request) -> Response:
        """:meth:`generate` without its warning (the preflight reports its failures in one line)."""
        if not self.transport.started or self._encoder is None or self._bodies is None:
            raise RuntimeError(f"{self.name}: call start() (or use `async with`) before generate()")
        began = time.perf_counter()
        if self.guard.frame_budget(request) < 0:
            return Response(
                error=f"prompt exceeds max_context_tokens={self.guard.max_context_tokens} even without frames",
                error_kind="context", attempts=0,
            )
        async with self._bodies:  # built off the loop, before the timer starts
            cut, truncation, body, encode_s = await asyncio.get_running_loop().run_in_executor(
                self._encoder, self._encode, request)
            response = await self.transport.complete(f"{self.base_url}/chat/completions", body, self.route(cut),
                                                     cut.request_id)
        return replace(response, truncation=truncation, encode_s=encode_s, elapsed_s=time.perf_counter() - began)

    def _encode(self, request: Request) -> tuple[Request, Truncation | None, Body, float]:
        """``request`` cut to the guard's limits, what the cut dropped, its body as sent, and the seconds
        all that took (waiting for the encoder thread not included)."""
        began = time.perf_counter()
        request, truncation = self.guard.apply(request)
        return request, truncation, self.wire(request), time.perf_counter() - began

    async def _listing(self, where: str) -> list[dict[str, Any]] | None:
        """What ``GET /models`` lists (:meth:`Transport.listing`; its ids kept as :attr:`served`), or
        :class:`EndpointError` with the one line that says what to change."""
        try:
            listing = await self.transport.listing(f"{self.base_url}/models")
        except Fatal as e:
            raise EndpointError(self.advice(Response(error=str(e), error_kind=e.kind), where)) from None
        self.served = None if listing is None else [str(m["id"]) for m in listing]
        return listing

    async def model_identity(self, where: str = "backbone") -> dict[str, Any] | None:
        """What the server lists of the model (``GET /models``): its entry, less the fields that name no
        model (:data:`NOT_THE_MODEL`); the ids listed, when no entry is the model's; its name alone, when the
        server lists nothing. Not its address: the same model moved to another ``base_url`` is the same."""
        listing = await self._listing(where)
        if not listing:
            return {"id": self.model, "listed": None}
        mine = next((m for m in listing if m["id"] == self.model), None)
        if mine is None:
            return {"id": self.model, "listed": sorted(str(m["id"]) for m in listing)}
        return {k: v for k, v in sorted(mine.items()) if k not in NOT_THE_MODEL}

    async def preflight(self, where: str = "backbone") -> None:
        """Before a run: the endpoint answers, takes the key and serves the model (``GET /models``, then a
        one-token text request); raises :class:`EndpointError` with the one line that says what to change."""
        await self._listing(where)
        ping = Request((Message.text("user", "Reply with OK."),), GenerationSettings(max_tokens=1, seed=None),
                       request_id="preflight/ping")
        response = await self._complete(ping)
        if not response.ok:
            raise EndpointError(self.advice(response, where))

    async def check_request(self, request: Request, where: str = "backbone") -> None:
        """Send ``request`` (the run's largest) with ``max_tokens=1``; raises :class:`EndpointError` naming the
        engine limit it breaks (``limit_mm_per_prompt``, ``max_model_len``, ``max_num_batched_tokens``)."""
        one_token = replace(request, settings=replace(request.settings, max_tokens=1), request_id="preflight/largest")
        response = await self._complete(one_token)
        if not response.ok:
            raise EndpointError(self.advice(response, where, request))

    def advice(self, response: Response, where: str = "backbone", request: Request | None = None) -> str:
        """One line: what failed at this endpoint and the setting to change (``where``: the config key
        holding this backbone); ``request`` is the largest request, when that is what failed."""
        head = f"{where} {self.name!r} at {self.base_url}: {_reason(response.error or '')}"
        kind = response.error_kind
        if kind == "auth":
            fix = (f"check the key in ${self.api_key_env}" if self.api_key_env
                   else f"set {where}.api_key_env to the variable that holds the key")
        elif kind == "not_found":
            listed = f" (it serves {', '.join(self.served[:8])})" if self.served else ""
            fix = f"{where}.{self.setting_names.model}={self.model!r} is not a model served there{listed}: set it"
        elif kind == "connection":
            fix = f"start the server, or set {where}.base_url"
        elif request is not None:
            fix = self._request_advice(response, request, where)
        else:
            return head
        return f"{head} — {fix}"

    def _request_advice(self, response: Response, request: Request, where: str) -> str:
        """Which engine limit the run's largest request broke, from the engine's message."""
        error, frames, limit = response.error or "", len(request.frames), self.setting_names.engine
        size = f"the largest request ({frames} frames, {text_chars(request)} characters of text)"
        if response.error_kind == "context":
            return f"{size}: its text alone is over {where}.max_context_tokens: raise it and the engine's max_model_len"
        if "may be provided in one prompt" in error:
            items = media_items(self.payload(request))
            return f"{size} sends {items}: raise {limit('limit_mm_per_prompt', where)}"
        length = re.search(r"\(length (\d+)\)|at least (\d+) input tokens|requested (\d+) tokens", error)
        if length or "maximum context length" in error or "max_model_len" in error:
            tokens = next(int(g) for g in length.groups() if g) if length else None
            need = f" to at least {tokens + request.settings.max_tokens}" if tokens else ""
            return (f"{size} is longer than the engine's context: raise "
                    f"{limit('max_model_len', where)}{need} (or raise {where}.tokens_per_frame, "
                    f"now {self.guard.tokens_per_frame}, so the context guard keeps fewer frames)")
        if "encoder cache" in error or "max_num_batched_tokens" in error:
            return f"{size} does not fit one engine step: raise {limit('max_num_batched_tokens', where)}"
        if response.error_kind == "timeout":
            return (f"{size} got no answer in time: the engine may be unable to schedule it (raise "
                    f"{limit('max_num_batched_tokens', where)}) or slower than {where}.attempt_timeout_s")
        return f"{size} was refused"

    def payload(self, request: Request) -> dict[str, Any]:
        """The chat-completions JSON body for a request (:meth:`ChatBody.body` naming this endpoint's model)."""
        return self.encoding.body(self.model, request)

    def wire(self, request: Request) -> Body:
        """:meth:`payload` as the JSON bytes sent, in pieces (:meth:`ChatBody.wire`; ``bytes()`` joins them)."""
        return self.encoding.wire(self.model, request)

    def route(self, request: Request) -> dict[str, str]:
        """Headers that send ``request`` to its trajectory's engine of a data-parallel server (none for one
        engine, or for a request of no trajectory): every probe of a trajectory reaches one prefix cache."""
        if self.data_parallel_size <= 1 or request.trajectory_id is None:
            return {}
        return {"X-data-parallel-rank": str(engine_of(request.trajectory_id, self.data_parallel_size))}


def engine_of(trajectory_id: str, engines: int) -> int:
    """The engine (0 … ``engines`` − 1) a trajectory's requests go to: a stable hash of its id."""
    return int.from_bytes(hashlib.sha256(trajectory_id.encode()).digest()[:8], "big") % engines


def _reason(error: str) -> str:
    """A failure as one short line: an HTTP error's JSON body reduced to its message (also when the body
    was cut short)."""
    status = re.match(r"(.*HTTP \d+): \{.*?\"message\"\s*:\s*\"((?:[^\"\\]|\\.)*)", error, re.S)
    if status:
        error = f"{status[1]}: {status[2]}".replace('\\"', '"').replace("\\'", "'")
    return " ".join(error.split())[:200]
