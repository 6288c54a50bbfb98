"""Flash-VStream-Qwen (IVGSZ/Flash-VStream, the official code) behind apm's process boundary: its real-time
model (``models/vstream_qwen2vl_realtime.py``) as its ``cli_server_2gpu.py`` drives it, one frame per
``FlashVStreamQwen2VLModel.embed_new_video_clip`` (the Flash Memory: k-means temporal memory plus
retrieved spatial memory), a one-token answer from ``generate`` reading that memory. Run by
``python -m apm_child adapters/flash_vstream.py:FlashVStream`` in a transformers 4.45 side env.

State: ``model.video_embedding_memory`` (the 13 tensors ``embed_new_video_clip`` reads back, the frames'
raw features among them, which grow with the video) and the frame count, saved with ``torch.save`` into
``flash_memory.pt`` after each session, rewritten in place; it rebuilds the model's memory exactly.
Its k-means draws from ``torch``/``random``: seeded with the session seed. Answers read the memory and
leave it as it was. No deviation is declared.

As its CLI does: the prompt is the video placeholder, the question and its options, then
``Best Option: (``, and one token is generated (its real-time ``generate`` keeps no cache and cannot
extend its visual positions past the prompt: a second token fails). The CLI feeds 120 frames at once
before going frame by frame; here every frame is fed alone.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Dict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _upstream import FirstToken, checkout, pil, query, seed_all, write_atomically  # noqa: E402

from apm_child import Answer, Frame, Harness, Probe, Session, System  # noqa: E402

COMMIT = "8f6bde2f397f4846505df4d03364d97617fc02ee"
STATE = "flash_memory.pt"
MEMORY = dict(flash_memory_temporal_length=120, flash_memory_temporal_method="kmeans_ordered",
              flash_memory_temporal_poolsize=2, flash_memory_temporal_pca_dim=32, flash_memory_spatial_length=60,
              flash_memory_spatial_method="klarge_retrieve")
"""The CLI's ``flash_memory_dict`` (``cli_server_2gpu.py``), the default of option ``memory``."""


class FlashVStream(System):
    name = "Flash-VStream-Qwen (official, child process)"
    declaration = {"family": "specialised", "streaming": True, "persistent": True, "representation": "visual_features"}

    def __init__(self, upstream: str, model: str, commit: str = COMMIT, memory: Dict[str, Any] = None,
                 max_pixels: int = 4 * 224 * 224, attn: str = "sdpa", dtype: str = "float32") -> None:
        super().__init__(upstream=upstream, model=model, commit=commit, memory={**MEMORY, **(memory or {})},
                         max_pixels=max_pixels, attn=attn, dtype=dtype)
        self.found = checkout(upstream, commit, syspath=("Flash-VStream-Qwen",))
        self.model = None

    def identity(self) -> Dict[str, Any]:
        import torch
        import transformers

        return {**self.found, "system": "Flash-VStream-Qwen", "transformers": transformers.__version__,
                "torch": torch.__version__}

    def _load(self) -> None:
        import torch

        if not torch.cuda.is_available():  # shim: the memory is read back with item.cuda(), CUDA or not
            torch.Tensor.cuda = lambda self, *a, **k: self
        from models import FlashVStreamQwen2VLConfig, FlashVStreamQwen2VLProcessor
        from models.vstream_qwen2vl_realtime import FlashVStreamQwen2VLModel

        o = self.options
        config = FlashVStreamQwen2VLConfig.from_pretrained(o["model"])
        config.vision_config.flash_memory_config = o["memory"]
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = FlashVStreamQwen2VLModel.from_pretrained(
            o["model"], config=config, torch_dtype=getattr(torch, o["dtype"]), attn_implementation=o["attn"])
        self.model = self.model.to(device).eval()
        self.model.use_video_streaming_mode = True
        self.processor = FlashVStreamQwen2VLProcessor.from_pretrained(o["model"], max_pixels=o["max_pixels"])

    def begin(self, session: Session, sessions, state_dir: str, seed: int, harness: Harness) -> None:
        import torch

        if self.model is None:
            self._load()
        self.session = session
        path = os.path.join(state_dir, STATE)
        saved = torch.load(path, weights_only=False) if os.path.exists(path) else {"memory": [], "frames": 0}
        self.model.video_embedding_memory, self.count = saved["memory"], saved["frames"]
        seed_all(seed)

    def observe_frame(self, frame: Frame) -> None:
        import torch

        clip = self.processor.image_processor(images=None, videos=[pil(frame.jpeg)], return_tensors="pt",
                                              additional_pool_size=self.options["memory"]["flash_memory_temporal_poolsize"])
        with torch.inference_mode():
            self.model.embed_new_video_clip(**clip, start_idx=self.count)
        self.count += 1

    def answer(self, probe: Probe, harness: Harness) -> Answer:
        import torch

        asked = query(probe.fields, probe.turns)
        memory = self.model.video_embedding_memory
        text = "\n".join([asked["question"], *asked["options"]])
        messages = [{"role": "user", "content": [{"type": "text", "text": "<|vision_start|><|video_pad|><|vision_end|>"
                                                                          + text}]}]
        prompt = self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        start = time.perf_counter()
        inputs = self.processor(text=[prompt + "Best Option: ("], images=None, videos=None, padding=True,
                                return_tensors="pt", flash_memory_config=self.options["memory"],
                                dummy_video_tokens=memory[11].shape[0] * 4).to(self.model.device)
        first = FirstToken()
        with torch.inference_mode():
            out = self.model.generate(**inputs, max_new_tokens=1, use_cache=False, streamer=first)
        total = time.perf_counter() - start
        answer = self.processor.batch_decode(out[:, inputs.input_ids.shape[1]:], skip_special_tokens=True)[0]
        return Answer(text=answer.strip(), ttft_s=(first.at - start) if first.at else total, total_s=total)

    def export(self, state_dir: str) -> Dict[str, Any]:
        import torch

        memory = self.model.video_embedding_memory
        size = write_atomically(os.path.join(state_dir, STATE),
                                lambda f: torch.save({"memory": list(memory), "frames": self.count}, f))
        return {"frames_total": self.count, "memory_tokens": int(memory[11].shape[0]) if memory else 0,
                "raw_feature_rows": int(memory[7].shape[0]) if memory else 0, "state_bytes": size}
