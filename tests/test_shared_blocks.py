"""Each script is a recipe on top, and below one marked line the little it needs to run on its own (flags, loading,
reading data, generation, main). Above the line is what a forker edits (config, data, tools, rubric, the call that
trains); it may differ freely between scripts. Below the line, every part is written out in each script that needs
it (a user copies one file), and every copy must be the same text, comments included, so that a fix cannot land in
one copy only. The few parts that only some recipes need are listed below, with the reason. What a forker does not
edit (the run instruments, the sandbox) is not copied at all: instruments.py and sandbox.py, imported."""

import ast
import re

import pytest
from conftest import REPO, docs_text

SCRIPTS = ["grpo_math.py", "grpo_tools.py", "grpo_code.py", "grpo_search.py", "grpo_judge.py"]
MACHINERY_LINE = ("# ---- machinery: the same in every script, held identical by tests; "
                  "you rarely need to edit below ----")

# Machinery cells that only some scripts need, by the first line of their markdown; every other one is in all four.
TOOL_SCRIPTS = {"grpo_tools.py", "grpo_code.py", "grpo_search.py"}
NEEDED_BY = {
    "# ## Multi-turn rollouts": TOOL_SCRIPTS,  # evaluation with the tools enabled
    "# ## Single-turn generation": {"grpo_math.py", "grpo_judge.py"},  # the single-turn recipes: plain generate()
    "# ## Task layouts": {"grpo_code.py"},  # HumanEval / MBPP / own rows -> tasks, reference solutions checked
    "# ## The search index": {"grpo_search.py"},  # BM25 over the corpus, cached on disk
    "# ## Question layouts and the corpus": {"grpo_search.py"},  # HotpotQA / own rows -> questions, documents
    "# ## The judge's client, server and audit": {"grpo_judge.py"},  # requests, transformers serve, the audit
}
# The line each must be on or before: what a forker edits, first. grpo_search.py's RUBRIC is the latest (467): two
# tools with their tally and six rewards, chain_progress the last added, come before it
TARGETS = {"RUBRIC": 470, "DEFAULT_MODEL": 150}


def split(text):
    """(recipe, machinery): the script's text above and below its machinery line."""
    assert text.count(MACHINERY_LINE + "\n") == 1, "the machinery line must appear once, as its own line"
    at = text.rindex("# %% [markdown]\n", 0, text.index(MACHINERY_LINE))  # the line's own markdown cell
    return text[:at], text[at:]


def cells(machinery):
    """{first markdown line: the cell's whole text (markdown and code)} of the machinery part."""
    found = {}
    for chunk in re.split(r"(?m)^(?=# %% \[markdown\]\n)", machinery):
        if chunk:
            heading = chunk.split("\n")[1]
            assert heading not in found, f"two machinery cells start with {heading!r}: give each its own heading"
            found[heading] = chunk
    return found


def definitions(text):
    """{name: source} of a text's top-level functions, classes and assignments."""
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found[node.name] = ast.get_source_segment(text, node)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = ast.get_source_segment(text, node)
    return found


def differing(texts: dict) -> list:
    """Problems with the machinery of {script: text}: a cell missing where it is needed or present where it is not,
    copies of a cell that differ, a name defined above the line of one script and below the line of another."""
    parts = {script: split(text) for script, text in texts.items()}
    machinery = {script: cells(below) for script, (_, below) in parts.items()}
    problems = []
    for heading in sorted(set().union(*machinery.values(), NEEDED_BY)):
        copies = {script: found[heading] for script, found in machinery.items() if heading in found}
        needed = NEEDED_BY.get(heading, set(SCRIPTS)) & set(texts)
        if set(copies) != needed:
            problems.append(f"{heading!r} is in {sorted(copies)} but belongs in {sorted(needed)}")
        if len(set(copies.values())) > 1:
            problems.append(f"{heading!r} differs between {sorted(copies)}: change every copy")
    below = {name for _, text in parts.values() for name in definitions(text)}
    for script, (above, _) in parts.items():
        shared_above = sorted(set(definitions(above)) & below)
        if shared_above:
            problems.append(f"{script} defines {shared_above} above its machinery line, which is machinery elsewhere")
    return problems


TEXTS = {script: (REPO / script).read_text() for script in SCRIPTS}


def test_the_machinery_is_the_same_in_every_script():
    assert differing(TEXTS) == []


@pytest.mark.parametrize("script", SCRIPTS)
def test_what_a_forker_edits_comes_first(script):
    text = TEXTS[script]
    recipe, machinery = split(text)
    for name, limit in TARGETS.items():
        line = text[:text.index(definitions(recipe)[name])].count("\n") + 1
        assert line <= limit, f"{script}: {name} is on line {line}, after {limit}: keep the recipe short"
    tools = script in TOOL_SCRIPTS
    for name in ("SYSTEM_PROMPT", "load_data", "RUBRIC", "build_trainer", "evaluate", *["ToolEnvironment"] * tools):
        assert name in definitions(recipe), f"{script}: {name} belongs above the machinery line"
    for name in ("main", "parse_args", "load_tokenizer", "rollouts" if tools else "generate_answers"):
        assert name in definitions(machinery), f"{script}: {name} belongs below the machinery line"
    for name in ("plot_curves", "RunMonitor", "replay", "ZeroSignalSampler", "_Sandbox", "run_hidden_tests"):
        assert name not in definitions(text), f"{script}: {name} is instruments.py's or sandbox.py's, imported"


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_recipe_runs_without_the_machinery(script):
    """Cells above the line call machinery only at run time, never when they are defined: run alone, top to bottom,
    they define everything a forker edits."""
    recipe, _ = split(TEXTS[script])
    namespace = {"__name__": "recipe_only", "__file__": str(REPO / script)}
    exec(compile(recipe, script, "exec"), namespace)
    assert callable(namespace["build_trainer"]) and namespace["RUBRIC"]


