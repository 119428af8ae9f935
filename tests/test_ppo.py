"""PPO's pure functions as units (the adaptive KL maths, completion lengths in `rlhf.ppo.maths`), the tokenizer
check and `PPORewards` (`rlhf.ppo.models`).

The trainer in memory on tiny models: test_ppo_trainer.py; end to end (logging, checkpoints, resume): test_cli_ppo.py.
"""

import pytest


def test_adaptive_kl_moves_toward_the_target():
    from rlhf.kl_control import adaptive_kl_coef

    assert adaptive_kl_coef(0.1, kl=12.0, target=6.0, n_steps=100, horizon=1000) == pytest.approx(0.1 * 1.02)
    assert adaptive_kl_coef(0.1, kl=3.0, target=6.0, n_steps=100, horizon=1000) == pytest.approx(0.1 * 0.98)
    assert adaptive_kl_coef(0.1, kl=6.6, target=6.0, n_steps=100, horizon=1000) == pytest.approx(0.1 * 1.01)
    assert adaptive_kl_coef(0.1, kl=6.0, target=6.0, n_steps=100, horizon=1000) == pytest.approx(0.1)


@pytest.mark.parametrize("kl", [0.0, 1e-9, 3.0, 6.0, 60.0, 1e9])
@pytest.mark.parametrize("n_steps, horizon", [(1, 10_000), (16, 1), (6, 1), (640, 100), (10**9, 1)])
def test_adaptive_kl_stays_positive_and_moves_by_a_bounded_factor(kl, n_steps, horizon):
    """Whatever the horizon and batch, one update multiplies the coefficient by a factor in [0.8, 1.2]: uncapped,
    `adaptive_kl_coef(0.05, 0, 6, 16, 1)` was -0.11 (the sign flipped, rewarding distance from the reference)."""
    from rlhf.kl_control import adaptive_kl_coef

    coef = 0.05
    for _ in range(50):  # many updates in a row: still positive, never below 0.8 ** 50 of where it began
        new = adaptive_kl_coef(coef, kl=kl, target=6.0, n_steps=n_steps, horizon=horizon)
        assert 0.8 * coef - 1e-15 <= new <= 1.2 * coef + 1e-15 and new > 0
        coef = new
    assert adaptive_kl_coef(0.05, 0, 6, 16, 1) == pytest.approx(0.04)  # the case: the floor, not -0.11
    assert adaptive_kl_coef(0.05, 100, 6, 16, 1) == pytest.approx(0.06)


@pytest.mark.parametrize("updates, per_update, horizon", [(59, 16, 10_000), (7, 4, 10), (3, 64, 32), (0, 16, 1)])
def test_the_most_the_kl_coefficient_can_move_is_what_the_controller_moves_it_by_at_its_bound(updates, per_update,
                                                                                             horizon):
    from rlhf.kl_control import adaptive_kl_coef, most_kl_coef_change

    up = down = 0.05
    for _ in range(updates):  # a KL far above the target, and far below it, at every update
        up = adaptive_kl_coef(up, kl=1e9, target=6.0, n_steps=per_update, horizon=horizon)
        down = adaptive_kl_coef(down, kl=0.0, target=6.0, n_steps=per_update, horizon=horizon)
    assert up / 0.05 - 1 == pytest.approx(most_kl_coef_change(updates, per_update, horizon))
    assert 1 - down / 0.05 <= most_kl_coef_change(updates, per_update, horizon) + 1e-12  # it falls by no more


