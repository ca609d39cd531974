"""grpo_code.py: its rubric on hand-written trajectories, task loading in every layout, the script run as a user
runs it, and the offline demo."""

import gzip
import json

import pytest
from conftest import REPO, offline_env, run_script

import grpo_code as gc

TINY_CODE_MODEL = REPO / "assets" / "tiny-qwen-code"
TOY_CODE_DATA = REPO / "assets" / "toy_code"
FAST_RUN = ["--model_name_or_path", str(TINY_CODE_MODEL), "--dataset_name", str(TOY_CODE_DATA),
            "--eval_dataset_name", "none", "--learning_rate", "2e-4", "--per_device_train_batch_size", "16",
            "--gradient_accumulation_steps", "1", "--num_generations", "8", "--max_completion_length", "128",
            "--max_tool_calling_iterations", "2", "--gradient_checkpointing", "false", "--logging_steps", "1",
            "--num_eval_examples", "16", "--eval_batch_size", "16", "--warmup_steps", "0"]

TASK = {"tests": "def check(candidate):\n    assert candidate(2) == 9\n    assert candidate(0) == 7\n",
        "entry_point": "solve", "setup": 'def solve(x):\n    """Return x plus 7."""\n'}


def columns(n):
    return {key: [value] * n for key, value in TASK.items()}


def env(calls=0, failures=0):
    from types import SimpleNamespace

    return SimpleNamespace(calls=calls, failures=failures)


def block(code):
    return {"role": "assistant", "content": f"Here it is.\n```python\n{code}```"}


def run(code, output):
    return [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "run_python", "arguments": {"code": code}}}]},
        {"role": "tool", "name": "run_python", "content": output}]


RIGHT, OFF = "def solve(x):\n    return x + 7\n", "def solve(x):\n    return x + 8\n"
HALF = "def solve(x):\n    return 7 if x == 0 else 0\n"

# (trajectory, tally, tests_passed_reward, code_format_reward)
TRAJECTORIES = [
    ([block(RIGHT)], env(), 1.0, 1.0),
    ([block(OFF)], env(), 0.0, 1.0),
    ([block(HALF)], env(), 0.1, 1.0),  # one case of two: partial credit only
    ([*run(OFF + "print(solve(2))", "10\n"), block(RIGHT)], env(1), 1.0, 1.0),  # tried, read, fixed
    ([*run(RIGHT, "Error: exit status 1"), block(RIGHT)], env(1, 1), 1.0, 1.0),
    ([{"role": "assistant", "content": "def solve(x):\n    return x + 7"}], env(), 0.0, 0.0),  # no block
    ([{"role": "assistant", "content": f"```python\n{OFF}```\nor\n```python\n{RIGHT}```"}], env(), 1.0, 0.0),  # the last
    ([block("def solve(x):\n    return x +\n")], env(), 0.0, 0.0),  # does not compile
    ([block("def answer(x):\n    return x + 7\n")], env(), 0.0, 0.0),  # not the entry point
    ([*run(RIGHT, "9\n")], env(1), 0.0, 0.0),  # never handed in an answer
    ([{"role": "assistant", "content": "```python\nimport sys\nsys.exit(0)\n```"}], env(), 0.0, 0.0),
]


@pytest.mark.parametrize("trajectory, tally, passed, formatted", TRAJECTORIES)
def test_rubric_on_hand_written_trajectories(trajectory, tally, passed, formatted):
    assert gc.tests_passed_reward([trajectory], **columns(1)) == [pytest.approx(passed)]
    assert gc.code_format_reward([trajectory], **columns(1)) == [formatted]
    assert gc.successful_run_credit(environments=[tally]) == [min(1.0, 0.5 * (tally.calls - tally.failures))]


def test_format_and_tool_terms_can_never_outweigh_passing_tests():
    weights = dict((f.__name__, w) for f, w in gc.RUBRIC)
    auxiliary = sum(w for name, w in weights.items() if name != "tests_passed_reward")
    assert weights["tests_passed_reward"] == 1.0 and auxiliary <= 0.2
    # a rollout that fails every test but collects every other term scores below one that passes them all
    # and collects nothing else
    assert auxiliary < weights["tests_passed_reward"] * (1 - gc.PARTIAL_CREDIT)


