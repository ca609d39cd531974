"""grpo_math.py run the way users run it: as a command, from Python, with bad input, resumed."""

import importlib.util
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import FAST_RUN, REPO, TINY_MODEL, TOY_DATA, offline_env, run_script

import grpo_math as gm
import instruments


def read_state(output_dir: Path) -> dict:
    return json.loads((output_dir / "trainer_state.json").read_text()) if (output_dir / "trainer_state.json").exists() \
        else json.loads(sorted(output_dir.glob("checkpoint-*/trainer_state.json"))[-1].read_text())


def test_short_run_writes_metrics_eval_and_plot(tmp_path):
    out = tmp_path / "run"
    result = run_script([*FAST_RUN, "--max_steps", "4", "--output_dir", out, "--save_steps", "2"])
    assert result.returncode == 0, result.stderr[-3000:]
    evaluation = json.loads((out / "eval.json").read_text())
    for when in ("before", "after"):
        assert 0.0 <= evaluation[when]["accuracy"] <= 1.0
        assert 0.0 <= evaluation[when]["format_rate"] <= 1.0
        assert evaluation[when]["num_examples"] == 16
    assert evaluation["global_step"] == 4
    logged = {key for entry in read_state(out / "checkpoint-4")["log_history"] for key in entry}
    for func, _ in gm.RUBRIC:  # each rubric term is logged on its own
        assert f"rewards/{func.__name__}/mean" in logged
    assert {"reward", "completions/mean_length"} <= logged
    png = (out / "training_curves.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert (out / "model.safetensors").exists()  # the final model
    assert "sample at step" in result.stdout  # throttled sample printing
    assert "accuracy" in result.stdout and "format_rate" in result.stdout  # the before/after table


def test_the_plot_shows_the_share_of_groups_with_no_signal(tmp_path, monkeypatch):
    """training_curves.png draws TRL's frac_reward_zero_std per step on its own 0-1 axis (the function is the same
    in every script: tests/test_shared_blocks.py)."""
    from matplotlib.figure import Figure

    drawn = {}
    monkeypatch.setattr(Figure, "savefig", lambda fig, path, **kwargs: drawn.update(figure=fig))
    log = [{"step": s, "reward": 0.1 * s, "rewards/correctness_reward/mean": 0.1 * s, "completions/mean_length": 50,
            "frac_reward_zero_std": share} for s, share in [(1, 0.75), (2, 0.5), (3, 0.25)]]
    assert instruments.plot_curves(log, tmp_path / "curves.png") == tmp_path / "curves.png"
    lines = {line.get_label(): line for ax in drawn["figure"].axes for line in ax.get_lines()}
    no_signal = lines["groups with no signal"]
    assert list(no_signal.get_xdata()) == [1, 2, 3] and list(no_signal.get_ydata()) == [0.75, 0.5, 0.25]
    assert tuple(no_signal.axes.get_ylim()) == (0, 1)
    instruments.plot_curves([{k: v for k, v in entry.items() if k != "frac_reward_zero_std"} for entry in log], tmp_path / "b")
    assert "groups with no signal" not in {line.get_label() for ax in drawn["figure"].axes for line in ax.get_lines()}


def test_main_from_python_ignores_sys_argv(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["ipykernel_launcher.py", "-f", "/kernel.json"])  # what a notebook has
    results = gm.main([*FAST_RUN, "--max_steps", "2", "--output_dir", str(tmp_path / "nb"),
                       "--num_eval_examples", "8"])
    assert results["global_step"] == 2
    assert results["after"]["num_examples"] == 8
    assert (tmp_path / "nb" / "eval.json").exists()


def test_help_lists_script_and_trainer_flags():
    result = run_script(["--help"])
    assert result.returncode == 0
    for flag in ("--question_column", "--answer_column", "--num_eval_examples", "--learning_rate",
                 "--num_generations", "--use_peft", "--load_in_4bit", "--use_vllm", "--report_to",
                 "--resume_from_checkpoint", "--model_name_or_path"):
        assert flag in result.stdout


def test_yaml_and_flags_override_defaults(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"learning_rate": 3e-5, "max_steps": 7, "question_column": "q",
                                      "model_name_or_path": str(TINY_MODEL)}))
    script_args, training_args, model_args, *_ = gm.parse_args(["--config", str(config), "--max_steps", "9"])
    assert training_args.learning_rate == 3e-5  # from YAML
    assert training_args.max_steps == 9  # the flag beats YAML
    assert script_args.question_column == "q"
    assert model_args.model_name_or_path == str(TINY_MODEL)


