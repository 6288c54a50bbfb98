"""apm: the evaluation framework for APM-Bench (cross-session persistent memory for egocentric
streaming video assistants)."""

__version__ = "0.1.0"
