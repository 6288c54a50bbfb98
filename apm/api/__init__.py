"""The Python API the console scripts wrap (docs/api.md): :mod:`.run` (``apm.run``, ``apm.compose``),
:mod:`.judge` (``apm.judge_runs``) and :mod:`.reduce` (``apm.reduce_runs``), each returning a typed
result. ``import apm`` loads none of them until one is used."""