def test_demo_settings_apply_without_gpu_but_flags_win():
    script_args, training_args, model_args, *_ = gm.parse_args(["--max_steps", "3"])
    assert model_args.model_name_or_path == gm.DEMO_SETTINGS["model_name_or_path"]
    assert script_args.dataset_name == gm.DEMO_SETTINGS["dataset_name"]
    assert training_args.learning_rate == gm.DEMO_SETTINGS["learning_rate"]
    assert training_args.max_steps == 3
    assert not training_args.bf16 and not training_args.fp16  # fp32 on CPU
    # The demo's own settings are the ones checked: its 64 rollouts a step take 64 generations a prompt
    script_args, training_args, model_args, *_ = gm.parse_args(["--num_generations", "64"])
    assert training_args.num_generations == 64 == training_args.per_device_train_batch_size
    # Choosing a model turns the demo off: the recipe's real defaults apply.
    script_args, training_args, model_args, *_ = gm.parse_args(["--model_name_or_path", str(TINY_MODEL)])
    assert training_args.learning_rate == 5e-6
    assert script_args.dataset_name == "openai/gsm8k" and script_args.dataset_config == "main"


# ---- bad input: one clear line that names the fix, no traceback, nothing overwritten ----
BAD_INPUTS = [
    (["--question_column", "prompt_text"], "--question_column"),
    (["--answer_column", "solution"], "--answer_column"),
    (["--dataset_train_split", "validation"], "--dataset_train_split"),
    (["--num_generations", "3"], "divisible"),
    (["--per_device_train_batch_size", "12", "--gradient_accumulation_steps", "1"], "divisible"),
    (["--use_vllm"], "pip install vllm"),
    (["--use_peft", "--load_in_4bit"], "pip install bitsandbytes"),
    (["--load_in_4bit"], "--use_peft"),
    (["--model_name_or_path", "Qwen/Qwen2.5-0.5B-Instruct"], "cannot load model"),
    (["--dataset_name", "openai/gsm8k"], "cannot load dataset"),
    (["--dataset_name", "missing_file.jsonl"], "no such file or folder: missing_file.jsonl (check the path given to --dataset_name)"),
    (["--dataset_name", "data/gsm8k"], "cannot load dataset"),
    (["--resume_from_checkpoint", "last"], "no checkpoint"),
    (["--reward_weights", "1.0", "2.0"], "--reward_weights has 2 values but RUBRIC has 5 rewards (correctness_reward, "),
    (["--learning_rate", "-1"], "--learning_rate -1.0 is out of range: it must be more than 0"),
    (["--max_completion_length", "0"], "--max_completion_length 0 is out of range: it must be 1 or more"),
    (["--output_dir", __file__], "is a file: pass a folder"),
    (["--report_to", "wandb"], "--report_to wandb needs its package, which is not installed: `pip install wandb`"),
    (["--max_stpes", "3"], "unknown flag --max_stpes: did you mean --max_steps?"),
    (["--max_step", "3"], "unknown flag --max_step: did you mean --max_steps?"),  # an abbreviation is refused
    (["--model_name", "x"], "unknown flag --model_name: did you mean --model_name_or_path?"),
]


@pytest.mark.parametrize("flags, expected", BAD_INPUTS)
def test_bad_input_raises_a_clear_error(flags, expected, tmp_path):
    if expected == "pip install bitsandbytes" and importlib.util.find_spec("bitsandbytes"):
        pytest.skip("bitsandbytes is installed here, so this error cannot occur")
    if expected == "pip install vllm" and importlib.util.find_spec("vllm"):
        pytest.skip("vllm is installed here, so this error cannot occur")
    if "pip install wandb" in expected and importlib.util.find_spec("wandb"):
        pytest.skip("wandb is installed here, so this error cannot occur")
    args = [*FAST_RUN, "--max_steps", "1", "--output_dir", str(tmp_path / "run"), *flags]
    with pytest.raises(gm.RecipeError, match=re.escape(expected)):
        gm.main(args)
    assert not (tmp_path / "run").exists()  # a run that fails before its first step leaves no folder behind


