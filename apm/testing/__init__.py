"""Test rigs, apart from the product: a fault-injecting OpenAI-compatible server, synthetic run
directories in the record contract and the tiny random-weight VLM builder. Tests, benchmarks and the
demo use them; the product never imports them (tests/test_architecture.py)."""
