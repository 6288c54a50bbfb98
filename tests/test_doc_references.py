"""Every code reference in ``docs/*.md`` and ``README.md`` resolves against the code: repository paths
(``apm/x/y.py``, ``conf/…``, ``tests/…``), dotted ``apm.x.y[.Name]``, code-looking names (``FrameCache``,
``FrameCache.entry``, ``load_release(…)``), Hydra config choices (``memory=raw_video``,
``+backbone@writer=perceiver``) and command-line flags (``apm-reduce --judge``, ``--allow-unjudged``).
A reference is code in backticks; one with a placeholder (``<…>``, ``…``, ``{…}``) is a pattern, not a
name, and is not resolved. Each kind of stale reference is fed to the checker and must be reported."""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hydra._internal.utils import get_args_parser  # Hydra's own command line: the flags apm-run takes

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
CODE_FOLDERS = ("apm", "examples", "bench")
"""Where the names the docs mention are defined."""
PATH_ROOTS = ("apm", "conf", "tests", "bench", "examples", "launchers", "docs", "notebooks", ".ci")
PLACEHOLDER = re.compile(r"[<>…{}]|\bN\b|\.\.\.|\bDIR\b|\bKEY\b")
EXTERNAL = {
    "DynamicCache": "transformers: the KV cache the HF streaming system crops",
    "RequestOutput": "vLLM: the offline engine's result",
    "JobReturn": "Hydra: a launcher's job result",
    "VmHWM": "Linux /proc/<pid>/status: peak resident memory",
    "KillWait": "SLURM: the seconds between scancel's SIGTERM and SIGKILL",
    "init_cache": "an official streaming implementation's entry point (docs/streaming-systems.md)",
    "encode_video_chunk": "an official streaming implementation's entry point (docs/streaming-systems.md)",
    "limit_denominator": "fractions.Fraction",
    # the official implementations of the paper's eight systems (docs/streaming-systems.md, "The paper's
    # eight systems"): names read in their repositories, at the commits that table names
    "Abstract_Hermes": "HERMES: the base class its inference file imports and does not ship",
    "ContextManager": "ReKV: its offloaded KV cache (model/attention/kv_cache_manager.py)",
    "FlashVStreamQwen2VLModel": "Flash-VStream-Qwen: its real-time model",
    "FluxMem": "FluxMem: its memory (models/qwen2-5-vl/src/qwen2_5_vl_fluxmem/fluxmem.py)",
    "ToMe_FSTW_PEMF": "StreamForest: its memory projector",
    "MemoryManager": "StreamForest: its event-forest memory, built per forward",
    "OasisModel": "OASIS: its stream/query model (src/oasis/model.py)",
    "FramePacket": "OASIS: one frame of its stream",
    "EventForest": "OASIS: its event memory",
    "ShortMemory": "OASIS: its recent-frame buffers",
    "Qwen2_5_VL_Stream_Think": "VST: its lmms-eval model (the stream-think loop)",
}
"""Names from other projects that the docs mention, with where they are from."""
FORMULAS = ("math", "hashlib")
"""Modules whose functions the docs' formulas use bare (``ceil(…)``, ``sha256(…)``)."""
ALIASES = {"pd": "pandas", "np": "numpy"}
CONFIG_ROOTS = ("conf", "examples/conf")
"""Where a ``group=choice`` is looked up (the examples' configs join through ``hydra.searchpath``)."""


