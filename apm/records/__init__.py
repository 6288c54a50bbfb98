"""The run's output lines (records, memory lines, judgements): how every stage reads them.

At the bottom of the package with ``apm.data``: the runner, the judge and the reducer read lines
through it, and it imports nothing above ``apm.data``.
"""
