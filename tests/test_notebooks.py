"""The notebooks: the same code as the scripts they come from, committed without outputs, and run top to bottom."""

import difflib
import json
import os
import re
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import REPO
from nbclient import NotebookClient

sys.path.insert(0, str(REPO / "notebooks"))
import build_notebooks  # noqa: E402  (notebooks/ is not a package)

NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
FROM_SCRIPTS = [(NOTEBOOK_DIR / f"{Path(script).stem}.ipynb", REPO / script)
                for script, _, _ in build_notebooks.NOTEBOOKS]


# ---------------------------------------------------------------------------------------------
# Drift: the notebook's code cells that come from the script add up to the script's code exactly.
# Written separately from build_notebooks.py, so that a bug there cannot hide a difference.
# ---------------------------------------------------------------------------------------------
def code_of_script(text: str) -> str:
    """The script less its `# %%` markers, their markdown comment lines and script-only cells."""
    kept, in_markdown, script_only = [], False, False
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\n")
        if bare.startswith("# %%"):
            in_markdown, script_only = "[markdown]" in bare, 'active="py"' in bare
        elif in_markdown and (bare == "#" or bare.startswith("# ")):
            continue
        else:
            in_markdown = False
            kept += [] if script_only else [line]
    return "".join(kept)


def script_only_cells(text: str) -> list:
    """The lines of each `# %% active="py"` cell: code that stays out of the notebook."""
    cells = []
    for line in text.splitlines():
        if line.startswith("# %%"):
            cells += [[]] if 'active="py"' in line else [None]
        elif cells and cells[-1] is not None:
            cells[-1].append(line)
    return [cell for cell in cells if cell is not None]


def code_of_notebook(notebook) -> str:
    """The code cells not tagged notebook-only, in order, each followed by the blank lines that follow it in the
    script (two, unless its `lines_to_next_cell` metadata says otherwise)."""
    return "".join(cell.source + "\n" * (1 + cell.metadata.get("lines_to_next_cell", 2)) for cell in notebook.cells
                   if cell.cell_type == "code" and "notebook-only" not in cell.metadata.get("tags", []))


def drift(script_text: str, notebook) -> list:
    """Every way the notebook's code differs from the script's ([] when there is none)."""
    problems = []
    for cell in script_only_cells(script_text):  # only the entry point may stay out of the notebook
        body = "\n".join(cell).rstrip("\n").split("\n")
        if body[0] != 'if __name__ == "__main__":' or any(line and not line.startswith(" ") for line in body[1:]):
            problems.append(f"a script-only cell holds more than the `if __name__ == \"__main__\":` block: {body[:3]}")
    expected, actual = code_of_script(script_text), code_of_notebook(notebook)
    if expected != actual:
        diff = difflib.unified_diff(expected.splitlines(), actual.splitlines(), "script", "notebook", lineterm="", n=1)
        problems.append("\n".join(list(diff)[:40]))
    return problems


@pytest.mark.parametrize("notebook_path, script", FROM_SCRIPTS, ids=lambda value: os.path.basename(str(value)))
def test_notebook_code_is_the_script(notebook_path, script):
    notebook = nbformat.read(notebook_path, as_version=4)
    problems = drift(script.read_text(), notebook)
    assert not problems, (f"{notebook_path.name} and {script.name} differ: edit {script.name} (not the notebook), "
                          f"then run `python notebooks/build_notebooks.py`\n" + "\n".join(problems))
    assert notebook.metadata["source_script"] == str(script.relative_to(REPO))


# The training scripts' reward functions: each starts a cell of its own.
REWARDS = {
    "grpo_math": ["correctness_reward", "numeric_answer_reward", "strict_format_reward", "lenient_format_reward",
                  "tag_count_reward"],
    "grpo_tools": ["correctness_reward", "tool_success_reward", "tool_budget_penalty", "successful_call_credit"],
}


