"""The shared frame cache: each session video decoded once, keyed by content, built lazily or in bulk.

An entry's key is a hash of the video file's SHA-256 and the sampling settings, so every run that
reads the same release (any path, any machine sharing the folder) reuses it. Builders of one key take
a file lock and write via temp-file + rename; an invalid entry is rebuilt, never read. Exact rules:
``docs/video.md``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import stat
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import closing, suppress
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable

import av
import PIL
from filelock import FileLock

from apm.data.frames import Preview
from apm.data.model import Release
from apm.live.progress import Unit, stage_progress
from apm.records.atomic import write_atomically
from apm.video.decode import SamplingSettings, VideoDecodeError, sample_frames
from apm.video.store import CorruptEntryError, EntryFile, write_entry

log = logging.getLogger(__name__)

CACHE_DIR_ENV = "APM_CACHE_DIR"
FORMAT_VERSION = 2
"""Bumped whenever the entry layout or the decode rules change (2: each frame's preview after its JPEG);
part of every key."""


def default_cache_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The cache folder: ``explicit`` (flag / config key), else ``$APM_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/apm/frames``."""
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "apm" / "frames"


GROUP_SHARED = stat.S_ISGID | stat.S_IRWXG
"""Bits the cache adds to every folder it creates, whatever the umask: the group may add entries
(a second user of a shared cache), and new folders inherit the folder's group (setgid)."""


def shared_folder(folder: Path, cache_dir: Path) -> Path:
    """``folder`` (``cache_dir`` or below it) made to exist; each folder from ``cache_dir`` down that
    this call creates gets :data:`GROUP_SHARED` (the folders above ``cache_dir`` follow the umask)."""
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    for made in [*reversed(folder.relative_to(cache_dir).parents), Path(folder.relative_to(cache_dir))]:
        target = cache_dir / made
        try:
            target.mkdir()
        except FileExistsError:
            continue
        target.chmod(stat.S_IMODE(target.stat().st_mode) | GROUP_SHARED)
    return folder


def shared_lock(path: Path) -> FileLock:
    """The build lock of an entry, its file group-writable (the group's next user must open it to lock)."""
    if not path.exists():
        with suppress(FileExistsError):
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            path.chmod(stat.S_IMODE(path.stat().st_mode) | stat.S_IRGRP | stat.S_IWGRP)
    return FileLock(str(path))


def file_digest(path: Path, cache_dir: Path) -> str:
    """SHA-256 of a video file, memoised under ``cache_dir/digests`` until its size, mtime or inode change."""
    real = path.resolve()
    st = real.stat()
    stamp = {"path": str(real), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}
    memo = cache_dir / "digests" / f"{hashlib.sha256(str(real).encode()).hexdigest()[:32]}.json"
    saved = _memo(memo)
    if saved is not None and {k: saved.get(k) for k in stamp} == stamp:
        return saved["sha256"]
    with open(real, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    shared_folder(memo.parent, cache_dir)
    write_atomically(memo, json.dumps({**stamp, "sha256": digest}).encode())
    return digest


def _memo(path: Path) -> dict[str, Any] | None:
    """A digest memo if it is readable and of the right shape (an object with a SHA-256 hex digest);
    anything else — absent, torn, another shape — is None, and the digest is computed again."""
    try:
        saved = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    digest = saved.get("sha256") if isinstance(saved, dict) else None
    if isinstance(digest, str) and len(digest) == 64 and all(c in "0123456789abcdef" for c in digest):
        return saved
    return None


def sample_seconds(i: int, rate: Fraction) -> tuple[float, int]:
    """``float(i / rate)`` and ``floor(i / rate)``, exactly, without building a Fraction (a 1,024-frame
    request asks for 1,024 of them): integer true division is correctly rounded, as ``float(Fraction)`` is."""
    whole = i * rate.denominator
    return whole / rate.numerator, whole // rate.numerator


class CacheEntry:
    """The cached frames of one video: sample ``i`` is video offset ``i / rate``; JPEG access is O(1)."""

    def __init__(self, video: Path, rate: Fraction, file: EntryFile) -> None:
        self.video = video
        self.rate = rate
        """Samples per second, exact."""
        self._file = file

    @property
    def path(self) -> Path:
        """The entry file on disk."""
        return self._file.path

    @property
    def key(self) -> str:
        return self._file.header["key"]

    @property
    def count(self) -> int:
        """Number of samples: ``floor(fps * offset of the last frame) + 1`` (docs/video.md)."""
        return len(self._file)

    def __len__(self) -> int:
        return self.count

    def offset(self, i: int) -> Fraction:
        """Video offset (seconds) of sample ``i``: the frame shown was recorded at or before it."""
        return i / self.rate

    def seconds(self, i: int) -> tuple[float, int]:
        """:meth:`offset` of sample ``i`` as a float and in whole seconds (:func:`sample_seconds`)."""
        return sample_seconds(i, self.rate)

    def jpeg(self, i: int) -> bytes:
        """The JPEG of sample ``i``."""
        return self.jpegs([i])[0]

    def jpegs(self, indices: Iterable[int]) -> list[bytes]:
        """The JPEGs of several samples with one file open."""
        return self._file.read(self._checked(indices))

    def jpegs_with_previews(self, indices: Iterable[int]) -> list[tuple[bytes, Preview | None]]:
        """The JPEGs of several samples, each with its preview (:class:`apm.data.frames.Preview`)."""
        read = self._file.read_with_previews(self._checked(indices))
        return [(jpeg, Preview.from_bytes(preview)) for jpeg, preview in read]

    def _checked(self, indices: Iterable[int]) -> list[int]:
        indices, count = list(indices), self.count
        bad = [i for i in indices if not 0 <= i < count]
        if bad:
            raise IndexError(f"{self.video}: samples {bad[:5]} outside 0..{self.count - 1}")
        return indices


class FrameCache:
    """Frame cache at ``cache_dir`` for one sampling setting; ``entry(video)`` builds what is missing."""

    def __init__(
        self,
        cache_dir: str | os.PathLike[str] | None = None,
        fps: float = 1.0,
        max_side: int = 448,
        jpeg_quality: int = 85,
    ) -> None:
        self.cache_dir = default_cache_dir(cache_dir)
        self.settings = SamplingSettings(fps, max_side, jpeg_quality)
        self._open: dict[Path, CacheEntry] = {}

    def __repr__(self) -> str:
        return f"FrameCache({str(self.cache_dir)!r}, {self.settings})"

    def key(self, video: Path) -> str:
        """Content key of ``video``'s entry: hash of format version, file SHA-256 and sampling settings."""
        spec = {
            "format": FORMAT_VERSION,
            "video_sha256": file_digest(video, self.cache_dir),
            **self.settings.describe(),
        }
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:40]

    def entry_path(self, key: str) -> Path:
        return self.cache_dir / key[:2] / f"{key}.apmf"

    def entry(self, video: str | os.PathLike[str]) -> CacheEntry:
        """The valid entry of ``video``, building it (once, under a lock) if missing or invalid."""
        video = Path(video).resolve()
        if not video.is_file():
            raise VideoDecodeError(video, 0.0, "no such file")
        if video not in self._open:
            self._open[video] = self._load_or_build(video)
        return self._open[video]

    def _load_or_build(self, video: Path) -> CacheEntry:
        """Open the entry; if missing or invalid, re-check under the key's lock and build it."""
        key = self.key(video)
        path = self.entry_path(key)
        try:
            return CacheEntry(video, self.settings.rate, EntryFile.open(path, key))
        except (FileNotFoundError, CorruptEntryError):
            pass
        shared_folder(path.parent, self.cache_dir)
        with shared_lock(path.with_name(path.name + ".lock")):
            try:
                found = EntryFile.open(path, key)
            except FileNotFoundError:
                found = self._build(video, path, key)
            except CorruptEntryError as e:
                log.warning("rebuilding %s", e)
                found = self._build(video, path, key)
        return CacheEntry(video, self.settings.rate, found)

    def _build(self, video: Path, path: Path, key: str) -> EntryFile:
        """Decode ``video`` into a new entry at ``path`` (caller holds the lock)."""
        for stale in path.parent.glob(f".{path.name}.*.tmp"):
            stale.unlink(missing_ok=True)  # left by a builder that died: nobody else can hold this key's lock
        header = {
            "key": key,
            "format": FORMAT_VERSION,
            "video": str(video),
            **self.settings.describe(),
            "built_with": {"av": av.__version__, "ffmpeg": str(av.ffmpeg_version_info), "pillow": PIL.__version__},
        }
        write_entry(path, header, sample_frames(video, self.settings))
        return EntryFile.open(path, key)


@dataclass(frozen=True)
class BuildReport:
    """What ``build_release_cache`` did: videos whose entry is ready, and those that failed (with why)."""

    ready: tuple[Path, ...]
    failed: tuple[VideoDecodeError, ...]


WORKER_START = "forkserver"
"""How the build's worker processes start: from a clean server process, never by forking the caller,
whose other threads (a progress monitor, an HTTP client, a test's) may hold a lock at the fork that the
child then waits on forever (seen: a suite hung in test_cache with both workers idle)."""


def _build_one(cache_dir: Path, settings: SamplingSettings, video: Path) -> int:
    """Worker: make ``video``'s entry exist; returns its sample count."""
    cache = FrameCache(cache_dir, settings.fps, settings.max_side, settings.jpeg_quality)
    return cache.entry(video).count


def build_release_cache(
    release: Release,
    cache_dir: str | os.PathLike[str] | None = None,
    fps: float = 1.0,
    max_side: int = 448,
    jpeg_quality: int = 85,
    workers: int = 2,
    progress: bool = True,
) -> BuildReport:
    """Build the entry of every session video of ``release`` with ``workers`` processes, ``progress`` on
    stderr (:func:`apm.live.progress.stage_progress`).

    Existing valid entries are reused. A video that cannot be decoded does not stop the others; it is
    listed in ``BuildReport.failed`` (the CLI should print those and exit non-zero).
    """
    cache = FrameCache(cache_dir, fps, max_side, jpeg_quality)
    videos = sorted({s.video.resolve() for t in release.trajectories for s in t.sessions})
    ready: list[Path] = []
    failed: list[VideoDecodeError] = []
    with (
        ProcessPoolExecutor(max(1, workers), mp_context=multiprocessing.get_context(WORKER_START)) as pool,
        closing(stage_progress(len(videos), "apm-data cache", Unit("videos"), lambda: len(failed), progress)) as bar,
    ):
        futures = {pool.submit(_build_one, cache.cache_dir, cache.settings, v): v for v in videos}
        for fut in as_completed(futures):
            try:
                fut.result()
                ready.append(futures[fut])
            except VideoDecodeError as e:
                failed.append(e)
            bar.update(1)
    return BuildReport(tuple(sorted(ready)), tuple(sorted(failed, key=lambda e: str(e.path))))