def test_trackio_the_tracker_the_readme_offers_works_after_the_install(tmp_path):
    """--report_to trackio (README, "Fork it"): trackio ships with requirements.txt and records the run locally."""
    env = offline_env(TRACKIO_DIR=str(tmp_path / "trackio"))
    result = run_script([*FAST_RUN, "--max_steps", "2", "--report_to", "trackio", "--output_dir", tmp_path / "run"],
                        env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    import sqlite3

    [database] = (tmp_path / "trackio").glob("*.db")  # one project: TRL's default, "huggingface"
    logged = " ".join(str(row[0]) for row in sqlite3.connect(database).execute("select metrics from metrics"))
    assert "train/rewards/correctness_reward/mean" in logged  # the run's own metrics, as TRL logs them


def test_a_yaml_reads_its_relative_paths_against_its_own_folder(tmp_path, monkeypatch):
    """`--config DIR/run.yaml` from any working directory: a path in the YAML that exists beside it is found there;
    anything else (a Hub id, a new output folder) is left as written."""
    folder = tmp_path / "configs"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "train.jsonl").write_text((TOY_DATA / "train.jsonl").read_text())
    (folder / "run.yaml").write_text(yaml.safe_dump({"dataset_name": "data/train.jsonl", "output_dir": "runs/a",
                                                     "model_name_or_path": str(TINY_MODEL), "max_steps": 4}))
    monkeypatch.chdir(tmp_path)
    script_args, training_args, *_ = gm.parse_args(["--config", "configs/run.yaml"])
    assert script_args.dataset_name == str(folder / "data" / "train.jsonl")
    assert training_args.output_dir == "runs/a" and training_args.max_steps == 4
    with pytest.raises(gm.RecipeError, match=re.escape("--config nowhere.yaml: no such file")):
        gm.parse_args(["--config", "nowhere.yaml"])


