"""Every family users train (`rlhf.tiny.FAMILIES`: Llama 3, Qwen2.5, Qwen3, Qwen3-MoE, Gemma 2, Mistral, Phi-3, GPT-2),
tiny and random with its own tokenizer, chat template and generation config, through both trainers in fp32 on CPU.

At the first update the policy is its own old policy and its own reference: PPO's ratio is 1, its approx-KL and KL 0,
GRPO's KL 0. A sampling transform (a generation config's repetition penalty or top-k, dropout, a re-padding that
shifts absolute positions) that reaches the log-probs on one side only breaks them. Generation stops at every end id
the family declares, and a completion that ended at any of them counts as ended. The chat template is applied once:
a family whose template writes BOS, and whose tokenizer adds it too, gets one BOS per prompt.
"""

import pytest
import torch

from conftest import assert_ok, grpo_args, ppo_args, run_in_process, scalars
from rlhf import tiny
from rlhf.data import build_prompt_dataset, tokenize_prompts

# PPO's KL is summed over a completion's tokens (8 here): 1e-6 a token, fp32's noise between the rollout's cached
# generation and a full forward pass (measured up to 2e-7 a token). A sampling transform gives 1e-3 and more.
KL_PER_TOKEN = 1e-6
COMPLETION = 8
# The families that declare an end id besides their tokenizer's EOS (Qwen3's and Qwen3-MoE's are Qwen2.5's tokens).
SEVERAL_ENDS = ("llama3", "qwen2.5", "gemma2", "phi3")


def models_of(families, tiny_models, name):
    return {**families[name], "prompts": tiny_models["prompts"]}


def at_step_one(logged, tag):
    step, value = logged[tag][0]
    assert step == 1, logged[tag]
    return value


def ends(policy):
    """The family's end ids (its generation config's) and its tokenizer's EOS."""
    from transformers import AutoTokenizer, GenerationConfig

    declared = GenerationConfig.from_pretrained(policy).eos_token_id
    return (declared if isinstance(declared, list) else [declared]), AutoTokenizer.from_pretrained(policy).eos_token_id


