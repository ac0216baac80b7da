"""Benchmarks, synthetic tasks, answer extraction and sandboxed scoring."""