@pytest.mark.parametrize("stem", sorted(REWARDS))
def test_training_notebook_leaves_out_only_the_entry_point(stem):
    script = (REPO / f"{stem}.py").read_text()
    assert [cell[0] for cell in script_only_cells(script)] == ['if __name__ == "__main__":']
    notebook = nbformat.read(NOTEBOOK_DIR / f"{stem}.ipynb", as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert not any(re.search(r"if __name__ == .__main__.:", cell.source) for cell in code)
    sources = [cell.source for cell in code]  # one reward function per cell
    for name in REWARDS[stem]:
        assert sum(source.startswith(f"def {name}(") for source in sources) == 1, name
    rubric = [source for source in sources if "\nRUBRIC = [" in source]
    assert len(rubric) == 1 and rubric[0].startswith("# (reward function, weight)"), "RUBRIC: a cell of its own"
    only = [cell for cell in notebook.cells if "notebook-only" in cell.metadata.get("tags", [])]
    assert only[:3] == notebook.cells[:3] and only[-6:] == notebook.cells[-6:]  # title, setup ... run, table, plot
    for i, cell in enumerate(notebook.cells[3:-6], 3):  # the script's cells: a markdown cell before each code cell
        if cell.cell_type == "code":
            assert notebook.cells[i - 1].cell_type == "markdown", cell.source[:80]


def test_grpo_tools_notebook_gives_each_tool_its_cells():
    """The calculator, run_python and ToolEnvironment each where a user can find and edit them."""
    notebook = nbformat.read(NOTEBOOK_DIR / "grpo_tools.ipynb", as_version=4)
    cells = [cell for cell in notebook.cells if "notebook-only" not in cell.metadata.get("tags", [])]
    code = [cell.source for cell in cells if cell.cell_type == "code"]

    def cell_defining(name):
        found = [source for source in code if re.search(rf"^(def|class) {name}\b", source, re.MULTILINE)]
        assert len(found) == 1, name
        return found[0]

    calculator = {cell_defining(name) for name in ("_calc_check", "_calc_eval", "calculator")}
    assert len(calculator) <= 2  # the calculator in one or two cells; run_python's sandbox is sandbox.py's, imported
    assert not [source for source in code if re.search(r"^(def|class) _?(run_in_sandbox|sandbox_mode|Sandbox)\b",
                                                        source, re.MULTILINE)]
    tools = cell_defining("run_python")
    assert "sandbox.run_python(code)" in tools  # the tool the model is offered, calling the one sandbox
    assert re.search(r"^TOOLS = \[", tools, re.MULTILINE)  # beside the list of tools, which a user edits
    environment = cell_defining("ToolEnvironment")
    assert environment.startswith("class ToolEnvironment:")
    assert not re.search(r"^(def|class) (?!ToolEnvironment\b|as_method\b)", environment, re.MULTILINE)  # and nothing else
    assert "## Tools" in [cell.source.split("\n")[0] for cell in cells if cell.cell_type == "markdown"]


# Each training script's weight of correctness_reward in RUBRIC, and another value for it.
WEIGHT = {"grpo_math": ("(correctness_reward, 2.0)", "(correctness_reward, 3.0)"),
          "grpo_tools": ("(correctness_reward, 1.0)", "(correctness_reward, 3.0)")}


def mutate_notebook(notebook, how, stem):
    cells = notebook.cells
    rubric = next(i for i, cell in enumerate(cells) if cell.source.startswith("# (reward function, weight)"))
    if how == "changed weight":
        assert WEIGHT[stem][0] in cells[rubric].source
        cells[rubric].source = cells[rubric].source.replace(*WEIGHT[stem])
    elif how == "one space":
        cells[rubric].source = cells[rubric].source.replace("RUBRIC = [", "RUBRIC  = [")
    elif how == "blank line added":
        cells[rubric].source = cells[rubric].source.replace("RUBRIC = [", "\nRUBRIC = [")
    elif how == "cell deleted":
        del cells[rubric]
    elif how == "cells swapped":
        cells[rubric], cells[rubric - 2] = cells[rubric - 2], cells[rubric]
    elif how == "untagged cell added":
        cells.insert(rubric + 1, nbformat.v4.new_code_cell("RUBRIC = RUBRIC[:1]"))
    elif how == "notebook-only tag removed":
        cells[2].metadata["tags"] = []
    elif how == "blank lines after a cell":
        cells[rubric].metadata["lines_to_next_cell"] = 1


def mutate_script(text, how, stem):
    if how == "changed weight":
        assert WEIGHT[stem][0] in text
        return text.replace(*WEIGHT[stem])
    if how == "line added":
        return text.replace("RUBRIC = [\n", "RUBRIC = [\n    (correctness_reward, 0.25),\n")
    if how == "code after the entry point":
        return text + 'print("only in the script")\n'
    raise ValueError(how)


@pytest.mark.parametrize("stem", sorted(WEIGHT))
@pytest.mark.parametrize("how", ["changed weight", "one space", "blank line added", "cell deleted", "cells swapped",
                                 "untagged cell added", "notebook-only tag removed", "blank lines after a cell"])
def test_drift_in_the_notebook_is_caught(how, stem):
    script = (REPO / f"{stem}.py").read_text()
    notebook = nbformat.read(NOTEBOOK_DIR / f"{stem}.ipynb", as_version=4)
    assert drift(script, notebook) == []
    mutate_notebook(notebook, how, stem)
    assert drift(script, notebook), how


@pytest.mark.parametrize("stem", sorted(WEIGHT))
@pytest.mark.parametrize("how", ["changed weight", "line added", "code after the entry point"])
def test_drift_in_the_script_is_caught(how, stem, tmp_path):
    copy = tmp_path / f"{stem}.py"
    copy.write_text(mutate_script((REPO / f"{stem}.py").read_text(), how, stem))
    notebook = nbformat.read(NOTEBOOK_DIR / f"{stem}.ipynb", as_version=4)
    assert drift(copy.read_text(), notebook), how


def test_notebooks_are_up_to_date():
    """Markdown, setup and run cells too: the committed notebooks are what build_notebooks.py writes now."""
    try:
        build_notebooks.main(["--check"])
    except SystemExit as error:
        pytest.fail(str(error))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name)