def test_the_reward_logs_the_share_a_time_limit_decided(monkeypatch):
    """What the run monitor's time_limited rule and the training curves read: tests/timed_out, each step."""
    import sandbox

    monkeypatch.setattr(sandbox, "TEST_CASE_CPU_S", 0.5)  # a quick time-out
    logged = {}
    slow = "def solve(x):\n    while x == 2:\n        pass\n    return x + 7\n"
    rewards = gc.tests_passed_reward([[block(RIGHT)], [block(slow)], [block(OFF)], [block(RIGHT)]], **columns(4),
                                     log_metric=logged.__setitem__)
    assert rewards == [1.0, 0.0, 0.0, 1.0]
    assert logged == {"tests/timed_out": 0.25}  # the slow one: a limit, not a wrong answer, decided it


def test_a_batch_is_scored_in_parallel_and_in_order():
    trajectories = [[block(RIGHT)], [block(OFF)], [block(HALF)]] * 10
    assert gc.tests_passed_reward(trajectories, **columns(30)) == pytest.approx([1.0, 0.0, 0.1] * 10)


def dataset_file(tmp_path, rows, name="tasks.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_tasks_in_every_layout(tmp_path):
    from types import SimpleNamespace

    from datasets import Dataset

    flags = SimpleNamespace(layout="auto", prompt_column=None, tests_column=None, entry_point_column=None,
                            solution_column=None, setup_column=None, float_tolerance=0.0)
    humaneval = [json.loads(line) for line in gzip.open(REPO / "tests" / "data" / "humaneval" / "HumanEval.jsonl.gz",
                                                        "rt")][:3]
    tasks = gc.to_tasks(Dataset.from_list(humaneval), flags, "humaneval")
    assert [t["entry_point"] for t in tasks] == [row["entry_point"] for row in humaneval]
    assert all(t["setup"] == row["prompt"] and t["answer"] == row["prompt"] + row["canonical_solution"]
               for t, row in zip(tasks, humaneval))
    assert gc.task_message(**{k: tasks[0][k] for k in ("prompt", "tests", "entry_point", "setup")}).startswith(
        "Complete this Python function:\n```python\nfrom typing import List")
    mbpp = [{"task_id": 2, "prompt": "Write a function to find the shared elements of two lists.",
             "code": "def similar_elements(a, b):\n    return tuple(set(a) & set(b))",
             "test_imports": [], "test_list": ["assert set(similar_elements((3, 4, 5), (5, 7, 4))) == set((4, 5))",
                                               "assert set(similar_elements((1, 2), (5, 7))) == set()"]}]
    task = gc.to_tasks(Dataset.from_list(mbpp), flags, "mbpp")[0]
    assert task["entry_point"] == "similar_elements" and task["setup"] == "" and task["answer"] == mbpp[0]["code"]
    message = gc.task_message(**{k: task[k] for k in ("prompt", "tests", "entry_point", "setup")})
    assert "`similar_elements`" in message and mbpp[0]["test_list"][0] in message
    assert mbpp[0]["test_list"][1] not in message  # only one example is shown; every test stays hidden
    assert gc.check_tasks([task], "mbpp") == [task]


LEETCODE_DATA = REPO / "tests" / "data" / "leetcode" / "leetcode_30.jsonl.gz"
STDIO_DATA = REPO / "tests" / "data" / "stdio" / "tasks.jsonl"
NO_FLAGS = dict(layout="auto", prompt_column=None, tests_column=None, entry_point_column=None, solution_column=None,
                setup_column=None, float_tolerance=0.0)


def test_leetcode_tasks_in_the_class_layout():
    """LeetCodeDataset's rows, found by their columns: the method's class, its setup block, its starter code."""
    from types import SimpleNamespace

    rows = gc.read_dataset(str(LEETCODE_DATA), None)["train"]
    assert gc.detect_layout(rows) == "class"
    tasks = gc.to_tasks(rows, SimpleNamespace(**NO_FLAGS), "leetcode")
    row, task = rows[0], tasks[0]
    assert task["entry_point"] == row["func_name"] == "Solution().shortestDistanceAfterQueries"
    assert task["setup"] == row["setup_code"] and task["answer"] == row["canonical_solution"]
    assert task["tests"].strip() == "\n".join(row["gt_answer"]) and task["starter"] == row["prompt_metadata"]["starter_code"]
    message = gc.task_message(**{k: task[k] for k in ("prompt", "tests", "entry_point", "setup", "starter")})
    assert message.startswith(row["question"].strip()) and "method `shortestDistanceAfterQueries` of `class Solution`" in message
    assert row["gt_answer"][0] not in message  # the tests stay hidden
    assert gc.LAYOUT_SYSTEM_PROMPTS["class"].startswith("Write the Python class")
    assert gc.defines(row["canonical_solution"], task["entry_point"])
    assert not gc.defines("def shortestDistanceAfterQueries(n, queries):\n    pass\n", task["entry_point"])
    # the method's name alone (LiveCodeBench), no starter column: the class comes from the reference, and so does
    # the starter code the prompt shows
    bare = [{"question": "Add two numbers.", "func_name": "add", "tests": "assert Solution().add(1, 2) == 3",
             "canonical_solution": "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b\n"}]
    from datasets import Dataset

    task = gc.to_tasks(Dataset.from_list(bare), SimpleNamespace(**dict(NO_FLAGS, layout="class",
                                                                      tests_column="tests")), "bare")[0]
    assert task["entry_point"] == "Solution().add"
    assert task["starter"] == "class Solution:\n    def add(self, a: int, b: int) -> int:\n        "
    assert "starting from:\n```python\nclass Solution:" in gc.task_message(
        **{k: task[k] for k in ("prompt", "tests", "entry_point", "setup", "starter")})
    assert gc.check_tasks([task], "bare") == [task]


def test_stdio_tasks_from_the_layouts_datasets_use():
    """Input/output pairs as CodeContests, APPS and LiveCodeBench store them all become the same tests."""
    from types import SimpleNamespace

    from datasets import Dataset

    pairs = {"inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n", "7\n"]}
    forms = [pairs, json.dumps(pairs), {"input": pairs["inputs"], "output": pairs["outputs"]},
             json.dumps([{"input": i, "output": o, "testtype": "stdin"} for i, o in zip(*pairs.values())])]
    assert all(gc.io_pairs(form) == pairs for form in forms)
    assert gc.io_pairs("assert f(1) == 2") is None and gc.io_pairs({"inputs": [[1]], "outputs": [2],
                                                                    "fn_name": "f"}) is None
    rows = gc.read_dataset(str(STDIO_DATA), None)["train"]
    assert gc.detect_layout(rows) == "stdio"
    tasks = gc.to_tasks(rows, SimpleNamespace(**dict(NO_FLAGS, float_tolerance=1e-6)), "stdio")
    assert all(t["entry_point"] == gc.STDIN_PROGRAM and json.loads(t["tests"])["float_tolerance"] == 1e-6
               for t in tasks)
    message = gc.task_message(**{k: tasks[0][k] for k in ("prompt", "tests", "entry_point", "setup", "starter")})
    assert message.startswith(rows[0]["prompt"].strip()) and "reads the input from stdin" in message
    assert rows[0]["tests"]["outputs"][0].strip() not in message.split("Example")[0]
    assert gc.check_tasks(tasks, "stdio") == tasks  # every reference passes
    wrong = gc.to_tasks(rows, SimpleNamespace(**dict(NO_FLAGS, solution_column="wrong")), "stdio")
    assert gc.check_tasks(wrong, "stdio") == []  # every wrong program fails
    # CodeContests: public and private tests in two columns, joined with '+'; solutions by language
    contest = Dataset.from_list([{"description": "Add a and b.", "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
                                  "private_tests": {"input": ["5 5\n"], "output": ["10\n"]},
                                  "solutions": {"language": [2, 3], "solution": ["int main(){}",
                                                                                "print(sum(map(int, input().split())))"]}}])
    task = gc.to_tasks(contest, SimpleNamespace(**dict(NO_FLAGS, tests_column="public_tests+private_tests")),
                       "contest")[0]
    assert json.loads(task["tests"]) == {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}
    assert task["answer"].startswith("print(") and gc.check_tasks([task], "contest") == [task]


