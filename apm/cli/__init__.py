"""Console entry points; every one answers ``--version`` with apm's version and code identity, and
``--help`` before importing the heavy stack (pandas, Hydra, PyAV, …: each command imports them once its
arguments are parsed)."""

from apm.errors import UsageErrors, say_version_with


def _version_line(prog: str) -> str:
    from apm.runner.code import version_line  # on demand: the light commands load no runner to start

    return version_line(prog)


say_version_with(_version_line)


def config_errors() -> UsageErrors:
    """A config that does not compose or check (apm's, Hydra's, OmegaConf's errors); imported once one is
    met, as :data:`apm.errors.Usage` allows."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from apm.runner.config import ConfigError

    return ConfigError, HydraException, OmegaConfBaseException
