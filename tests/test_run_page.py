"""report.html, the run's page (run_page.py): written by every run and by `python run_page.py RUN_DIR`, opened from
its file:// URL in a real Chromium, and checked against the run's own files.

Playwright rather than selenium: it reports every uncaught page error and console message as an event (what these
tests fail on), waits for the page by itself, and drives Debian's chromium through `executable_path` with no
driver binary to keep in step with the browser's version."""

import json
import shutil
import subprocess
import sys

import pytest
from conftest import FAST_RUN, REPO, browser_page, check_run_page, docs_text, offline_env, read_jsonl, run_script

sys.path.insert(0, str(REPO))
import run_page  # noqa: E402

# Built to break out of the page: each must show as text and run nothing
BREAKOUTS = ['</script><script>window.pwned = "script"</script>',
             '<img src=x onerror="window.pwned = \'onerror\'">',
             '<!-- <script>window.pwned = "comment"</script>',
             '"]}</script><svg onload="window.pwned = \'svg\'">',
             'line\u2028separator & <b>bold</b> \\u003c/script\\u003e']


@pytest.fixture(scope="module")
def tools_run(tmp_path_factory):
    """A short grpo_tools.py run as a user starts it (real tool calls, groups, mid-run evaluations), then --replay."""
    out = tmp_path_factory.mktemp("page") / "run"
    result = run_script(["--max_steps", "3", "--logging_steps", "1", "--num_eval_examples", "16",
                         "--mid_eval_steps", "2", "--num_mid_eval_examples", "16", "--output_dir", out],
                        script="grpo_tools.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"wrote {out / 'report.html'}" in result.stdout
    result = run_script(["--replay", out], script="grpo_tools.py")
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def rebuilt(folder):
    """`python run_page.py FOLDER`, as a user writes a page for an existing run folder."""
    result = subprocess.run([sys.executable, str(REPO / "run_page.py"), str(folder)], capture_output=True, text=True,
                            env=offline_env(), timeout=120)
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout and (folder / "report.html").is_file()
    return folder / "report.html"


def test_the_page_shows_every_group_rollout_and_question_of_the_run(tools_run):
    rebuilt(tools_run)  # with replay.json, which the run's own page predates
    counts = check_run_page(tools_run)
    assert counts["groups"] >= 3 and counts["rollouts"] >= 3 * 8
    questions = {json.dumps(r["prompt"]) for r in read_jsonl(tools_run / "eval_before.jsonl")}
    assert counts["questions"] == len(questions) == 16
    html = (tools_run / "report.html").read_text()
    assert "http://" not in html and "https://" not in html  # nothing fetched: no CDN, no font, no script src
    assert html.count("</script>") == 2  # the template's own two blocks: the data holds no way out of its block


def test_tool_calls_open_on_a_click_and_the_groups_sort_filter_and_search(tools_run):
    rows = read_jsonl(tools_run / "train_samples.jsonl")
    calls = [c for r in rows for c in r["completions"] if isinstance(c["text"], list)
             and any(m.get("tool_calls") for m in c["text"])]
    assert calls, "the tiny tools model made no tool call in 3 steps"
    with browser_page(tools_run / "report.html") as page:
        page.click("#tab-groups")
        page.select_option("#g-filter", "all")
        assert page.locator("#g-list details.part, #g-list .fold, #g-list .facts").count() == 0  # short: as before
        call = page.locator("details.tool-call").first
        assert call.get_attribute("open") is None and not call.locator("pre").is_visible()
        call.locator("summary").click()
        assert call.get_attribute("open") is not None and "expression" in call.locator("pre").inner_text()
        result = page.locator("details.tool-result").first
        result.locator("summary").click()
        assert result.locator("pre").is_visible()

        page.select_option("#g-sort", "mean-desc")
        means = [float(m) for m in page.locator("#g-list .group").evaluate_all("gs => gs.map(g => g.dataset.mean)")]
        assert means == sorted(means, reverse=True) and len(set(means)) > 1
        page.select_option("#g-sort", "advantage-desc")
        tops = page.locator("#g-list .group").evaluate_all(
            "gs => gs.map(g => Math.max(...[...g.querySelectorAll('.rollout')].map(r => Number(r.dataset.advantage))))")
        assert tops == sorted(tops, reverse=True)
        for group in page.locator("#g-list .group").all()[:3]:  # each group's rollouts, best first
            advantages = [float(a) for a in group.locator(".rollout").evaluate_all("rs => rs.map(r => r.dataset.advantage)")]
            assert advantages == sorted(advantages, reverse=True)
        page.select_option("#g-sort", "step-desc")
        steps = [int(s) for s in page.locator("#g-list .group").evaluate_all("gs => gs.map(g => g.dataset.step)")]
        assert steps == sorted(steps, reverse=True)

        page.select_option("#g-filter", "no-signal")
        no_signal = sum(all(abs(c["advantage"]) < 1e-6 for c in r["completions"]) for r in rows)
        assert page.locator("#g-list .group").count() == page.locator("#g-list .group.nosignal").count() == no_signal
        page.select_option("#g-filter", "all")

        word = rows[-1]["prompt"][-1]["content"].split()[-2]  # a word of the last group's question
        page.fill("#g-search", word)
        expected = sum(word.lower() in json.dumps(r["prompt"][-1]["content"] + str(r["answer"]) + json.dumps(
            [c["text"] for c in r["completions"]])).lower() for r in rows)
        assert 1 <= page.locator("#g-list .group").count() <= expected
        page.fill("#g-search", "no such text anywhere 7f3a")
        assert page.locator("#g-list .group").count() == 0

        page.click("#tab-heldout")
        page.select_option("#h-filter", "flipped")
        before = {json.dumps(r["prompt"]): r["completions"][0]["rewards"]["correctness_reward"]
                  for r in read_jsonl(tools_run / "eval_before.jsonl")}
        after = {json.dumps(r["prompt"]): r["completions"][0]["rewards"]["correctness_reward"]
                 for r in read_jsonl(tools_run / "eval_after.jsonl")}
        flipped = sum(before[k] != after[k] for k in before)
        assert page.locator("#h-table tr.question").count() == flipped

        page.click("#tab-replay")
        replayed = len(read_jsonl(tools_run / "replay.jsonl"))
        assert page.locator("#r-table tr").count() == 1 + min(replayed, 500)
        assert page.problems == [], page.problems


def test_model_text_built_to_break_out_shows_as_text_and_runs_nothing(tools_run, tmp_path):
    folder = tmp_path / "hostile"
    shutil.copytree(tools_run, folder, ignore=shutil.ignore_patterns("checkpoint-*", "*.safetensors"))
    rows = read_jsonl(folder / "train_samples.jsonl")
    for text, completion in zip(BREAKOUTS, rows[0]["completions"]):
        completion["text"] = text
        completion["parsed_answer"] = text
    rows[1]["completions"][0]["text"] = [{"role": "assistant", "content": BREAKOUTS[0], "tool_calls": [
        {"type": "function", "function": {"name": BREAKOUTS[1], "arguments": {"expression": BREAKOUTS[3]}}}]},
        {"role": "tool", "name": "calculator", "content": BREAKOUTS[2]}]
    rows[2]["prompt"][-1]["content"] = BREAKOUTS[1]
    (folder / "train_samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page_file = rebuilt(folder)
    with browser_page(page_file) as page:
        for tab in ("groups", "heldout", "replay", "run"):
            page.click(f"#tab-{tab}")
        page.click("#tab-groups")
        for details in page.locator("details").all()[:40]:
            if details.is_visible():
                details.locator("summary").first.click()
        assert page.evaluate("typeof window.pwned") == "undefined"
        assert page.locator("img").count() == 1 and page.locator("svg, #g-list script").count() == 0
        assert page.locator("b", has_text="bold").count() == 0  # the model's <b> is not markup
        text = page.locator("#g-list").inner_text()
        for hostile in BREAKOUTS[:4]:
            assert hostile in text  # shown, as text
        assert page.problems == [], page.problems


def test_the_hack_labs_marks_show_and_filter(tools_run, tmp_path):
    """Rollouts the hack lab marked (train_samples.jsonl's `hack`, the truth, and `flagged`, the detector's)."""
    folder = tmp_path / "lab"
    shutil.copytree(tools_run, folder, ignore=shutil.ignore_patterns("checkpoint-*", "*.safetensors"))
    rows = read_jsonl(folder / "train_samples.jsonl")
    for n, row in enumerate(rows):
        for i, completion in enumerate(row["completions"]):
            completion["hack"], completion["flagged"] = n % 2 == 0 and i < 3, n % 3 == 0 and i == 0
    (folder / "train_samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with browser_page(rebuilt(folder)) as page:
        page.click("#tab-groups")
        while page.is_visible("#g-more"):
            page.click("#g-more")
        assert page.locator(".rollout .badge.hack").count() == sum(c["hack"] for r in rows for c in r["completions"])
        page.select_option("#g-filter", "hack")
        assert page.locator("#g-list .group").count() == sum(n % 2 == 0 for n in range(len(rows)))
        page.select_option("#g-filter", "flagged")
        assert page.locator("#g-list .group").count() == page.locator(".rollout .badge.flagged").count() == sum(
            n % 3 == 0 for n in range(len(rows)))
        assert page.problems == [], page.problems


def test_answers_a_time_limit_decided_are_marked(tools_run, tmp_path):
    """A code answer whose hidden tests hit a time limit (grpo_code.py's eval files keep each case's error) says
    so in its cell and its details, and the summary counts them; an answer without tests is not marked."""
    folder = tmp_path / "limits"
    shutil.copytree(tools_run, folder, ignore=shutil.ignore_patterns("checkpoint-*", "*.safetensors"))
    rows = read_jsonl(folder / "eval_after.jsonl")
    for row in rows[:3]:
        greedy = next(c for c in row["completions"] if c.get("greedy"))
        greedy["tests"] = {"passed": [True, False, False], "harness_error": None,
                           "errors": ["", "timed out (over 2 s of CPU)", "skipped: an earlier case timed out"]}
    rows[3]["completions"][0]["tests"] = {"passed": [False], "errors": ["AssertionError"], "harness_error": None}
    (folder / "eval_after.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with browser_page(rebuilt(folder)) as page:
        page.click("#tab-heldout")
        marked = page.locator("#h-table td", has_text="(time limit)")
        assert marked.count() == 3
        assert marked.first.get_attribute("title") == "timed out (over 2 s of CPU)"
        assert "3 answers failed on a time limit" in page.inner_text("#h-summary")
        page.locator("#h-table tr.question").first.click()
        assert "hidden tests: timed out (over 2 s of CPU)" in page.inner_text("#h-table")
        assert page.problems == [], page.problems


def test_a_long_run_shows_a_stated_share_and_stays_small(tmp_path):
    """12,000 rollouts of 2,000 characters (24 MB of text): the page holds every k-th step and says so."""
    folder = tmp_path / "long"
    folder.mkdir()
    completion = {"text": "x" * 2000, "greedy": False, "parsed_answer": "1", "advantage": 0.5, "total": 1.0,
                  "rewards": {"correctness_reward": 1.0}}
    with open(folder / "train_samples.jsonl", "w") as f:
        for step in range(750):
            for group in range(2):
                f.write(json.dumps({"step": step, "prompt": [{"role": "user", "content": f"q{step}-{group}"}],
                                    "answer": "1", "columns": {}, "completions": [completion] * 8}) + "\n")
    page_file = rebuilt(folder)
    assert page_file.stat().st_size < 5_000_000
    share = run_page.page_data(folder)["share"]
    assert share["rollouts_in_file"] == 12_000 and share["every"] > 1 and share["steps"] < 750
    with browser_page(page_file) as page:
        page.click("#tab-groups")
        note = page.locator("#g-share").inner_text()
        every = share["every"]
        ordinal = "th" if every % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(every % 10, "th")
        assert f"{share['rollouts']} of 12000 rollouts" in note and f"every {share['every']}{ordinal} logged step" in note
        assert page.locator("#g-list .group").count() == 40 and page.is_visible("#g-more")  # drawn 40 at a time
        assert page.problems == [], page.problems
    readme = " ".join(docs_text().split())  # the documentation quotes this case (docs/watching.md)
    assert (f'a {page_file.stat().st_size / 1e6:.1f} MB page holding "{share["rollouts"]} of 12000 rollouts, '
            f'every {share["every"]}{ordinal} logged step"') in readme


QUESTION = "Where was the founder of the school of Scholar 530 born?"
CALLS_PER_PART = 16  # run_page.py's JavaScript shows a long episode in parts of this many calls


def folded_episode(calls: int, answer: str | None = "Corran", window: int = 6000) -> tuple[list, list]:
    """A grpo_search.py rollout of `calls` tool calls, one a turn (a search, then two opens, results as long as
    --page_chars' default), its context folded by context_folding.fold_context whenever the messages in view pass
    `window` characters: (its messages, its folds), as evaluate() writes them (the format of a real
    --max_context_tokens run). It ends on `answer`, or with None on a fold after its last call (no room left)."""
    from context_folding import fold_context

    active = [{"role": "system", "content": "Answer with search and open."}, {"role": "user", "content": QUESTION}]
    messages, folds = [], []
    for n in range(1, calls + 1):
        if n % 3 == 1:
            name, arguments = "search", {"query": f"Scholar {n}"}
            result = "\n".join(f"[Scholar {n + k}] Scholar {n + k} studied algebra " + "y" * 160 for k in range(5))
        else:
            name, arguments = "open", {"doc_id": f"Scholar {n}", "page": 1 + n % 2}
            result = f"[Scholar {n}] page 1 of 2\nThe mentor of Scholar {n} was Scholar {n + 1}. " + "z" * 1000
        turn = [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": name, "arguments":
                                                                                           arguments}}], "content": ""},
                {"role": "tool", "name": name, "content": result}]
        messages += turn
        active += turn
        if len(json.dumps(active)) > window or (answer is None and n == calls):
            before = len(json.dumps(active)) // 4
            active, lines = fold_context(active, QUESTION)
            folds.append({"after_tool_calls": n, "tokens_before": before, "tokens_after": len(json.dumps(active)) // 4,
                          "dropped": lines})
    if answer:
        messages.append({"role": "assistant", "content": f"<answer>{answer}</answer>"})
    return messages, folds


