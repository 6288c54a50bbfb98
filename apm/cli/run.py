"""``apm-run``: the Hydra app around :func:`apm.api.run.run` (``apm.run``): Hydra composes (and sweeps,
``-m``), the job is the Python API's run."""

from __future__ import annotations

import sys
from typing import cast

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from apm.api.run import Composed, run
from apm.backbones.base import EndpointError
from apm.configs import CONF_DIR
from apm.errors import hold, hydra_guarded
from apm.records.redact import redact_logging
from apm.runner.app import discard_fresh_job_folder, request_listing
from apm.runner.config import ConfigError


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def _app(cfg: DictConfig) -> None:
    """The Hydra task: one shard job, or one instance's request (``print_request``)."""
    redact_logging()
    try:
        if cfg.print_request:
            print(request_listing(cfg))
        else:
            run(Composed(cfg, cast(DictConfig, HydraConfig.get())))  # typed as its schema, a DictConfig
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
