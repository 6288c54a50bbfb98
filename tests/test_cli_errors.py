"""Every command-line error is one line and a non-zero exit; ``--debug`` shows the traceback."""

from __future__ import annotations

import subprocess
import sys

from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError

from apm.errors import one_line


def command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=120)


def test_hydra_and_omegaconf_messages_become_one_line():
    try:
        raise ConfigCompositionException("Could not override 'concurency'.\nTo append use +concurency=4") \
            from ConfigKeyError("Key 'concurency' is not in struct\n    full_key: concurency\n    object_type=dict")
    except ConfigCompositionException as e:
        line = one_line(e)
    assert line == "Could not override 'concurency'; To append use +concurency=4; Key 'concurency' is not in struct"


def test_apm_status_and_apm_data_errors_are_one_line(tmp_path):
    for args in (("apm.scale.status", str(tmp_path / "nowhere")), ("apm.cli.data", "synth", "--out", str(tmp_path))):
        if args[1] == "synth":
            (tmp_path / "keep").write_text("mine")
        done = command(*args)
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and ": error: " in done.stderr


def test_debug_shows_the_traceback(tmp_path):
    done = command("apm.scale.status", str(tmp_path / "nowhere"), "--debug")
    assert done.returncode == 1 and "Traceback" in done.stderr and "FileNotFoundError" in done.stderr
