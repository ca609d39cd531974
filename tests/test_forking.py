"""Forking, as a new user does it (README, "Fork it"): a local data file by any path, in every script and for every
data flag; a fork's runs in its own folder; the demo line naming what the run trains on; one grader per answer
type (OUTCOME_REWARD), a stale name refused in one line; hand-written tool calls replayed through the script's own
tools; and the worked SQL fork (docs/forking.md), made from its own code blocks, replayed and trained."""

import difflib
import importlib
import json
import random
import re
import shutil
import sqlite3

import pytest
from conftest import REPO, docs_text, run_script

SCRIPTS = ["grpo_math.py", "grpo_tools.py", "grpo_code.py", "grpo_search.py"]
README = docs_text()  # README.md and docs/: the worked forks are in docs/forking.md


def rows_of(path, n=None):
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows[:n] if n else rows


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


# ---- a local file by any path -------------------------------------------------------------------------------

@pytest.mark.parametrize("script", SCRIPTS)
def test_read_dataset_takes_a_file_by_any_path(script, tmp_path, monkeypatch):
    """Bare, ./, sub/ and absolute names of a file, and a bare folder name, from the file's own folder: the datasets
    that requirements.txt installs read the bare name's folder '.' as no dataset at all."""
    module = importlib.import_module(script[:-3])
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(5)]
    write_jsonl(tmp_path / "data.jsonl", rows)
    write_jsonl(tmp_path / "sub" / "data.jsonl", rows)
    (tmp_path / "data.csv").write_text("question,answer\n" + "".join(f"q{i},{i}\n" for i in range(5)))
    write_jsonl(tmp_path / "folder" / "train.jsonl", rows)
    monkeypatch.chdir(tmp_path)
    for name in ("data.jsonl", "./data.jsonl", "sub/data.jsonl", str(tmp_path / "data.jsonl"), "data.csv", "folder"):
        dataset = module.read_dataset(name, None)
        assert dataset["train"]["answer"] == [str(i) for i in range(5)] or \
            dataset["train"]["answer"] == list(range(5)), name  # the CSV's answers are read as numbers


