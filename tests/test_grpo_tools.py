"""grpo_tools.py: its rubric on hand-written trajectories, the multi-turn loop, and the offline demo."""

import json
from types import SimpleNamespace

import pytest
from conftest import REPO, run_script
from hypothesis import given
from hypothesis import strategies as st

import grpo_tools as gt

TINY_TOOLS_MODEL = REPO / "assets" / "tiny-qwen-tools"
TOY_TOOLS_DATA = REPO / "assets" / "toy_tools"
FAST_RUN = ["--model_name_or_path", str(TINY_TOOLS_MODEL), "--dataset_name", str(TOY_TOOLS_DATA),
            "--learning_rate", "2e-4", "--per_device_train_batch_size", "16", "--gradient_accumulation_steps", "1",
            "--num_generations", "8", "--max_completion_length", "96", "--gradient_checkpointing", "false",
            "--logging_steps", "1", "--num_eval_examples", "16", "--eval_batch_size", "16", "--warmup_steps", "0"]


def env(calls=0, failures=0, budget=3):
    return SimpleNamespace(calls=calls, failures=failures, budget=budget)


def call(expression):
    return {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "calculator", "arguments": {"expression": expression}}}]}


def tool(content):
    return {"role": "tool", "name": "calculator", "content": content}


def final(text):
    return {"role": "assistant", "content": text}


# (trajectory, environment tally, correct?)
TRAJECTORIES = [
    ([final("<answer>1081</answer>")], env(), True),  # right without a tool
    ([final("<answer>1000</answer>")], env(), False),  # a guess
    ([call("23 * 47"), tool("1081"), final("<answer>1081</answer>")], env(1), True),
    ([call("23 * 47"), tool("1081"), final("<answer>1080</answer>")], env(1), False),  # misread the result
    ([call("23 *"), tool("Error: incomplete expression"), final("<answer>1081</answer>")], env(1, 1), True),
    ([call("1"), tool("1"), call("1"), tool("1"), call("1"), tool("1"), call("1"), tool("1"), call("1"),
      tool("1"), final("<answer>1081</answer>")], env(5), True),  # over the budget
    ([call("23 * 47"), tool("1081")], env(1), False),  # never answered
    ([call("23 * 47"), tool("<answer>1081</answer>"), final("done")], env(1), False),  # answer only in a tool result
]


@pytest.mark.parametrize("trajectory, tally, correct", TRAJECTORIES)
def test_rubric_on_hand_written_trajectories(trajectory, tally, correct):
    assert gt.correctness_reward([trajectory], answer=["#### 1081"]) == [float(correct)]
    success = gt.tool_success_reward(environments=[tally])[0]
    assert success is None if tally.calls == 0 else success == (tally.calls - tally.failures) / tally.calls
    assert gt.successful_call_credit(environments=[tally]) == [min(1.0, 0.5 * (tally.calls - tally.failures))]
    assert gt.tool_budget_penalty(environments=[tally]) == [-min(1.0, max(0, tally.calls - 3) / 3)]


def test_tool_terms_can_never_outweigh_a_correct_answer():
    weights = {func.__name__: weight for func, weight in gt.RUBRIC}
    best_tool_bonus = 0.0
    for calls in range(0, 30):
        for failures in range(0, calls + 1):
            tally = [env(calls, failures)]
            bonus = sum(weight * (func(environments=tally, completions=[[]], answer=["1"])[0] or 0.0)
                        for func, weight in gt.RUBRIC if func is not gt.correctness_reward)
            best_tool_bonus = max(best_tool_bonus, bonus)
    assert best_tool_bonus < weights["correctness_reward"]
    assert best_tool_bonus == pytest.approx(0.4)  # the documented cap


def test_environment_tallies_calls_and_failures():
    environment = gt.ToolEnvironment()
    environment.reset(question="q", answer="1")
    assert environment.calculator("23 * 47") == "1081"
    assert environment.calculator("23 *").startswith("Error")
    assert (environment.calls, environment.failures) == (2, 1)
    names = [t.__name__ for t in gt.tools_of(environment)]
    assert names == ["calculator", "run_python"]


def test_multi_turn_batch_masks_tool_results(tmp_path, monkeypatch):
    """Trajectories hold real tool messages, rewards see them, and tool results carry no loss."""
    captured, seen_by_rewards = [], []
    original = gt.GRPOTrainer._generate_and_score_completions

    def capture(self, inputs):
        output = original(self, inputs)
        captured.append((output, self.processing_class))
        return output

    monkeypatch.setattr(gt.GRPOTrainer, "_generate_and_score_completions", capture)
    rubric = list(gt.RUBRIC)
    correctness = rubric[0][0]

    def spy(completions, **kwargs):
        seen_by_rewards.extend(completions)
        return correctness(completions, **kwargs)

    spy.__name__ = "correctness_reward"
    monkeypatch.setattr(gt, "RUBRIC", [(spy, rubric[0][1])] + rubric[1:])
    gt.main([*FAST_RUN, "--max_steps", "2", "--num_eval_examples", "0", "--output_dir", str(tmp_path / "run")])

    assert any(m.get("role") == "tool" for c in seen_by_rewards for m in c), "no tool message reached the rewards"
    output, tokenizer = captured[0]
    ids, mask, tool_mask = output["completion_ids"], output["completion_mask"], output["tool_mask"]
    masked_out = trained = ""
    for row in range(ids.shape[0]):
        masked_out += tokenizer.decode(ids[row][(mask[row] * (1 - tool_mask[row])).bool()])
        trained += tokenizer.decode(ids[row][(mask[row] * tool_mask[row]).bool()])
    assert "<tool_response>" in masked_out  # the tool's results are in the batch, outside the loss
    assert "<tool_response>" not in trained and "<tool_call>" in trained  # the model's own calls are trained


