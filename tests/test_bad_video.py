"""Real-world video: VFR, non-zero start, odd sizes, rotation, audio; broken files raise VideoDecodeError."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from support.video import cfr, code_image, make_video, read_code

from apm.data.frames import Frame
from apm.video.cache import FrameCache
from apm.video.decode import SamplingSettings, VideoDecodeError, assign_slots, sample_frames


def codes(video: Path, **settings: float) -> list[int]:
    """The time code (centiseconds after the first frame) shown by each slot."""
    sampled = sample_frames(video, SamplingSettings(**settings))
    return [read_code(Frame("DAY1/S001", 0, 0, jpeg).pixels()) for jpeg, _ in sampled]


def test_slot_rule_on_timestamps() -> None:
    times = [Fraction(t) for t in ("0", "0.4", "1", "1.2", "4.5", "4.4", "5")]
    assert list(assign_slots(((t, t) for t in times), Fraction(1))) == [
        Fraction(0), Fraction(1), Fraction("1.2"), Fraction("1.2"), Fraction("1.2"), Fraction(5)
    ]  # 4.4 arrives after 4.5: a broken timestamp, dropped


def test_variable_frame_rate_holds_the_last_frame_never_a_later_one(tmp_path: Path) -> None:
    times = [0, 0.3, 0.95, 1.0, 1.7, 4.2, 4.9, 5.05, 6.5]
    video = make_video(tmp_path / "vfr.mp4", times)
    assert codes(video) == [0, 100, 170, 170, 170, 490, 505]  # slot 6 <= 6.5 < 7: seven slots
    entry = FrameCache(tmp_path / "c").entry(video)
    assert entry.count == 7 and entry.jpeg(2) == entry.jpeg(4)  # the held frame, stored once


def test_nonzero_start_pts_counts_from_the_first_frame(tmp_path: Path) -> None:
    video = make_video(tmp_path / "late.mp4", cfr(3), start=2.5)
    assert codes(video) == [0, 100, 200, 300]


def test_odd_size_audio_and_scaling(tmp_path: Path) -> None:
    video = make_video(tmp_path / "odd.mp4", cfr(2), size=(161, 97), pix_fmt="yuv444p", audio=True)
    entry = FrameCache(tmp_path / "c", max_side=80).entry(video)
    frames = [Frame("DAY1/S001", 0, 0, j).pixels() for j in entry.jpegs(range(entry.count))]
    assert [f.shape for f in frames] == [(48, 80, 3)] * 3
    assert [read_code(f) for f in frames] == [0, 100, 200]


def test_rotation_metadata_is_applied(tmp_path: Path) -> None:
    video = make_video(tmp_path / "rot.mp4", [0], size=(96, 64), rotation=90)
    ((jpeg, _),) = list(sample_frames(video, SamplingSettings()))
    upright = Frame("DAY1/S001", 0, 0, jpeg).pixels()
    expected = np.asarray(Image.fromarray(code_image(0, 96, 64)).transpose(Image.Transpose.ROTATE_90))
    assert upright.shape == (96, 64, 3)
    assert np.abs(upright.astype(int) - expected).mean() < 10


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Intact encodings of one 20 s clip: mp4 with the index at the end, faststart mp4, mkv."""
    d = tmp_path_factory.mktemp("good")
    return {
        "end.mp4": make_video(d / "a.mp4", cfr(20), size=(160, 120)).read_bytes(),
        "fast.mp4": make_video(d / "b.mp4", cfr(20), size=(160, 120), options={"movflags": "faststart"}).read_bytes(),
        "cut.mkv": make_video(d / "c.mkv", cfr(20), size=(160, 120)).read_bytes(),
    }


def decode_error(path: Path) -> VideoDecodeError:
    with pytest.raises(VideoDecodeError) as err:
        list(sample_frames(path, SamplingSettings()))
    assert str(path) in str(err.value) and err.value.path == path
    return err.value


@pytest.mark.parametrize("name", ["end.mp4", "fast.mp4", "cut.mkv"])
def test_truncated_file(sound: dict[str, bytes], tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(sound[name][: len(sound[name]) // 2])
    err = decode_error(path)
    if name == "end.mp4":  # the index (moov) is at the end: nothing is readable
        assert err.at_seconds == 0 and "not a readable video container" in err.reason
    else:  # decoding got about halfway before failing
        assert 5 < err.at_seconds < 15


def test_corrupt_middle(sound: dict[str, bytes], tmp_path: Path) -> None:
    data = bytearray(sound["fast.mp4"])
    middle = len(data) // 2
    data[middle : middle + 3000] = np.random.default_rng(0).integers(0, 256, 3000, dtype=np.uint8).tobytes()
    (path := tmp_path / "corrupt.mp4").write_bytes(bytes(data))
    err = decode_error(path)
    assert 5 < err.at_seconds < 15 and "corrupt" in err.reason


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.mp4", b"", "empty file"),
        ("notes.mp4", b"hello world\n" * 100, "not a readable video container"),
        ("missing.mp4", None, "no such file"),
    ],
)
def test_not_a_video(tmp_path: Path, name: str, content: bytes | None, reason: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    err = decode_error(path)
    assert err.at_seconds == 0 and reason in err.reason


def test_still_image_and_audio_only_are_not_videos(tmp_path: Path) -> None:
    Image.new("RGB", (32, 32)).save(image := tmp_path / "frame.png")
    assert "still image" in decode_error(image).reason
    import av

    with av.open(str(audio := tmp_path / "voice.m4a"), "w") as out:
        stream = out.add_stream("aac", rate=16000)
        chunk = av.AudioFrame.from_ndarray(np.zeros((1, 1024), dtype=np.float32), format="fltp", layout="mono")
        chunk.sample_rate, chunk.pts = 16000, 0
        out.mux(stream.encode(chunk))
        out.mux(stream.encode())
    assert "no video stream" in decode_error(audio).reason


def test_bad_video_leaves_no_cache_entry(tmp_path: Path) -> None:
    (path := tmp_path / "empty.mp4").write_bytes(b"")
    with pytest.raises(VideoDecodeError):
        FrameCache(tmp_path / "c").entry(path)
    assert not list((tmp_path / "c").rglob("*.apmf")) and not list((tmp_path / "c").rglob("*.tmp"))