def bare_name_run(script, tmp_path):
    """(flags, files to copy into tmp_path) for a short --eval_only run of `script` with bare data file names."""
    toy = REPO / "assets"
    if script in ("grpo_math.py", "grpo_tools.py"):
        folder = "toy_math" if script == "grpo_math.py" else "toy_tools"
        write_jsonl(tmp_path / "data.jsonl", rows_of(toy / folder / "test.jsonl", 40))
        return ["--dataset_name", "data.jsonl"]
    if script == "grpo_code.py":
        write_jsonl(tmp_path / "tasks.jsonl", rows_of(toy / "toy_code" / "train.jsonl", 12))
        write_jsonl(tmp_path / "held_out.jsonl", rows_of(toy / "toy_code" / "test.jsonl", 4))
        return ["--dataset_name", "tasks.jsonl", "--eval_dataset_name", "held_out.jsonl"]
    write_jsonl(tmp_path / "questions.jsonl", rows_of(toy / "toy_search" / "test.jsonl", 12))
    shutil.copy(toy / "toy_search" / "corpus.jsonl", tmp_path / "docs.jsonl")
    return ["--dataset_name", "questions.jsonl", "--corpus_name", "docs.jsonl"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_bare_file_names_load_in_every_script(script, tmp_path):
    """As a user types it, from the data's own folder: the run loads the files, says in its first line that it
    trains on them (not on the toy set), and writes to outputs/<script>/ there."""
    flags = bare_name_run(script, tmp_path)
    result = run_script([*flags, "--eval_only", "--num_eval_examples", "4", "--eval_batch_size", "4"], cwd=tmp_path,
                        script=script, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    demo_line = next(line for line in result.stdout.splitlines() if line.startswith("No CUDA GPU"))
    assert f"data {flags[1]}." in demo_line and "toy set" not in demo_line, demo_line
    assert list((tmp_path / "outputs" / script[:-3]).glob("*/eval.json")), result.stdout[-2000:]


def test_the_demo_line_says_when_the_toy_set_replaces_default_dataset(tmp_path):
    """No GPU, no --dataset_name: the toy set stands in for DEFAULT_DATASET, and the line says so and names both."""
    fork = tmp_path / "my_math.py"
    fork.write_text((REPO / "grpo_math.py").read_text().replace(
        'DEFAULT_DATASET = ("openai/gsm8k", "main")', 'DEFAULT_DATASET = ("my_org/my_set", None)'))
    shutil.copy(REPO / "instruments.py", tmp_path)
    (tmp_path / "assets").symlink_to(REPO / "assets")  # a fork beside its original finds the demo's assets
    import subprocess
    import sys
    from conftest import offline_env
    result = subprocess.run([sys.executable, str(fork), "--eval_only", "--num_eval_examples", "2",
                             "--eval_batch_size", "2"], capture_output=True, text=True, cwd=tmp_path,
                            env=offline_env(), timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    demo_line = next(line for line in result.stdout.splitlines() if line.startswith("No CUDA GPU"))
    assert "toy_math" in demo_line and "in place of DEFAULT_DATASET 'my_org/my_set'" in demo_line, demo_line
    assert list((tmp_path / "outputs" / "my_math").glob("*/eval.json"))  # the fork's own folder


# ---- one grader per answer type ------------------------------------------------------------------------------

@pytest.mark.parametrize("script", [*SCRIPTS, "grpo_judge.py"])
def test_a_stale_outcome_reward_is_refused_naming_the_rewards_it_could_be(script, monkeypatch):
    module = importlib.import_module(script[:-3])
    outcome = module.OUTCOME_REWARD
    monkeypatch.setattr(module, "OUTCOME_REWARD", "old_reward")
    with pytest.raises(module.RecipeError, match="OUTCOME_REWARD is 'old_reward', which is not a reward in RUBRIC"
                       ) as refused:
        module.outcome_reward()
    assert outcome in str(refused.value)  # the names it could be


@pytest.mark.parametrize("script", ["grpo_math.py"])  # as a user meets it, once: every script's check is the same
def test_a_stale_outcome_reward_is_one_line_before_anything_loads(script, tmp_path):
    text = (REPO / script).read_text()
    outcome = re.search(r'^OUTCOME_REWARD = "(\w+)"', text, re.MULTILINE).group(1)
    fork = tmp_path / f"my_{script}"
    fork.write_text(text.replace(f'OUTCOME_REWARD = "{outcome}"', 'OUTCOME_REWARD = "old_reward"', 1))
    shutil.copy(REPO / "sandbox.py", tmp_path)  # grpo_code.py needs it to start at all
    import subprocess
    import sys
    from conftest import offline_env
    result = subprocess.run([sys.executable, str(fork), "--max_steps", "1"], capture_output=True, text=True,
                            cwd=tmp_path, env=offline_env(), timeout=300)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()
    assert len(last) == 1 and "OUTCOME_REWARD is 'old_reward', which is not a reward in RUBRIC" in last[0], last
    assert outcome in last[0]  # the names it could be
    assert not (tmp_path / "outputs").exists()


def test_evaluate_and_the_filter_grade_with_the_outcome_reward(tmp_path, monkeypatch):
    """A fork that changes the outcome reward alone changes what load_data keeps and what evaluate calls right:
    here a reward that grades only even golds, and pays any answer."""
    import grpo_tools as gt

    def even_only(completions, answer, **kwargs):
        return [None if gt.gold_number(gold) % 2 else 1.0 for gold in answer]

    monkeypatch.setattr(gt, "RUBRIC", [(even_only, 1.0)])
    monkeypatch.setattr(gt, "OUTCOME_REWARD", "even_only")
    rows = rows_of(REPO / "assets" / "toy_tools" / "test.jsonl", 40)
    write_jsonl(tmp_path / "data.jsonl", rows)
    flags = ["--model_name_or_path", str(REPO / "assets" / "tiny-qwen-tools"), "--dataset_name",
             str(tmp_path / "data.jsonl"), "--eval_only", "--num_eval_examples", "8", "--eval_batch_size", "8",
             "--max_completion_length", "16", "--output_dir", str(tmp_path / "run")]
    results = gt.main(flags)
    assert results["eval_only"]["accuracy"] == 1.0  # every kept row is even, and even_only pays any answer
    kept = [json.loads(line)["answer"] for line in (tmp_path / "run" / "eval_only.jsonl").read_text().splitlines()]
    assert kept and all(gt.gold_number(gold) % 2 == 0 for gold in kept)
    assert sum(gt.gold_number(row["answer"]) % 2 == 1 for row in rows)  # the data did hold odd golds


# ---- hand-written tool calls, replayed -------------------------------------------------------------------------

def call(name, **arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def test_replay_runs_hand_written_tool_calls_through_the_scripts_tools(tmp_path):
    conversations = [
        {"answer": "1081", "messages": [{"role": "assistant", "tool_calls": [call("calculator", expression="23 * 47")]},
                                        {"role": "tool", "content": "999"},  # written wrong: the tool's own replaces it
                                        {"role": "assistant", "content": "<answer>1081</answer>"}]},
        {"answer": "6", "messages": [{"role": "assistant", "tool_calls": [call("calculator", expression="2 *"),
                                                                           call("no_such_tool", x=1)]},
                                     {"role": "assistant", "content": "<answer>7</answer>"}]},
    ]
    write_jsonl(tmp_path / "calls.jsonl", conversations)
    result = run_script(["--replay", "calls.jsonl"], cwd=tmp_path, script="grpo_tools.py")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "[tool] 1081" in result.stdout and "[tool] 999" not in result.stdout
    assert "[tool] Error: not a valid arithmetic expression" in result.stdout
    assert "Tool no_such_tool not found." in result.stdout
    report = json.loads(next((tmp_path / "outputs" / "grpo_tools").glob("*/replay.json")).read_text())
    first, second = report["conversations"]
    assert first["rewards"]["correctness_reward"] == 1.0 and first["rewards"]["tool_success_reward"] == 1.0
    assert second["rewards"]["correctness_reward"] == 0.0 and second["rewards"]["tool_success_reward"] == 0.0
    (tmp_path / "bad.jsonl").write_text('{"answer": "1"}\n')
    bad = run_script(["--replay", "bad.jsonl"], cwd=tmp_path, script="grpo_tools.py")
    assert bad.returncode == 1 and "line 1 is not a JSON object" in bad.stderr.strip().splitlines()[-1]


# ---- the worked SQL fork (docs/forking.md) -------------------------------------------------------------------

def readme_blocks(heading):
    """The ```python blocks of the section titled `heading` (at any level) in README.md or docs/, up to the next
    heading; a `#` line inside a code block is code, not a heading."""
    found = re.search(rf"^#+ {re.escape(heading)}\n", README, re.MULTILINE)
    assert found, f"no section {heading!r} in README.md or docs/"
    lines, fenced = [], False
    for line in README[found.end():].splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            break
        lines.append(line)
    return re.findall(r"```python\n(.*?)```", "".join(lines), re.DOTALL)


def sql_fork_text():
    """grpo_tools.py with docs/forking.md's two SQL blocks in place of its system prompt and its TOOLS line."""
    prompt_block, tools_block = readme_blocks("Worked fork: a SQL agent from grpo_tools.py")
    text = (REPO / "grpo_tools.py").read_text()
    prompt_line = re.search(r'^SYSTEM_PROMPT = .*\n', text, re.MULTILINE).group(0)
    tools_line = re.search(r'^TOOLS = \[calculator, run_python\].*\n', text, re.MULTILINE).group(0)
    return text.replace(prompt_line, prompt_block, 1).replace(tools_line, tools_block, 1)


def build_shop(folder, seed=0):
    """shop.sqlite (customers, orders) and 30 questions whose answers are computed by SQL."""
    rng = random.Random(seed)
    cities, years = ["Lyon", "Oslo", "Porto", "Graz"], [2022, 2023, 2024]
    db = sqlite3.connect(folder / "shop.sqlite")
    db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT)")
    db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount INTEGER, year INTEGER)")
    names = [f"customer {i}" for i in range(20)]
    db.executemany("INSERT INTO customers VALUES (?, ?, ?)", [(i, n, rng.choice(cities)) for i, n in enumerate(names)])
    db.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)",
                   [(i, rng.randrange(20), rng.randrange(5, 500), rng.choice(years)) for i in range(200)])
    db.commit()
    questions = []
    for city in cities:
        questions.append((f"How many customers live in {city}?", f"SELECT COUNT(*) FROM customers WHERE city = '{city}'"))
    for year in years:
        questions.append((f"How many orders were placed in {year}?", f"SELECT COUNT(*) FROM orders WHERE year = {year}"))
    for i in range(23):
        questions.append((f"What is the total amount of the orders of customer {i % 20} in {years[i % 3]}?",
                          f"SELECT COALESCE(SUM(amount), 0) FROM orders WHERE customer_id = {i % 20} "
                          f"AND year = {years[i % 3]}"))
    rows = [{"question": q, "answer": str(db.execute(query).fetchone()[0]), "query": query} for q, query in questions]
    db.close()
    write_jsonl(folder / "questions.jsonl", [{"question": r["question"], "answer": r["answer"]} for r in rows])
    return rows