def test_a_kl_horizon_too_long_for_the_run_is_said_with_the_runs_own():
    from rlhf.kl_control import MEASURABLE, kl_horizon_note, most_kl_coef_change

    # 60 rollouts of 16 prompts at the default horizon move kl_coef by under 2% (59 adaptations that a later rollout
    # trains with), where a horizon of the run's own length (960 episodes) lets it move by 22%.
    assert most_kl_coef_change(59, 16, 10_000) == pytest.approx(1.00032 ** 59 - 1)
    assert kl_horizon_note("--kl_coef", 6, 59, 16, 10_000, "episodes", "rollouts") == (
        "note: --target_kl 6 can move --kl_coef by at most 1.91% in this run (59 adaptations of 16 episodes at "
        "--kl_horizon 10000); --kl_horizon 960, the run's own length in episodes, lets it move by up to 22%")
    assert most_kl_coef_change(59, 16, 960) > MEASURABLE
    assert kl_horizon_note("--kl_coef", 6, 59, 16, 960, "episodes", "rollouts") is None  # it can: nothing said
    assert kl_horizon_note("--beta", 0.1, 0, 4, 10_000, "completions", "logs") == (
        "note: --target_kl 0.1 cannot move --beta in this run: it adapts between logs, and the run has one; train "
        "longer, or drop --target_kl")


def test_completion_lengths_count_up_to_and_including_the_first_stop_token():
    import torch

    from rlhf.ppo.maths import completion_lengths

    eos = 2
    completions = torch.tensor([[5, 6, eos, eos, eos],  # ended at its 3rd token; the rest is padding
                                [eos, eos, eos, eos, eos],  # ended at once
                                [5, 6, 7, 8, 9]])  # cut at the maximum length
    lengths, clipped = completion_lengths(completions, (eos,))
    assert lengths.tolist() == [3, 1, 5] and clipped.tolist() == [False, False, True]
    lengths, clipped = completion_lengths(completions, ())  # no stop token: every completion runs to the end
    assert lengths.tolist() == [5, 5, 5] and clipped.all()
    lengths, clipped = completion_lengths(completions, (eos, 7))  # a second end id (an end-of-turn token)
    assert lengths.tolist() == [3, 1, 3] and not clipped.any()


def test_a_response_is_cut_after_its_first_stop_token_of_any_declared_id():
    import torch

    from rlhf.ppo.maths import stop_mask, truncate_response

    eos, eot, pad = 2, 3, 0
    responses = torch.tensor([[5, eot, 6, eos], [5, 6, eos, eot], [5, 6, 7, 8]])
    assert truncate_response((eos,), pad, responses).tolist() == [[5, eot, 6, eos], [5, 6, eos, pad], [5, 6, 7, 8]]
    assert truncate_response((eos, eot), pad, responses).tolist() == [[5, eot, pad, pad], [5, 6, eos, pad],
                                                                       [5, 6, 7, 8]]
    assert torch.equal(truncate_response((), pad, responses), responses)  # no stop token: nothing is cut
    assert stop_mask(responses, (eos, eot)).any(dim=-1).tolist() == [True, True, False]


def test_a_reward_model_with_another_tokenizer_is_refused_naming_both_and_the_way_out(tiny_models):
    from transformers import AutoTokenizer

    from rlhf.errors import UserError
    from rlhf.ppo.models import check_same_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_models["policy"])
    check_same_tokenizer(tokenizer, tiny_models["reward_model"], "reward model", "--reward_model_path")  # same one
    other = tiny_models["other_reward_model"]
    with pytest.raises(UserError) as error:
        check_same_tokenizer(tokenizer, other, "reward model", "--reward_model_path")
    message = str(error.value)
    assert f"reward model {other} uses another tokenizer" in message
    assert "--reward_model_path" in message and "train_grpo.py" in message


