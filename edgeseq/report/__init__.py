"""Benchmarks and reports: figures measured side by side in one run."""