def diff_counts(before, after):
    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
    return (sum(line.startswith("+") and not line.startswith("+++") for line in lines),
            sum(line.startswith("-") and not line.startswith("---") for line in lines))


def test_the_readme_states_the_sql_forks_size():
    added, removed = diff_counts((REPO / "grpo_tools.py").read_text(), sql_fork_text())
    assert f"The fork is +{added}/-{removed} lines of `grpo_tools.py`" in " ".join(README.split()), (added, removed)


def test_the_readme_sql_fork_replays_and_trains(tmp_path):
    """The fork made from docs/forking.md's blocks: its tool answers hand-written calls from the database (and refuses
    to write it), and a two-step run on the questions, by their bare name, writes to outputs/grpo_sql/."""
    (tmp_path / "grpo_sql.py").write_text(sql_fork_text())
    for module in ("instruments.py", "sandbox.py", "run_page.py"):
        shutil.copy(REPO / module, tmp_path)
    (tmp_path / "assets").symlink_to(REPO / "assets")  # a fork beside its original finds the demo's assets
    rows = build_shop(tmp_path)
    conversations = [
        {"answer": rows[0]["answer"], "messages": [
            {"role": "assistant", "tool_calls": [call("sql", query=rows[0]["query"])]},
            {"role": "assistant", "content": f"<answer>{rows[0]['answer']}</answer>"}]},
        {"answer": "0", "messages": [
            {"role": "assistant", "tool_calls": [call("sql", query="DELETE FROM orders"),
                                                 call("sql", query="ATTACH DATABASE 'x.db' AS x")]},
            {"role": "assistant", "content": "<answer>0</answer>"}]},
    ]
    write_jsonl(tmp_path / "calls.jsonl", conversations)
    import subprocess
    import sys
    from conftest import offline_env

    def run(*flags):
        return subprocess.run([sys.executable, "grpo_sql.py", *flags], capture_output=True, text=True, cwd=tmp_path,
                              env=offline_env(), timeout=900)

    replayed = run("--replay", "calls.jsonl")
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    assert f"[tool] {rows[0]['answer']}\n" in replayed.stdout
    assert replayed.stdout.count("[tool] Error: not authorized") == 2, replayed.stdout[-2000:]
    report = json.loads(next((tmp_path / "outputs" / "grpo_sql").glob("*/replay.json")).read_text())
    assert report["conversations"][0]["rewards"]["correctness_reward"] == 1.0
    assert report["conversations"][1]["rewards"]["tool_success_reward"] == 0.0
    assert not (tmp_path / "x.db").exists()
    with sqlite3.connect(tmp_path / "shop.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == 200

    trained = run("--dataset_name", "questions.jsonl", "--max_steps", "2", "--num_eval_examples", "6",
                  "--per_device_train_batch_size", "16", "--save_steps", "2", "--mid_eval_steps", "0")
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "data questions.jsonl." in trained.stdout
    assert list((tmp_path / "outputs" / "grpo_sql").glob("*/checkpoint-2"))
    assert list((tmp_path / "outputs" / "grpo_sql").glob("*/eval.json"))
    assert not (tmp_path / "outputs" / "grpo_tools").exists()


# ---- the worked shelf fork (docs/forking.md) -----------------------------------------------------------------

SHELF = ("soft_overlong_penalty", "repetition_penalty", "cosine_scaled_correctness")


def shelf_fork_text():
    """grpo_math.py with the three rewards.py entries pasted above its RUBRIC cell, and docs/forking.md's RUBRIC."""
    import ast

    shelf = (REPO / "rewards.py").read_text()
    entries = {node.name: ast.get_source_segment(shelf, node) for node in ast.parse(shelf).body
               if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    (rubric_block,) = readme_blocks("Worked fork: rewards from the shelf in grpo_math.py")
    text = (REPO / "grpo_math.py").read_text()
    rubric = re.search(r"^RUBRIC = \[\n.*?^\]\n", text, re.MULTILINE | re.DOTALL).group(0)
    pasted = "".join(entries[name] + "\n\n\n" for name in SHELF)
    return text.replace(rubric, pasted + rubric_block, 1)


def test_the_readme_shelf_fork_replays_and_trains(tmp_path):
    (tmp_path / "my_grpo_math.py").write_text(shelf_fork_text())
    shutil.copy(REPO / "instruments.py", tmp_path)
    (tmp_path / "assets").symlink_to(REPO / "assets")
    answers = [{"answer": "72", "messages": "<reasoning>\nHalf of 48 is 24, and 48 plus 24 makes 72.\n</reasoning>\n<answer>\n72\n</answer>"},
               {"answer": "72", "messages": "<reasoning>\n" + "go go go " * 30 + "\n</reasoning>\n<answer>\n71\n</answer>"}]
    write_jsonl(tmp_path / "answers.jsonl", answers)
    import subprocess
    import sys
    from conftest import offline_env

    def run(*flags):
        return subprocess.run([sys.executable, "my_grpo_math.py", *flags], capture_output=True, text=True,
                              cwd=tmp_path, env=offline_env(), timeout=900)

    replayed = run("--replay", "answers.jsonl")
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    right, looping = (c["rewards"] for c in json.loads(next(
        (tmp_path / "outputs" / "my_grpo_math").glob("*/replay.json")).read_text())["conversations"])
    assert right["correctness_reward"] == 1.0 and right["repetition_penalty_reward"] == 0.0
    assert right["cosine_scaled_correctness_reward"] > 0.5 and looping["cosine_scaled_correctness_reward"] < 0
    assert looping["repetition_penalty_reward"] < -0.4 and right["soft_overlong_penalty_reward"] == 0.0
    trained = run("--max_steps", "1", "--num_eval_examples", "8", "--per_device_train_batch_size", "16",
                  "--mid_eval_steps", "0", "--save_steps", "1", "--logging_steps", "1")
    assert trained.returncode == 0, trained.stderr[-3000:]
    metrics = json.loads(next((tmp_path / "outputs" / "my_grpo_math").glob("*/checkpoint-1/trainer_state.json"))
                         .read_text())["log_history"][0]
    for name in ("soft_overlong_penalty_reward", "repetition_penalty_reward", "cosine_scaled_correctness_reward"):
        assert f"rewards/{name}/mean" in metrics, sorted(metrics)


@pytest.mark.parametrize("script", [*SCRIPTS, "grpo_judge.py"])
def test_a_line_that_is_not_json_is_named_by_its_file_and_number(script, tmp_path):
    """A blank line is fine (datasets skips it); a broken line is one error naming the file and the line, in place of
    datasets' DatasetGenerationError and its traceback."""
    module = importlib.import_module(script[:-3])
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"question": "What is 2 + 2?", "answer": "4"}\n\n'
                                      '{"question": "What is 3 + 3?", "answer": "6"\n')
    for name in (data / "train.jsonl", data):  # the file, and the folder holding it
        with pytest.raises(module.RecipeError, match=rf"{re.escape(str(data / 'train.jsonl'))}, line 3 is not JSON "
                                                     r"\(Expecting ',' delimiter"):
            module.read_dataset(str(name), None)


def test_a_broken_jsonl_line_ends_the_run_in_one_line_before_any_model_loads(tmp_path):
    (tmp_path / "data.jsonl").write_text('{"question": "What is 2 + 2?", "answer": "#### 4"}\nnot json at all\n')
    result = run_script(["--dataset_name", "data.jsonl", "--output_dir", "run"], cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "data.jsonl, line 2 is not JSON" in last and "fix or remove that line" in last, last
    assert not (tmp_path / "run").exists()
