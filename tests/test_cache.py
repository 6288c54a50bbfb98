"""Frame cache: slot rule on pixels, content keys, reuse, corruption → rebuild, concurrent builders."""

from __future__ import annotations

import io
import json
import logging
import math
import multiprocessing as mp
import multiprocessing.synchronize
import os
import shutil
import tempfile
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image
from support.video import cfr, make_video, read_code

from apm.data.frames import Frame
from apm.data.model import Release, Session, Trajectory
from apm.video import cache as cache_mod
from apm.video.cache import CACHE_DIR_ENV, FrameCache, build_release_cache, default_cache_dir, sample_seconds
from apm.video.store import CorruptEntryError, EntryFile, write_entry


def pixels(jpeg: bytes) -> np.ndarray:
    return Frame("DAY1/S001", 0.0, 0, jpeg).pixels()


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """10 fps, last frame at 12.3 s, so 13 slots (0..12)."""
    return make_video(tmp_path_factory.mktemp("v") / "clip.mp4", cfr(12.3))


def test_slot_k_shows_the_frame_at_k_seconds(clip: Path, tmp_path: Path) -> None:
    entry = FrameCache(tmp_path).entry(clip)
    assert entry.count == len(entry) == 13
    assert [read_code(pixels(j)) for j in entry.jpegs(range(entry.count))] == [100 * k for k in range(13)]


def test_fps_and_max_side_are_settings(clip: Path, tmp_path: Path) -> None:
    entry = FrameCache(tmp_path, fps=2.0, max_side=48).entry(clip)
    assert entry.count == 25  # floor(2 * 12.3) + 1
    assert entry.offset(3) == 1.5
    assert read_code(pixels(entry.jpeg(3))) == 150
    assert pixels(entry.jpeg(0)).shape == (32, 48, 3)
    assert pixels(FrameCache(tmp_path, max_side=448).entry(clip).jpeg(0)).shape == (64, 96, 3)  # never enlarged


def test_each_jpeg_is_pyavs_own_rgb_image_encoded(clip: Path, tmp_path: Path) -> None:
    """The cached bytes are those of PyAV's ``to_image()`` of the AREA-scaled rgb24 frame, JPEG-encoded by
    Pillow at the entry's quality: a faster path to the pixels must not change an entry's content."""
    entry = FrameCache(tmp_path, fps=2.0, max_side=48, jpeg_quality=70).entry(clip)
    with av.open(str(clip)) as container:
        decoded = list(container.decode(container.streams.video[0]))
    kept = [max((f for f in decoded if f.time <= k / 2), key=lambda f: f.time) for k in range(entry.count)]
    expected = []
    for frame in kept:
        buf = io.BytesIO()
        rgb = frame.reformat(width=48, height=32, format="rgb24", interpolation="AREA")
        rgb.to_image().save(buf, format="JPEG", quality=70)
        expected.append(buf.getvalue())
    assert entry.jpegs(range(entry.count)) == expected


