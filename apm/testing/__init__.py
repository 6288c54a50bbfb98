"""Test rigs, apart from the product: a fault-injecting OpenAI-compatible server and synthetic run
directories in the record contract. Tests and benchmarks import them; the product never does
(tests/test_architecture.py)."""
