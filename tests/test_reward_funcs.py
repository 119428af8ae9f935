import pytest

from rlhf.cli import UserError
from rlhf.rewards.functions import (
    CheckedRewardFunc,
    MissingEOSPenalty,
    RewardFunctionError,
    load_reward_funcs,
    make_boxed_answer,
)


def test_boxed_answer_rewards_correct_wrong_and_missing():
    reward = make_boxed_answer()
    completions = [[{"role": "assistant", "content": r"so \boxed{7}"}], r"I think \boxed{8}", "seven"]
    assert reward(prompts=[None] * 3, completions=completions, ground_truth=["7", "7", "7"]) == [1.0, 0.0, 0.0]
    assert reward(prompts=[None], completions=[r"\boxed{1,200}"], answer=["... #### 1200"]) == [1.0]
    seeds = make_boxed_answer(1.0, -1.0, -0.5)  # the seed documents' values (--reward_correct 1 ...)
    assert seeds(prompts=[None] * 3, completions=completions, ground_truth=["7"] * 3) == [1.0, -1.0, -0.5]


def test_a_completion_cut_off_scores_the_lower_of_wrong_and_missing_whatever_its_box_says():
    """Seed 2's GRPO repeated its boxed answer until the length limit and ended none (EOS 0%): each scored as the
    answer. Now a completion that did not end has no final answer: it never earns more than an ended one."""
    eos = 2
    completions = [r"\boxed{7} \boxed{7} \boxed{7}", r"\boxed{7}", r"\boxed{8}", "seven"]
    for rewards, cut_off in (((1.0, 0.0, 0.0), 0.0), ((1.0, -1.0, -0.5), -1.0), ((1.0, -0.2, -0.5), -0.5)):
        reward = make_boxed_answer(*rewards, stop_token_ids={eos})
        # TRL's completion_ids: up to and including EOS when the completion ended; the first one ran to the limit
        ids = [[5, 6, 7, 8], [5, eos], [5, 6, eos], [5, eos]]
        scores = reward(prompts=[None] * 4, completions=completions, ground_truth=["7"] * 4, completion_ids=ids)
        assert scores == [cut_off, rewards[0], rewards[1], rewards[2]]
        assert reward.last_verdicts[0] == "correct"  # the verdict stays the verifier's: only the reward changes
        # evaluation passes whether each ended
        assert reward(prompts=[None] * 4, completions=completions, ground_truth=["7"] * 4,
                      ended=[False, True, False, True]) == [cut_off, rewards[0], cut_off, rewards[2]]
    # without stop tokens (a direct call) or ids, every completion counts as ended
    assert make_boxed_answer()(prompts=[None], completions=[r"\boxed{7}"], ground_truth=["7"],
                               completion_ids=[[5, 6]]) == [1.0]


def test_outcome_rewards_are_worked_out_from_the_package_functions():
    from rlhf.rewards.functions import outcome_rewards

    assert outcome_rewards(["boxed_answer"]) == {
        "correct": 1.0, "wrong": 0.0, "right number, no box": 0.0, "no answer": 0.0, "correct, cut off": 0.0,
        "wrong, cut off": 0.0, "no answer, cut off": 0.0}
    # a right number written without a box, credited below a boxed one: the box pays only with a right answer
    credited = outcome_rewards(["boxed_answer"], None, (1.0, 0.0, 0.0, 0.5))
    assert (credited["correct"], credited["right number, no box"], credited["no answer"]) == (1.0, 0.5, 0.0)
    assert credited["correct, cut off"] == 0.0
    # the recipe the seed-1 H200 run gamed: a boxed wrong answer (0) beat no answer (-0.5)
    old = outcome_rewards(["boxed_answer", "boxed_format"], [1, 1], (1.0, -1.0, -0.5))
    assert (old["correct"], old["wrong"], old["no answer"]) == (2.0, 0.0, -0.5)
    assert outcome_rewards(["reward_model", "boxed_answer"]) is None  # a reward model: no table in advance
    assert outcome_rewards(["my_rewards.brevity"]) is None


