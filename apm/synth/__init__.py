"""A synthetic APM-Bench release with real H.264 videos whose answers can be read off the pixels."""

from apm.synth.render import read_scene, read_sign
from apm.synth.world import SCALES, state_at
from apm.synth.writer import generate

__all__ = ["SCALES", "generate", "read_scene", "read_sign", "state_at"]