def test_ppo_rewards_score_each_completion_with_its_own_row_and_log_each_function(tmp_path, monkeypatch):
    """`PPORewards` finds each sequence's dataset row from its left-padded prompt ids, decodes the completion as GRPO
    does, and returns the weighted sum of the functions."""
    import torch
    from datasets import Dataset
    from transformers import TrainerState

    from rlhf import tiny
    from rlhf.data import build_prompt_dataset, tokenize_prompts
    from rlhf.ppo.models import PPORewards
    from rlhf.rewards.functions import load_reward_funcs
    from rlhf.rewards.reward_model import ensure_distinct_pad

    tokenizer = ensure_distinct_pad(tiny.build_tokenizer())
    rows = Dataset.from_list([{"question": "What is 1 + 1?", "ground_truth": "2"},
                              {"question": "What is 10 + 20?", "ground_truth": "30"}])
    prompts, _, _ = build_prompt_dataset(rows, tokenizer, 512)
    token_ids = tokenize_prompts(prompts, tokenizer)["input_ids"]
    (tmp_path / "echo_rewards.py").write_text(
        "seen = {}\n\n\n"
        "def echo(prompts, completions, ground_truth, trainer_state, **kwargs):\n"
        "    seen.update(prompts=prompts, completions=completions, step=trainer_state.global_step)\n"
        "    return [float(answer) for answer in ground_truth]\n")
    monkeypatch.syspath_prepend(tmp_path)
    names = ["boxed_answer", "echo_rewards.echo"]
    funcs = load_reward_funcs(names, boxed_rewards=(1.0, -1.0, -0.5), stop_token_ids={tokenizer.eos_token_id})
    rewards = PPORewards(names, funcs, [1.0, 0.5], tokenizer, prompts, token_ids, (tokenizer.eos_token_id,))
    rewards.trainer_state = lambda: TrainerState(global_step=3)

    pad = tokenizer.pad_token_id
    answers = [r"1 + 1 = 2. \boxed{2}", r"10 + 20 = 31. \boxed{31}"]
    completions = [tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                   for text in answers]
    # The batch in reverse dataset order, prompts padded on the left, completions on the right (as TRL's rollout).
    prompt_length = max(map(len, token_ids))
    completion_length = max(map(len, completions)) + 2
    batch = torch.tensor([[pad] * (prompt_length - len(token_ids[i])) + token_ids[i] + completions[i]
                          + [pad] * (completion_length - len(completions[i])) for i in (1, 0)])
    scores = rewards.score_completions(batch, prompt_length)

    # Row 1: wrong (-1) + 0.5 x 30; row 0: right (+1) + 0.5 x 2.
    assert scores.tolist() == pytest.approx([-1 + 15.0, 1 + 1.0])
    from echo_rewards import seen

    assert [c[0]["content"] for c in seen["completions"]] == answers[::-1]  # EOS and padding dropped
    assert [p[-1]["content"] for p in seen["prompts"]] == ["What is 10 + 20?", "What is 1 + 1?"]
    assert seen["step"] == 3
    metrics = rewards.recorded_metrics(lambda values: values)
    assert metrics["rewards/boxed_answer/mean"] == pytest.approx(0.0)
    assert metrics["rewards/echo_rewards.echo/mean"] == pytest.approx(16.0)
    assert rewards.recorded_metrics(lambda values: values) == {}  # each log reports the scores since the last
    # Row 0's right answer cut off at the length limit (no EOS): the lower of wrong and missing, -1, not +1
    cut = batch[1:].clone()
    text = completions[0][:-1]  # the answer without its EOS, then a token repeated up to the length limit
    cut[0, prompt_length:] = torch.tensor(text + [text[0]] * (completion_length - len(text)))
    assert rewards.score_completions(cut, prompt_length).tolist() == pytest.approx([-1 + 1.0])