@pytest.mark.parametrize("names, weights, rewards, problems", [
    (["boxed_answer"], None, (1.0, 0.0, 0.0), []),
    (["boxed_answer", "boxed_format"], [1, 0], (1.0, 0.0, 0.0), []),
    (["boxed_answer"], None, (1.0, -1.0, -0.5), []),  # the seed's values alone: allowed (abstaining beats guessing)
    (["boxed_answer", "boxed_format"], [1, 1], (1.0, -1.0, -0.5), ["box guesses", "not to end"]),  # seed 1's H200 run
    (["boxed_answer", "boxed_format"], [1, 0.2], (1.0, 0.0, 0.0), ["box guesses", "not to end"]),
    (["boxed_answer", "boxed_format"], None, (1.0, 0.0, 0.0), ["box guesses", "not to end"]),
    (["boxed_answer"], None, (0.0, 0.0, 0.0), ["correct answer (0) earns no more than"]),
    (["boxed_answer"], None, (1.0, 0.5, 0.0), ["box guesses"]),
    (["boxed_format"], None, (1.0, 0.0, 0.0), ["correct answer (1) earns no more than wrong", "box guesses",
                                               "not to end"]),
    (["boxed_answer"], None, (1.0, 0.0, 0.0, 0.5), []),  # credit for a right unboxed number, below a boxed one
    (["boxed_answer"], None, (1.0, 0.0, 0.0, 1.0), ["correct answer (1) earns no more than right number, no box"]),
])
def test_reward_order_problems_name_what_a_policy_would_game(names, weights, rewards, problems):
    from rlhf.rewards.functions import check_reward_order, outcome_rewards, reward_order_problems

    found = reward_order_problems(outcome_rewards(names, weights, rewards))
    assert len(found) == len(problems) and all(word in line for word, line in zip(problems, found))
    line = check_reward_order(names, weights, rewards)
    assert (line is None) == (not problems)
    if line:
        assert line.startswith("warning: these rewards can be gamed") and "\n" not in line


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
    from rlhf.rewards.functions import SamplesRewardFunc, _call_style

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


def recipe(args):
    """(--reward_funcs, --reward_weights, (correct, wrong, missing)) of a command line's arguments."""
    def values(flag):
        if flag not in args:
            return None
        after = args[args.index(flag) + 1:]
        return [str(value) for value in after[:next((i for i, a in enumerate(after) if str(a).startswith("--")),
                                                       len(after))]]

    rewards = [1.0, 0.0, 0.0]
    for i, flag in enumerate(("--boxed_correct_reward", "--boxed_wrong_reward", "--boxed_missing_reward")):
        rewards[i] = float(values(flag)[0]) if values(flag) else rewards[i]
    weights = values("--reward_weights")
    return values("--reward_funcs"), weights and [float(w) for w in weights], tuple(rewards)


def shipped_recipes():
    """Every rule-based reward a user is handed: the quickstart's math stages, configs/*.yaml, and each command in
    the docs and README that names --reward_funcs."""
    import shlex
    from pathlib import Path

    import yaml

    import quickstart

    root = Path(__file__).parents[1]
    found = {"quickstart --task math": recipe(quickstart.MATH_REWARDS)}
    for path in sorted((root / "configs").glob("*.yaml")):
        config = yaml.safe_load(path.read_text()) or {}
        if "reward_funcs" in config:
            found[path.name] = (config["reward_funcs"], config.get("reward_weights"), (1.0, 0.0, 0.0))
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted(root.glob("*.py"))]:
        text = path.read_text().replace("\\\n", " ")
        for number, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("python ") and "--reward_funcs" in line:
                found[f"{path.name}:{number}"] = recipe(shlex.split(line.split("#")[0]))
    return found


def test_every_shipped_recipe_pays_a_correct_answer_most_and_cannot_be_gamed():
    from rlhf.rewards.functions import outcome_rewards, reward_order_problems

    recipes = shipped_recipes()
    assert "quickstart --task math" in recipes and sum("boxed_answer" in r[0] for r in recipes.values()) >= 3
    for where, (names, weights, rewards) in recipes.items():
        assert reward_order_problems(outcome_rewards(names, weights, rewards)) == [], where


def test_docs_rewards_table_is_what_the_package_functions_give():
    """docs/rewards.md's table of what each outcome earns, computed here from the package's reward functions."""
    from pathlib import Path

    import quickstart
    from rlhf.rewards.functions import OUTCOMES, outcome_rewards

    names, weights, rewards = recipe(quickstart.MATH_REWARDS)
    columns = {
        "quickstart --task math: boxed_answer + boxed_format, weights 1 0": (names, weights, rewards),
        "boxed_answer alone (the defaults 1 / 0 / 0)": (["boxed_answer"], None, (1.0, 0.0, 0.0)),
        "+ a right unboxed number 0.5": (["boxed_answer"], None, (1.0, 0.0, 0.0, 0.5)),
        "boxed_answer 1 / -1 / -0.5 (the seeds' values)": (["boxed_answer"], None, (1.0, -1.0, -0.5)),
        "gamed: + boxed_format paid, weights 1 1, 1 / -1 / -0.5": (["boxed_answer", "boxed_format"], [1.0, 1.0],
                                                                  (1.0, -1.0, -0.5)),
    }
    totals = {column: outcome_rewards(*recipe_) for column, recipe_ in columns.items()}
    table = ["| outcome | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    table += [f"| {outcome} | " + " | ".join(f"{totals[c][outcome]:g}" for c in columns) + " |"
              for outcome in OUTCOMES]
    docs = (Path(__file__).parents[1] / "docs" / "rewards.md").read_text()
    assert "\n".join(table) in docs, "docs/rewards.md should hold this table:\n" + "\n".join(table)