def test_committed_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: clear the outputs"
    assert {"grpo_math.ipynb", "grpo_tools.ipynb", "rewards_playground.ipynb"} <= {path.name for path in NOTEBOOKS}


# ---------------------------------------------------------------------------------------------
# Run top to bottom, as a user does: a kernel of this interpreter, started from notebooks/, offline, on CPU.
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def kernel_env(monkeypatch, tmp_path):
    """The kernel inherits os.environ: conftest's offline settings, plus these."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the CPU path (the offline demo), even on a GPU machine
    monkeypatch.setenv("NOTEBOOK_OUTPUT_DIR", str(tmp_path / "run"))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # keep Jupyter's inline plots
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "1")  # the python3 kernel of this environment, not a user-wide one
    return tmp_path


def execute(path, tmp_path, timeout=1200, flags=None):
    """Run a copy of the notebook in memory (the committed file is left as it is) and save it to tmp_path; `flags`
    replace the run cell's flags, as a user edits that line."""
    committed = path.read_bytes()
    notebook = nbformat.read(path, as_version=4)
    if flags is not None:
        line = 'flags = ["--eval_num_samples", "8"]'
        cells = [cell for cell in notebook.cells if line in cell.source]
        assert len(cells) == 1, "the run cell's flags line changed: update this test"
        cells[0].source = cells[0].source.replace(line, f"flags = {flags!r}")
    try:
        NotebookClient(notebook, kernel_name="python3", timeout=timeout,
                       resources={"metadata": {"path": str(NOTEBOOK_DIR)}}).execute()
    finally:
        nbformat.write(notebook, tmp_path / path.name)
    assert path.read_bytes() == committed
    return notebook


def text_of(cell) -> str:
    return "".join(output.get("text", "") for output in cell.outputs if output.output_type == "stream")


def images_in(cell) -> int:
    return sum("image/png" in output.get("data", {}) for output in cell.outputs)


