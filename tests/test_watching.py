"""Watching a run: --eval_only and the signal report, trajectory files, mid-run held-out accuracy, and the
reward-hacking monitor (its rules on synthetic logs, and a real run with a hackable rubric)."""

import json
from pathlib import Path

import pytest
from conftest import FAST_RUN, TINY_MODEL, TOY_DATA, run_script

import grpo_math
import instruments

TRAJECTORY_FIELDS = {"step", "prompt", "answer", "completions"}
COMPLETION_FIELDS = {"text", "greedy", "parsed_answer", "rewards", "total"}


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_trajectories(rows, completions_each):
    for row in rows:
        assert TRAJECTORY_FIELDS <= set(row) <= TRAJECTORY_FIELDS | {"columns"}, set(row)
        assert isinstance(row.get("columns", {}), dict) and row["prompt"][-1]["role"] == "user"
        assert len(row["completions"]) == completions_each
        assert [c["greedy"] for c in row["completions"]] == [True] + [False] * (completions_each - 1)
        for c in row["completions"]:
            assert set(c) == COMPLETION_FIELDS
            assert set(c["rewards"]) == {func.__name__ for func, _ in grpo_math.RUBRIC}
            assert c["total"] == pytest.approx(sum(w * c["rewards"][f.__name__] for f, w in grpo_math.RUBRIC))
            assert c["parsed_answer"] == grpo_math.extract_answer(c["text"])


@pytest.mark.parametrize("samples", [1, 4])
def test_eval_only_writes_scores_and_trajectories_and_nothing_else(samples, tmp_path):
    out = tmp_path / "eval"
    result = run_script([*FAST_RUN, "--eval_only", "--eval_num_samples", samples, "--output_dir", out])
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads((out / "eval.json").read_text())["eval_only"]
    assert scores["num_examples"] == 16 and 0 <= scores["accuracy"] <= 1
    assert sorted(p.name for p in out.iterdir()) == ["eval.json", "eval_only.jsonl", "report.html"]  # no checkpoint
    rows = read_jsonl(out / "eval_only.jsonl")
    assert len(rows) == 16
    check_trajectories(rows, 1 + (samples if samples > 1 else 0))
    greedy_right = sum(row["completions"][0]["rewards"]["correctness_reward"] for row in rows)
    assert scores["accuracy"] == pytest.approx(greedy_right / 16)
    if samples > 1:
        right = [sum(c["rewards"]["correctness_reward"] for c in row["completions"][1:]) for row in rows]
        assert scores["pass@1"] == pytest.approx(sum(right) / (16 * samples))
        assert scores[f"pass@{samples}"] == pytest.approx(sum(k > 0 for k in right) / 16)
        assert scores["signal"]["all_wrong"] == pytest.approx(sum(k == 0 for k in right) / 16)
        assert sum(scores["signal"].values()) == pytest.approx(1)
        assert "signal report (16 questions x 4 samples)" in result.stdout and "give no signal" in result.stdout
    else:
        assert "signal" not in scores and "signal report" not in result.stdout


def test_a_short_run_writes_every_instrument(tmp_path):
    out = tmp_path / "run"
    result = run_script([*FAST_RUN, "--max_steps", "4", "--mid_eval_steps", "2", "--num_mid_eval_examples", "8",
                         "--train_samples_per_log", "3", "--output_dir", out])
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((out / "trainer_state.json").read_text())
    assert [e["step"] for e in state["log_history"] if "eval/accuracy" in e] == [0, 2, 4]
    midrun = read_jsonl(out / "eval_midrun.jsonl")
    assert [row["step"] for row in midrun] == [0] * 8 + [2] * 8 + [4] * 8
    for name in ("eval_before.jsonl", "eval_after.jsonl"):
        check_trajectories(read_jsonl(out / name), 1)
    samples = read_jsonl(out / "train_samples.jsonl")  # 3 whole groups of 8 a step (logging_steps 1)
    assert [row["step"] for row in samples] == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    for row in samples:
        assert len(row["completions"]) == 8 and len({json.dumps(row["prompt"])}) == 1
        advantages = [c.pop("advantage") for c in row["completions"]]  # GRPO's: the group's totals, centred
        assert sum(advantages) == pytest.approx(0, abs=1e-4)
        totals = [c["total"] for c in row["completions"]]
        assert all((a > 1e-6) == (t > sum(totals) / 8 + 1e-6) for a, t in zip(advantages, totals))
    check_trajectories([{**row, "completions": [{**c, "greedy": i == 0} for i, c in enumerate(row["completions"])]}
                        for row in samples], 8)
    assert json.loads((out / "eval.json").read_text())["warnings"] == []