def test_adding_a_built_in_reward_function_is_one_registry_entry(monkeypatch):
    from rlhf.rewards import functions

    def ends_politely(prompts, completions, **kwargs):
        return [float(functions.completion_text(c).endswith("Thanks.")) for c in completions]

    monkeypatch.setitem(functions.REGISTRY, "ends_politely", lambda boxed_rewards, stop_token_ids: ends_politely)
    (func,) = functions.load_reward_funcs(["ends_politely"])
    assert func(prompts=[None, None], completions=["Yes. Thanks.", "No."]) == [1.0, 0.0]
    # a rule-based function: what each outcome earns is worked out for it too
    assert set(functions.outcome_rewards(["boxed_answer", "ends_politely"])) == set(functions.OUTCOMES)


def test_a_right_number_without_a_box_earns_its_credit_only_where_asked_and_only_when_ended():
    from rlhf.rewards import verifier

    assert verifier.last_number("Ada has 21 - 1 = 19 marbles left.") == "19"
    assert verifier.last_number("It costs 1,200 dollars, or 1.5 times x2.") == "1.5"
    assert verifier.last_number("I do not know.") is None
    completions = ["Ada has 21 - 1 = 19 marbles left.", "Ada has 21 - 1 = 20 marbles left.", r"So \boxed{19}",
                   r"So \boxed{20}", "I do not know.", "Ada has 21 - 1 = 19 marbles"]
    ended = [True, True, True, True, True, False]
    credited = make_boxed_answer(1.0, 0.0, 0.0, unboxed_correct=0.5)
    assert credited(prompts=[None] * 6, completions=completions, ground_truth=["19"] * 6, ended=ended) == [
        0.5, 0.0, 1.0, 0.0, 0.0, 0.0]
    assert credited.last_verdicts[0] == "missing"  # the verdict (the accuracy) reads boxes only
    plain = make_boxed_answer()
    assert plain(prompts=[None] * 6, completions=completions, ground_truth=["19"] * 6, ended=ended) == [
        0.0, 0.0, 1.0, 0.0, 0.0, 0.0]


def test_the_missing_eos_penalty_is_taken_from_completions_cut_off_before_a_stop_token():
    penalty = MissingEOSPenalty(1.5, stop_token_ids={2, 9})
    ids = [[5, 6, 2], [5, 6, 7], [9], [], [5, 9, 6]]  # ended at EOS, cut off, ended at another stop, none, cut off
    assert penalty(prompts=[None] * 5, completions=["a"] * 5, completion_ids=ids) == [0.0, -1.5, 0.0, -1.5, -1.5]
    assert penalty(prompts=[None] * 2, completions=["a"] * 2, ended=[False, True]) == [-1.5, 0.0]
    assert penalty.__name__ == "missing_eos_penalty"  # TRL logs it as rewards/missing_eos_penalty/mean
    unknown = MissingEOSPenalty(1.0)  # no stop tokens: nothing can be read as cut off
    assert unknown(prompts=[None], completions=["a"], completion_ids=[[5, 6]]) == [0.0]


def test_a_function_given_by_an_absolute_path_is_logged_under_its_file_name_not_a_tag_with_two_slashes(tmp_path):
    from rlhf.evaluation.metrics import reward_function
    from rlhf.rewards.functions import load_reward_funcs, logged_name

    (tmp_path / "my_rewards.py").write_text("def brevity(completions, **kwargs):\n    return [0.0] * len(completions)")
    absolute = f"{tmp_path / 'my_rewards.py'}:brevity"
    assert logged_name(absolute) == "my_rewards.py:brevity"
    for name in ("rewards/my_rewards.py:brevity", "../r.py:fn", "my_rewards.brevity", "boxed_answer", "reward_model"):
        assert logged_name(name) == name  # relative paths, dotted paths and built-ins keep the name given
    [func] = load_reward_funcs([absolute])
    assert func.__name__ == "my_rewards.py:brevity"
    assert reward_function(f"train/rewards/{func.__name__}/mean") == func.__name__
