"""The scripts are standalone (a user copies one file), so their shared plumbing is written out in each: every
function, class or constant that more than one script defines must be the same text in each, so that a fix cannot
land in one copy only. What is meant to differ per script is listed below, with the reason."""

import ast

import pytest
from conftest import REPO

SCRIPTS = ["grpo_math.py", "grpo_tools.py", "grpo_code.py", "grpo_search.py"]

PER_SCRIPT = {
    "SYSTEM_PROMPT", "DEFAULT_MODEL", "DEFAULT_DATASET", "DEMO_SETTINGS",  # each recipe's task, model and data
    "ScriptArguments", "RecipeConfig",  # each recipe's flags and defaults (its output folder, its rounds)
    "load_data", "extract_answer", "correctness_reward", "RUBRIC",  # each task's data and rubric
    "ToolEnvironment",  # each recipe's tools
    "evaluate", "main",  # each task's metrics and summary table
}


def top_level(text):
    """{name: source} of a script's top-level functions, classes and assignments."""
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found[node.name] = ast.get_source_segment(text, node)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = ast.get_source_segment(text, node)
    return found


def differing(definitions: dict) -> list:
    """Names defined in more than one script, not per-script, whose copies differ."""
    names = {name for d in definitions.values() for name in d} - PER_SCRIPT
    return sorted(name for name in names if len({d[name] for d in definitions.values() if name in d}) > 1)


DEFINITIONS = {script: top_level((REPO / script).read_text()) for script in SCRIPTS}
SHARED = sorted({name for name in set().union(*DEFINITIONS.values())
                 if sum(name in d for d in DEFINITIONS.values()) > 1} - PER_SCRIPT)


def test_the_scripts_share_their_plumbing():
    for name in ("parse_args", "resolve_checkpoint", "load_tokenizer", "load_model", "plot_curves", "score",
                 "monitor_warnings", "run_python", "_SANDBOX_ZYGOTE", "rollouts", "with_logging"):
        assert name in SHARED


@pytest.mark.parametrize("name", SHARED)
def test_a_shared_definition_is_the_same_in_every_script(name):
    copies = {script: d[name] for script, d in DEFINITIONS.items() if name in d}
    assert len(set(copies.values())) == 1, f"{name} differs between {sorted(copies)}: change every copy"


@pytest.mark.parametrize("cell", ["# ## Watching the run", "# ## Plots"])
def test_shared_cells_are_the_same_in_every_script(cell):
    texts = {script: (REPO / script).read_text().split(cell)[1].split("# %% [markdown]\n# ## ")[0] for script in SCRIPTS}
    assert len(set(texts.values())) == 1


def sandbox_cells(text):
    """From the sandbox's first cell to the end of run_python's."""
    start = text.index("# %% [markdown]\n# The sandbox behind `run_python`")
    return text[start:text.index("# %% [markdown]\n", text.index("def run_python(", start))]


def test_the_sandbox_cells_are_the_same_in_both_tool_scripts():
    assert sandbox_cells((REPO / "grpo_tools.py").read_text()) == sandbox_cells((REPO / "grpo_code.py").read_text())


def test_drift_is_caught():
    """The checks above fail when one copy changes."""
    edited = (REPO / "grpo_code.py").read_text().replace("PYTHON_WALL_S = 5 ", "PYTHON_WALL_S = 6 ")
    assert differing({**DEFINITIONS, "grpo_code.py": top_level(edited)}) == ["PYTHON_WALL_S"]
    assert sandbox_cells(edited) != sandbox_cells((REPO / "grpo_tools.py").read_text())