def test_kernel_is_this_interpreter_with_this_environment(kernel_env):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os, sys\nprint(sys.prefix, os.environ['HF_HUB_OFFLINE'], os.environ['NOTEBOOK_OUTPUT_DIR'])")])
    NotebookClient(notebook, kernel_name="python3", timeout=120).execute()
    assert text_of(notebook.cells[0]).split() == [sys.prefix, "1", str(kernel_env / "run")]


def test_rewards_playground_runs(kernel_env):
    notebook = execute(NOTEBOOK_DIR / "rewards_playground.ipynb", kernel_env)
    output = "".join(text_of(cell) for cell in notebook.cells if cell.cell_type == "code")
    assert f"working directory: {REPO}" in output
    assert "honest: correct, exact format" in output and "best hack 1.00" in output  # the audit
    assert "full-width digits" in output  # the edited reward pays for a hack the original refuses
    assert sum(images_in(cell) for cell in notebook.cells if cell.cell_type == "code") == 2  # two inline plots
    assert "Skipped: no judge server at http://127.0.0.1:8000/v1." in output  # nothing listens there in the tests


# The training notebooks run every cell with a short run in the run cell: the demos' learning targets are checked
# by running the scripts themselves (test_demo.py, test_grpo_*.py), the same main() on the same settings.
SHORT_RUN = ["--max_steps", "4", "--logging_steps", "1", "--num_eval_examples", "16", "--mid_eval_steps", "2",
             "--num_mid_eval_examples", "8", "--eval_num_samples", "2"]


@pytest.mark.parametrize("stem, keys", [
    ("grpo_math", ("accuracy", "format_rate")),
    ("grpo_tools", ("accuracy", "tool_call_success", "mean_tool_calls")),
    ("grpo_code", ("accuracy", "tests_passed", "compiles", "mean_tool_calls")),
    ("grpo_judge", ("accuracy", "true_score", "judge_agreement")),  # the tiny judge served for the run, then stopped
])
def test_training_notebook_runs_top_to_bottom(kernel_env, stem, keys):
    """Setup, every script cell, then the run, table and plot cells: the table and the curves come from the run."""
    notebook = execute(NOTEBOOK_DIR / f"{stem}.ipynb", kernel_env, flags=SHORT_RUN)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    setup, run, table, plot = code[0], code[-3], code[-2], code[-1]
    assert f"working directory: {REPO}" in text_of(setup) and "offline demo" in text_of(setup)
    assert "offline demo" in text_of(run) and "signal report" in text_of(run)  # the script's own messages
    assert images_in(plot) == 1
    evaluation = json.loads((kernel_env / "run" / "eval.json").read_text())
    assert evaluation["global_step"] == 4
    midrun = [e["eval/accuracy"] for e in json.loads((kernel_env / "run" / "trainer_state.json").read_text())[
        "log_history"] if "eval/accuracy" in e]
    assert len(midrun) == 3  # steps 0, 2 and 4
    for key in keys:
        before, after = evaluation["before"][key], evaluation["after"][key]
        assert re.search(rf"^{key} +{before:.2f} +{after:.2f}$", text_of(table), re.MULTILINE), (key, text_of(table))


def test_grpo_search_notebook_runs_top_to_bottom(kernel_env):
    """Every cell, the run cell with a short run (the demo's targets are checked by running the script): the
    table and the curves come from that run."""
    notebook = execute(NOTEBOOK_DIR / "grpo_search.ipynb", kernel_env, flags=[*SHORT_RUN, "--turn_credit"])
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    setup, run, table, plot = code[0], code[-3], code[-2], code[-1]
    assert f"working directory: {REPO}" in text_of(setup) and "offline demo" in text_of(setup)
    assert "offline demo" in text_of(run) and "signal report" in text_of(run)
    assert images_in(plot) == 1
    evaluation = json.loads((kernel_env / "run" / "eval.json").read_text())
    assert evaluation["global_step"] == 4 and evaluation["turn_credit"] is True
    for key in ("accuracy", "f1", "supporting_searches", "searches"):
        before, after = evaluation["before"][key], evaluation["after"][key]
        assert re.search(rf"^{key} +{before:.2f} +{after:.2f}$", text_of(table), re.MULTILINE), (key, text_of(table))