def test_ppo_rewards_end_a_completion_at_any_of_the_runs_stop_tokens(tiny_models, end_of_turn_models):
    """A correct boxed answer that ended at the model's end-of-turn id (not the tokenizer's EOS) earns its reward:
    the functions get its ids up to that token, as TRL's GRPO passes them. With EOS alone it scored as cut off."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer

    from rlhf.data import build_prompt_dataset, tokenize_prompts
    from rlhf.models import stop_token_ids
    from rlhf.ppo.models import PPORewards
    from rlhf.rewards.functions import load_reward_funcs
    from rlhf.rewards.reward_model import ensure_distinct_pad

    tokenizer = ensure_distinct_pad(AutoTokenizer.from_pretrained(tiny_models["policy"]))
    prompts, _, _ = build_prompt_dataset(Dataset.from_list([{"question": "What is 1 + 1?", "ground_truth": "2"}]),
                                         tokenizer, 512)
    token_ids = tokenize_prompts(prompts, tokenizer)["input_ids"]
    answer = tokenizer(r"\boxed{2}", add_special_tokens=False)["input_ids"]
    pad, eot = tokenizer.pad_token_id, end_of_turn_models["end_of_turn"]
    batch = torch.tensor([token_ids[0] + answer + [eot, pad, pad]])
    for stops, expected in ((stop_token_ids(tokenizer, end_of_turn_models["policy"]), 1.0),
                            ((tokenizer.eos_token_id,), -1.0)):
        funcs = load_reward_funcs(["boxed_answer"], boxed_rewards=(1.0, -1.0, -0.5), stop_token_ids=stops)
        rewards = PPORewards(["boxed_answer"], funcs, None, tokenizer, prompts, token_ids, stops)
        assert rewards.score_completions(batch, len(token_ids[0])).tolist() == [expected]


@pytest.mark.parametrize("init", ["random", "zero"])
def test_a_trained_value_head_is_kept_or_set_to_zero_with_a_note(tiny_models, tmp_path, capsys, init):
    """--value_model_path (here the reward model, a trained head) with --value_head_init zero: the head is set to 0
    and the launch says so in one line; without zero the trained head is kept as it is."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from config import PPOModelArguments, PPOTrainingConfig, PromptDataArguments
    from rlhf.cli import parse_args
    from rlhf.ppo.models import load_ppo_models

    trained = str(tiny_models["reward_model"])
    model_args, _, training_args = parse_args((PPOModelArguments, PromptDataArguments, PPOTrainingConfig), [
        "--model_name_or_path", str(tiny_models["policy"]), "--reward_funcs", "boxed_answer", "--value_model_path",
        trained, "--value_head_init", init, "--output_dir", str(tmp_path / "out")])
    capsys.readouterr()
    tokenizer = AutoTokenizer.from_pretrained(tiny_models["policy"])
    value_model = load_ppo_models(model_args, training_args, tokenizer)[3]
    notes = [line for line in capsys.readouterr().out.splitlines() if "--value_head_init" in line]
    head = AutoModelForSequenceClassification.from_pretrained(trained).score.weight
    if init == "zero":
        assert value_model.score.weight.abs().sum().item() == 0
        assert len(notes) == 1 and notes[0].startswith("note: --value_head_init zero sets the trained head")
        assert trained in notes[0]
    else:
        assert torch.equal(value_model.score.weight, head) and not notes


# ---- PPO's maths on values worked out by hand (rlhf.ppo.maths) ----


def test_kl_penalized_rewards_put_the_kl_penalty_at_every_token_and_the_score_after_the_last():
    import math

    import torch

    from rlhf.ppo.maths import kl_penalized_rewards

    scores = torch.tensor([1.0, 2.0])
    logprobs = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    ref_logprobs = torch.tensor([[-1.5, -1.0, -0.5], [-2.0, -3.0, -2.0]])
    ends = torch.tensor([0, 2])  # the first completion is one token; the second fills the whole length
    rewards, kl, penalty = kl_penalized_rewards(scores, logprobs, ref_logprobs, ends, kl_coef=0.1)
    # k1: log p - log p_ref = [0.5, 0, -0.5] and [0, 1, 0]; penalty -0.1 x that
    assert torch.allclose(kl, torch.tensor([[0.5, 0.0, -0.5], [0.0, 1.0, 0.0]]))
    assert torch.allclose(penalty, torch.tensor([[-0.05, 0.0, 0.05], [0.0, -0.1, 0.0]]))
    # the score one position after the last token (where the value model reads it), or at the end when it is full
    assert torch.allclose(rewards, torch.tensor([[-0.05, 1.0, 0.05], [0.0, -0.1, 2.0]]))
    _, k3, _ = kl_penalized_rewards(scores, logprobs, ref_logprobs, ends, kl_coef=0.1, kl_estimator="k3")
    # k3: (r - 1) - log r, r = p_ref / p: never negative
    assert k3[0].tolist() == pytest.approx([math.exp(-0.5) - 0.5, 0.0, math.exp(0.5) - 1.5])
    with pytest.raises(ValueError, match="kl_estimator must be k1 or k3, got 'k2'"):  # not k3 by default
        kl_penalized_rewards(scores, logprobs, ref_logprobs, ends, kl_coef=0.1, kl_estimator="k2")