def test_eval_only_on_real_humaneval(tmp_path):
    """The default evaluation set through the same code path, from the file OpenAI distributes: every task loads,
    every reference passes its tests at load time, and each rollout is scored by them."""
    out = tmp_path / "eval"
    humaneval = REPO / "tests" / "data" / "humaneval" / "HumanEval.jsonl.gz"
    result = run_script([*FAST_RUN, "--eval_dataset_name", humaneval, "--num_eval_examples", "164",
                         "--eval_batch_size", "82", "--max_prompt_tokens", "100000", "--eval_only", "--output_dir", out],
                        script="grpo_code.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dropped" not in result.stdout  # all 164 references pass
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation["eval_only"]["num_examples"] == 164 and evaluation["eval_dataset"] == str(humaneval)
    rows = [json.loads(line) for line in (out / "eval_only.jsonl").read_text().splitlines()]
    assert rows[0]["prompt"][1]["content"].startswith("Complete this Python function:\n```python\nfrom typing import")
    assert all(len(row["completions"][0]["tests"]["passed"]) or row["completions"][0]["parsed_answer"] is None
               for row in rows)


def test_column_flags_name_the_training_sets_columns(tmp_path):
    """Custom training columns, the default evaluation set: the flags apply where the columns exist."""
    rows = [json.loads(line) for line in (TOY_CODE_DATA / "train.jsonl").read_text().splitlines()[:20]]
    data = dataset_file(tmp_path, [{("hidden_tests" if k == "test" else k): v for k, v in row.items()} for row in rows])
    humaneval = REPO / "tests" / "data" / "humaneval" / "HumanEval.jsonl.gz"
    out = tmp_path / "eval"
    result = run_script([*FAST_RUN, "--dataset_name", data, "--tests_column", "hidden_tests", "--eval_dataset_name",
                         humaneval, "--num_eval_examples", "4", "--max_prompt_tokens", "100000", "--eval_only",
                         "--output_dir", out], script="grpo_code.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "eval.json").read_text())["eval_only"]["num_examples"] == 4


@pytest.mark.parametrize("script", ["grpo_math", "grpo_tools", "grpo_code"])
def test_hold_out_never_takes_more_than_half(script):
    import importlib

    from datasets import Dataset

    hold_out = importlib.import_module(script).hold_out
    rows = Dataset.from_dict({"x": list(range(6))})
    for size, expected in [(200, (3, 3)), (2, (4, 2)), (0, (6, 0))]:
        train, test = hold_out(rows, size, seed=0)
        assert (len(train), len(test)) == expected
        assert sorted([*train["x"], *test["x"]]) == list(range(6))


def test_a_task_whose_reference_fails_is_reported_and_dropped(tmp_path):
    rows = [json.loads(line) for line in (TOY_CODE_DATA / "test.jsonl").read_text().splitlines()[:20]]
    rows[3]["canonical_solution"] = "    return None\n"
    rows[5]["test"] = "def check(candidate):\n    pass\n"  # no test case at all
    data = tmp_path / "tasks"
    data.mkdir()
    dataset_file(data, rows, "train.jsonl")
    (data / "test.jsonl").write_text((TOY_CODE_DATA / "test.jsonl").read_text())
    out = tmp_path / "eval"
    result = run_script([*FAST_RUN, "--dataset_name", data, "--eval_only", "--output_dir", out], script="grpo_code.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "dropped 2 of 20 tasks" in result.stdout and "1 whose reference solution fails its own tests" in result.stdout
    assert json.loads((out / "eval.json").read_text())["eval_only"]["num_examples"] == 16


def test_leetcode_and_stdio_tasks_through_the_users_path(tmp_path):
    """Public LeetCode tasks (a .jsonl.gz, as downloaded) and stdin/stdout tasks (a JSONL named with the column
    flags) as a user passes them: every reference passes at load time, and held-out rollouts are scored."""
    for data, flags in ((LEETCODE_DATA, []), (STDIO_DATA, ["--prompt_column", "prompt", "--tests_column", "tests",
                                                           "--solution_column", "solution"])):
        out = tmp_path / data.name
        result = run_script([*FAST_RUN, "--dataset_name", data, *flags, "--num_eval_examples", "2", "--eval_batch_size",
                             "2", "--max_completion_length", "16", "--max_prompt_tokens", "100000", "--eval_only",
                             "--output_dir", out], script="grpo_code.py")
        assert result.returncode == 0, result.stderr[-3000:]
        assert "dropped" not in result.stdout, result.stdout[-2000:]  # all 30 (6) references pass
        assert json.loads((out / "eval.json").read_text())["eval_only"]["num_examples"] == 2
        rows = [json.loads(line) for line in (out / "eval_only.jsonl").read_text().splitlines()]
        layout = "class" if data == LEETCODE_DATA else "stdio"
        assert rows[0]["prompt"][0]["content"] == gc.LAYOUT_SYSTEM_PROMPTS[layout]
        assert gc.layout_of(rows[0]["columns"]["entry_point"]) == layout
    # a wrong program in the solution column: every task reported and dropped, and the run stops in one line
    result = run_script([*FAST_RUN, "--dataset_name", STDIO_DATA, "--solution_column", "wrong", "--output_dir",
                         tmp_path / "wrong"], script="grpo_code.py")
    assert result.returncode != 0 and "whose reference solution fails its own tests" in result.stdout
    assert "is usable (each was dropped, the line above says why)" in result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("flags, message", [
    (["--tests_column", "tests"], "has no column 'tests'"),
    (["--layout", "program"], "--layout program: use one of auto, function, class, stdio"),
    (["--layout", "stdio"], "holds no input/output pairs"),  # the toy tasks' tests are asserts
    (["--layout", "class", "--dataset_name", STDIO_DATA, "--tests_column", "tests"], "pass --entry_point_column NAME"),
    (["--setup_column", "imports"], "has no column 'imports'"),
    (["--float_tolerance", "-1"], "--float_tolerance -1.0: use 0 (the same words exactly) or more"),
    (["--layout", "class"], "check the columns (--prompt_column, --tests_column, --solution_column) and --layout (class)"),
    (["--dataset_train_split", "train+dev"], "has no split 'dev'"),
    (["--dataset_name", "missing.jsonl"], "no such file or folder: missing.jsonl (check the path given to --dataset_name)"),
    (["--eval_dataset_name", "./tasks"], "no such file or folder: ./tasks (check the path given to --eval_dataset_name)"),
])
def test_bad_input_is_one_clear_error(flags, message, tmp_path):
    result = run_script([*FAST_RUN, *flags, "--output_dir", tmp_path / "run"], script="grpo_code.py")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("grpo_code.py: error:") and message in last, last
    assert not (tmp_path / "run" / "eval.json").exists()


def test_tasks_without_tests_are_one_clear_error(tmp_path):
    data = dataset_file(tmp_path, [{"prompt": "Write f.", "test": "print('no assert')", "entry_point": "f"}] * 4)
    result = run_script([*FAST_RUN, "--dataset_name", data, "--output_dir", tmp_path / "run"], script="grpo_code.py")
    assert result.returncode != 0 and "is usable (each was dropped" in result.stderr.strip().splitlines()[-1]


def test_short_run_writes_eval_trajectories_and_plot(tmp_path):
    out = tmp_path / "run"
    result = run_script([*FAST_RUN, "--max_steps", "2", "--output_dir", out], script="grpo_code.py")
    assert result.returncode == 0, result.stderr[-3000:]
    evaluation = json.loads((out / "eval.json").read_text())
    for when in ("before", "after"):
        scores = evaluation[when]
        assert scores["num_examples"] == 16
        for key in ("accuracy", "tests_passed", "compiles", "timed_out", "tool_call_success"):
            assert 0 <= scores[key] <= 1
    assert (out / "training_curves.png").exists() and (out / "checkpoint-2").is_dir()
    rows = [json.loads(line) for line in (out / "eval_after.jsonl").read_text().splitlines()]
    assert len(rows) == 16
    timed_out = sum(any(str(e).startswith("timed out") for e in row["completions"][0]["tests"]["errors"]) for row in rows)
    assert evaluation["after"]["timed_out"] == pytest.approx(timed_out / 16)  # the verdicts a time limit decided
    assert evaluation["test_limits"] == {"case_cpu_s": 2, "solution_cpu_s": 4, "wall_factor": 5}  # and the limits
    right = 0
    for row in rows:
        completion = row["completions"][0]
        assert completion["text"][-1]["role"] == "assistant"  # the whole conversation
        assert set(completion["rewards"]) == {f.__name__ for f, _ in gc.RUBRIC}
        passed = completion["tests"]["passed"]
        assert completion["rewards"]["tests_passed_reward"] == pytest.approx(
            0.2 * sum(passed) / len(passed) + 0.8 * all(passed) if passed else 0.0)
        right += bool(passed) and all(passed)
    assert evaluation["after"]["accuracy"] == pytest.approx(right / 16)
    state = json.loads((out / "trainer_state.json").read_text())
    assert any("rewards/tests_passed_reward/mean" in e for e in state["log_history"])
    assert all(0.0 <= e["tests/timed_out"] <= 1.0 for e in state["log_history"] if "reward" in e)  # logged each step
    result = run_script([*FAST_RUN, "--max_steps", "2", "--output_dir", out], script="grpo_code.py")
    assert result.returncode != 0 and "already holds checkpoints" in result.stderr  # never overwritten
    result = run_script([*FAST_RUN, "--max_steps", "3", "--resume_from_checkpoint", "last", "--num_eval_examples", "0",
                         "--output_dir", out], script="grpo_code.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3  # went on from step 2




def test_a_sandbox_mode_that_does_not_exist_is_one_line(tmp_path):
    """GRPO_SANDBOX=bogus: one line naming the modes there are, not every task dropped for its columns."""
    result = run_script([*FAST_RUN, "--max_steps", "1", "--output_dir", tmp_path / "run"], script="grpo_code.py",
                        env=offline_env(GRPO_SANDBOX="bogus"))
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "GRPO_SANDBOX='bogus'" in last and "namespaces, landlock, plain" in last