def test_each_frame_keeps_its_jpegs_one_eighth_scale_decode(clip: Path, tmp_path: Path) -> None:
    """The preview beside each JPEG is the JPEG decoded at 1/8 (``Image.draft``), pixel for pixel; a frame
    under 8 pixels a side has none."""
    entry = FrameCache(tmp_path).entry(clip)
    read = entry.jpegs_with_previews(range(entry.count))
    assert [jpeg for jpeg, _ in read] == entry.jpegs(range(entry.count))
    for jpeg, preview in read:
        with Image.open(io.BytesIO(jpeg)) as im:
            im.draft("RGB", (im.width // 8, im.height // 8))
            assert preview is not None and preview.image().tobytes() == im.convert("RGB").tobytes()
    tiny = FrameCache(tmp_path, max_side=6).entry(clip)
    assert {preview for _, preview in tiny.jpegs_with_previews(range(tiny.count))} == {None}


def test_entry_is_keyed_by_content_and_reused(clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = FrameCache(tmp_path / "c").entry(clip)
    copy = shutil.copy(clip, tmp_path / "elsewhere.mp4")
    monkeypatch.setattr(cache_mod, "sample_frames", lambda *a: pytest.fail("rebuilt a valid entry"))
    again = FrameCache(tmp_path / "c").entry(copy)
    assert again.path == first.path
    assert FrameCache(tmp_path / "c", jpeg_quality=50).key(clip) != first.key
    other = make_video(tmp_path / "other.mp4", cfr(2))
    assert FrameCache(tmp_path / "c").key(other) != first.key


def test_digest_memo_follows_file_changes(tmp_path: Path) -> None:
    video = make_video(tmp_path / "v.mp4", cfr(2))
    cache = FrameCache(tmp_path / "c")
    before = cache.key(video)
    make_video(video, cfr(3))
    assert cache.key(video) != before


@pytest.mark.parametrize("damage", ["truncate", "flip", "foreign", "apart"])
def test_invalid_entry_is_rebuilt_not_read(
    clip: Path, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    good = FrameCache(tmp_path).entry(clip)
    expected = good.jpegs(range(good.count))
    data = good.path.read_bytes()
    if damage == "truncate":
        good.path.write_bytes(data[: len(data) - 100])
    elif damage == "flip":
        good.path.write_bytes(data[:5000] + bytes([data[5000] ^ 0xFF]) + data[5001:])
    elif damage == "foreign":
        write_entry(good.path, {"key": "someone-else"}, [(b"x", b"")])
    else:  # valid rows, but a preview not right after its JPEG (it is read with the JPEG in one piece)
        write_entry(good.path, json.loads(data[12 : 12 + int.from_bytes(data[8:12], "little")]), [(b"x", b"y")])
        moved = bytearray(good.path.read_bytes())
        index_at = int.from_bytes(moved[-28:-20], "little")
        moved[index_at + 12 : index_at + 20] = (index_at - 2).to_bytes(8, "little")  # the preview's offset
        good.path.write_bytes(bytes(moved[:-28]) + _refooted(moved))
    with pytest.raises(CorruptEntryError, match="does not follow" if damage == "apart" else None):
        EntryFile.open(good.path, good.key)
    with caplog.at_level(logging.WARNING):
        rebuilt = FrameCache(tmp_path).entry(clip)
    assert "rebuilding" in caplog.text
    assert rebuilt.jpegs(range(rebuilt.count)) == expected


def _refooted(entry: bytearray) -> bytes:
    """The footer of ``entry`` with its crc32 made right for the bytes before it."""
    import zlib

    footer = entry[-28:]
    footer[16:20] = zlib.crc32(bytes(entry[:-28])).to_bytes(4, "little")
    return bytes(footer)


def test_failed_build_leaves_nothing(tmp_path: Path) -> None:
    def broken():
        yield b"jpeg", b""
        raise RuntimeError("decoder died")

    target = tmp_path / "e.apmf"
    with pytest.raises(RuntimeError):
        write_entry(target, {"key": "k"}, broken())
    assert list(tmp_path.iterdir()) == []


def _build_and_read(cache_dir: str, video: str, start: "mp.synchronize.Barrier", out: "mp.Queue[list[bytes]]") -> None:
    start.wait()
    entry = FrameCache(cache_dir).entry(video)
    out.put(entry.jpegs(range(entry.count)))


def test_two_processes_build_the_same_entry(tmp_path: Path) -> None:
    video = make_video(tmp_path / "v.mp4", cfr(30), size=(160, 120))
    ctx = mp.get_context("spawn")
    results: mp.Queue[list[bytes]] = ctx.Queue()
    start = ctx.Barrier(2)
    args = (str(tmp_path / "c"), str(video), start, results)
    procs = [ctx.Process(target=_build_and_read, args=args) for _ in range(2)]
    for p in procs:
        p.start()
    frames = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert frames[0] == frames[1] and len(frames[0]) == 31
    entries = list((tmp_path / "c").rglob("*.apmf*"))
    assert [e.suffix for e in entries if not e.name.endswith(".lock")] == [".apmf"]  # no temp files left


def test_cache_dir_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "env"))
    assert default_cache_dir() == tmp_path / "env"
    assert default_cache_dir(tmp_path / "flag") == tmp_path / "flag"
    monkeypatch.delenv(CACHE_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "apm" / "frames"


def test_build_release_cache_reports_bad_videos(clip: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video")
    gone = tmp_path / "gone.mp4"
    videos = [clip, bad, clip, gone]
    sessions = tuple(Session("T1", "DAY1", f"S00{i}", i, 100 * i, 100 * i + 12, v) for i, v in enumerate(videos))
    release = Release(tmp_path, (Trajectory("T1", "test", "t", sessions),), ())
    report = build_release_cache(release, tmp_path / "c", workers=2, progress=False)
    assert report.ready == (clip.resolve(),)
    assert [e.path for e in report.failed] == [bad.resolve(), gone.resolve()]
    assert report.failed[1].reason == "no such file"
    assert FrameCache(tmp_path / "c").entry(clip).count == 13


def test_entries_and_memos_follow_the_umask_so_a_group_can_share_the_cache(clip: Path, tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        entry = FrameCache(tmp_path / "c").entry(clip)
    finally:
        os.umask(old)
    memos = list((tmp_path / "c" / "digests").glob("*.json"))
    for path in [entry.path, *memos]:
        assert path.stat().st_mode & 0o060 == 0o060, (path, oct(path.stat().st_mode))


@pytest.mark.parametrize("memo", ["[]", '"x"', "{}", '{"sha256": 5}', '{"sha256": "zz"}', "{not json"])
def test_a_malformed_digest_memo_is_rebuilt_never_trusted(clip: Path, tmp_path: Path, memo: str) -> None:
    cache = FrameCache(tmp_path / "c")
    key = cache.key(clip)
    (path,) = (tmp_path / "c" / "digests").glob("*.json")
    good = json.loads(path.read_text())
    spoilt = memo if not memo.startswith('{"sha256"') else json.dumps({**good, **json.loads(memo)})
    path.write_text(spoilt)
    assert FrameCache(tmp_path / "c").key(clip) == key
    assert json.loads(path.read_text()) == good


NOBODY = 65534
"""uid and gid of ``nobody`` / ``nogroup``: the second user of a shared cache."""


def _as_nobody(work: Callable[[], bool]) -> int:
    """Exit status of ``work()`` run in a forked child as uid/gid ``nobody`` under umask 022 (forked,
    not exec'd: the interpreter's own files need not be readable by nobody); 13: a PermissionError."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.umask(0o022)
            code = 0 if work() else 3
        except PermissionError:
            code = 13
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as a second user")
def test_a_shared_cache_under_umask_022_is_read_and_extended_by_a_second_user(clip: Path) -> None:
    shared = Path(tempfile.mkdtemp(dir="/tmp"))  # outside pytest's 0700 folders, so nobody can reach it
    try:
        shared.chmod(0o755)
        first, second = shutil.copy(clip, shared / "a.mp4"), make_video(shared / "b.mp4", cfr(3.3))
        cache_dir = shared / "cache"
        cache_dir.mkdir()
        os.chown(cache_dir, -1, NOBODY)  # docs/scale.md: the cache root belongs to the sharing group, setgid
        cache_dir.chmod(0o2775)
        before = os.umask(0o022)
        try:
            built = FrameCache(cache_dir, fps=1.0, max_side=64).entry(first)
        finally:
            os.umask(before)
        count, entry_file = built.count, built.path
        entry_file.unlink()  # the second user rebuilds it in the first user's folder, under its lock file

        def second_user() -> bool:
            cache = FrameCache(cache_dir, fps=1.0, max_side=64)
            return cache.entry(first).count == count and cache.entry(second).count == 4

        assert _as_nobody(second_user) == 0
        assert entry_file.stat().st_uid == NOBODY
        folders = [p for p in cache_dir.rglob("*") if p.is_dir()]
        assert {p.name for p in folders} >= {"digests", entry_file.parent.name}
        assert all(p.stat().st_mode & 0o2070 == 0o2070 and p.stat().st_gid == NOBODY for p in folders)
        assert all(p.stat().st_mode & 0o060 == 0o060 for p in cache_dir.rglob("*.lock"))
    finally:
        shutil.rmtree(shared)


def test_the_build_workers_never_fork_the_caller(clip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked worker inherits the caller's locks held by other threads and can wait on them forever:
    the pool starts its workers from a clean server process."""
    import apm.video.cache as cache_module

    started: list[str] = []
    real = cache_module.ProcessPoolExecutor

    def spied(*args, **kwargs):
        started.append(kwargs["mp_context"].get_start_method())
        return real(*args, **kwargs)

    monkeypatch.setattr(cache_module, "ProcessPoolExecutor", spied)
    sessions = (Session("T1", "DAY1", "S001", 0, 0, 12, clip),)
    release = Release(tmp_path, (Trajectory("T1", "test", "t", sessions),), ())
    assert build_release_cache(release, tmp_path / "c", workers=2, progress=False).ready == (clip.resolve(),)
    assert started == ["forkserver"]


@pytest.mark.parametrize("rate", [Fraction(1), Fraction(2), Fraction(1, 3), Fraction(30000, 1001), Fraction(7, 10)])
def test_sample_seconds_are_the_offsets_float_and_floor(rate: Fraction) -> None:
    """The frames' offsets and wall-clock seconds, taken without Fractions, are exactly the Fraction's."""
    for i in [*range(2000), 10**6 + 7, 3 * 10**7 + 1]:
        assert sample_seconds(i, rate) == (float(i / rate), math.floor(i / rate))
