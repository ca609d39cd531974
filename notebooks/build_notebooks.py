"""Write the notebooks in this folder from percent-format scripts: `python notebooks/build_notebooks.py`.

A script marks its cells as in jupytext's percent format: `# %% [markdown]` followed by `# ` comment lines is
a markdown cell, `# %%` starts a code cell, and `# %% active="py"` starts a cell that stays in the script only
(its `if __name__ == "__main__":` entry point: in a notebook, the last cells call main() instead).
A notebook is its script's cells, in order and unchanged, plus cells tagged "notebook-only": a title, the
setup cell (setup_cell.py: installs in Colab, moves to the repository root, checks the GPU) and, for a
training script, run_cells.py (run main(), print the held-out scores, show the training curves). The code
cells that come from the script add up to the script exactly; a cell followed by other than two blank lines
keeps their number in its `lines_to_next_cell` metadata. The code cells after the script's machinery line (a markdown
cell holding MACHINERY_LINE) start with their code hidden, so that a reader sees the recipe and opens the machinery
only when needed. `--check` fails if a notebook is not up to date.
"""

import argparse
import hashlib
import re
import sys
import textwrap
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent

# (script, notebook title, a training script whose main() the last cells run): one line per notebook.
NOTEBOOKS = [
    ("grpo_math.py", "GRPO on GSM8K-style math", True),
    ("grpo_tools.py", "GRPO with tools", True),
    ("grpo_code.py", "GRPO for code: write it, run it, fix it", True),
    ("grpo_search.py", "GRPO for search: a research agent with turn-level credit", True),
    ("grpo_judge.py", "GRPO with rubrics as rewards: an LLM judge grades each criterion", True),
    ("notebooks/rewards_playground.py", "Rewards playground", False),
]

MARKER = re.compile(r"# %%(.*)")
MACHINERY_LINE = "---- machinery: the same in every script, held identical by tests; you rarely need to edit below ----"
ONLY = {"tags": ["notebook-only"]}


def kind_of(marker):
    return "markdown" if "[markdown]" in marker else "script-only" if 'active="py"' in marker else "code"


def is_comment(line):
    return line == "#" or line.startswith("# ")


def script_cells(text, name):
    """[(kind, source, blank lines after it)] for a percent-format script; kind: markdown, code, script-only."""
    cells = [["code", [], 1]]
    for number, line in enumerate(text.splitlines(), 1):
        if MARKER.fullmatch(line):
            cells.append([kind_of(line), [], number + 1])
        elif cells[-1][0] == "markdown" and not is_comment(line):  # markdown ends where the comments end
            cells.append(["code", [line], number])
        else:
            cells[-1][1].append(line)
    result = []
    for kind, lines, number in cells:
        if kind == "markdown":
            result += [(kind, "\n".join(line[2:] for line in lines), 0)] if lines else []
        elif any(lines):
            if not lines[0]:
                sys.exit(f"{name}:{number}: a cell starts with a blank line: put blank lines before '# %%', not after")
            if kind == "script-only" and lines[0] != 'if __name__ == "__main__":':
                sys.exit(f"{name}:{number}: only the `if __name__ == \"__main__\":` block may stay out of the notebook")
            code = "\n".join(lines).rstrip("\n")
            result.append((kind, code, len(lines) - len(code.split("\n"))))
        elif lines:  # blank lines alone, e.g. between a markdown cell and '# %%': they would be lost
            sys.exit(f"{name}:{number}: blank lines that belong to no cell: remove them")
    return result


def script_code(text):
    """The script without its markers, markdown comments and script-only cells."""
    kept, kind = [], "code"
    for line in text.splitlines(keepends=True):
        if MARKER.fullmatch(line.rstrip("\n")):
            kind = kind_of(line)
        elif kind == "markdown" and is_comment(line.rstrip("\n")):
            continue
        else:
            kind = "code" if kind == "markdown" else kind
            kept += [line] if kind == "code" else []
    return "".join(kept)


