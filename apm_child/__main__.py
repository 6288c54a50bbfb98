"""``python -m apm_child FILE.py:Class`` (or ``module:Class``): serve that system to the harness."""

from apm_child.serve import main

main()
