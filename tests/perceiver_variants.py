"""Variants of the pixel perceiver that read a subset of what a request shows: no earlier session,
only the current frames. Where one beats the perceiver, the perceiver is no ceiling (its tag says so)."""

from __future__ import annotations

from apm.backbones import perceiver
from apm.backbones.base import Request, Response
from apm.backbones.baselines import Answer, intervene
from apm.backbones.perceiver import PixelPerceiver, Shown
from apm.synth.world import PACKING


def _tpg_now(s: Shown) -> Answer:
    """TPG from the current frames only: packing the tray now is taken as packing it again."""
    now = s.at(s.now)
    if now is not None and now.action == PACKING:
        return intervene("TPG", "packing the tray", proactive_response="You're packing the tray again.")
    return perceiver.silent("not packing the tray")


def _mpa_now(s: Shown) -> Answer:
    """MPA from the current frames only: an action that has just started is taken as done before."""
    first, _ = perceiver._window(s)
    now = s.at(s.now)
    if now is not None and perceiver._started_in(s, now.action, first):
        return intervene("MPA", f"{now.action} again", proactive_response=f"You're {now.action} again.")
    return perceiver.silent("what I am doing now has not just started")


CURRENT_ONLY = {perceiver._tpg: _tpg_now, perceiver._mpa: _mpa_now}


class CurrentFramesOnly(PixelPerceiver):
    """Answers the inter-session adaptive probes from the current frames alone (a subset of its inputs)."""

    async def generate(self, request: Request) -> Response:
        saved = perceiver.PROBES
        perceiver.PROBES = {name: CURRENT_ONLY.get(probe, probe) for name, probe in saved.items()}
        try:
            return await super().generate(request)
        finally:
            perceiver.PROBES = saved