@dataclass
class Code:
    """What the code defines: every module's top-level names, every class's members and bases, every
    name defined anywhere (functions, methods, classes, imports, attributes), its string literals and
    each command's flags."""

    modules: dict[str, set[str]] = field(default_factory=dict)
    classes: dict[str, set[str]] = field(default_factory=dict)
    bases: dict[str, set[str]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    attributes: set[str] = field(default_factory=set)
    """Every attribute the code reads or writes (``x.reformat(…)``: methods of other packages' objects)."""
    strings: set[str] = field(default_factory=set)
    """Every ``--flag`` written in a string of the code, its configs or its scripts."""
    literals: set[str] = field(default_factory=set)
    """Every string the code writes (``"enable-prefix-caching"``, a folder name made at run time)."""
    flags: dict[str, set[str]] = field(default_factory=dict)
    """Each ``apm-<command>``'s flags (``add_argument("--x")`` in ``apm/cli/<command>.py``)."""


EVERY_COMMANDS_FLAGS = {"--debug", "--verbose", "--help", "--version"}
"""What every console script takes (``apm.errors``: the guard, ``OneLineParser``; argparse's ``--help``)."""


def read_code(root: Path) -> Code:
    """Index the code under ``root``'s code folders (and the flags of ``root/apm/cli``)."""
    code = Code()
    for folder in CODE_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            code.modules[name] = _top_level(tree)
            _index(tree, code)
    for path in sorted((root / "apm" / "cli").glob("*.py")):
        flags = {a.value for call in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                 and call.func.attr == "add_argument"
                 for a in call.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
        command = f"apm-{path.stem.replace('_', '-')}"  # apm-check-system: check_system.py
        code.flags[command] = flags | EVERY_COMMANDS_FLAGS
    if "apm-run" in code.flags:  # a Hydra app: Hydra's own flags too (--hydra-help, -sc …)
        code.flags["apm-run"] |= {o for a in get_args_parser()._actions for o in a.option_strings if o.startswith("--")}
    for path in sorted((root / "apm").rglob("*.js")):
        code.names |= set(re.findall(r"[A-Za-z_]\w*", path.read_text(encoding="utf-8")))
    for folder in ("conf", "launchers", ".ci"):
        for path in (root / folder).rglob("*"):
            if path.is_file() and path.suffix in (".yaml", ".sh", ".md", ""):
                text = path.read_text(encoding="utf-8", errors="replace")
                code.strings |= set(re.findall(r"--[a-z][\w-]*", text))
                code.literals |= set(re.findall(r"[\w.-]+", text)) if path.suffix == ".sh" else set()
    return code


def _top_level(tree: ast.Module | ast.If) -> set[str]:
    """The names a module binds at its top level (definitions, assignments, imports), those it imports for
    type checkers too (``if TYPE_CHECKING:``: the names ``apm/__init__.py`` exports lazily)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            names |= _top_level(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        else:
            names |= _assigned(node)
    return names


def _assigned(node: ast.AST) -> set[str]:
    """The plain names an assignment statement binds."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
        node, (ast.AnnAssign, ast.AugAssign)) else []
    return {t.id for t in targets if isinstance(t, ast.Name)}


def _index(tree: ast.Module, code: Code) -> None:
    """Add ``tree``'s classes (with their members), definitions and string literals to ``code``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            members = set()
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    members.add(item.name)
                members |= _assigned(item)
            members |= {t.attr for t in ast.walk(node) if isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name) and t.value.id == "self" and isinstance(t.ctx, ast.Store)}
            code.classes.setdefault(node.name, set()).update(members)
            code.bases.setdefault(node.name, set()).update(b.id for b in node.bases if isinstance(b, ast.Name))
            code.names.add(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            code.names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            code.names |= {(a.asname or a.name).split(".")[-1] for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            code.strings |= set(re.findall(r"--[a-z][\w-]*", node.value))
            code.literals.add(node.value)
        code.names |= _assigned(node)
        if isinstance(node, ast.Attribute):
            (code.names if isinstance(node.ctx, ast.Store) else code.attributes).add(node.attr)


def member(code: Code, cls: str, name: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether class ``cls`` (or a base of it that the code defines) has ``name``."""
    return name in code.classes.get(cls, set()) or any(
        member(code, base, name, seen | {cls}) for base in code.bases.get(cls, set()) - seen - {cls})


@dataclass(frozen=True)
class Reference:
    """One code reference: where it is written and what it says."""

    where: str
    text: str


def references(doc: Path, root: Path = ROOT) -> Iterator[Reference]:
    """Every inline code span of ``doc`` (fenced blocks left out), with ``file:line``."""
    fenced = False
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            for span in re.findall(r"`([^`]+)`", line):
                yield Reference(f"{doc.relative_to(root)}:{number}", span.strip())


def problems(ref: Reference, code: Code, root: Path = ROOT) -> list[str]:
    """What in ``ref`` does not resolve (empty when all of it does)."""
    text = ref.text
    found = []
    for token in text.split():
        found += _path_problems(token, code, root) + _choice_problems(token, root)
        if re.fullmatch(r"apm(\.\w+)+", token) and token != text.split("(")[0].strip():
            found += _dotted_problems(token.split("."), code)  # inside a command: python -m apm.cli.run
    found += _flag_problems(text, code)
    if not PLACEHOLDER.search(text.split("(")[0]):
        found += _name_problems(text, code)
    return [f"{ref.where}: `{text}`: {p}" for p in found]


def _path_problems(text: str, code: Code, root: Path) -> list[str]:
    """A repository path (a glob, a config named without ``.yaml``, a test as ``file::name``, a folder the
    code or a script makes at run time) that is not there."""
    if not re.fullmatch(r"(%s)/\S*" % "|".join(map(re.escape, PATH_ROOTS)), text) or PLACEHOLDER.search(text):
        return []
    path, _, name = text.rstrip(".,;:").partition("::")
    made = Path(path.rstrip("/"))
    if not (list(root.glob(str(made))) or (root / f"{path}.yaml").is_file()
            or (root / made.parent).is_dir() and made.name in code.literals):
        return [f"no file or folder {path}"]
    if name and name not in _top_level(ast.parse((root / path).read_text(encoding="utf-8"))):
        return [f"{path} defines no {name}"]
    return []


def _choice_problems(token: str, root: Path) -> list[str]:
    """A Hydra config choice (``memory=a,b``, ``+backbone@writer=x``, ``hydra/launcher=slurm``) of a group
    ``conf/`` has, naming a config no config root holds."""
    choice = re.fullmatch(r"\+?([\w/]+)(?:@\w+)?=([\w,]+)", token)
    if not choice or not (root / "conf" / choice[1]).is_dir():
        return []
    return [f"no config {choice[1]}={value} (conf/{choice[1]}/{value}.yaml)" for value in choice[2].split(",")
            if not any((root / where / choice[1] / f"{value}.yaml").is_file() for where in CONFIG_ROOTS)]


def _flag_problems(text: str, code: Code) -> list[str]:
    """After ``apm-<command>``: flags that command does not define. Alone: flags that no ``apm-*``
    command defines, no code or config passes on, and that name no option of the code (an engine's
    ``data_parallel_size`` is vLLM's ``--data-parallel-size``, ``--no-…`` when false)."""
    command = re.match(r"(apm-[a-z]+(?:-[a-z]+)*)\b", text)
    flags = re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text)
    if command and command[1] in code.flags:
        return [f"{command[1]} has no flag {f}" for f in flags if f not in code.flags[command[1]]]
    if command:
        return [f"no command {command[1]}"]
    known = set().union(*code.flags.values()) | code.strings
    options = {n.replace("_", "-") for n in code.names}
    return [f"no command defines or passes {f}" for f in flags
            if f not in known and not {f[2:], f.removeprefix("--no-")} & (options | code.literals)]