def notebook_code(notebook):
    """The code cells that come from the script, each followed by its blank lines, joined."""
    return "".join(cell.source + "\n" * (1 + cell.metadata.get("lines_to_next_cell", 2)) for cell in notebook.cells
                   if cell.cell_type == "code" and "notebook-only" not in cell.metadata.get("tags", []))


def requirements():
    """requirements.txt down to its '# tests' section, comments dropped: what Colab installs."""
    lines = (ROOT / "requirements.txt").read_text().split("# tests")[0].splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def setup_code(training):
    """setup_cell.py with requirements.txt's packages filled in; the part after '# --- GPU' for training only."""
    packages = textwrap.fill(", ".join(f'"{line}"' for line in requirements()), 100, initial_indent="    ",
                             subsequent_indent="    ", break_on_hyphens=False, break_long_words=False)
    code = (ROOT / "notebooks" / "setup_cell.py").read_text().replace(
        "REQUIREMENTS = []  # the packages of requirements.txt", f"REQUIREMENTS = [  # requirements.txt\n{packages},\n]")
    common, gpu = code.split("# --- GPU\n")
    return (common + gpu if training else common).strip("\n")


def run_cells(stem):
    """The cells of run_cells.py, for the script `stem`: run main(), print the scores, show the curves."""
    text = (ROOT / "notebooks" / "run_cells.py").read_text().replace("{stem}", stem)
    return [(new_markdown_cell if kind == "markdown" else new_code_cell)(source, metadata=ONLY)
            for kind, source, _ in script_cells(text, "run_cells.py")]


def build(script, title, training):
    text = (ROOT / script).read_text()
    intro = ("Run the cells top to bottom; to change a reward, edit its cell and run from there to the end again."
             if training else "Run the cells top to bottom, then edit any of them and run it again.")
    cells = [new_markdown_cell(f"# {title}\n\n{intro}", metadata=ONLY),
             new_markdown_cell("Setup: in Colab this installs the requirements; everywhere it moves to the "
                               "repository root" + (" and says what the run at the end will do." if training else "."),
                               metadata=ONLY),
             new_code_cell(setup_code(training), metadata=ONLY)]
    machinery = False
    for kind, source, blank_after in script_cells(text, script):
        if kind == "markdown":
            cells.append(new_markdown_cell(source))
            machinery = machinery or MACHINERY_LINE in source
        elif kind == "code":
            metadata = {} if blank_after == 2 else {"lines_to_next_cell": blank_after}
            if machinery:  # collapsed in Jupyter: one click shows it
                metadata["jupyter"] = {"source_hidden": True}
            cells.append(new_code_cell(source, metadata=metadata))
    cells += run_cells(Path(script).stem) if training else []
    seen = set()
    for cell in cells:  # ids from the content, so that a rebuild of unchanged cells changes nothing
        cell.id = hashlib.sha1(f"{cell.cell_type}\n{cell.source}".encode()).hexdigest()[:12]
        while cell.id in seen:
            cell.id = hashlib.sha1(cell.id.encode()).hexdigest()[:12]
        seen.add(cell.id)
    notebook = new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"}, "source_script": script,
        **({"accelerator": "GPU", "colab": {"gpuType": "T4", "provenance": []}} if training else {})})
    nbformat.validate(notebook)
    if notebook_code(notebook) != script_code(text):
        sys.exit(f"{script}: the notebook's code would not add up to the script (does the file end with a newline?)")
    return notebook


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a notebook differs from a fresh build")
    args = parser.parse_args(argv)
    stale = []
    for script, title, training in NOTEBOOKS:
        path = ROOT / "notebooks" / f"{Path(script).stem}.ipynb"
        text = nbformat.writes(build(script, title, training)) + "\n"
        if args.check:
            stale += [] if path.exists() and path.read_text() == text else [str(path.relative_to(ROOT))]
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        sys.exit(f"stale: {', '.join(stale)}: run `python notebooks/build_notebooks.py`")


if __name__ == "__main__":
    main()
