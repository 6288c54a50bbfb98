"""A system that lives in an environment of its own, as an official one does: Python 3.9 with transformers
pinned to 4.x (``.ci/tf4-env.sh``), which ``apm`` itself cannot load beside its transformers 5. It keeps
keyframes as the template does, one per temporal patch of the Qwen2-VL config it builds with that
transformers, and reports the versions it ran with on every memory line."""

from __future__ import annotations

import sys
from typing import Any, Dict

import transformers
from transformers import Qwen2VLConfig

from apm_child.template import KeyframeTemplate


class Tf4Keyframes(KeyframeTemplate):
    name = "Keyframes on transformers 4.x (test)"

    def __init__(self, every_s: int = 10, recent: int = 2) -> None:
        if not transformers.__version__.startswith("4."):
            raise RuntimeError("this system needs transformers 4.x, found %s" % transformers.__version__)
        patch = Qwen2VLConfig().vision_config.temporal_patch_size  # frames per temporal patch: 2
        super().__init__(every_s=every_s * patch // 2, recent=recent)

    def identity(self) -> Dict[str, Any]:
        return {"transformers": transformers.__version__, "python": "%d.%d" % sys.version_info[:2]}
