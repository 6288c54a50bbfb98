"""One thumbnail path: ``apm-publish`` and ``apm-view`` turn a recorded frame into the same image."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from support.video import cfr, make_video, read_code

from apm.publish.thumbnails import Thumbnails as StripThumbnails
from apm.video.cache import FrameCache
from apm.video.thumbnails import recorded_frame, run_sampling
from apm.view.thumbs import Thumbnails as SiteThumbnails

FPS = 10
SESSION = "DAY1/S001"


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """A real H.264 clip whose pixels spell each frame's time, and the ``config.frames`` of a run at 10 fps."""
    folder = tmp_path_factory.mktemp("clip")
    video = make_video(folder / "s1.mp4", cfr(2.0, fps=FPS), size=(96, 64))
    return video, {"cache_dir": str(folder / "cache"), "fps": FPS, "max_side": 448, "jpeg_quality": 95}


@pytest.mark.parametrize("offset", [0.0, 0.05, 0.35, 0.7, 1.25, 2.0])
def test_publish_and_view_give_the_same_image_for_a_frame(clip, tmp_path: Path, offset: float) -> None:
    """Off the sample grid (0.05 s at 10 fps) the two used to round to different samples."""
    video, frames = clip
    strip = StripThumbnails(FrameCache(*run_sampling(frames)), {("T1", SESSION): video})
    published = strip.frame("T1", {"session": SESSION, "offset": offset})
    site = SiteThumbnails(tmp_path / "site")
    viewed = Image.open(tmp_path / "site" / site.src(frames, video, offset)).convert("RGB")
    assert published.size == viewed.size and published.tobytes() == viewed.tobytes()


def test_a_recorded_frame_is_the_nearest_sample_in_exact_arithmetic(clip) -> None:
    video, frames = clip
    cache = FrameCache(*run_sampling(frames))
    assert recorded_frame(cache, video, 0.05).sample == 1  # 0.05 as recorded is a hair above the tie
    assert recorded_frame(cache, video, 0.7).sample == 7
    shown = recorded_frame(cache, video, 0.7)
    assert read_code(np.asarray(Image.open(io.BytesIO(shown.thumbnail())))) == 70
