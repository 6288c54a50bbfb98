"""``python -m apm.check.child SPEC``: one checked run in its own process (``apm.check.runs.RunSpec``
as JSON), so the SIGKILL check can kill it mid-session."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from apm.check.runs import RunSpec
from apm.runner.app import run_async

if __name__ == "__main__":
    spec = RunSpec(**json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
    asyncio.run(run_async(spec.config()))
