"""The documentation's shape: README.md is the front door (at most 300 lines: what the project is, the commands,
what to expect, which recipe to fork, where to read more) and every page under docs/ is linked from it, starts with
a one-line title and a link back, and every relative link of README.md and docs/*.md reaches a file that exists and,
for a #anchor, a heading of that file. Text only, no run: well under a second."""

import re

from conftest import REPO, docs_pages

MAX_README_LINES = 300
BACK = "[Back to the README](../README.md)"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def outside_code(text: str) -> list:
    """The lines of a markdown text that are not inside a ``` code block (a `#` line there is code, not a heading)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(text: str) -> set:
    """The #anchors of a page's headings, as GitHub makes them: lower case, punctuation but `-` and `_` dropped,
    spaces to hyphens; a repeated heading gets -1, -2, ..."""
    found = set()
    for line in outside_code(text):
        heading = re.fullmatch(r"#{1,6} (.+?)\s*#*", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
            name, n = slug, 0
            while name in found:
                n += 1
                name = f"{slug}-{n}"
            found.add(name)
    return found


def broken_links(pages: dict) -> list:
    """'page: target' for each relative link of {path: text} whose file does not exist, or whose #anchor is not a
    heading of the markdown file it names (or of its own page, for a bare #anchor)."""
    broken = []
    for path, text in pages.items():
        for target in LINK.findall("\n".join(outside_code(text))):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                broken.append(f"{path.name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md":
                heads = anchors(pages[linked] if linked in pages else linked.read_text())
                if anchor not in heads:
                    broken.append(f"{path.name}: {target} (no such heading)")
    return broken


def unlinked_pages(readme: str, pages: list) -> list:
    """docs/ pages the README links to by no link."""
    linked = {target.partition("#")[0] for target in LINK.findall(readme)}
    return [page.name for page in pages if f"docs/{page.name}" not in linked]


def front_door_problems(readme: str) -> list:
    problems = []
    if readme.count("\n") > MAX_README_LINES:
        problems.append(f"README.md has {readme.count(chr(10))} lines; at most {MAX_README_LINES}: move a section "
                        "to a page under docs/ and link it")
    quick = readme.split("## Quick start\n", 1)[-1].split("\n## ", 1)[0] if "## Quick start\n" in readme else ""
    # the install, run and test commands, which .ci/run runs as the README gives them
    for command in ("pip install -r requirements.txt", "python grpo_math.py", "python -m pytest"):
        if f"\n{command}" not in quick:
            problems.append(f"README.md's Quick start lacks `{command}`")
    return problems


PAGES = {path.resolve(): path.read_text() for path in docs_pages()}
README = (REPO / "README.md").read_text()
DOCS = sorted((REPO / "docs").glob("*.md"))


def test_the_readme_is_a_front_door():
    assert front_door_problems(README) == []


def test_every_docs_page_is_linked_from_the_readme():
    assert DOCS, "docs/ holds the pages the README links to"
    assert unlinked_pages(README, DOCS) == []


def test_every_docs_page_has_a_title_and_a_link_back():
    for page in DOCS:
        first, blank, back = page.read_text().splitlines()[:3]
        assert first.startswith("# ") and blank == "" and back == BACK, page.name


def test_every_relative_link_reaches_a_file_and_a_heading():
    assert broken_links(PAGES) == []


def test_the_checks_fail_on_what_they_guard(tmp_path):
    """Each check above fails on a README too long, a page not linked, a link to no file, a link to no heading."""
    long = README + "line\n" * (MAX_README_LINES + 1 - README.count("\n"))
    assert front_door_problems(long) and not front_door_problems(README)
    assert front_door_problems(README.replace("\npython -m pytest", "\npytest"))
    assert unlinked_pages(README.replace("(docs/sandbox.md)", "(sandbox.py)"), DOCS) == ["sandbox.md"]
    docs = tmp_path / "docs"
    docs.mkdir()
    (tmp_path / "README.md").write_text("# Title\n\n## Quick start\n\n[a](docs/a.md#one) [b](docs/a.md#two)\n")
    (docs / "a.md").write_text("# A\n\n## One\n\n```\n# Two\n```\n\n[up](../README.md#quick-start) [x](../x.py)\n")
    pages = {path.resolve(): path.read_text() for path in (tmp_path / "README.md", docs / "a.md")}
    assert broken_links(pages) == ["README.md: docs/a.md#two (no such heading)", "a.md: ../x.py (no such file)"]
    assert anchors("## `grpo_tools.py`: multi-turn tool use\n## A\n## A\n") == {
        "grpo_toolspy-multi-turn-tool-use", "a", "a-1"}