def _name_problems(text: str, code: Code) -> list[str]:
    """A dotted ``apm.…`` name, a CamelCase name (with its member), or a call ``name(…)`` /
    ``x.name(…)`` that the code does not define."""
    name = text.split("(")[0].strip()
    called = "(" in text
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", name):
        return []
    parts = name.split(".")
    if parts[0] == "apm":
        return _dotted_problems(parts, code)
    if parts[0] in EXTERNAL or parts[-1] in EXTERNAL or parts[0] in dir(builtins):
        return []
    if re.fullmatch(r"_?[A-Z][a-z0-9]+[A-Z]\w*", parts[0]) or (
            re.fullmatch(r"[A-Z][a-z]\w*[a-z]", parts[0]) and (len(parts) > 1 or called)):
        if parts[0] not in code.names:
            return [f"no class or name {parts[0]}"]
        if len(parts) > 1 and parts[0] in code.classes and not member(code, parts[0], parts[1]):
            return [f"{parts[0]} has no member {parts[1]}"]
        return []
    if not called or len(parts[-1]) <= 2:
        return []  # a field or config key (checked elsewhere), or a formula's symbol (S(k), fn)
    module = ALIASES.get(parts[0], parts[0])
    if len(parts) > 1 and importlib.util.find_spec(module):
        return _external_problems(module, parts[1:])
    if len(parts) == 1 and any(hasattr(importlib.import_module(m), parts[0]) for m in FORMULAS):
        return []
    return [] if parts[-1] in code.names | code.attributes else [f"nothing defines {parts[-1]}"]