def test_drift_is_caught():
    """The checks above fail when one copy changes (code or comment), when a part moves above the line, and when a
    cell is missing from a script that needs it."""
    edited = TEXTS["grpo_code.py"].replace("size = min(size, len(train) // 2)", "size = min(size, len(train) // 3)")
    assert edited != TEXTS["grpo_code.py"]
    assert [p for p in differing({**TEXTS, "grpo_code.py": edited}) if "Reading data" in p]
    comment = TEXTS["grpo_tools.py"].replace("# the padding repeats rows", "# padding repeats rows")
    assert [p for p in differing({**TEXTS, "grpo_tools.py": comment}) if "Multi-turn rollouts" in p]
    recipe, machinery = split(TEXTS["grpo_math.py"])
    reading = cells(machinery)["# ## Reading data"]
    moved = recipe + reading + machinery.replace(reading, "")
    assert [p for p in differing({**TEXTS, "grpo_math.py": moved}) if "above its machinery line" in p]
    lost = TEXTS["grpo_search.py"].replace(cells(split(TEXTS["grpo_search.py"])[1])["# ## Multi-turn rollouts"], "")
    assert [p for p in differing({**TEXTS, "grpo_search.py": lost}) if "Multi-turn rollouts" in p]
    extra = TEXTS["grpo_math.py"] + cells(split(TEXTS["grpo_code.py"])[1])["# ## Task layouts"]
    assert [p for p in differing({**TEXTS, "grpo_math.py": extra}) if "Task layouts" in p]


def copied_code_lines(texts: dict) -> dict:
    """{script: code lines (not blank, not a comment) that stand in a run of six or more consecutive code lines found
    in another script too}: how much of each script is a copy."""
    width, code = 6, {}
    for script, text in texts.items():
        stripped = (" ".join(line.split()) for line in text.splitlines())
        code[script] = [line for line in stripped if line and not line.startswith("#")]
    owners = {}
    for script, lines in code.items():
        for i in range(len(lines) - width + 1):
            owners.setdefault(tuple(lines[i:i + width]), set()).add(script)
    copied = {}
    for script, lines in code.items():
        marked = set()
        for i in range(len(lines) - width + 1):
            if len(owners[tuple(lines[i:i + width])]) > 1:
                marked.update(range(i, i + width))
        copied[script] = len(marked)
    return copied


def test_the_readme_table_counts_what_the_scripts_hold():
    """The README's table of the five scripts ("Which one to fork"; "How the scripts differ" in docs/how_it_works.md
    explains it): its line counts, copy counts and line numbers are the scripts' own."""
    rows = {}
    for line in docs_text().splitlines():
        if line.startswith("| lines") or line.startswith("| `RUBRIC` on line") or line.startswith("| code lines"):
            label, *values = [cell.strip() for cell in line.strip("|").split("|")]
            rows[label] = [value if " / " in value else value.split(" ")[0].replace(",", "") for value in values]
    machinery = {script: cells(split(text)[1]) for script, text in TEXTS.items()}
    copied = copied_code_lines(TEXTS)
    for column, script in enumerate(SCRIPTS):
        text = TEXTS[script]
        recipe, below = split(text)
        own = sum(cell.count("\n") for heading, cell in machinery[script].items()
                  if sum(heading in found for found in machinery.values()) == 1)
        line = {name: text[:text.index(definitions(recipe)[name])].count("\n") + 1 for name in TARGETS}
        assert rows["lines in all"][column] == str(text.count("\n")), script
        assert rows["lines: recipe (above the line)"][column] == str(recipe.count("\n")), script
        assert rows["lines: below the line, the same in other scripts"][column] == str(below.count("\n") - own), script
        assert rows["lines: below the line, its own"][column] == str(own), script
        assert rows["code lines in a run of 6+ found in another script too"][column] == str(copied[script]), script
        numbers = f"{line['RUBRIC']} / {line['DEFAULT_MODEL']}"
        assert rows["`RUBRIC` on line / `DEFAULT_MODEL` on line"][column] == numbers, script
    assert f"In all, {sum(copied.values()):,} code lines" in docs_text(), "README.md or docs/ (docs/how_it_works.md)"


def test_the_copy_count_catches_a_copy():
    """The measure behind the README's copy row: a pasted run of six code lines counts in both scripts."""
    pasted = "\n".join(f"value_{n} = {n}  # a comment does not count" for n in range(6)) + "\n"
    texts = {"a.py": "import os\n" + pasted, "b.py": pasted + "print(1)\n", "c.py": pasted[:-20] + "\n"}
    assert copied_code_lines(texts) == {"a.py": 6, "b.py": 6, "c.py": 0}


def test_the_two_gsm8k_recipes_read_their_data_alike():
    """grpo_math.py and grpo_tools.py train on the same GSM8K-style data, so their number helpers are copies: a fix to
    one must reach the other. Their load_data parted ways on purpose: grpo_math.py also reads symbolic answers
    (--answer_type), grpo_tools.py numbers only; both keep the rows their outcome reward can grade, and the tools'
    prompt-length check counts the tools' descriptions, which are part of every prompt there."""
    math, tools = (definitions(split(TEXTS[script])[0]) for script in ("grpo_math.py", "grpo_tools.py"))
    for name in ("NUMBER", "parse_number", "gold_number"):  # correctness_reward: held to rewards.py too
        assert math[name] == tools[name], name
    for helpers in (math, tools):
        assert "grade([\"\"], **{key: [value] for key, value in row.items()})" in helpers["load_data"]
    assert "--answer_type" in math["load_data"] and "tools=tools_of(ToolEnvironment())" in tools["load_data"]