def inlined(page_file) -> str:
    """The JSON the page inlines: what counts against run_page.PAGE_BUDGET."""
    html = page_file.read_text(encoding="utf-8")
    return html.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0]


def part_labels(calls: int, folds: list) -> list:
    """The headers of a whole answered episode's parts, one tool call a turn: calls, tools, folds."""
    labels = []
    for first in range(1, calls + 1, CALLS_PER_PART):
        last = min(calls, first + CALLS_PER_PART - 1)
        searches = sum(n % 3 == 1 for n in range(first, last + 1))
        numbers = [k + 1 for k, f in enumerate(folds) if first <= f["after_tool_calls"] <= last]
        labels.append(" · ".join(x for x in [
            f"calls {first}-{last}", f"search ×{searches}, open ×{last - first + 1 - searches}",
            (f"folds {numbers[0]}-{numbers[-1]}" if len(numbers) > 1 else f"fold {numbers[0]}") if numbers else "",
            "the answer" if last == calls else ""] if x))
    return labels


def test_a_folded_episode_of_120_calls_shows_whole_in_parts_with_each_fold_and_its_lines(tmp_path):
    """grpo_search.py --max_context_tokens: 120 tool calls, folded about every third turn. The page keeps every call
    and the answer (each long result cut, not the episode), marks each fold after its call with the lines it left,
    groups the calls in parts (the last open), says the rollout's calls, folds, peak tokens and cost, and fits its
    budget: train_samples.jsonl's 32 rollouts of the kind (4.8 MB) and 8 held-out answers."""
    assert f"const CALLS_PER_PART = {CALLS_PER_PART};" in run_page.TEMPLATE
    folder = tmp_path / "deep"
    folder.mkdir()
    messages, folds = folded_episode(120)
    folds[0]["dropped"].append(f"- note: {BREAKOUTS[1]}")  # a note the model wrote, kept in full by its fold
    ran_out, ran_out_folds = folded_episode(120, answer=None)
    assert len(folds) > 2 * 120 // CALLS_PER_PART and ran_out_folds[-1]["after_tool_calls"] == 120
    cost = {"prefilled_tokens": 512345, "generated_tokens": 9876, "turns": 121, "tool_seconds": 0.25,
            "bookkeeping_seconds": 1.5, "generation_seconds": 40.42}
    rewards = {"exact_match_reward": 1.0, "f1_reward": 1.0}
    with open(folder / "eval_before.jsonl", "w") as before, open(folder / "eval_after.jsonl", "w") as after:
        for q in range(8):
            row = {"step": None, "prompt": [{"role": "user", "content": f"{QUESTION} ({q})"}], "answer": ["Corran"],
                   "columns": {"supporting_docs": ["Scholar 530"]}}
            short = [{"role": "assistant", "content": "<answer>Ardmore</answer>"}]
            before.write(json.dumps({**row, "completions": [
                {"text": short, "greedy": True, "parsed_answer": "Ardmore", "rewards": {"exact_match_reward": 0.0},
                 "total": 0.0, "tool_calls": 0, "folds": [], "peak_context_tokens": 300, "cost": {}}]}) + "\n")
            text, its_folds = (ran_out, ran_out_folds) if q == 7 else (messages, folds)
            after.write(json.dumps({**row, "completions": [
                {"text": text, "greedy": True, "parsed_answer": None if q == 7 else "Corran", "rewards": rewards,
                 "total": 2.0, "tool_calls": 120, "folds": its_folds, "peak_context_tokens": 1010,
                 "cost": cost}]}) + "\n")
    with open(folder / "train_samples.jsonl", "w") as f:  # instruments.py's rows: the messages, no folds recorded
        for step in (4, 9):
            for group in range(2):
                f.write(json.dumps({"step": step, "prompt": [{"role": "user", "content": f"{QUESTION} [{group}]"}],
                                    "answer": ["Corran"], "columns": {}, "completions": [
                    {"text": messages, "greedy": False, "parsed_answer": "Corran", "rewards": rewards, "total": 2.0,
                     "advantage": 0.0}] * 8}) + "\n")
    assert (folder / "train_samples.jsonl").stat().st_size > run_page.PAGE_BUDGET  # more than the whole page's

    page_file = rebuilt(folder)
    assert len(inlined(page_file).encode()) < run_page.PAGE_BUDGET
    check_run_page(folder)  # every group and rollout drawn, no page error
    data = json.loads(inlined(page_file))
    assert data["share"]["steps"] == 2 and data["share"]["cut_to"] and data["held_out"]["cut_to"]
    texts = [(c["text"], messages) for g in data["groups"] for c in g["completions"]] + [
        (q["results"]["after"]["text"], ran_out if n == 7 else messages) for n, q in enumerate(data["held_out"]["questions"])]
    for text, episode in texts:  # every message and call kept, each message cut: not the episode's first 6000 chars
        assert [m.get("tool_calls") for m in text] == [m.get("tool_calls") for m in episode]
        assert text[-1] == episode[-1] or text[-1]["content"].startswith(episode[-1]["content"][:run_page.MIN_TEXT])
    after = data["held_out"]["questions"][0]["results"]["after"]
    assert after["folds"] == folds and after["cost"] == cost  # the folds' lines are short: none is cut
    assert "more characters]" in after["text"][-2]["content"]  # a long result is cut, and says so

    with browser_page(page_file) as page:
        page.click("#tab-heldout")
        for row, (text, its_folds) in ((0, (messages, folds)), (7, (ran_out, ran_out_folds))):
            page.locator("#h-table tr.question").nth(row).click()
            detail = page.locator("#h-table tr.detail").nth(row)
            marks = detail.locator(".fold")
            assert marks.count() == len(its_folds)
            for n, fold in enumerate(its_folds):  # at its point: after the call it names, with the lines it left
                mark = marks.nth(n)
                assert mark.get_attribute("data-after") == str(fold["after_tool_calls"])
                assert mark.locator("pre").text_content() == "\n".join(fold["dropped"])  # in a closed part: hidden
                assert f"fold {n + 1} after call {fold['after_tool_calls']}: {fold['tokens_before']:,} → " in (
                    mark.text_content())
            calls_before = marks.evaluate_all("""marks => marks.map(m => [...m.closest('.conv').querySelectorAll(
                'details.tool-call')].filter(c => c.compareDocumentPosition(m) & Node.DOCUMENT_POSITION_FOLLOWING).length)""")
            assert calls_before == [f["after_tool_calls"] for f in its_folds]
            facts = detail.locator(".facts").last.inner_text()
            assert facts == (f"120 tool calls · {len(its_folds)} folds (after calls "
                             f"{', '.join(str(f['after_tool_calls']) for f in its_folds)}) · peak 1,010 tokens in view"
                             " · 42.2 s (tool 0.25, bookkeeping 1.50, generation 40.42) · 512,345 tokens prefilled,"
                             " 9,876 generated")
            parts = detail.locator("details.part")
            assert parts.count() == 8
            assert [p.get_attribute("open") is not None for p in parts.all()] == [False] * 7 + [True]
            if row == 0:
                assert detail.locator("details.part > summary").all_inner_texts() == part_labels(120, folds)
                assert detail.get_by_text("<answer>Corran</answer>").is_visible()  # the answer, open
            assert detail.get_by_text(messages[-2]["content"].split("\n")[0]).count() == 1  # the last call's result
            page.locator("#h-table tr.question").nth(row).click()
        assert page.evaluate("typeof window.pwned") == "undefined" and page.locator("#h-table img").count() == 0

        page.click("#tab-groups")
        rollout = page.locator("#g-list .rollout").first
        assert rollout.locator(".facts").inner_text() == "120 tool calls"  # all train_samples.jsonl records
        assert rollout.locator("details.part > summary").all_inner_texts() == part_labels(120, [])
        assert rollout.locator(".fold").count() == 0
        assert rollout.get_by_text("<answer>Corran</answer>").is_visible()
        assert page.problems == [], page.problems


