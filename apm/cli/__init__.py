"""Console entry points; every one answers ``--version`` with apm's version and code identity."""

from apm.errors import say_version_with


def _version_line(prog: str) -> str:
    from apm.runner.code import version_line  # on demand: the light commands load no runner to start

    return version_line(prog)


say_version_with(_version_line)
