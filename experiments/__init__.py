"""Benchmark and training scripts that use the ops; results in RESULTS.md."""
