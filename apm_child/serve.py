"""The child's loop: read one operation per line from the harness, run it on the :class:`System`, write
one result line (docs/boundary.md, "The wire"). Calls the system makes to the harness (``ask``,
``generate``) go out on the same line stream while an operation runs.

The protocol owns the real standard output: anything the system (or a library it loads) prints goes
to standard error, so it can never corrupt the stream.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path
from typing import IO, Any, Callable, Dict, Optional, Tuple

from apm_child.system import DEVIATIONS, PROTOCOL, Frame, Harness, Probe, Session, System, Turn


class Wire:
    """One JSON object per line each way: ``send`` writes one, ``receive`` reads the next."""

    def __init__(self, inbound: IO[bytes], outbound: IO[bytes]) -> None:
        self.inbound, self.outbound = inbound, outbound

    def send(self, message: Dict[str, Any]) -> None:
        self.outbound.write(json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n")
        self.outbound.flush()

    def receive(self) -> Optional[Dict[str, Any]]:
        line = self.inbound.readline()
        return json.loads(line) if line else None


def load_system(spec: str) -> Callable[..., System]:
    """The class named by ``path/to/file.py:Class`` or ``package.module:Class``."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise SystemExit("apm_child: expected FILE.py:Class or module:Class, got %r" % spec)
    if where.endswith(".py"):
        path = Path(where).resolve()
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        if module_spec is None or module_spec.loader is None:
            raise SystemExit("apm_child: cannot load %s" % path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[path.stem] = module
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


class Child:
    """Runs the operations of one harness on one system object."""

    def __init__(self, factory: Callable[..., System], wire: Wire) -> None:
        self.factory, self.wire = factory, wire
        self.system: Optional[System] = None
        self.in_probe = False
        self.fed: Dict[Tuple[str, float], bytes] = {}
        """The current session's frames as fed (the harness holds them too: they go back by reference)."""

    def call(self, message: Dict[str, Any]) -> Dict[str, Any]:
        """Send a call to the harness and wait for its reply (``{"reply": …}``)."""
        if message["call"] in ("ask", "compose") and not self.in_probe:
            raise RuntimeError("harness.%s is for answering a probe: call it from System.answer" % message["call"])
        self.wire.send(message)
        answer = self.wire.receive()
        if answer is None:
            raise SystemExit(0)  # the harness is gone
        if "reply" not in answer:
            raise RuntimeError("the harness refused the call: %s" % answer.get("error", answer))
        return answer["reply"]

    def run(self) -> None:
        while True:
            message = self.wire.receive()
            if message is None or message.get("op") == "close":
                if message is not None:
                    self.wire.send({"ok": None})
                return
            try:
                result = self.operate(message)
            except Exception as e:  # noqa: BLE001 — reported to the harness, which records it
                traceback.print_exc(file=sys.stderr)
                self.wire.send({"error": "%s: %s" % (type(e).__name__, e)})
            else:
                self.wire.send({"ok": result})

    def operate(self, message: Dict[str, Any]) -> Any:
        op = message["op"]
        harness = Harness(self.call, self.fed)
        if op == "hello":
            return self.hello(message)
        system = self.system
        if system is None:
            raise RuntimeError("no hello before %r" % op)
        if op == "begin":
            sessions = tuple(Session.from_wire(s) for s in message["sessions"])
            current = next(s for s in sessions if s.key == message["session"])
            self.fed.clear()
            system.begin(current, sessions, message["state_dir"], int(message["seed"]), harness)
            return None
        if op == "frame":
            frame = Frame.from_wire(message)
            self.fed[(frame.session, frame.offset)] = frame.jpeg
            system.observe_frame(frame)
            return None
        if op == "turn":
            system.observe_turn(Turn.from_wire(message))
            return None
        if op == "probe":
            self.in_probe = True
            try:
                return system.answer(Probe.from_wire(message["probe"]), harness).to_wire()
            finally:
                self.in_probe = False
        if op == "export":
            return system.export(message["state_dir"]) or {}
        raise RuntimeError("unknown operation %r" % op)

    def hello(self, message: Dict[str, Any]) -> Dict[str, Any]:
        if message.get("protocol") != PROTOCOL:
            raise RuntimeError("the harness speaks protocol %r, this apm_child %d"
                               % (message.get("protocol"), PROTOCOL))
        self.system = system = self.factory(**message.get("options", {}))
        unknown = sorted(set(system.deviations) - set(DEVIATIONS))
        if unknown:
            raise RuntimeError("unknown deviations %s (known: %s)" % (unknown, ", ".join(DEVIATIONS)))
        return {"protocol": PROTOCOL, "name": system.name, "declaration": dict(system.declaration),
                "deviations": list(system.deviations), "identity": system.identity(),
                "python": "%d.%d.%d" % sys.version_info[:3]}


def protocol_streams() -> Tuple[IO[bytes], IO[bytes]]:
    """The harness's streams, with file descriptor 1 pointed at standard error from now on, so a print
    anywhere in the process (Python or C) lands in the log instead of the protocol."""
    outbound = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return sys.stdin.buffer, outbound


def main(argv: Optional[list] = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m apm_child FILE.py:Class | module:Class")
    factory = load_system(args[0])
    Child(factory, Wire(*protocol_streams())).run()
