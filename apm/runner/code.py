"""The code that produces a run's answers, named by its content (docs/records.md, "Code identity").

``apm`` itself is named by its version and a digest of its answer-path source files (every file of
the subpackages below, whatever git says), so an editable checkout with uncommitted edits, a commit
and a wheel of the same sources are named alike and any edit is a new name. Each module outside
those that a ``_target_`` of the memory, backbone or writer names (a plug-in protocol, a test's
backbone), and every module those import that is neither ``apm``'s, the standard library's nor an
installed package's, is named by a digest of its file; installed packages they import, and the
engine stack, by their versions. Records and memory lines carry the short identity (``run.code``);
``config.json`` keeps the parts, so a refusal can say what changed.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.util
import site
import sys
import sysconfig
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from apm.records.identity import short_digest

if TYPE_CHECKING:
    from omegaconf import DictConfig

ANSWER_PATH = ("backbones", "data", "memory", "prompts", "records", "runner", "streaming", "video")
"""The subpackages of ``apm`` on the way from a release to a record; judging, reducing, publishing,
viewing, scheduling and release synthesis come after a record or before the release fingerprint."""
TARGET_KEYS = ("memory", "backbone", "writer")
"""Config keys whose ``_target_`` classes produce the answers and memory (the judge's do not)."""
ENGINE_STACK = ("torch", "transformers", "vllm", "av")
"""Distributions every run's ``packages`` names by version (``None``: not installed): the engines and the decoder."""

_PACKAGE = Path(__file__).resolve().parents[1]


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _source_files() -> list[Path]:
    """Every file of the answer-path subpackages, compiled caches left out, in a fixed order."""
    return sorted(p for sub in ANSWER_PATH for p in (_PACKAGE / sub).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def _version(distribution: str) -> str | None:
    """An installed distribution's version (None: not installed)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def apm_code() -> dict[str, Any]:
    """``apm``'s version and the digest of its answer-path sources (relative path and bytes of each)."""
    digest = hashlib.sha256()
    for path in _source_files():
        digest.update(path.relative_to(_PACKAGE).as_posix().encode() + b"\0" + _file_digest(path).encode())
    return {"version": _version("apm"), "source_sha256": digest.hexdigest()}


def _targets(node: Any) -> list[str]:
    """Every ``_target_`` in a plain config node, nested ones included."""
    if isinstance(node, dict):
        own = [node["_target_"]] if isinstance(node.get("_target_"), str) else []
        return own + [t for value in node.values() for t in _targets(value)]
    if isinstance(node, list):
        return [t for value in node for t in _targets(value)]
    return []


def target_module(path: str) -> Any:
    """The module a dotted ``_target_`` lives in: the longest prefix that imports."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:cut])
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is None or not f"{name}.".startswith(f"{e.name}."):
                raise  # the module exists but needs one that is missing: say which
    raise ImportError(f"no module of {path!r} can be imported")


def _covered(path: Path) -> bool:
    """Whether ``apm_code``'s digest already covers this file."""
    return any(path.is_relative_to(_PACKAGE / sub) for sub in ANSWER_PATH)


def _imports(name: str, file: Path) -> set[str]:
    """The absolute module names a module's source imports (``from x import y`` also as ``x.y``, in case
    ``y`` is a submodule); imports made at run time by name are not seen."""
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(file.read_bytes(), str(file))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            try:
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            except (ImportError, ValueError):
                continue
            found |= {base} | {f"{base}.{alias.name}" for alias in node.names if alias.name != "*"}
    return found


def _file_of(name: str) -> Path | None:
    """Where the module ``name`` would be loaded from; None for a built-in, a namespace or no such module."""
    if name.partition(".")[0] in sys.stdlib_module_names:
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin).resolve() if spec and spec.has_location and spec.origin else None


@functools.cache
def _site_dirs() -> tuple[Path, ...]:
    """Where installed packages live (their modules are named by version, not by file)."""
    dirs = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")} | set(site.getsitepackages())
    return tuple(Path(d).resolve() for d in dirs | {site.getusersitepackages()})


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    return metadata.packages_distributions()


def module_digests(cfg: DictConfig) -> tuple[dict[str, str], dict[str, str | None]]:
    """``{module: sha256 of its file}`` for each module a ``_target_`` of the run's config names outside
    ``apm``'s answer path, and, followed from those, each module imported that is not ``apm``'s, the
    standard library's or an installed package's; and ``{distribution: version}`` of the installed packages
    they import (read now, so an edit between two runs of one process counts)."""
    from omegaconf import DictConfig, OmegaConf  # here: ``--version`` (this module's version_line) needs neither

    nodes = [OmegaConf.to_container(node, resolve=True) if isinstance(node := cfg.get(key), DictConfig) else node
             for key in TARGET_KEYS]
    found: dict[str, str] = {}
    packages: dict[str, str | None] = {}
    todo: list[tuple[str, Path]] = []
    for target in sorted({t for node in nodes for t in _targets(node)}):
        module = target_module(target)
        file = getattr(module, "__file__", None)
        if file and not _covered(Path(file).resolve()):
            todo.append((module.__name__, Path(file).resolve()))
    while todo:
        name, file = todo.pop()
        if name in found:
            continue
        found[name] = _file_digest(file)
        if file.suffix != ".py":
            continue
        for imported in sorted(_imports(name, file) - set(found)):
            where = _file_of(imported)
            if where is None or where.is_relative_to(_PACKAGE):
                continue
            if any(where.is_relative_to(d) for d in _site_dirs()):
                packages |= {d: _version(d) for d in _distributions().get(imported.partition(".")[0], ())}
            else:
                todo.append((imported, where))
    return dict(sorted(found.items())), packages


def code_parts(cfg: DictConfig) -> dict[str, Any]:
    """What ``config.json`` keeps under ``code``: ``apm`` (version, source digest), ``modules`` and
    ``packages`` (the engine stack's and the plug-ins' installed imports' versions)."""
    modules, packages = module_digests(cfg)
    stack = {name: _version(name) for name in ENGINE_STACK}
    return {"apm": apm_code(), "modules": modules, "packages": dict(sorted((stack | packages).items()))}


def code_identity(parts: dict[str, Any]) -> str:
    """The short identity of :func:`code_parts` (12 hex characters), carried by every line as ``run.code``."""
    return short_digest(parts)


def what_changed(before: dict[str, Any] | None, now: dict[str, Any]) -> str:
    """The parts of the code that differ, in words: ``apm source``, ``apm 0.3 → 0.4``, ``module x``,
    ``package torch 2.5 → 2.6``."""
    if not isinstance(before, dict):
        return "its config.json names no code"
    said = []
    old_apm, new_apm = before.get("apm") or {}, now["apm"]
    if old_apm.get("version") != new_apm["version"]:
        said.append(f"apm {old_apm.get('version')} → {new_apm['version']}")
    if old_apm.get("source_sha256") != new_apm["source_sha256"]:
        said.append("apm source")
    old_modules, new_modules = before.get("modules") or {}, now["modules"]
    said += [f"module {m}" for m in sorted(set(old_modules) | set(new_modules))
             if old_modules.get(m) != new_modules.get(m)]
    old_packages, new_packages = before.get("packages") or {}, now["packages"]
    said += [f"package {p} {old_packages.get(p)} → {new_packages.get(p)}"
             for p in sorted(set(old_packages) | set(new_packages)) if old_packages.get(p) != new_packages.get(p)]
    return ", ".join(f"{s} changed" for s in said) or "the records name other code than config.json"


def version_line(prog: str) -> str:
    """What every command's ``--version`` prints: apm's version and the identity of its answer-path code
    (the ``run.code`` of a run whose classes are all apm's own), ``apm-run (apm 0.1.0, code 3f2a…)``."""
    parts = {"apm": apm_code(), "modules": {}}
    return f"{prog} (apm {parts['apm']['version']}, code {code_identity(parts)})"