def test_the_last_evaluations_long_episodes_keep_every_call_where_the_first_and_last_do_not_fit(tmp_path):
    """Three evaluations of 12 questions, each answer 120 calls: the first and last evaluations' texts pass the
    held-out budget even cut to MIN_TEXT a message, so the page keeps the last one's, every call and answer of it."""
    folder = tmp_path / "evals"
    folder.mkdir()
    messages, folds = folded_episode(120)
    for name, step in (("eval_before.jsonl", None), ("eval_midrun.jsonl", 5), ("eval_after.jsonl", 10)):
        with open(folder / name, "w") as f:
            for q in range(12):
                f.write(json.dumps({"step": step, "prompt": [{"role": "user", "content": f"q{q}"}], "answer": ["Corran"],
                                    "completions": [{"text": messages, "greedy": True, "parsed_answer": "Corran",
                                                     "rewards": {"exact_match_reward": 1.0}, "folds": folds}]}) + "\n")
    held_out = run_page.page_data(folder)["held_out"]
    assert held_out["evaluations"] == ["before", "step 5", "after"] and held_out["texts_of"] == ["after"]
    assert held_out["cut_to"] and len(json.dumps(held_out["questions"])) < run_page.PAGE_BUDGET // 4
    for q in held_out["questions"]:
        assert q["results"]["before"]["text"] is None and q["results"]["before"]["right"] is True  # marks stay
        assert len(q["results"]["after"]["text"]) == len(messages) and q["results"]["after"]["folds"] == folds
        assert q["results"]["after"]["text"][-1] == messages[-1]


def test_an_eval_only_folder_and_bad_folders(tmp_path):
    out = tmp_path / "eval"
    result = run_script(["--eval_only", "--num_eval_examples", "8", "--output_dir", out])
    assert result.returncode == 0, result.stderr[-3000:]
    assert check_run_page(out)["questions"] == 8
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "eval.json").write_text('{"before": {"accuracy": 0.5}, "aft')  # a run stopped while writing it
    for folder, message in ((tmp_path / "missing", "is not a folder"), (tmp_path, "holds no eval.json"),
                            (broken, "eval.json is not JSON")):
        result = subprocess.run([sys.executable, str(REPO / "run_page.py"), str(folder)], capture_output=True,
                                text=True, env=offline_env())
        assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1 and message in result.stderr


def test_a_run_without_run_page_py_says_so_in_one_line_and_ends_well(tmp_path):
    from test_two_tiers import fork, run_fork

    path, out = fork(tmp_path, "grpo_math.py", "instruments.py"), tmp_path / "run"
    result = run_fork(path, [*FAST_RUN, "--max_steps", "1", "--num_eval_examples", "8", "--output_dir", out])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no report.html: copy run_page.py beside this script" in result.stdout
    assert (out / "eval.json").is_file() and not (out / "report.html").exists()