@pytest.mark.parametrize("gamma, lam, advantages, returns", [
    (1.0, 1.0, [0.5, 0.5, 0.5], [1.0, 1.0, 1.0]),  # Monte Carlo: the return less the value
    (1.0, 0.5, [0.125, 0.25, 0.5], [0.625, 0.75, 1.0]),  # each step back halves the last TD error
    (0.9, 1.0, [0.31, 0.4, 0.5], [0.81, 0.9, 1.0]),  # discounted returns: 0.9^2, 0.9, 1
])
def test_gae_on_a_reward_at_the_last_token(gamma, lam, advantages, returns):
    import torch

    from rlhf.ppo.maths import gae

    got_advantages, got_returns = gae(torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.5, 0.5, 0.5]]), gamma, lam)
    assert got_advantages[0].tolist() == pytest.approx(advantages)
    assert got_returns[0].tolist() == pytest.approx(returns)


@pytest.mark.parametrize("value_lam, returns", [
    (1.0, [1.0, 1.0, 1.0]),  # Monte Carlo: the reward still to come, whatever the values say
    (0.0, [0.2, 0.6, 1.0]),  # TD(0): r_t + V_{t+1}
    (0.5, [0.5, 0.8, 1.0]),  # the policy's own lambda: A + V
    (None, [0.5, 0.8, 1.0]),
])
def test_gae_with_a_value_lambda_of_its_own_changes_the_returns_and_not_the_advantages(value_lam, returns):
    import torch

    from rlhf.ppo.maths import gae

    rewards, values = torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.5, 0.2, 0.6]])
    # TD errors r_t + V_{t+1} - V_t: -0.3, 0.4, 0.4; at lam 0.5 each step back adds half the next advantage
    advantages, got_returns = gae(rewards, values, 1.0, 0.5, value_lam)
    assert advantages[0].tolist() == pytest.approx([0.0, 0.6, 0.4])
    assert got_returns[0].tolist() == pytest.approx(returns)
    if value_lam in (None, 0.5):  # the same computation as without it, to the bit
        assert torch.equal(got_returns, gae(rewards, values, 1.0, 0.5)[1])


def test_the_clipped_value_loss_keeps_the_larger_error():
    import torch

    from rlhf.ppo.maths import clipped_value_loss

    mask = torch.tensor([[True, True]])
    # clipped to old +- 0.2: 0.2 and 2.7; squared errors to 2.0: unclipped 1, 1; clipped 3.24, 0.49
    loss, clipfrac = clipped_value_loss(torch.tensor([[1.0, 3.0]]), torch.tensor([[0.0, 2.5]]),
                                        torch.tensor([[2.0, 2.0]]), 0.2, mask)
    assert loss.item() == pytest.approx(0.5 * (3.24 + 1.0) / 2) and clipfrac.item() == 0.5
    loss, _ = clipped_value_loss(torch.tensor([[1.0, 3.0]]), torch.tensor([[0.0, 2.5]]),
                                 torch.tensor([[2.0, 2.0]]), 0.2, torch.tensor([[False, True]]))
    assert loss.item() == pytest.approx(0.5)  # the masked position does not count


