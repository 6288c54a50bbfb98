"""VST, Video Streaming Thinking (1ranGuan/VST, the official code) behind apm's process boundary. VST's
evaluation is prefix-recompute: its lmms-eval model ``Qwen2_5_VL_Stream_Think`` reads the clip up to the
question, cuts it into ``stream_think_times`` segments (more for longer clips), writes one thought per
segment, each chained into the next as a ``previous text`` turn, and answers from the last segment. This
adapter hands that ``generate_until`` one request per probe, on the user's checkout (``upstream``): the
stream so far (the visible earlier sessions' frames, then the current session's) written as a 1-FPS
video in the child's scratch folder, which VST's own reader (decord) samples. Run by
``python -m apm_child adapters/vst.py:VST`` in a transformers 4.50 side env.

State: each finished session's frames (JPEG), which rebuild what the adapter holds. Deviation:
``prefix_recompute`` (the thoughts are rewritten for every question and never kept; declared
``streaming: false``). VST answers a failed preprocessing with ``random.sample``: seeded
here with the session seed.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any, Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _upstream import FirstToken, checkout, load_frames, pil, query, save_frames, seed_all  # noqa: E402

from apm_child import Answer, Frame, Harness, Probe, Session, System  # noqa: E402

COMMIT = "b6f4490a0b6d15f06eb54690d6c469c87ba53ca1"
TASK = ("apm", "test")


class VST(System):
    name = "VST (official, child process)"
    declaration = {"family": "specialised", "streaming": False, "persistent": True,
                   "representation": "reasoning_thoughts"}
    deviations = ("prefix_recompute",)

    def __init__(self, upstream: str, model: str, commit: str = COMMIT, stream_think_times: str = "2-3-5-5",
                 max_stream_vid_tokens: int = 8192, max_num_frames: int = 384, min_pixels: int = 256 * 28 * 28,
                 max_pixels: int = 1605632, max_new_tokens: int = 32768, think_tokens: int = None,
                 attn: str = "sdpa", dtype: str = "float32") -> None:
        # defaults: eval/scripts/ovobench.sh (stream_think_times, max_stream_vid_tokens, max_num_frames) and the
        # model's own (pixels, 32768 answer tokens); think_tokens caps the thoughts' hard-coded 5000 (None: as VST)
        super().__init__(upstream=upstream, model=model, commit=commit, stream_think_times=stream_think_times,
                         max_stream_vid_tokens=max_stream_vid_tokens, max_num_frames=max_num_frames,
                         min_pixels=min_pixels, max_pixels=max_pixels, max_new_tokens=max_new_tokens,
                         think_tokens=think_tokens, attn=attn, dtype=dtype)
        self.found = checkout(upstream, commit, syspath=("eval/lmms-eval",))
        self.lm = None
        self.calls: List[int] = []

    def identity(self) -> Dict[str, Any]:
        import torch
        import transformers

        return {**self.found, "system": "VST", "transformers": transformers.__version__, "torch": torch.__version__}

    def _load(self) -> None:
        """The lmms-eval model as ``--model_args`` builds it, on ``cuda`` or CPU, with ``attn``/``dtype``."""
        import torch
        from lmms_eval.models.simple.qwen2_5_vl_stream_think import Qwen2_5_VL_Stream_Think

        o = self.options
        device = "cuda" if torch.cuda.is_available() else "cpu"
        lm = Qwen2_5_VL_Stream_Think(pretrained=o["model"], device=device, device_map=device,
                                     attn_implementation=o["attn"], min_pixels=o["min_pixels"],
                                     max_pixels=o["max_pixels"], max_num_frames=o["max_num_frames"],
                                     max_stream_vid_tokens=o["max_stream_vid_tokens"],
                                     stream_think_times=o["stream_think_times"])
        lm._model = lm._model.to(getattr(torch, o["dtype"]))  # it loads bfloat16 whatever the device
        generate = lm._model.generate

        def counted(**kw):  # one call per thought, then the answer: count them, time the first token
            self.first = FirstToken()
            if o["think_tokens"] and kw.get("max_new_tokens") == 5000:
                kw["max_new_tokens"] = o["think_tokens"]
            self.calls.append(int(kw["input_ids"].shape[1]))
            return generate(**kw, streamer=self.first)

        lm._model.generate = counted
        self.lm = lm

    def begin(self, session: Session, sessions, state_dir: str, seed: int, harness: Harness) -> None:
        if self.lm is None:
            self._load()
        seed_all(seed)
        self.session, self.current = session, []
        self.earlier: List[Frame] = load_frames(state_dir, sessions, session.index)

    def observe_frame(self, frame: Frame) -> None:
        self.current.append(frame)  # nothing else: VST thinks when asked

    def _video(self, frames: List[Frame]) -> str:
        """``frames`` as a 1-FPS H.264 video (even-sized, as the codec needs) in the scratch folder."""
        import av

        first = pil(frames[0].jpeg)
        size = (first.width // 2 * 2, first.height // 2 * 2)
        path = tempfile.mktemp(suffix=".mp4")
        with av.open(path, "w") as out:
            stream = out.add_stream("libx264", rate=1)
            stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
            for f in frames:
                for packet in stream.encode(av.VideoFrame.from_image(pil(f.jpeg).resize(size))):
                    out.mux(packet)
            for packet in stream.encode():
                out.mux(packet)
        return path

    def answer(self, probe: Probe, harness: Harness) -> Answer:
        from lmms_eval.api.instance import Instance

        visible = set(probe.visible_sessions)
        stream = [f for f in self.earlier if f.session in visible] + self.current
        asked = query(probe.fields, probe.turns)
        context = "\n".join([asked["question"], *asked["options"]])
        start = time.perf_counter()
        path = self._video(stream)
        try:
            self.lm.task_dict = {TASK[0]: {TASK[1]: {0: {"video": path}}}}
            request = Instance("generate_until", (context, {"max_new_tokens": self.options["max_new_tokens"]},
                                                  lambda doc: [doc["video"]], 0, *TASK), 0,
                               {"task": TASK[0], "doc_id": 0, "repeats": 1})
            self.calls = []
            text = self.lm.generate_until([request])[0]
        finally:
            os.unlink(path)
        total = time.perf_counter() - start
        first = self.first.at - start if self.first.at else total
        return Answer(text=text, ttft_s=first, total_s=total, completion_tokens=None,
                      frames=tuple(Frame(f.session, f.offset, f.wall_clock, b"") for f in stream))

    def export(self, state_dir: str) -> Dict[str, Any]:
        save_frames(state_dir, self.session, self.current)
        return {"frames": len(self.current), "generate_calls_last_probe": len(self.calls),
                "prompt_tokens_last_probe": self.calls}