def even_answer_reward(completions, **kwargs):
    """A hackable reward: any even number in the answer block, right or wrong."""
    values = [grpo_math.extract_answer(grpo_math.completion_text(c)) for c in completions]
    values = [grpo_math.parse_number(v) if v is not None else None for v in values]
    return [1.0 if v is not None and v % 2 == 0 else 0.0 for v in values]


def test_a_hacked_rubric_raises_the_divergence_warning(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(grpo_math, "RUBRIC", [(grpo_math.correctness_reward, 0.0), (even_answer_reward, 1.0)])
    results = grpo_math.main(["--model_name_or_path", TINY_MODEL, "--dataset_name", TOY_DATA, "--output_dir",
                              tmp_path / "hacked", "--learning_rate", "2e-4", "--lr_scheduler_type", "constant",
                              "--warmup_steps", "0", "--per_device_train_batch_size", "64", "--max_steps", "30",
                              "--max_completion_length", "40", "--gradient_checkpointing", "false",
                              "--logging_steps", "2", "--mid_eval_steps", "10", "--num_eval_examples", "64",
                              "--eval_batch_size", "64", "--save_steps", "1000", "--print_samples_every", "0"])
    rules = [w["rule"] for w in results["warnings"]]
    assert "reward_without_accuracy" in rules, results["warnings"]
    assert "WARNING (step" in capsys.readouterr().out
    saved = json.loads((tmp_path / "hacked" / "eval.json").read_text())["warnings"]
    assert [w["rule"] for w in saved] == rules


# ----------------------------------------------------------------------------- the monitor's rules, on synthetic logs
def history(n=40, **curves):
    """A logged training history of n points, each metric a function of the point's index."""
    base = {"reward": lambda i: 1.0 + i / n, "rewards/correctness_reward/mean": lambda i: 0.3 + 0.4 * i / n,
            "rewards/strict_format_reward/mean": lambda i: 0.7 + 0.2 * i / n, "frac_reward_zero_std": lambda i: 0.3,
            "completions/mean_length": lambda i: 100.0, "completions/clipped_ratio": lambda i: 0.05,
            "entropy": lambda i: 1.0}
    base.update(curves)
    logs = [{"step": 5 * (i + 1), **{k: f(i) for k, f in base.items() if f is not None}} for i in range(n)]
    return logs


def rules(log_history, evals=None, max_steps=200):
    return [w["rule"] for w in instruments.monitor_warnings(log_history, "correctness_reward", 3.0, max_steps, evals)]


def test_a_healthy_run_raises_no_warning():
    assert rules(history(), evals=[(0, 0.3), (100, 0.5), (200, 0.7)]) == []


@pytest.mark.parametrize("curves, evals, rule", [
    ({}, [(0, 0.3), (200, 0.3)], "reward_without_accuracy"),
    ({"rewards/correctness_reward/mean": lambda i: 0.3, "rewards/strict_format_reward/mean": lambda i: 0.99},
     None, "auxiliary_saturated"),
    ({"frac_reward_zero_std": lambda i: 0.97}, None, "no_signal"),
    ({"completions/mean_length": lambda i: max(2.0, 100.0 - 5 * i)}, None, "length_collapse"),
    ({"completions/clipped_ratio": lambda i: 0.8}, None, "clipped"),
    ({"entropy": lambda i: max(0.05, 1.0 - i / 10)}, None, "entropy_collapse"),
])
def test_each_rule_fires_on_what_it_watches(curves, evals, rule):
    found = instruments.monitor_warnings(history(**curves), "correctness_reward", 3.0, 1000, evals)
    assert [w["rule"] for w in found] == [rule], found
    assert any(ch.isdigit() for ch in found[0]["message"])  # it says what it saw, in numbers


def test_the_verdict_does_not_depend_on_the_number_of_processes():
    """The math demo under `torchrun --nproc_per_node 2` (recorded: twice the batch a step, so the training reward's
    first window already holds most of its rise): held-out accuracy rose 0.34 -> 0.78, as with one process, and no
    rule fires at any log, as with one process (test_demo). The monitor once said "lenient_format_reward is saturated
    (0.99) while correctness_reward gained +0.04" at step 55 of this log."""
    recorded = json.loads((Path(__file__).parent / "data" / "monitor_math_two_processes.json").read_text())
    monitor, logs = instruments.RunMonitor(max_reward=3.0), recorded["log_history"]
    for end in range(1, len(logs) + 1):  # as on_log sees it, one log more each time
        monitor.check(logs[:end], recorded["max_steps"])
    assert monitor.warnings == []


@pytest.mark.parametrize("evals, fires", [
    (None, True),                              # no held-out evaluation: the training reward decides
    ([(0, 0.30)], False),                      # mid-run evaluation on: wait for its second point
    ([(0, 0.30), (100, 0.31)], True),          # held-out accuracy flat too: the easy reward is all it learned
    ([(0, 0.30), (100, 0.60)], False),         # held-out accuracy rose: it is learning the task
])
def test_a_saturated_auxiliary_reward_is_judged_against_held_out_accuracy(evals, fires):
    logs = history(**{"rewards/correctness_reward/mean": lambda i: 0.3, "rewards/strict_format_reward/mean": lambda i: 0.99,
                      "reward": lambda i: 1.3})
    assert ("auxiliary_saturated" in rules(logs, evals=evals, max_steps=1000)) == fires


@pytest.mark.parametrize("disputed, fires", [
    (None, False),        # no detector (no --loophole): the rule has nothing to read
    (0.0, False),         # the detector fails nothing the reward paid
    (0.02, False),        # at the onset's threshold, not over it
    (3 / 64, True),       # 3 of 64 rollouts paid in full that the detector fails
])
def test_disputed_reward_fires_on_one_point_over_the_threshold(disputed, fires):
    """The hack lab's rule reads hack/disputed at the latest logged point, with no window to wait for: it can warn
    at the first logged step."""
    logs = history(n=1, **{"hack/disputed": None if disputed is None else (lambda i: disputed)})
    found = instruments.monitor_warnings(logs, "correctness_reward", 3.0, 1000)
    assert [w["rule"] for w in found] == (["disputed_reward"] if fires else []), found
    if fires:
        assert found[0]["step"] == 5 and "5% of the rollouts at step 5" in found[0]["message"]


@pytest.mark.parametrize("timed_out, fires", [
    (None, False),        # no hidden tests (every script but grpo_code.py): nothing to read
    (0.05, False),        # a slow answer now and then
    (0.10, True),         # a tenth of the rollouts decided by a limit
    (0.40, True),
])
def test_time_limited_fires_when_limits_decide_the_reward(timed_out, fires):
    logs = history(**{"tests/timed_out": None if timed_out is None else (lambda i: timed_out)})
    found = instruments.monitor_warnings(logs, "correctness_reward", 3.0, 1000, evals=[(0, 0.3), (200, 0.7)])
    assert [w["rule"] for w in found] == (["time_limited"] if fires else []), found
    if fires:
        assert f"decided {timed_out:.0%} of the rollouts' hidden tests" in found[0]["message"]
        assert "sandbox.TEST_CASE_CPU_S" in found[0]["message"]  # and names the fix


def test_the_signal_report_counts_rollouts_a_time_limit_decided():
    metrics = {**instruments.sample_metrics([0, 3, 8, 5], 8), "num_examples": 4}
    assert "time limit" not in instruments.signal_report(metrics)  # none timed out, or not a code run: not said
    metrics["rollouts_timed_out"] = 0.12
    assert instruments.signal_report(metrics).endswith(
        "12% of rollouts failed on a time limit: the limits (sandbox.TEST_*), not only the code, decided their reward.")


def test_entropy_falling_late_is_not_a_collapse():
    assert rules(history(entropy=lambda i: max(0.05, 1.0 - i / 10)), max_steps=150) == []  # step 200 > 30% of 150


def test_the_monitor_warns_once_per_rule(capsys):
    monitor = instruments.RunMonitor(max_reward=3.0)
    logs = history(frac_reward_zero_std=lambda i: 0.97)
    for end in range(10, len(logs) + 1):
        monitor.check(logs[:end], 1000)
    assert [w["rule"] for w in monitor.warnings] == ["no_signal"]
    assert capsys.readouterr().out.count("WARNING") == 1


# ----------------------------------------------------------------------------- the same instruments in grpo_tools.py
import grpo_tools  # noqa: E402
from test_grpo_tools import FAST_RUN as TOOLS_RUN  # noqa: E402


@pytest.mark.parametrize("samples", [1, 3])
def test_tools_eval_only_keeps_whole_conversations(samples, tmp_path):
    out = tmp_path / "eval"
    result = run_script([*TOOLS_RUN, "--eval_only", "--eval_num_samples", samples, "--output_dir", out],
                        script="grpo_tools.py")
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads((out / "eval.json").read_text())["eval_only"]
    assert sorted(p.name for p in out.iterdir()) == ["eval.json", "eval_only.jsonl", "report.html"]
    rows = read_jsonl(out / "eval_only.jsonl")
    assert len(rows) == 16 and all(len(row["completions"]) == 1 + (samples if samples > 1 else 0) for row in rows)
    names = {func.__name__ for func, _ in grpo_tools.RUBRIC}
    for row in rows:
        for c in row["completions"]:
            assert isinstance(c["text"], list) and c["text"][-1]["role"] == "assistant"  # the whole conversation
            assert set(c["rewards"]) == names
            assert c["parsed_answer"] == grpo_tools.extract_answer(c["text"][-1]["content"])
    calls = [m for row in rows for m in row["completions"][0]["text"] if m.get("tool_calls")]
    assert scores["mean_tool_calls"] == pytest.approx(sum(len(m["tool_calls"]) for m in calls) / 16)
    assert ("signal report" in result.stdout) == (samples > 1)


def test_eval_only_takes_a_peft_adapter_folder(tmp_path):
    """What --use_peft saves: an adapter, evaluated on its base model."""
    run = tmp_path / "lora"
    result = run_script([*FAST_RUN, "--use_peft", "--max_steps", "1", "--num_eval_examples", "8", "--output_dir", run])
    assert result.returncode == 0, result.stderr[-3000:]
    assert (run / "adapter_config.json").exists() and not (run / "config.json").exists()
    result = run_script([*FAST_RUN, "--model_name_or_path", run, "--num_eval_examples", "8", "--eval_only",
                         "--output_dir", tmp_path / "eval"])
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads((tmp_path / "eval" / "eval.json").read_text())["eval_only"]
    assert scores["accuracy"] == pytest.approx(json.loads((run / "eval.json").read_text())["after"]["accuracy"])


def test_sample_metrics_count_groups():
    metrics = instruments.sample_metrics([0, 2, 4, 1], 4)  # right answers out of 4, for 4 questions
    assert metrics["pass@1"] == pytest.approx(7 / 16) and metrics["pass@4"] == pytest.approx(3 / 4)
    assert metrics["signal"] == {"all_wrong": 0.25, "mixed": 0.5, "all_right": 0.25}


@pytest.mark.parametrize("script", ["grpo_math.py", "grpo_tools.py"])
def test_eval_only_never_overwrites_a_training_run(script, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval.json").write_text('{"before": {}, "after": {}}')
    result = run_script([*(FAST_RUN if script == "grpo_math.py" else TOOLS_RUN), "--eval_only", "--output_dir", run],
                        script=script)
    assert result.returncode != 0 and "pass another --output_dir" in result.stderr.splitlines()[-1]
    assert (run / "eval.json").read_text() == '{"before": {}, "after": {}}'


@pytest.mark.parametrize("flag, value", [("--eval_num_samples", "0"), ("--mid_eval_steps", "-5"),
                                         ("--train_samples_per_log", "-2")])
def test_bad_instrument_flags_are_one_clear_error(flag, value, tmp_path):
    result = run_script([*FAST_RUN, flag, value, "--output_dir", tmp_path / "run"])
    assert result.returncode != 0 and "--eval_num_samples must be 1 or more" in result.stderr.splitlines()[-1]
    assert not (tmp_path / "run" / "eval.json").exists()


def test_a_trl_without_the_step_log_is_one_line_before_training(tmp_path):
    """train_samples.jsonl and --skip_zero_signal read TRL's own log of each step (GRPOTrainer._logs): a TRL
    without it is one line naming the tested release, said before the first step, not a crash at the first log."""
    from types import SimpleNamespace

    run = instruments.Run(vars(grpo_math), *grpo_math.parse_args(["--output_dir", str(tmp_path / "run")]))
    trainer = SimpleNamespace(accelerator=SimpleNamespace(is_main_process=True), add_callback=lambda callback: None)
    with pytest.raises(grpo_math.RecipeError, match=r"keeps no _logs.*trl==1\.16\.\*"):
        run.watch(trainer, {}, [])
