"""Benchmarks: each ``bench/bench_<name>.py`` has ``run(quick: bool) -> dict`` and runs alone
with ``python -m bench.bench_<name>``; ``python -m bench`` (``make bench``) runs them all."""