@pytest.mark.parametrize("advantage, loss, clipped", [
    (1.0, (-1.2 - 0.5) / 2, 0.5),  # ratio 1.5 clipped to 1.2 (no gain past it); 0.5 kept (the loss is larger)
    (-1.0, (1.5 + 0.8) / 2, 0.5),  # ratio 1.5 kept (a worse action made likelier pays in full); 0.5 clipped to 0.8
])
def test_the_clipped_policy_loss_is_the_pessimistic_bound(advantage, loss, clipped):
    import math

    import torch

    from rlhf.ppo.maths import clipped_policy_loss

    old = torch.tensor([[0.0, 0.0]])
    new = torch.tensor([[math.log(1.5), math.log(0.5)]], requires_grad=True)
    got, ratio, clipfrac, approxkl = clipped_policy_loss(new, old, torch.full((1, 2), advantage), 0.2,
                                                         torch.tensor([[True, True]]))
    assert got.item() == pytest.approx(loss) and clipfrac.item() == clipped
    assert ratio.item() == pytest.approx((1.5 + 0.5) / 2)
    assert approxkl.item() == pytest.approx(0.5 * (math.log(1.5) ** 2 + math.log(0.5) ** 2) / 2)
    got.backward()  # the gradient reaches only the unclipped term
    kept = [0.0, 1.0] if advantage > 0 else [1.0, 0.0]
    assert (new.grad[0] != 0).float().tolist() == kept
    # The second position padding: the mean ratio and the approximate KL are the first's alone (a padding position's
    # log ratio is 0 and its ratio 1: counted, they pulled both toward no change)
    _, ratio, _, approxkl = clipped_policy_loss(new, old, torch.full((1, 2), advantage), 0.2,
                                                torch.tensor([[True, False]]))
    assert ratio.item() == pytest.approx(1.5) and approxkl.item() == pytest.approx(0.5 * math.log(1.5) ** 2)


def test_entropy_of_logits():
    import math

    import torch

    from rlhf.ppo.maths import entropy

    values = entropy(torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]]))
    assert values.tolist() == pytest.approx([math.log(2), -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))])


@pytest.mark.parametrize("init", ["random", "zero"])
def test_the_value_models_new_head_starts_random_or_at_zero(tiny_models, tmp_path, init):
    """--value_head_init zero: every value is 0 at the first rollout, so with --lam 1.0 its advantages are the rewards
    (no untrained critic's noise); random is transformers' start, TRL's."""
    import torch
    from transformers import AutoTokenizer

    from config import PPOModelArguments, PPOTrainingConfig, PromptDataArguments
    from rlhf.cli import parse_args
    from rlhf.ppo.models import load_ppo_models

    model_args, _, training_args = parse_args((PPOModelArguments, PromptDataArguments, PPOTrainingConfig), [
        "--model_name_or_path", str(tiny_models["policy"]), "--reward_funcs", "boxed_answer",
        "--value_head_init", init, "--output_dir", str(tmp_path / "out")])
    tokenizer = AutoTokenizer.from_pretrained(tiny_models["policy"])
    policy, _, _, value_model = load_ppo_models(model_args, training_args, tokenizer)
    values = value_model(torch.tensor([[5, 6, 7, 8]])).logits
    assert torch.all(values == 0).item() == (init == "zero")
    # the body is the policy's either way: only the head differs
    assert torch.equal(value_model.model.embed_tokens.weight, policy.model.embed_tokens.weight)


def test_one_right_answer_in_four_pushes_the_other_three_down_only_when_whitened():
    """Why the math quickstart's PPO keeps GAE's advantages: with the value head at 0 and lam 1.0 a rollout whose one
    completion in four scored 1 gives that one's tokens advantage 1 and the others' 0; whitened, the other three's
    turn negative (each pushed down, and with it whatever the wrong answers share, the box or EOS)."""
    import torch

    from rlhf.ppo.maths import gae, masked_whiten

    rewards = torch.zeros(4, 3)
    rewards[0, -1] = 1.0  # the score, after the first completion's last token
    advantages, returns = gae(rewards, torch.zeros(4, 3), 1.0, 1.0)
    assert advantages[0].tolist() == [1.0, 1.0, 1.0] and advantages[1:].abs().sum().item() == 0
    assert torch.equal(returns, advantages)  # values of 0: the value model learns the returns
    whitened = masked_whiten(advantages, torch.ones(4, 3, dtype=torch.bool))
    assert (whitened[0] > 1).all() and (whitened[1:] < 0).all()