def test_the_long_search_yaml_runs_from_another_working_directory(tmp_path):
    """docs/grpo_search.md's `python grpo_search.py --config assets/long_search.yaml`, run from outside the
    repository."""
    result = run_script(["--config", REPO / "assets" / "long_search.yaml", "--help"], script="grpo_search.py",
                        cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    import grpo_search as gs

    script_args, training_args, model_args, *_ = gs.parse_args(["--config", str(REPO / "assets" / "long_search.yaml")])
    assert Path(model_args.model_name_or_path) == REPO / "assets" / "tiny-qwen-search-long"
    assert Path(script_args.corpus_name).is_file() and Path(script_args.dataset_name).is_dir()


def test_bad_input_on_the_command_line_is_one_line(tmp_path):
    result = run_script([*FAST_RUN, "--question_column", "nope", "--output_dir", tmp_path / "x"])
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("grpo_math.py: error:") and "--question_column" in last


def test_existing_checkpoints_are_never_overwritten(tmp_path):
    out = tmp_path / "run"
    checkpoint = out / "checkpoint-5"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text('{"global_step": 5}')
    with pytest.raises(gm.RecipeError, match="--resume_from_checkpoint last"):
        gm.main([*FAST_RUN, "--max_steps", "1", "--output_dir", str(out)])
    assert (checkpoint / "trainer_state.json").read_text() == '{"global_step": 5}'
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-5"]


def test_killed_run_resumes_to_the_same_step_count(tmp_path):
    """Kill a run after its first checkpoint, resume it, and compare with an uninterrupted run."""
    steps = ["--max_steps", "12", "--save_steps", "3", "--num_eval_examples", "0"]
    full = run_script([*FAST_RUN, *steps, "--output_dir", tmp_path / "full"])
    assert full.returncode == 0, full.stderr[-3000:]

    out = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, str(REPO / "grpo_math.py"), *FAST_RUN, *steps, "--output_dir",
                                str(out)], env=offline_env(), cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (out / "checkpoint-3" / "trainer_state.json").exists() and process.poll() is None:
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    saved = {p.name for p in out.glob("checkpoint-*")}
    assert "checkpoint-12" not in saved, "the run finished before it could be killed"

    resumed = run_script([*FAST_RUN, *steps, "--output_dir", out, "--resume_from_checkpoint", "last"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert saved <= {p.name for p in out.glob("checkpoint-*")}  # nothing saved before was lost
    full_state, resumed_state = read_state(tmp_path / "full"), read_state(out)
    assert resumed_state["global_step"] == full_state["global_step"] == 12
    logged_steps = [e["step"] for e in resumed_state["log_history"] if "reward" in e]
    assert logged_steps == list(range(1, 13))  # history carried over from the checkpoint, no step twice


def test_rows_whose_answer_states_no_number_are_dropped_and_counted(tmp_path, capsys):
    """GSM8K-style data with a few broken labels: still graded as numbers (the broken labels do not make it symbolic),
    the broken rows dropped and counted; data with no gradable answer at all is one line naming both flags."""
    rows = [json.loads(line) for line in open(TOY_DATA / "train.jsonl")][:40]
    for row in rows[:5]:
        row["answer"] = "see the solution manual"  # a broken label: no number, and words no grader reads
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    gm.main([*FAST_RUN, "--dataset_name", str(data), "--max_steps", "1", "--num_eval_examples", "8",
             "--output_dir", str(tmp_path / "run")])
    printed = capsys.readouterr().out
    assert "answer type: number (--answer_type auto" in printed, printed[-2000:]
    dropped = re.findall(r"dropped (\d+) of (\d+) rows whose answer correctness_reward cannot grade \(e\.g\. "
                         r"'see the solution manual', read as number\): check --answer_type and --answer_column", printed)
    assert sum(int(n) for n, _ in dropped) == 5 and sum(int(total) for _, total in dropped) == 40, printed[-2000:]
    for row in rows:
        row["answer"] = "see the solution manual"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(gm.RecipeError, match="can grade no answer.*--answer_type and --answer_column"):
        gm.main([*FAST_RUN, "--dataset_name", str(data), "--max_steps", "1", "--output_dir", str(tmp_path / "run2")])
    assert not (tmp_path / "run2" / "checkpoint-1").exists()


def test_a_data_file_datasets_cannot_read_is_one_line_saying_why(tmp_path):
    """datasets infers a local file's format from its name; one it cannot read is one line with its reason."""
    data = tmp_path / "questions.xyz"
    data.write_text('{"question": "What is 1 + 1?", "answer": "2"}\n')
    with pytest.raises(gm.RecipeError, match=r"cannot load dataset '.*questions\.xyz' \(.*supported extension"):
        gm.main([*FAST_RUN, "--dataset_name", str(data), "--max_steps", "1", "--output_dir", str(tmp_path / "run")])


def test_ctrl_c_is_one_line_and_the_resumed_run_saves_each_step_once(tmp_path):
    """Ctrl-C (SIGINT) after a checkpoint: one line with the step and the command that resumes; after the resume,
    train_samples.jsonl and eval_midrun.jsonl hold each step once, as an uninterrupted run's do."""
    out = tmp_path / "run"
    steps = ["--max_steps", "30", "--save_steps", "3", "--num_eval_examples", "8", "--mid_eval_steps", "2",
             "--num_mid_eval_examples", "4", "--output_dir", str(out)]  # 30 steps: time to stop it mid-run
    def as_a_terminal_starts_it():  # Ctrl-C's signal at its default: a test runner started in the background by a
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # script (`.ci/run &`) ignores SIGINT, and its children inherit that

    process = subprocess.Popen([sys.executable, str(REPO / "grpo_math.py"), *FAST_RUN, *steps], env=offline_env(),
                               cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               preexec_fn=as_a_terminal_starts_it)
    deadline = time.time() + 300
    while not (out / "checkpoint-6" / "trainer_state.json").exists() and process.poll() is None:
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    assert process.poll() is None, f"the run ended before it could be stopped: {process.communicate()[1][-3000:]}"
    process.send_signal(signal.SIGINT)
    stderr = process.communicate(timeout=120)[1]
    assert process.returncode != 0 and "checkpoint-30" not in {p.name for p in out.glob("checkpoint-*")}
    assert "Traceback" not in stderr, stderr[-3000:]
    said = [line for line in stderr.splitlines() if line.startswith("grpo_math.py: error:")]  # tqdm closes its bar after
    assert len(said) == 1 and re.match(r"grpo_math.py: error: stopped at step \d+; ", said[0]), said
    assert f"--resume_from_checkpoint last --output_dir {out}" in said[0]

    resumed = run_script([*FAST_RUN, *steps, "--resume_from_checkpoint", "last"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    samples = [json.loads(line)["step"] for line in (out / "train_samples.jsonl").read_text().splitlines()]
    assert sorted(set(samples)) == list(range(30)) and all(samples.count(s) == samples.count(0) for s in samples)
    midrun = [json.loads(line)["step"] for line in (out / "eval_midrun.jsonl").read_text().splitlines()]
    assert sorted(set(midrun)) == list(range(0, 31, 2)) and all(midrun.count(s) == 4 for s in midrun)
