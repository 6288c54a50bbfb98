"""A streaming memory system that runs as a child process, in an environment of its own, behind the
boundary (docs/boundary.md): the harness side of the protocol ``apm_child`` speaks.

:class:`ChildSystem` is an ordinary :class:`~apm.streaming.base.StreamingSystem` to the runner. Each
copy the runner takes (one per trajectory, one per restricted visible set) starts its own process on
its first ``begin``, sealed (:mod:`apm.boundary.seal`) to its environment, a scratch folder and the state
folder it exports into; frames, turns and probes reach it over its standard input, an instance view with
opaque ids, and every request it makes to the run's engines is composed, checked and sent here.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hashlib
import json
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from apm.backbones.base import FramePart, GenerationSettings, Message, Part, Request, Response, TextPart, ask
from apm.boundary import sandbox
from apm.data.frames import Frame
from apm.data.instances import Turn
from apm.data.model import Session
from apm.memory.base import Note
from apm.records.declaration import NOT_SEALED, Declaration, Deviation
from apm.streaming.base import Answer, Probe, SessionContext, StreamingSystem
from apm.video.select import CausalityError

PROTOCOL = 1
"""The protocol version the harness speaks (``apm_child.PROTOCOL`` must be the same)."""
DECLARED = ("family", "streaming", "persistent", "representation")
"""The declaration's fields the child's ``hello`` must state as the memory config does."""
LINE_LIMIT = 1 << 28
"""The longest line either side may send (a request's frames travel inside one)."""


class ChildError(RuntimeError):
    """The child refused an operation, broke the protocol or died; the message says which, in one line.
    ``answered``: the child answered the operation with an error and goes on (else it is gone or broken)."""

    def __init__(self, message: str, answered: bool = False) -> None:
        super().__init__(message)
        self.answered = answered


def _session_wire(s: Session) -> dict[str, Any]:
    return {"key": s.key, "day_id": s.day_id, "session_id": s.session_id, "index": s.index, "start": s.start,
            "end": s.end}


def _frame_wire(f: Frame) -> dict[str, Any]:
    return {"session": f.session, "offset": f.offset, "wall_clock": f.wall_clock,
            "jpeg": base64.b64encode(f.jpeg).decode("ascii")}


def _frame(data: dict[str, Any]) -> Frame:
    return Frame(str(data["session"]), float(data["offset"]), int(data["wall_clock"]),
                 base64.b64decode(data.get("jpeg") or b""))


def _turn_wire(t: Turn) -> dict[str, Any]:
    return {"kind": t.kind, "time": t.time, "text": t.text, "candidate": t.candidate_id}


def _turn(data: dict[str, Any]) -> Turn:
    return Turn(data["kind"], int(data["time"]), str(data.get("text", "")), str(data["candidate"]))


def _reply(response: Response, number: int) -> dict[str, Any]:
    """A response as the child gets it: text, timing and counts (never the engine's own fields)."""
    return {"id": number, "text": response.text, "ttft_s": response.ttft_s, "total_s": response.total_s,
            "prompt_tokens": response.prompt_tokens, "completion_tokens": response.completion_tokens,
            "error": response.error}


def _composed_wire(request: Request, frames: list[Frame], number: int) -> dict[str, Any]:
    """A composed request as the child gets it: its messages (a frame as its index among ``frames``, the
    ones the child showed) and its settings; never the request's id or trajectory."""
    index = {(f.session, f.offset): i for i, f in reversed(list(enumerate(frames)))}
    messages = [{"role": m.role, "time": m.time,
                 "parts": [{"text": p.text} if isinstance(p, TextPart)
                           else {"frame": index[(p.frame.session, p.frame.offset)], "still": p.still}
                           for p in m.parts]} for m in request.messages]
    return {"id": number, "messages": messages, "settings": dataclasses.asdict(request.settings)}


class ChildSystem(StreamingSystem):
    """A system served by ``command`` (e.g. ``[/envs/tf4/bin/python, -m, apm_child, my.py:MySystem]``),
    declared here as it declares itself (refused when the two differ)."""

    needs_writer = True  # the child may ask the run's writer (its engine calls name ``writer`` by default)

    def __init__(self, command: Sequence[str], declaration: dict[str, Any], name: str | None = None,
                 options: dict[str, Any] | None = None, read: Sequence[str] = (), env: dict[str, str] | None = None,
                 seal: str = "auto", network: bool = False, deviations: Sequence[str] = ()) -> None:
        super().__init__(name)
        if not command:
            raise ValueError("memory.command: the command that starts the system's child process is empty")
        self.command, self.options = [str(c) for c in command], dict(options or {})
        self.read, self.env, self.network = [str(p) for p in read], dict(env or {}), bool(network)
        self.mechanism = sandbox.mechanism(seal)
        declared = dict(declaration)
        marks = [declared.pop("tag", ""), "" if self.mechanism else NOT_SEALED,
                 f"deviates: {', '.join(deviations)}" if deviations else ""]
        self.declared = Declaration(**declared, tag=", ".join(m for m in marks if m),
                                    deviations=cast(tuple[Deviation, ...], tuple(deviations)))
        self.declaration = self.declared  # type: ignore[misc]  # one class, declared per memory config
        if self.mechanism is None and seal == "auto":
            print(f"apm: {self.name} runs unsealed (no Landlock on this kernel): its rows are marked "
                  f"'{NOT_SEALED}'", file=sys.stderr)
        self._unstarted()

    def _unstarted(self) -> None:
        """The copy's own state before its child starts (a copy gets it afresh: nothing is shared)."""
        self._process: asyncio.subprocess.Process | None = None
        self._scratch: Path | None = None
        self._state_dir: Path | None = None
        self._salt = ""
        self._failed: str | None = None
        """Why this copy's child failed in the current session (None: it did not)."""
        self._fed: dict[tuple[str, float], Frame] = {}
        """The current session's frames as fed to the child (the stream's own objects) or sent by it with a
        request: what a reference names."""
        self._context: SessionContext | None = None
        self._probe: Probe | None = None
        self._asked: list[tuple[Request, Response]] = []
        self._composed: list[Request] = []
        """The probe's ``compose`` requests (composed and checked, never sent): what an own answer may name."""
        self.identity: dict[str, Any] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> ChildSystem:
        """A copy as configured: no process, nothing observed (each copy starts a child of its own)."""
        if self._process is not None:
            raise TypeError(f"{self.name}: a started child system cannot be copied")
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy._unstarted()
        return copy

    async def _start(self, context: SessionContext) -> None:
        """Start the child for this copy: sealed to its environment, a scratch folder and ``state_dir``."""
        self._scratch = Path(tempfile.mkdtemp(prefix="apm-child-"))
        lib = self._scratch / "lib"
        shutil.copytree(Path(sandbox.child_package()), lib / "apm_child",
                        ignore=shutil.ignore_patterns("__pycache__"))
        self._populate(lib)
        (self._scratch / "tmp").mkdir()
        env = sandbox.child_environment(self._scratch, lib, self.env)
        argv = self.command
        if self.mechanism == "landlock":
            view = sandbox.view(self.command, env, self.read, self._scratch, context)
            argv = sandbox.sealed(view, self.network, self.command)
        self._salt = secrets.token_hex(16)
        self._process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env, cwd=self._scratch,
            limit=LINE_LIMIT)
        hello = await self._op({"op": "hello", "protocol": PROTOCOL, "options": self.options})
        self._check_hello(hello)

    def _populate(self, lib: Path) -> None:
        """Put what the child imports beside ``apm_child`` in ``lib`` (first on its ``PYTHONPATH``): nothing
        here (``apm.boundary.host.HostedSystem`` links ``apm``)."""

    def _check_hello(self, hello: Any) -> None:
        """Refuse a child whose protocol or declaration is not the config's."""
        if not isinstance(hello, dict) or hello.get("protocol") != PROTOCOL:
            raise ChildError(f"{self.name}: the child speaks protocol {hello!r}, the harness {PROTOCOL}")
        mine = {k: v for k, v in self.declared.as_record().items() if k in DECLARED}
        theirs = {k: dict(hello.get("declaration") or {}).get(k) for k in DECLARED}
        if mine != theirs or sorted(hello.get("deviations", [])) != sorted(self.declared.deviations):
            raise ChildError(f"{self.name}: the child declares {theirs} deviations {hello.get('deviations')}, "
                             f"the memory config {mine} deviations {list(self.declared.deviations)}: make them agree")
        self.identity = {"python": hello.get("python"), **dict(hello.get("identity") or {})}

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        await self._process.stdin.drain()

    async def _op(self, message: dict[str, Any]) -> Any:
        """Send one operation and serve the child's calls until its result arrives."""
        assert self._process is not None and self._process.stdout is not None
        try:
            await self._send(message)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise await self._died() from e
        while True:
            line = await self._process.stdout.readline()
            if not line:
                raise await self._died()
            reply = json.loads(line)
            if "call" in reply:
                await self._send(await self._serve_call(reply))
            elif "ok" in reply:
                return reply["ok"]
            else:
                raise ChildError(f"{self.name}: {message['op']} failed in the child: {reply.get('error', reply)}",
                                 answered=True)

    async def _died(self) -> ChildError:
        assert self._process is not None
        code = await self._process.wait()
        return ChildError(f"{self.name}: the child process exited (status {code}); its standard error says why")

    async def _serve_call(self, call: dict[str, Any]) -> dict[str, Any]:
        """Answer the child's ``ask`` (the probe's request, composed and checked here) or ``generate``."""
        try:
            if call["call"] == "ask":
                return {"reply": await self._ask(call)}
            if call["call"] == "generate":
                return {"reply": await self._generate(call)}
            if call["call"] == "compose":
                return {"reply": self._compose(call)}
            return {"error": f"unknown call {call['call']!r}"}
        except CausalityError as e:  # kept by the probe's refusals too: the instance is refused whatever the child does
            return {"error": f"causality: {e}"}
        except ChildError as e:
            return {"error": str(e)}

    async def _ask(self, call: dict[str, Any]) -> dict[str, Any]:
        probe, context = self._probe, self._context
        if probe is None or context is None:
            return {"error": "ask is for answering a probe"}
        frames = [self._shown(f) for f in call.get("frames", [])]
        notes = [Note(probe.trajectory.session(n["session"]), str(n["text"]), int(n["formed_at"]))
                 for n in call.get("notes", [])]
        request = probe.request(frames=frames, notes=notes, turns=[_turn(t) for t in call.get("turns", [])])
        response = await ask(context.backbone, request, probe.instance)
        self._asked.append((request, response))
        return _reply(response, len(self._asked) - 1)

    def _compose(self, call: dict[str, Any]) -> dict[str, Any]:
        """The probe's request around what the child shows, composed and checked as for ``ask`` but not sent
        (an own answer names it): its messages, each frame as the index of the call's frame, and settings.
        Frames come without bytes: composing, checking and the prompt digest read only where and when."""
        probe = self._probe
        if probe is None:
            return {"error": "compose is for answering a probe"}
        frames = [_frame(f) for f in call.get("frames", [])]
        notes = [Note(probe.trajectory.session(n["session"]), str(n["text"]), int(n["formed_at"]))
                 for n in call.get("notes", [])]
        request = probe.request(frames=frames, notes=notes, turns=[_turn(t) for t in call.get("turns", [])])
        self._composed.append(request)
        return _composed_wire(request, frames, len(self._composed) - 1)

    def _shown(self, data: dict[str, Any]) -> Frame:
        """A frame a request shows: its bytes as sent (held for the session), or (a reference: no ``jpeg``)
        the frame fed or sent at that offset in this session."""
        key = (str(data["session"]), float(data["offset"]))
        if "jpeg" in data:
            self._fed[key] = _frame(data)
            return self._fed[key]
        fed = self._fed.get(key)
        if fed is None:
            raise ChildError(f"{self.name}: a frame reference to {data['session']} +{data['offset']} s, "
                             "not a frame fed or sent in this session: send its bytes", answered=True)
        return fed

    async def _generate(self, call: dict[str, Any]) -> dict[str, Any]:
        context = self._context
        assert context is not None
        engine = context.writer if call.get("engine", "writer") == "writer" else context.backbone
        parts: list[Part] = [TextPart(str(p["text"])) if "text" in p else FramePart(self._shown(p["frame"]))
                             for p in call.get("parts", [])]
        system = (Message.text("system", str(call["system"])),) if call.get("system") else ()
        messages = (*system, Message("user", tuple(parts)))
        settings = (GenerationSettings(max_tokens=int(call["max_tokens"])) if call.get("max_tokens")
                    else GenerationSettings())
        response = await engine.generate(Request(messages=messages, settings=settings,
                                                 request_id=f"{context.trajectory.trajectory_id}/{context.session.key}/child"))
        return _reply(response, -1)

    async def begin(self, context: SessionContext) -> None:
        """Start the session in this copy's child, starting one first (again, after a child that failed)."""
        if self._process is not None and (self._state_dir != context.state_dir or self._failed):
            await self.close()
        self._context, self._failed = context, None
        self._fed.clear()
        if self._process is None:
            context.state_dir.mkdir(parents=True, exist_ok=True)
            self._state_dir = context.state_dir
            await self._start(context)
        await self._guarded({"op": "begin", "session": context.session.key, "seed": context.seed,
                             "sessions": [_session_wire(s) for s in context.trajectory.sessions],
                             "state_dir": os.path.abspath(context.state_dir)})

    async def _guarded(self, message: dict[str, Any]) -> Any:
        """An operation that fails the rest of the session, not the run, when the child does: after a
        :class:`ChildError` the session's updates are skipped, its answers and export fail with it."""
        if self._failed:
            return None
        try:
            return await self._op(message)
        except ChildError as e:
            self._failed = str(e)
            return None

    async def observe_frame(self, frame: Frame) -> None:
        self._fed[(frame.session, frame.offset)] = frame
        await self._guarded({"op": "frame", **_frame_wire(frame)})

    async def observe_turn(self, turn: Turn) -> None:
        await self._guarded({"op": "turn", **_turn_wire(turn)})

    async def answer(self, probe: Probe) -> Answer:
        if self._failed:
            raise ChildError(self._failed)
        inst = probe.instance
        self._probe, self._asked, self._composed = probe, [], []
        wire = {"id": hashlib.sha256(f"{self._salt}/{inst.key}".encode()).hexdigest()[:16],
                "candidate": inst.candidate_id, "task": inst.task, "family": inst.family, "session": inst.session,
                "probe_time": inst.probe_time, "window_start": inst.window_start,
                "visible_sessions": list(inst.visible_sessions), "turns": [_turn_wire(t) for t in inst.turns],
                "fields": inst.candidate.fields}
        try:
            result = await self._op({"op": "probe", "probe": wire})
        except ChildError as e:
            self._failed = None if e.answered else str(e)
            raise
        finally:
            self._probe = None
        if "reply" in result:
            number = result["reply"]
            if not isinstance(number, int) or not 0 <= number < len(self._asked):
                raise ChildError(f"{self.name}: the answer names ask reply {number!r}; "
                                 f"this probe made {len(self._asked)}")
            request, response = self._asked[number]
            return Answer(response, request, tuple(_frame(f) for f in result.get("frames", [])))
        response = Response(text=str(result.get("text") or ""), ttft_s=result.get("ttft_s"),
                            total_s=float(result.get("total_s") or 0.0), prompt_tokens=result.get("prompt_tokens"),
                            completion_tokens=result.get("completion_tokens"), error=result.get("error"))
        return Answer(response, self._composed_named(result), tuple(_frame(f) for f in result.get("frames", [])))

    def _composed_named(self, result: dict[str, Any]) -> Request | None:
        """The ``compose`` request an own answer names (``request``: its number), if it names one."""
        if "request" not in result:
            return None
        number = result["request"]
        if not isinstance(number, int) or not 0 <= number < len(self._composed):
            raise ChildError(f"{self.name}: the answer names composed request {number!r}; "
                             f"this probe composed {len(self._composed)}")
        return self._composed[number]

    async def export(self, state_dir: Path) -> dict[str, Any]:
        facts = await self._guarded({"op": "export", "state_dir": os.path.abspath(state_dir)})
        failed = {"error": f"export failed: {self._failed}"} if self._failed else {}
        return {**(facts if isinstance(facts, dict) else {}), **failed, "boundary": self.boundary_facts()}

    def boundary_facts(self) -> dict[str, Any]:
        """What the memory line says of the route: the seal it ran under and what the child reported."""
        return {"route": "child", "sealed": self.mechanism, "child": self.identity}

    async def close(self) -> None:
        """End the child (asked to close, then killed if it does not) and remove its scratch folder."""
        process, self._process = self._process, None
        if process is not None:
            if process.returncode is None and process.stdin is not None:
                try:
                    process.stdin.write(b'{"op":"close"}\n')
                    await process.stdin.drain()
                    process.stdin.close()
                    await asyncio.wait_for(process.wait(), 10)
                except (BrokenPipeError, ConnectionResetError, asyncio.TimeoutError):
                    pass
            if process.returncode is None:
                process.kill()
                await process.wait()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