def test_close_turns_writes_the_turns_end_after_cut_off_completions_only():
    import torch

    from rlhf.ppo.maths import close_turns

    pad, eos, end = 0, 9, [9, 8]  # a two-token end of turn
    batch = torch.tensor([[pad, 5, 6, 1, 2, 3],      # cut off: no stop token in 1 2 3
                          [4, 5, 6, 1, eos, pad],    # ended
                          [pad, pad, 6, 7, pad, pad]])  # a completion that generated pad: closed after 7
    closed = close_turns(batch, 3, (eos,), end, pad)
    assert closed.tolist() == [[pad, 5, 6, 1, 2, 3, 9, 8],
                               [4, 5, 6, 1, eos, pad, pad, pad],
                               [pad, pad, 6, 7, 9, 8, pad, pad]]
    ended = batch[1:2]
    assert close_turns(ended, 3, (eos,), end, pad) is ended  # nothing cut off: the same tensor
    assert close_turns(batch, 3, (eos,), [], pad) is batch  # no chat template: nothing to close with


def test_ppo_scores_a_cut_off_completion_as_grpo_and_the_evaluation_do(tmp_path):
    """The reward model reads a completion cut off at the length limit at the end of its turn, in PPO's rollout
    (token ids, `score_completions`) and in `PPORewards` (the reward model beside reward functions) as in GRPO's scorer
    and the evaluation (`score_conversations` of the rendered conversation). Read at its last token instead, SmolLM2's
    reward model scored the base policy's cut-off answers 0.79 lower on average (sd 1.4): PPO chased another score."""
    import torch
    from datasets import Dataset

    from rlhf import tiny
    from rlhf.data import build_prompt_dataset, tokenize_prompts
    from rlhf.ppo.maths import get_reward, score_completions
    from rlhf.ppo.models import PPORewards
    from rlhf.rewards.reward_model import (
        RewardModelScorer,
        ensure_distinct_pad,
        load_reward_model,
        turn_end_ids,
    )

    tokenizer = ensure_distinct_pad(tiny.build_tokenizer())
    assert turn_end_ids(tokenizer) == [tokenizer.eos_token_id]  # the tiny template's <|im_end|>
    model, reward_tokenizer = load_reward_model(str(tiny.build_reward_model(tmp_path / "rm", tiny.build_tokenizer())))
    prompts, _, _ = build_prompt_dataset(Dataset.from_list([{"question": "Why is the river so wide?"}]), tokenizer,
                                         512)
    token_ids = tokenize_prompts(prompts, tokenizer)["input_ids"]
    prompt_length, pad, eos = len(token_ids[0]), tokenizer.pad_token_id, tokenizer.eos_token_id
    words = tokenizer("The river is wide because the city", add_special_tokens=False)["input_ids"]
    batch = torch.tensor([token_ids[0] + words + [eos, pad],  # ended
                          token_ids[0] + words + words[:2]])  # cut off at the limit
    texts = ["The river is wide because the city", tokenizer.decode(words + words[:2])]
    grpo = RewardModelScorer(model, reward_tokenizer, "rm")(
        [prompts[0]["prompt"]] * 2, [[{"role": "assistant", "content": text}] for text in texts])

    ppo = score_completions(model, batch, pad, prompt_length, (eos,), turn_end_ids(tokenizer))
    assert ppo.tolist() == pytest.approx(grpo, abs=1e-5)
    rewards = PPORewards(["reward_model"], [model], None, tokenizer, prompts, token_ids, (eos,))
    assert rewards.score_completions(batch, prompt_length).tolist() == pytest.approx(grpo, abs=1e-5)
    # read at its last token (TRL's PPO), the cut-off completion scored otherwise
    assert get_reward(model, batch, pad, prompt_length)[1][1].item() != pytest.approx(grpo[1], abs=1e-3)


def test_ppo_pads_with_no_token_a_completion_ends_at():
    """Qwen2.5 pads with `<|endoftext|>`, one of its declared ends: PPO masks pad-id tokens, so a completion that
    ended there at its first token was masked whole (a NaN loss at step 1)."""
    from rlhf import tiny
    from rlhf.rewards.reward_model import ensure_distinct_pad

    tokenizer = tiny.build_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|endoftext|>", "<|fim_pad|>"]})
    tokenizer.pad_token = "<|endoftext|>"
    end = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert ensure_distinct_pad(tokenizer).pad_token == "<|endoftext|>"  # not the EOS: kept, where no end is given
    assert ensure_distinct_pad(tokenizer, (tokenizer.eos_token_id, end)).pad_token == "<|fim_pad|>"