def test_short_run_writes_eval_and_plot(tmp_path):
    out = tmp_path / "run"
    result = run_script([*FAST_RUN, "--max_steps", "3", "--output_dir", out], script="grpo_tools.py")
    assert result.returncode == 0, result.stderr[-3000:]
    evaluation = json.loads((out / "eval.json").read_text())
    for when in ("before", "after"):
        for key in ("accuracy", "tool_call_success"):
            assert 0.0 <= evaluation[when][key] <= 1.0
        assert evaluation[when]["mean_tool_calls"] >= 0
    logged = {k for e in json.loads((out / "trainer_state.json").read_text())["log_history"] for k in e}
    for name in ("tools/call_frequency", "tools/failure_frequency", "tools/calls_per_rollout",
                 "tools/turns_per_rollout", "rewards/correctness_reward/mean", "rewards/tool_success_reward/mean"):
        assert name in logged, name
    assert (out / "training_curves.png").read_bytes().startswith(b"\x89PNG")


def test_a_missing_local_file_is_not_looked_up_on_the_hub(tmp_path):
    result = run_script([*FAST_RUN, "--dataset_name", "nonexistent.jsonl", "--output_dir", tmp_path / "run"],
                        script="grpo_tools.py")
    last = result.stderr.strip().splitlines()[-1]
    assert last == ("grpo_tools.py: error: no such file or folder: nonexistent.jsonl "
                    "(check the path given to --dataset_name)")
    assert not (tmp_path / "run").exists()


def test_unsupported_chat_template_is_one_clear_error(tmp_path):
    model = tmp_path / "model"
    import shutil

    shutil.copytree(TINY_TOOLS_MODEL, model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "chat_template.jinja").write_text(  # a plain ChatML template: no tool calls
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(gt.RecipeError, match="supported family"):
        gt.main([*FAST_RUN, "--model_name_or_path", str(model), "--max_steps", "1",
                 "--output_dir", str(tmp_path / "run")])


def test_correctness_agrees_with_rewards_py():
    """The inline copy in grpo_tools.py and rewards.correctness_reward give the same scores."""
    import rewards
    from test_grpo_math_rubric import CORRECTNESS_CASES

    cases = [(c, g) for c, g, _ in CORRECTNESS_CASES] + [(t, "#### 1081") for t, _, _ in TRAJECTORIES]
    cases += [("<answer>" + "7" * 60 + "</answer>", "7" * 60), ("<answer>7" + "0" * 39 + "</answer>", "7" + "0" * 39)]
    for completion, gold in cases:
        assert gt.correctness_reward([completion], answer=[gold]) == \
            rewards.correctness_reward([completion], answer=[gold]), completion


@given(text=st.text(), gold=st.text())
def test_correctness_agrees_with_rewards_py_on_random_input(text, gold):
    import rewards

    for completion in (text, f"<answer>{text}</answer>", [{"role": "assistant", "content": text}]):
        assert gt.correctness_reward([completion], answer=[gold]) == \
            rewards.correctness_reward([completion], answer=[gold])


@pytest.mark.parametrize("script", ["grpo_tools", "grpo_code", "grpo_search"])
def test_evaluation_stops_in_one_line_on_an_untested_trl(script, monkeypatch):
    """Evaluation drives GRPOTrainer's internals (_generate, the tool dicts): on a TRL outside the range the suite ran
    on, it stops before touching them, in one line naming that range, which requirements.txt pins too."""
    import importlib

    import trl

    module = importlib.import_module(script)
    requirement = next(line for line in (REPO / "requirements.txt").read_text().splitlines() if line.startswith("trl"))
    major, minor = map(int, module.TESTED_TRL.split("."))
    assert requirement.split("#")[0].strip() == f"trl>={module.TESTED_TRL}.0,<{major}.{minor + 1}"
    monkeypatch.setattr(trl, "__version__", f"{major}.{minor + 1}.0")
    expected = rf"TRL {major}\.{minor + 1}\.0 is installed.*'trl=={module.TESTED_TRL}\.\*'"
    with pytest.raises(module.RecipeError, match=expected):
        module.rollouts(None, [], 1)