def trained_rows(checkpoint):
    """The generation a GRPO checkpoint trains on: [(prompt ids, completion ids)], padding dropped."""
    state = torch.load(checkpoint / "grpo_generation_0.pt", weights_only=True)
    return [(prompt[prompt_mask.bool()].tolist(), completion[completion_mask.bool()].tolist())
            for batch in state["buffered_inputs"]
            for prompt, prompt_mask, completion, completion_mask in zip(
                batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"])]


@pytest.mark.slow
@pytest.mark.parametrize("name", tiny.FAMILIES)
def test_ppo_first_update_has_ratio_one_and_no_kl(families, tiny_models, tmp_path, name):
    out = tmp_path / "ppo"
    assert_ok(run_in_process("train_ppo.py", *ppo_args(models_of(families, tiny_models, name), out,
                                                       "--total_episodes", "2")))
    logged = scalars(out)
    measured = {tag: at_step_one(logged, tag)
                for tag in ("train/val/ratio", "train/policy/approxkl_avg", "train/objective/kl")}
    assert measured["train/val/ratio"] == pytest.approx(1, abs=1e-6), measured
    assert measured["train/policy/approxkl_avg"] == pytest.approx(0, abs=1e-6), measured
    assert measured["train/objective/kl"] == pytest.approx(0, abs=KL_PER_TOKEN * COMPLETION), measured


@pytest.fixture(scope="module", params=tiny.FAMILIES)
def grpo_run(request, families, tiny_models, tmp_path_factory):
    """One GRPO step of a family (checkpoint-1 holds the generation it trained on), read by the tests below."""
    name = request.param
    out = tmp_path_factory.mktemp(f"grpo_{name}")
    assert_ok(run_in_process("train_grpo.py", *grpo_args(models_of(families, tiny_models, name), out, "--max_steps",
                                                         "1", "--save_steps", "1")))
    return name, out


@pytest.mark.slow
def test_grpo_first_step_has_no_kl(grpo_run):
    name, out = grpo_run
    assert at_step_one(scalars(out), "train/kl") == pytest.approx(0, abs=1e-6)


@pytest.mark.slow
def test_grpo_prompts_hold_the_templates_bos_once(grpo_run, families):
    """TRL renders and tokenizes the conversation itself: the BOS the template writes is not added again."""
    from transformers import AutoTokenizer

    name, out = grpo_run
    tokenizer = AutoTokenizer.from_pretrained(families[name]["policy"])
    if tokenizer.bos_token_id is None:
        pytest.skip(f"{name} has no BOS")
    written = tokenizer.chat_template.count("bos_token")
    for prompt, _ in trained_rows(out / "checkpoint-1"):
        assert prompt.count(tokenizer.bos_token_id) == written, (name, prompt[:4])


@pytest.mark.slow
@pytest.mark.parametrize("name", tiny.FAMILIES)
def test_grpo_with_dynamic_sampling_first_step_has_no_kl(families, tiny_models, tmp_path, name):
    # The tiny reward model scores every completion differently: every group is kept, none redrawn.
    out = tmp_path / "grpo"
    assert_ok(run_in_process("train_grpo.py", *grpo_args(models_of(families, tiny_models, name), out, "--max_steps",
                                                         "1", "--use_dynamic_sampling")))
    assert at_step_one(scalars(out), "train/kl") == pytest.approx(0, abs=1e-6)


@pytest.mark.parametrize("name", tiny.FAMILIES)
def test_the_prompts_ppo_tokenizes_hold_the_templates_bos_once(families, tiny_models, name):
    from datasets import load_dataset
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(families[name]["policy"])
    if tokenizer.bos_token_id is None:
        pytest.skip(f"{name} has no BOS")
    prompts, _, _ = build_prompt_dataset(load_dataset("json", data_files=str(tiny_models["prompts"]))["train"],
                                         tokenizer, 512)
    written = tokenizer.chat_template.count("bos_token")
    assert tokenizer("x")["input_ids"].count(tokenizer.bos_token_id) == int(name in ("llama3", "gemma2", "mistral"))
    for row in tokenize_prompts(prompts, tokenizer):
        assert row["input_ids"].count(tokenizer.bos_token_id) == written


@pytest.fixture
def ending(families, tmp_path):
    """A family's policy that ends at its declared end ids other than its tokenizer's EOS (0.4 a token in all): the
    ids a stop at EOS alone misses."""
    def build(name):
        declared, eos = ends(families[name]["policy"])
        others = [token for token in declared if token != eos]
        return tiny.ending_family_policy(families[name]["policy"], tmp_path / "ending", others, 0.4 / len(others))
    return build


@pytest.mark.slow
@pytest.mark.parametrize("name", SEVERAL_ENDS)
def test_grpo_stops_at_every_declared_end_and_counts_it_ended(families, tiny_models, ending, tmp_path, name):
    out = tmp_path / "grpo"
    args = grpo_args(models_of(families, tiny_models, name), out, "--max_steps", "1", "--save_steps", "1",
                     "--temperature", "1", "--missing_eos_penalty", "1", "--per_device_train_batch_size", "8",
                     "--prompts_per_step", "4")
    args[args.index("--model_name_or_path") + 1] = ending(name)
    assert_ok(run_in_process("train_grpo.py", *args))
    declared, eos = ends(families[name]["policy"])
    completions = [completion for _, completion in trained_rows(out / "checkpoint-1")]
    ended = [completion[-1] in declared for completion in completions]
    assert all(was or len(completion) == COMPLETION for was, completion in zip(ended, completions))
    assert sum(ended) > len(ended) / 2  # most ended (0.4 a token), at ids other than EOS
    assert all(token not in declared for completion in completions for token in completion[:-1])  # stopped there
    logged = scalars(out)
    cut = 1 - sum(ended) / len(ended)
    assert at_step_one(logged, "train/completions/clipped_ratio") == pytest.approx(cut)  # TRL's count
    assert at_step_one(logged, "train/rewards/missing_eos_penalty/mean") == pytest.approx(-cut)  # the package's


@pytest.mark.slow
@pytest.mark.parametrize("name", SEVERAL_ENDS)
def test_ppo_stops_at_every_declared_end_and_counts_it_ended(families, tiny_models, ending, tmp_path, name):
    out = tmp_path / "ppo"
    args = ppo_args(models_of(families, tiny_models, name), out, "--total_episodes", "8", "--prompts_per_rollout",
                    "8", "--temperature", "1")
    args[args.index("--model_name_or_path") + 1] = ending(name)
    assert_ok(run_in_process("train_ppo.py", *args))
    logged = scalars(out)
    cut = at_step_one(logged, "train/completions/clipped_ratio")
    assert cut < 0.5  # most ended (0.4 a token over 8 tokens: 2% cut off)
    assert at_step_one(logged, "train/val/num_eos_tokens") == pytest.approx(8 * (1 - cut))
