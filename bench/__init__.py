"""Measuring tools (they print figures; they are not tests). Run from the repository root, by path or as modules:
`python bench/benchmark.py --suite cpu` or `python -m bench.benchmark --suite cpu`."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository: the scripts the benchmark runs, data/
