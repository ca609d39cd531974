"""The scripts under two processes on CPU (torchrun: gloo, as `accelerate launch` does on GPUs).

Each rank generates 4 completions per step and GRPO groups 8 completions per prompt, so a step
exists only if both ranks take part: one process alone refuses these settings. Evaluation is
sharded over the ranks and gathered; its "before" scores must equal a one-process run's, which
they would not if answers were paired with the wrong questions.
"""

import json
import subprocess
import sys

import pytest
from conftest import REPO, TINY_MODEL, TOY_DATA, offline_env, run_script

EVAL_QUESTIONS = 15  # odd: one rank's share is padded
SETTINGS = {
    "grpo_math.py": ["--model_name_or_path", TINY_MODEL, "--dataset_name", TOY_DATA, "--max_completion_length", "40"],
    "grpo_tools.py": ["--model_name_or_path", REPO / "assets" / "tiny-qwen-tools",
                      "--dataset_name", REPO / "assets" / "toy_tools", "--max_completion_length", "96"],
    "grpo_code.py": ["--model_name_or_path", REPO / "assets" / "tiny-qwen-code", "--dataset_name",
                     REPO / "assets" / "toy_code", "--eval_dataset_name", "none", "--max_completion_length", "128",
                     "--max_tool_calling_iterations", "2"],
    "grpo_search.py": ["--model_name_or_path", REPO / "assets" / "tiny-qwen-search", "--dataset_name",
                       REPO / "assets" / "toy_search", "--corpus_name", REPO / "assets" / "toy_search" / "corpus.jsonl",
                       "--max_completion_length", "160", "--max_tool_calling_iterations", "3",
                       "--turn_credit"],  # per-turn advantages: groups gathered over both ranks
}
COMMON = ["--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1", "--num_generations", "8",
          "--learning_rate", "2e-4", "--warmup_steps", "0", "--gradient_checkpointing", "false",
          "--logging_steps", "1", "--max_steps", "2", "--save_steps", "2",
          "--num_eval_examples", str(EVAL_QUESTIONS), "--eval_batch_size", "4"]


def torchrun(script, args, timeout=600):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(REPO / script), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=offline_env(), cwd=REPO)


@pytest.mark.parametrize("script", sorted(SETTINGS))
def test_two_processes_train_and_evaluate_together(script, tmp_path):
    args = [*SETTINGS[script], *COMMON]
    result = torchrun(script, [*args, "--output_dir", tmp_path / "two"])
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "two" / "eval.json").read_text())
    assert results["num_processes"] == 2
    assert results["global_step"] == 2
    for when in ("before", "after"):
        assert results[when]["num_examples"] == EVAL_QUESTIONS
        assert results[when]["questions_per_process"] == [8, 8]  # 8 + 7, the short share padded
    history = json.loads((tmp_path / "two" / "trainer_state.json").read_text())["log_history"]
    assert [entry["step"] for entry in history if "loss" in entry] == [1, 2]
    assert result.stdout.count("wrote ") == 2  # only the main process writes and reports: eval.json, its page
    assert result.stdout.count("report.html: open it in a browser") == 1

    # The same settings in one process: 4 completions cannot form a group of 8.
    alone = run_script([*args, "--output_dir", tmp_path / "one"], script=script)
    assert alone.returncode != 0
    assert "must be divisible by num_generations" in alone.stderr.strip().splitlines()[-1]

    # One process, one group per step: the held-out scores before training must match.
    baseline = run_script([*SETTINGS[script], *COMMON, "--per_device_train_batch_size", "8", "--max_steps", "1",
                           "--output_dir", tmp_path / "one"], script=script)
    assert baseline.returncode == 0, baseline.stderr[-3000:]
    before = json.loads((tmp_path / "one" / "eval.json").read_text())["before"]
    assert before["questions_per_process"] == [EVAL_QUESTIONS]
    for key, value in before.items():
        if isinstance(value, float):
            assert results["before"][key] == pytest.approx(value), key
