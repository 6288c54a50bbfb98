"""Packaging beyond setup.cfg: the project's Hydra configs (``conf/``, kept at the top level of the
checkout) ship inside the wheel as ``apm/conf``, where :mod:`apm.configs` finds them."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithConfigs(build_py):
    """``build_py`` that also copies ``conf/**/*.yaml`` into the built package as ``apm/conf/``."""

    def run(self) -> None:
        super().run()
        source = Path(__file__).parent / "conf"
        for path in sorted(source.rglob("*.yaml")):
            target = Path(self.build_lib, "apm", "conf", path.relative_to(source))
            self.mkpath(str(target.parent))
            self.copy_file(str(path), str(target), preserve_mode=False)


setup(cmdclass={"build_py": BuildWithConfigs})
