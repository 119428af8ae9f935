"""Measurement probe for bench/benchmark.py, loaded into every Python process the benchmark starts.

Python imports `sitecustomize` at startup from the path; the benchmark puts this folder on PYTHONPATH only for
the commands it measures (so it also reaches the process that `trl grpo` launches through accelerate). It does
nothing unless BENCH_STATS_DIR is set. At exit, a process that imported torch writes BENCH_STATS_DIR/<pid>.json:
its peak RSS, its peak CUDA memory, and, with BENCH_COUNT_GENERATE=1, the completion tokens of every
`generate()` call (PPO logs no completion length; GRPO logs its own and is read from there).
"""

import atexit
import json
import os
import sys
import time

STATS_DIR = os.environ.get("BENCH_STATS_DIR")
generated = []  # (unix time, completion tokens) per generate() call


def _count_generate():
    from transformers.generation.utils import GenerationMixin

    original = GenerationMixin.generate

    def generate(self, *args, **kwargs):
        import torch

        prompt = kwargs.get("input_ids", kwargs.get("inputs", args[0] if args else None))
        output = original(self, *args, **kwargs)
        if not torch.is_tensor(prompt):  # e.g. called with inputs_embeds: nothing to count from
            return output
        sequences = output if torch.is_tensor(output) else output.sequences
        completions = sequences[:, prompt.shape[1]:]
        # A completion runs up to and including its first end-of-sequence token (what follows is padding).
        eos = self.generation_config.eos_token_id
        eos = [] if eos is None else eos if isinstance(eos, list) else [eos]
        ended = torch.isin(completions, torch.tensor(eos, dtype=completions.dtype, device=completions.device))
        lengths = torch.where(ended.any(dim=1), ended.int().argmax(dim=1) + 1, completions.shape[1])
        generated.append((time.time(), int(lengths.sum())))
        return output

    GenerationMixin.generate = generate


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
        "generated": generated,
    }
    with open(os.path.join(STATS_DIR, f"{os.getpid()}.json"), "w", encoding="utf-8") as handle:
        json.dump(stats, handle)


if STATS_DIR:
    if os.environ.get("BENCH_COUNT_GENERATE") == "1":
        _count_generate()
    atexit.register(_write_stats)
