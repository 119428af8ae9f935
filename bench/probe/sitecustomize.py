"""Measurement probe for bench/benchmark.py, loaded into every Python process the benchmark starts.

Python imports `sitecustomize` at startup from the path; the benchmark puts this folder on PYTHONPATH only for
the commands it measures (so it also reaches the process that `trl grpo` launches through accelerate). It does
nothing unless BENCH_STATS_DIR is set. At exit, a process that imported torch writes BENCH_STATS_DIR/<pid>.json:
its peak RSS and its peak CUDA memory. (Completion lengths are read from the runs' own logs.)
"""

import atexit
import json
import os
import sys

STATS_DIR = os.environ.get("BENCH_STATS_DIR")


def _write_stats():
    torch = sys.modules.get("torch")
    if torch is None:  # not a training process (e.g. a launcher that never imported torch)
        return
    try:
        import resource

        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
        peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale
    except ImportError:  # Windows
        peak_rss = None
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    stats = {
        "pid": os.getpid(),
        "argv": sys.argv,
        "peak_rss_bytes": peak_rss,
        "cuda_max_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None,
        "cuda_max_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
    }
    with open(os.path.join(STATS_DIR, f"{os.getpid()}.json"), "w", encoding="utf-8") as handle:
        json.dump(stats, handle)


if STATS_DIR:
    atexit.register(_write_stats)
