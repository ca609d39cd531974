"""Bad input that used to end in a traceback, or in a run that trained nothing and looked successful: one line naming
the fix, in every script, before any model loads and with nothing written."""

import importlib

import pytest
from conftest import run_script

SCRIPTS = ["grpo_math.py", "grpo_tools.py", "grpo_code.py", "grpo_search.py", "grpo_judge.py"]


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("flags, message", [
    (["--use_peft", "--lora_r", "0"], "--lora_r 0: a LoRA adapter needs a rank of 1 or more: pass --lora_r 16"),
    (["--max_steps", "0"], "--max_steps 0 trains nothing: pass --max_steps 1 or more, or --eval_only"),
])
def test_settings_that_train_nothing_are_refused(script, flags, message, tmp_path):
    module = importlib.import_module(script[:-3])
    with pytest.raises(module.RecipeError, match=message.replace("(", r"\(")):
        module.parse_args([*flags, "--output_dir", str(tmp_path / "run")])
    assert not (tmp_path / "run").exists()
    module.parse_args(["--use_peft", "--lora_r", "1", "--max_steps", "1", "--output_dir", str(tmp_path / "run")])


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_folder_with_no_model_is_one_line(script, tmp_path):
    module = importlib.import_module(script[:-3])
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not a model")
    script_args, training_args, model_args, *_ = module.parse_args(
        ["--model_name_or_path", str(tmp_path / "empty"), "--eval_only", "--output_dir", str(tmp_path / "run")])
    with pytest.raises(module.RecipeError, match=r"is a folder with no model in it \(no config.json\): pass a folder"):
        module.load_tokenizer(model_args, training_args)


def test_eval_only_on_an_empty_folder_ends_in_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "empty").mkdir()
    result = run_script(["--model_name_or_path", tmp_path / "empty", "--eval_only", "--output_dir", tmp_path / "run"])
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "is a folder with no model in it" in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_fewer_prompts_than_one_generation_batch_is_one_line(tmp_path):
    """A 5-row CSV against the math demo's generation batch (64 completions / 8 = 8 prompts): TRL would train 0 steps
    and the run would end as if it had trained."""
    rows = "".join(f"What is {n} + {n}?,#### {2 * n}\n" for n in range(5))
    (tmp_path / "data.csv").write_text("question,answer\n" + rows)
    result = run_script(["--dataset_name", "data.csv", "--num_eval_examples", "0", "--output_dir", "run"],
                        cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "5 training prompts, fewer than one generation batch takes" in last, last
    assert "lower --per_device_train_batch_size to 40 or less" in last, last
    assert not list((tmp_path / "run").glob("checkpoint-*"))
