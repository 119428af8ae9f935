"""Peak memory of TRL's own GRPOTrainer on CPU, by phase: where TRL 1.16's extra GB goes (docs/performance.md).

    python bench/lm_head_memory.py                      # the TRL installed (1.16: its fused LM head's CPU tiles)
    python bench/lm_head_memory.py --vocab_tile 4096    # the same with the head's vocabulary tile set to 4096
    PYTHONPATH=/path/to/trl-1.12.0 python bench/lm_head_memory.py   # another TRL, installed with pip --target

TRL's trainer alone (none of this package's code runs in the training): the bundled SmolLM2-135M-Instruct as the
policy and, with a new random score head, as the reward model; 4 prompts of data/preferences.jsonl x 4 completions
of up to 64 tokens a step, float32, gradient checkpointing, seed 42. Prints one JSON object: TRL's version, the peak
RSS of the process (`ru_maxrss`) and by phase (polled every 20 ms; the phase is the TRL method running), and the
losses, which a change of tile must leave as they are.
"""

import argparse
import dataclasses
import json
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GB = 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--vocab_tile", type=int, default=None,
                        help="trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE (TRL 1.15+; its default: 32768)")
    args = parser.parse_args()

    import psutil
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    sys.path.insert(0, str(ROOT))
    from rlhf.bundled import BUNDLED_NAME, ensure_bundled

    if args.vocab_tile:
        import trl.trainer.utils as trl_utils

        trl_utils._CHUNKED_LOGPROB_CHUNK_SIZE = args.vocab_tile
    policy = str(ensure_bundled(ROOT / BUNDLED_NAME))
    work = Path(tempfile.mkdtemp(prefix="lm_head_memory_"))
    scorer = AutoModelForSequenceClassification.from_pretrained(policy, num_labels=1)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    scorer.config.pad_token_id = tokenizer.pad_token_id or tokenizer.eos_token_id
    scorer.save_pretrained(work / "reward_model")
    tokenizer.save_pretrained(work / "reward_model")
    del scorer

    # The phase running, and the peak RSS seen in each.
    process, phase, peaks, done = psutil.Process(), ["load"], {}, threading.Event()

    def poll():
        while not done.is_set():
            peaks[phase[0]] = max(peaks.get(phase[0], 0), process.memory_info().rss)
            time.sleep(0.02)

    def tagged(cls, name, label):
        method = getattr(cls, name, None)
        if method is None:
            return

        def wrapped(self, *a, **k):
            before, phase[0] = phase[0], label
            try:
                return method(self, *a, **k)
            finally:
                phase[0] = before

        setattr(cls, name, wrapped)

    tagged(GRPOTrainer, "_generate_and_score_completions", "generation, rewards, old/reference log-probs")
    tagged(GRPOTrainer, "compute_loss", "policy forward")
    tagged(GRPOTrainer, "training_step", "policy backward and step")  # compute_loss inside it is tagged apart
    threading.Thread(target=poll, daemon=True).start()

    rows = [json.loads(line) for line in (ROOT / "data" / "preferences.jsonl").open(encoding="utf-8")][:16]
    prompts = [([{"role": "system", "content": r["system"]}] if r.get("system", "").strip() else [])
               + [{"role": "user", "content": r["question"]}] for r in rows]
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    settings = {"output_dir": str(work / "out"), "per_device_train_batch_size": 16, "num_generations": 4,
                "max_completion_length": 64, "max_steps": args.steps, "gradient_checkpointing": True, "bf16": False,
                "use_cpu": True, "beta": 0.04, "report_to": "none", "logging_steps": 1, "save_strategy": "no",
                "seed": 42, "temperature": 0.7, "top_p": 0.9, "learning_rate": 5e-6}
    config = GRPOConfig(**{key: value for key, value in settings.items() if key in fields})
    trainer = GRPOTrainer(model=policy, reward_funcs=str(work / "reward_model"), args=config,
                          train_dataset=Dataset.from_dict({"prompt": prompts}))
    phase[0] = "other"
    trainer.train()
    done.set()
    print(json.dumps({
        "trl": trl.__version__, "torch": torch.__version__, "steps": args.steps, "vocab_tile": args.vocab_tile,
        "peak_rss_GB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB, 2),
        "peak_rss_GB_by_phase": {name: round(value / GB, 2) for name, value in peaks.items()},
        "losses": [entry["loss"] for entry in trainer.state.log_history if "loss" in entry],
    }, indent=1))


if __name__ == "__main__":
    main()