def _external_problems(module: str, attributes: list[str]) -> list[str]:
    """Another package's ``module.a.b``: it must be there (``time.time_ns``, ``pandas.read_json``)."""
    obj: object = importlib.import_module(module)
    for attribute in attributes:
        if not hasattr(obj, attribute):
            return [f"{module} has no {'.'.join(attributes)}"]
        obj = getattr(obj, attribute)
    return []


def _dotted_problems(parts: list[str], code: Code) -> list[str]:
    """An ``apm.x.y[.Name[.member]]`` name: the longest module prefix, then its top-level name, then
    that class's member."""
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in code.modules:
            rest = parts[cut:]
            if not rest:
                return []
            if rest[0] not in code.modules[module]:
                return [f"{module} defines no {rest[0]}"]
            if len(rest) > 1 and rest[0] in code.classes and not member(code, rest[0], rest[1]):
                return [f"{rest[0]} has no member {rest[1]}"]
            return []
    return [f"no module {'.'.join(parts[:2])}"]


@pytest.fixture(scope="module")
def code() -> Code:
    return read_code(ROOT)


def test_every_code_reference_in_the_docs_resolves(code: Code) -> None:
    wrong = [p for doc in DOCS for ref in references(doc) for p in problems(ref, code)]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(("text", "expected"), [
    ("apm/records/nothing.py", "no file or folder apm/records/nothing.py"),
    ("conf/memory/nothing", "no file or folder conf/memory/nothing"),
    ("apm.records.nothing", "apm.records defines no nothing"),
    ("apm.nothing.at_all", "apm defines no nothing"),
    ("tests/test_architecture.py::test_no_such_test", "tests/test_architecture.py defines no test_no_such_test"),
    ("time.no_such_clock()", "time has no no_such_clock"),
    ("apm.records.atomic.no_such_function", "apm.records.atomic defines no no_such_function"),
    ("apm.backbones.base.Response.no_such_field", "Response has no member no_such_field"),
    ("FrameCache.no_such_method", "FrameCache has no member no_such_method"),
    ("NoSuchThing", "no class or name NoSuchThing"),
    ("no_such_function(a, b)", "nothing defines no_such_function"),
    ("memory=no_such_protocol", "no config memory=no_such_protocol"),
    ("apm-run memory=none,no_such_protocol", "no config memory=no_such_protocol"),
    ("+backbone@writer=no_such_backbone", "no config backbone=no_such_backbone"),
    ("apm-reduce --no-such-flag", "apm-reduce has no flag --no-such-flag"),
    ("--no-such-flag", "no command defines or passes --no-such-flag"),
    ("apm-frobnicate RUN_DIR", "no command apm-frobnicate"),
])
def test_each_stale_reference_is_reported(code: Code, text: str, expected: str) -> None:
    found = problems(Reference("doc.md:1", text), code)
    assert any(expected in p for p in found), found


@pytest.mark.parametrize("text", [
    "apm/records/atomic.py", "conf/memory/raw_video", "apm/cli/", "apm/prompts/templates/*.txt",
    "apm.records.atomic.write_atomically", "apm.reduce.score_table", "apm.backbones.base.Response.cached_tokens",
    "FrameCache.entry", "load_release(root, check_videos=False)", "memory=none,raw_video",
    "+backbone@writer=perceiver", "apm-reduce --judge", "--allow-unjudged", "numpy.savez", "apm/cli/<command>.py",
    "DynamicCache", "pd.read_json(lines=True)", "ceil(N / shard.count)", "backbone=my_backbone",
    "tests/test_architecture.py::test_the_code_draws_exactly_the_picture", "--data-parallel-size N",
    "--no-enable-prefix-caching",
])
def test_true_references_resolve(code: Code, text: str) -> None:
    assert problems(Reference("doc.md:1", text), code) == []
