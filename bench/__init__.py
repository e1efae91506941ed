"""Benchmarks: `python -m bench.run` (make bench). Results in bench/results/, report in docs/benchmarks.md."""
