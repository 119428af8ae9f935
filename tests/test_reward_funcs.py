import pytest

from rlhf.cli import UserError
from rlhf.reward_funcs import CheckedRewardFunc, RewardFunctionError, load_reward_funcs, make_boxed_answer


def test_boxed_answer_rewards_correct_wrong_and_missing():
    reward = make_boxed_answer()
    completions = [[{"role": "assistant", "content": r"so \boxed{7}"}], r"I think \boxed{8}", "seven"]
    assert reward(prompts=[None] * 3, completions=completions, ground_truth=["7", "7", "7"]) == [1.0, -1.0, -0.5]
    assert reward(prompts=[None], completions=[r"\boxed{1,200}"], answer=["... #### 1200"]) == [1.0]
    custom = make_boxed_answer(2.0, 0.0, -1.0)
    assert custom(prompts=[None] * 3, completions=completions, ground_truth=["7"] * 3) == [2.0, 0.0, -1.0]


def test_a_broken_reward_function_is_named_in_one_line():
    def crashes(prompts, completions, **kwargs):
        raise KeyError("score")

    def too_few(prompts, completions, **kwargs):
        return [1.0]

    with pytest.raises(RewardFunctionError, match="'crashes' raised KeyError"):
        CheckedRewardFunc(crashes, "crashes")(prompts=["a", "b"], completions=["x", "y"])
    with pytest.raises(RewardFunctionError, match="'too_few' returned 1 values for 2 completions"):
        CheckedRewardFunc(too_few, "too_few")(prompts=["a", "b"], completions=["x", "y"])


def test_unknown_names_and_bad_import_paths_are_user_errors():
    with pytest.raises(UserError, match="unknown reward function 'boxed'"):
        load_reward_funcs(["boxed"])
    with pytest.raises(UserError, match="cannot import reward function 'no_such_module.f'"):
        load_reward_funcs(["no_such_module.f"])


@pytest.mark.parametrize("returned, shown", [
    (["good", "bad"], "returned 'good' (a str) for completion 1"),
    (["1.0", "0.0"], "returned '1.0' (a str) for completion 1"),  # a number in a string is a mistake too
    ([1.0, None], "returned None (a NoneType) for completion 2"),
    (0.5, "returned 0.5 (a float)"),
    ("1.0", "returned '1.0' (a str)"),
    ([1.0, 2.0, 3.0], "returned 3 values for 2 completions"),
])
def test_a_reward_function_returning_other_than_one_number_per_completion_is_one_line(returned, shown):
    func = CheckedRewardFunc(lambda prompts, completions, **kwargs: returned, "my_rewards.score")
    with pytest.raises(RewardFunctionError) as error:
        func(prompts=["a", "b"], completions=["x", "y"])
    assert f"reward function 'my_rewards.score' {shown}" in str(error.value)
    assert str(error.value).endswith("it must return a list of 2 numbers, one per completion")


def test_a_reward_function_may_return_bools_or_numpy_numbers():
    import numpy

    func = CheckedRewardFunc(lambda prompts, completions, **kwargs: numpy.array([True, False]), "flags")
    assert func(prompts=["a", "b"], completions=["x", "y"]) == [1.0, 0.0]


def test_a_reward_function_is_called_as_trl_calls_it_or_with_the_batch_as_dicts_or_refused():
    from rlhf.reward_funcs import SamplesRewardFunc, _call_style

    def trl_style(prompts, completions, **kwargs): ...
    def a_column_by_keyword(completions, *, ground_truth, **kwargs): ...
    def samples_style(samples): ...
    def no_kwargs(prompts, completions): ...  # TRL also passes trainer_state and every column
    def positional_only(x, /, **kwargs): ...

    assert [_call_style(f) for f in (trl_style, a_column_by_keyword, samples_style, no_kwargs, positional_only)] == [
        "trl", "trl", "samples", None, None]
    seen = []
    adapted = SamplesRewardFunc(lambda samples: seen.extend(samples) or [1.0] * len(samples))
    adapted(prompts=[[{"role": "user", "content": "What is 1 + 1?"}]],
            completions=[[{"role": "assistant", "content": "\\boxed{2}"}]], completion_ids=[[5, 6]],
            ground_truth=["2"], trainer_state=None)
    assert seen == [{"prompt": "What is 1 + 1?", "completion": "\\boxed{2}", "ground_truth": "2"}]
