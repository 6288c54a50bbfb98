"""``apm-run``: the Hydra app around :func:`apm.api.run.run` (``apm.run``): Hydra composes (and sweeps,
``-m``), the job is the Python API's run. ``--help`` and ``--version`` answer before Hydra is imported."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

from apm.cli import config_errors
from apm.configs import CONF_DIR
from apm.errors import DEBUG_FLAG, VERBOSE_FLAG, VERSION_FLAG, UsageErrors, guarded, hold, hydra_guarded

if TYPE_CHECKING:
    from omegaconf import DictConfig

HELP_FLAGS = ("-h", "--help")


def config_groups(conf_dir: Path) -> dict[str, list[str]]:
    """Each config group under ``conf_dir`` (``memory``, ``hydra/launcher``) and its options, read from
    the YAML files' names (no Hydra)."""
    groups = {}
    for folder in sorted(p for p in conf_dir.rglob("*") if p.is_dir()):
        if options := sorted(f.stem for f in folder.glob("*.yaml")):
            groups[folder.relative_to(conf_dir).as_posix()] = options
    return groups


def usage(conf_dir: Path) -> str:
    """What ``apm-run --help`` prints: the command line it takes and every config group's options."""
    groups = "\n".join(f"  {group}: {', '.join(options)}" for group, options in config_groups(conf_dir).items())
    return f"""usage: apm-run [-m] [OVERRIDE ...]

Run one (dataset, memory protocol, backbone) config over one shard of trajectories (a Hydra app: the
config is config.yaml of the folder below with the overrides applied, in order).

overrides:
  GROUP=OPTION     pick a config group's option (memory=text_summary); +experiment=NAME a preset
  KEY=VALUE        set a config key (dataset.root=DIR, backbone.model=NAME, shard.count=4)
  +KEY=VALUE       add a key the config does not have; ~KEY removes one
  -m, --multirun   sweep: comma-separated values (memory=raw_video,text_summary) run as one job each

config groups (the options in {conf_dir}):
{groups}

options:
  -h, --help       show this message and exit
  {VERSION_FLAG}        print apm's version and the identity of its code, and exit
  --cfg job        print the config the overrides compose, and exit (nothing run)
  --hydra-help     Hydra's own flags (-sc install=bash: tab completion; --info; --config-dir)
  {DEBUG_FLAG}          show the traceback of an error (also HYDRA_FULL_ERROR=1)
  {VERBOSE_FLAG}        show an error's whole message"""


def _task(cfg: DictConfig) -> None:
    """The Hydra task: one shard job, or one instance's request (``print_request``)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from apm.api.run import Composed, run
    from apm.records.redact import redact_logging
    from apm.runner.app import discard_fresh_job_folder, request_listing

    redact_logging()
    try:
        if cfg.print_request:
            print(request_listing(cfg))
        else:
            run(Composed(cfg, cast("DictConfig", HydraConfig.get())))  # typed as its schema, a DictConfig
    except Exception as e:
        if HydraConfig.get().mode != RunMode.RUN:
            raise  # a sweep reports its failed jobs itself
        hold(e)
    finally:
        discard_fresh_job_folder(cfg)


def one_job(argv: list[str]) -> bool:
    """Whether ``apm-run ARGV`` asks for one job and nothing else: only overrides, none of them
    ``hydra.mode`` (``-m``, ``--cfg``, ``--info``, ``--config-dir``… go to Hydra's own main)."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    args = vars(parser.parse_args(argv))
    plain = vars(parser.parse_args([])) | {"overrides": args["overrides"]}
    return args == plain and not any(o.lstrip("+~").startswith("hydra.mode=") for o in args["overrides"])


def _run_one_job(overrides: list[str]) -> None:
    """What Hydra's main does for a run without ``-m``, less the composition it makes first only to read
    ``hydra.mode`` (a run sets ``hydra.mode=RUN``, as Hydra's main does): the config is composed once, by
    ``Hydra.run``, which makes the job folder, configures logging and calls :func:`_task`."""
    from hydra import version
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import (
        create_automatic_config_search_path,
        detect_calling_file_or_module_from_task_function,
        detect_task_name,
        run_and_report,
    )
    from hydra.core.global_hydra import GlobalHydra

    version.setbase("1.3")
    caller = detect_calling_file_or_module_from_task_function(_task)  # as Hydra's main finds them
    search_path = create_automatic_config_search_path(*caller, CONF_DIR)
    hydra = run_and_report(lambda: Hydra.create_main_hydra2(detect_task_name(*caller), search_path))
    try:
        run_and_report(lambda: hydra.run("config", _task, [*overrides, "hydra.mode=RUN"]))
    finally:
        GlobalHydra.instance().clear()


def _app() -> None:
    """Hydra around :func:`_task` (Hydra names the job after this module: ``run``), once the runner is
    imported: that registers what config.yaml names (the ``apm_schema`` it extends, ``${apm_run_name:}``).
    One job (:func:`one_job`) is composed once (:func:`_run_one_job`); anything else is Hydra's main."""
    import hydra

    import apm.runner.app  # noqa: F401

    if one_job(sys.argv[1:]):
        _run_one_job(sys.argv[1:])
    else:
        hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")(_task)()


def setup_errors() -> UsageErrors:
    """Errors found before the run started (exit status 2); any other stops a run (exit status 1)."""
    from apm.backbones.base import EndpointError

    return (*config_errors(), EndpointError)


def main() -> None:
    """``apm-run``: every error is one line on stderr and a non-zero exit (``--debug``: the traceback)."""
    if any(a in HELP_FLAGS for a in sys.argv[1:]):
        sys.exit(guarded("apm-run", lambda: print(usage(Path(CONF_DIR))), debug=False))  # guarded: `| head` too
    sys.exit(hydra_guarded("apm-run", _app, setup_errors))


if __name__ == "__main__":
    main()
