"""``apm-run``: the Hydra app. Compose, check, then run the online protocol (``apm.runner.app``)."""

from __future__ import annotations

import asyncio
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from apm.backbones.base import EndpointError
from apm.configs import CONF_DIR
from apm.errors import hold, hydra_guarded
from apm.records.redact import redact_logging
from apm.runner.app import discard_fresh_job_folder, request_listing, run_async
from apm.runner.config import ConfigError


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def _app(cfg: DictConfig) -> None:
    """The Hydra task: one shard job, or one instance's request (``print_request``)."""
    redact_logging()
    try:
        if cfg.print_request:
            print(request_listing(cfg))
        else:
            asyncio.run(run_async(cfg, strict=True))
    except Exception as e:
        if HydraConfig.get().mode != RunMode.RUN:
            raise  # a sweep reports its failed jobs itself
        hold(e)
    finally:
        discard_fresh_job_folder(cfg)


SETUP_ERRORS = (ConfigError, EndpointError, HydraException, OmegaConfBaseException)
"""Errors found before the run started (exit status 2); any other stops a run (exit status 1)."""


def main() -> None:
    """``apm-run``: every error is one line on stderr and a non-zero exit (``--debug``: the traceback)."""
    sys.exit(hydra_guarded("apm-run", _app, SETUP_ERRORS))


if __name__ == "__main__":
    main()
