"""The overhead and recipe benchmarks: their 2025 baseline rewards, and short runs of each (no timing asserted)."""

import json
import subprocess
import sys

import pytest
from conftest import REPO, offline_env

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_recipe  # noqa: E402

GOLD = "Natalia sold 24 clips in May and 72 in all.\n#### 72"


def completion(text):
    return [{"role": "assistant", "content": text}]


@pytest.mark.parametrize("text, expected", [
    # [correctness, integer, strict, soft, tag count]: the 2025 demo's rules with the quirks its
    # users hit: no DOTALL (the soft format never matches multi-line reasoning, the strict one
    # only one-line reasoning), the tag count's penalty on the whole text when the completion
    # ends at </answer>, the last <answer> block winning, exact string match.
    ("<reasoning>\n48 + 24 = 72\n</reasoning>\n<answer>\n72\n</answer>\n", [2.0, 0.5, 0.5, 0.0, 0.5]),
    ("<reasoning>\n48 + 24 = 72\n</reasoning>\n<answer>\n72\n</answer>", [2.0, 0.5, 0.0, 0.0, 0.5 - 0.059 + 0.001]),
    ("<reasoning>\nline one\nline two\n</reasoning>\n<answer>\n72\n</answer>\n", [2.0, 0.5, 0.0, 0.0, 0.5]),
    ("<answer>73</answer><answer>72</answer>", [2.0, 0.5, 0.0, 0.0, 0.0]),
    ("<reasoning>\nx\n</reasoning>\n<answer>\n72.0\n</answer>\n", [0.0, 0.0, 0.5, 0.0, 0.5]),
])
def test_2025_rewards_follow_the_original_rules(text, expected):
    scores = [func(completions=[completion(text)], answer=[GOLD])[0] for func in bench_recipe.REWARDS_2025]
    assert scores == pytest.approx(expected)


def test_2025_tag_count_goes_negative_on_long_trailing_text():
    text = "<reasoning>\nx\n</reasoning>\n<answer>\n72\n</answer>" + "z" * 846
    assert bench_recipe.tag_count_2025(completions=[completion(text)])[0] < 0


def run_benchmark(name, args, tmp_path):
    out = tmp_path / f"{name}.json"
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / f"{name}.py"), *args, "--out", str(out)],
                            capture_output=True, text=True, env=offline_env(), cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text()), result.stdout


def test_overhead_benchmark_runs_both_sides(tmp_path):
    report, stdout = run_benchmark("bench_overhead", ["--steps", "3", "--rounds", "1"], tmp_path)
    assert [run["steps"] for run in report["runs"]["ours"] + report["runs"]["bare"]] == [3, 3]  # the same work
    for side in ("ours", "bare"):  # each side's time per step is measured inside its own training, not around it
        run = report["runs"][side][0]
        assert 0 < run["seconds_per_step"] * run["steps"] <= run["train_runtime"] + 1e-6 < run["wall"]
    assert f"ratio ours / bare per step: {report['ratio_ours_over_bare']:.3f}" in stdout  # what a reader sees


def test_recipe_benchmark_scores_each_arm(tmp_path):
    report, stdout = run_benchmark("bench_recipe", ["--max_steps", "2", "--eval_every", "1", "--arms", "ours,2025",
                                                    "--target", "0.01"], tmp_path)
    for arm in ("ours", "2025"):
        points = report["arms"][arm]["points"]
        assert [point["step"] for point in points] == [0, 1, 2]
        assert report["arms"][arm]["reached"] == points[0]  # the start already beats a target of 0.01
    assert points[0]["accuracy"] == report["arms"]["ours"]["points"][0]["accuracy"]  # same model, same questions
    assert "steps and training time" in stdout


def test_sandbox_benchmark_measures_every_arm(tmp_path):
    report, stdout = run_benchmark("bench_sandbox", ["--calls", "3", "--burst", "4"], tmp_path)
    assert {"bare python", "run_python", "run_python, realistic"} <= set(report["latency"])
    for row in report["latency"].values():
        assert 0 < row["median_ms"] <= row["p95_ms"]
    assert report["floor"] in report["latency"]  # the ratio's baseline was measured in the same run
    assert report["throughput"]["run_python, realistic"]["calls"] == 4
    ratio = report["ratio_run_python_over_floor"]
    assert f"ratio run_python / {report['floor']} (median latency): {ratio:.2f}" in stdout
    assert list(report["modes"]) == ["namespaces", "landlock", "plain"]  # every mode, started or said why not
    for mode, row in report["modes"].items():
        assert row["started"] or row["why"], mode
        if row["started"]:
            assert 0 < row["median_ms"] <= row["p95_ms"] and f"\n{mode:<12}" in stdout


def test_code_reward_benchmark_times_both_arms(tmp_path):
    report, stdout = run_benchmark("bench_code_reward", ["--rounds", "1", "--tasks", "12"], tmp_path)
    assert report["solutions"] == 12 and set(report["median_s"]) == {"harness", "plain process"}
    assert report["cases_scored"]["harness"] > 12  # every test case on its own
    # Both arms scored the same 12 reference solutions, and every one passed in both (the benchmark exits otherwise)
    assert report["cases_scored"]["plain process"] == 12 and all(s > 0 for s in report["median_s"].values())
    ratio = report["ratio_harness_over_plain"]
    assert f"ratio harness / plain process (seconds for all 12 solutions): {ratio:.2f}" in stdout


def test_turn_credit_benchmark_runs_both_arms_with_one_seed(tmp_path):
    report, stdout = run_benchmark("bench_turn_credit", ["--seeds", "42", "--max_steps", "2", "--eval_every", "1",
                                                         "--eval_examples", "8", "--gains=-1,2"], tmp_path)
    assert [run["turn_credit"] for run in report["runs"]] == [False, True]
    for run in report["runs"]:
        assert [e["step"] for e in run["evaluations"]] == [0, 1, 2]
        assert run["targets"]["-1.00"]["step"] == 0  # a gain of -1: the start already meets the target
        assert run["targets"]["+2.00"]["step"] is None  # exact match cannot gain 2
    first = [run["evaluations"][0]["exact_match"] for run in report["runs"]]
    assert first[0] == first[1]  # the same model on the same questions before training
    assert report["grpo"]["targets"]["-1.00"]["reached"] == report["turn_credit"]["targets"]["-1.00"]["reached"] == "1 of 1"
    assert report["grpo"]["targets"]["+2.00"]["reached"] == "0 of 1"
    assert "turn_credit" in stdout


def test_long_search_benchmark_trains_then_compares_the_folding_modes(tmp_path):
    report, stdout = run_benchmark("bench_search_long", ["--max_steps", "1", "--eval_examples", "14"], tmp_path)
    assert report["demo"]["steps"] == 1 and set(report["demo"]["before"]) == {str(k) for k in range(2, 9)}
    for mode in ("off", "rule", "model"):
        assert set(report["modes"][mode]) == {"2", "4", "6", "8"}  # two held-out questions at each depth
        assert all(row["questions"] == 2 for row in report["modes"][mode].values())
    for mode in ("rule", "model"):  # folding keeps what the model sees inside the window
        assert all(row["peak_tokens_max"] <= report["window"] for row in report["modes"][mode].values())
    assert "| 8 | rule-based |" in stdout


def test_deep_search_benchmark_trains_then_times_episodes_one_at_a_time(tmp_path):
    """The hundred-call benchmark's quick path (level 8 only, one step): the run's levels before and after, episodes
    timed one at a time with their cost split (folded) and their peak in view, a GRPO step's group of rollouts."""
    report, stdout = run_benchmark("bench_search_deep", ["--max_hops", "4", "--max_steps", "1", "--per_level", "1"],
                                   tmp_path)
    assert report["steps"] == 1 and set(report["levels"]["before"]) == set(report["levels"]["after"]) == {"8"}
    assert report["levels"]["after"]["8"]["questions"] == 6
    folded, unfolded = report["timed"]["folded"], report["timed"]["unfolded"]
    assert [row["required_calls"] for row in folded["episodes"]] == [8] == [r["required_calls"] for r in
                                                                         unfolded["episodes"]]
    episode = folded["episodes"][0]
    assert 1 <= episode["cost"]["turns"] <= episode["tool_calls"] + 1
    assert 0 < sum(episode["cost"][part] for part in ("generation_seconds", "tool_seconds",
                                                      "bookkeeping_seconds")) <= episode["seconds"]
    assert episode["cost"]["prefilled_tokens"] > episode["peak_tokens"] > 0  # every turn prefills its context
    assert unfolded["episodes"][0]["peak_tokens"] > 0 and not unfolded["episodes"][0]["cost"]
    group = report["timed"]["group_rollout"]
    assert group["level"] == 8 and group["rollouts"] == len(group["tool_calls"]) == 8
    assert "| 8 | folded |" in stdout and "| 8 | 0." in stdout


def test_deep_search_credit_runs_both_rubrics_as_a_user_starts_them(tmp_path):
    """--credit's quick path (one seed, level 8, one step): outcome only and credit per link each train through
    grpo_search.py with their own --reward_weights, and the table reads their held-out levels and chain_progress."""
    runs = tmp_path / "runs"
    report, stdout = run_benchmark("bench_search_deep", ["--credit", "0", "--max_hops", "4", "--max_steps", "1",
                                                         "--arms", "outcome_only", "credit_per_link",
                                                         "--copy_lines", "1", "--run", str(runs)], tmp_path)
    assert set(report["runs"]) == {"outcome_only", "credit_per_link"} and report["seeds"] == [0]
    assert "--run DIR" in report["command"] and str(tmp_path) not in report["command"]  # not this machine's folders
    for arm, flags in report["arms"].items():
        settings = json.loads((runs / f"{arm}-seed0" / "eval.json").read_text())
        run = report["runs"][arm]["0"]
        assert run["steps"] == 1 and set(run["levels"]["after"]) == {"8"}
        assert 0 <= run["chain_progress_in_training"][0] <= 1
        said = dict(zip(flags[-4::2], flags[-3::2]))  # each arm says both outright, whatever the config sets
        assert said == {"--turn_credit": "true" if arm == "credit_per_link" else "false", "--scale_rewards": "group"}
        assert settings["turn_credit"] == (arm == "credit_per_link")  # the config's turn_credit: true is overridden
        assert settings["flags"].get("scale_rewards", "group") == "group"  # and its scale_rewards: none
        weights = json.loads(settings["flags"]["reward_weights"])  # what the run trained with
        assert weights[-1] == (0.2 if arm == "credit_per_link" else 0) and weights[3] == 0  # chain_progress; search_credit
    assert f"| 8 | {report['before']['8']['exact_match']:.2f} |" in stdout
    for copied in [report["copy_errors_before"], *(r["0"]["copy_errors_after"] for r in report["runs"].values())]:
        assert copied["open"]["test"][1] == copied["open"]["train"][1] == 62  # a line's 3rd to 64th scholar
        assert 0 <= copied["open"]["test"][0] <= 62
    assert "opens that named the wrong scholar" in stdout


def test_deep_search_credit_refuses_no_copy_lines(capsys):
    """--copy_lines 0 would divide by zero lines in the tables: refused before any run, naming the fix."""
    import bench_search_deep

    with pytest.raises(SystemExit) as exit_code:
        bench_search_deep.main(["--credit", "0", "--copy_lines", "0"])
    assert exit_code.value.code == 2 and "give 1 or more lines" in capsys.readouterr().err.splitlines()[-1]


def deep_episode(*calls, answer=None):
    """An episode's messages: (tool, argument) calls, each with a result, then the last message if given: an answer,
    or text that starts "<tool_call>" (a call TRL could not parse), as it is."""
    messages = []
    for name, argument in calls:
        key = "query" if name == "search" else "doc_id"
        messages += [{"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": name, "arguments": {key: argument}}}]},
            {"role": "tool", "name": name, "content": "..."}]
    last = answer if answer and answer.startswith("<tool_call>") else f"<answer>{answer}</answer>"
    return messages + ([{"role": "assistant", "content": last}] if answer else [])


CHAIN = ["Scholar 13", "Scholar 707", "Scholar 102"]


@pytest.mark.parametrize("calls, answer, expected", [
    # a miscopied number in the open after a right search: 707 read as 727
    ([("search", "Scholar 13"), ("open", "Scholar 13"), ("search", "Scholar 707"), ("open", "Scholar 727")],
     "Ardmore", ("open", 1)),
    # ... in the search; "Scholar 133" is not "Scholar 13" (whole ids only)
    ([("search", "Scholar 13"), ("open", "Scholar 13"), ("search", "Scholar 133")], "Ardmore", ("search", 0)),
    # every call on the chain (re-reading a link is on it), answered before the founder
    ([("search", "Scholar 13"), ("open", "Scholar 13"), ("open", "Scholar 13")], "Harrow", ("stopped", 0)),
    ([("search", "Scholar 13"), ("open", "Scholar 13"), ("search", "Scholar 707")], None, ("no_answer", 1)),
    # a call TRL could not parse ends the episode: no tool ran, no answer
    ([("search", "Scholar 13")], '<tool_call>\n{"name": "open", "arguments": {"doc_id": "Scholar 13", "page": "Sc',
     ("unreadable_call", 0)),
    ([("search", "Scholar 707"), ("open", "Scholar 102")], "Harrow", ("wrong_after_founder", 2)),
])
def test_deep_search_failures_are_read_off_the_chain(calls, answer, expected):
    """The benchmark's account of why a failed hundred-call episode failed (per level in its results): where its
    calls left the question's chain of supporting documents, and with which tool."""
    import bench_search_deep
    assert bench_search_deep.why_it_failed(deep_episode(*calls, answer=answer), CHAIN) == expected


def test_copy_errors_read_the_call_the_model_makes_in_a_folded_line(tmp_path, monkeypatch):
    """copy_errors: the teacher's line folded as the tool loop folds it (each view within the window, the id to copy
    in view), the model's greedy next call compared with the id it must name; a case whose id the model cannot
    name counts as wrong."""
    import bench_search_deep as bench
    import context_folding
    made, seen = bench.copy_cases, {}

    def with_unnameable_ids(trainer, *args, **kwargs):  # the training line's opens must name a scholar who is not
        cases = seen.setdefault("as_folded", made(trainer, *args, **kwargs)) if not seen else \
            made(trainer, *args, **kwargs)  # the first call: the views as the loop folds them; then in digits
        seen["trainer"] = trainer
        return [(s, t, "Scholar 0" if (s, t) == ("train", "open") else d, v) for s, t, d, v in cases]
    monkeypatch.setattr(bench, "copy_cases", with_unnameable_ids)
    copied = bench.copy_errors(None, tmp_path, lines=1)
    assert copied["open"]["train"] == [62, 62]
    assert copied["open"]["test"][1] == 62 and copied["open"]["test"][0] <= 6  # the shipped model: ~3% miscopied
    assert copied["search"]["train"][0] <= 6
    late = copied[bench.LATE_OPENS]["train"]  # a line's last opens: more than 100 calls already folded out of view
    assert late[1] > 0 and late == [late[1], late[1]] == copied[bench.IN_DIGITS]["train"]

    cases, tokenizer = seen["as_folded"], seen["trainer"].processing_class
    assert [(split, tool) for split, tool, *_ in cases[:2]] == [("train", "search"), ("train", "open")]
    assert len(cases) == 4 * 62  # per split, a line's 3rd to 64th scholar: a search and an open each
    tools = bench.grpo_search.tools_of(bench.grpo_search.ToolEnvironment())
    for split, tool, doc, view in cases:
        assert len(tokenizer.apply_chat_template(view, tools=tools, add_generation_prompt=True, tokenize=True,
                                                 return_dict=False)) <= 1024
        assert doc in view[-1]["content"]  # the page naming the mentor, or the search result listing it
    assert sum(context_folding.FOLDED in view[1]["content"] for *_, view in cases) > len(cases) // 2
    many = sum("- many earlier tool calls not listed" in view[1]["content"] for *_, view in cases)
    assert many == 4 * late[1]  # on both lines, before a search and before an open


def test_deep_search_tables_print_from_the_committed_results():
    """--tables: the README's and docs' tables, from the committed JSON, without running anything."""
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_search_deep.py"), "--tables"],
                            capture_output=True, text=True, env=offline_env(), cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    readme = (REPO / "README.md").read_text()
    rows = [line for line in result.stdout.splitlines() if line.startswith("| 128 |")]
    assert len(rows) >= 2 and rows[0] in readme  # the README's table first, then the docs' own
    summary = [line for line in result.stdout.splitlines() if line.endswith(".json |")]  # every credit run's arms
    results = sorted((REPO / "benchmarks" / "results").glob("search_deep_credit*.json"))
    assert len(summary) == sum(len(json.loads(path.read_text())["runs"]) for path in results)
    assert {line.split(" | ")[-1].removesuffix(" |") for line in summary} == {path.name for path in results}


def test_turn_credit_benchmark_has_a_long_horizon_setting(tmp_path):
    report, _ = run_benchmark("bench_turn_credit", ["--long", "--seeds", "42", "--max_steps", "1", "--eval_every",
                                                    "1", "--eval_examples", "7", "--gains=-1"], tmp_path)
    assert report["settings"]["long"] is True and [run["turn_credit"] for run in report["runs"]] == [False, True]
    assert all([e["step"] for e in run["evaluations"]] == [0, 1] for run in report["runs"])


def test_zero_signal_benchmark_runs_both_arms_on_a_small_training_set(tmp_path):
    """Math only, one seed, 8 steps over 16 prompts (4 epochs): the 'on' arm passes prompts over, 'off' never."""
    report, stdout = run_benchmark("bench_zero_signal", ["--demos", "math", "--seeds", "42", "--max_steps", "8",
                                                         "--train_prompts", "16", "--eval_every", "4",
                                                         "--eval_examples", "8", "--gains=-1,2"], tmp_path)
    off, on = report["runs"]
    assert (off["skip_zero_signal"], on["skip_zero_signal"]) == (0, 1)
    assert off["passed_over"] == 0 and off["train_prompts"] == on["train_prompts"] == 16
    for run in report["runs"]:
        assert run["steps"] == 8 and [e["step"] for e in run["evaluations"]] == [0, 4, 8]
        assert 0 <= run["signal_share"] <= 1
        assert run["targets"]["-1.00"]["step"] == 0 and run["targets"]["+2.00"]["step"] is None
    assert off["evaluations"][0]["accuracy"] == on["evaluations"][0]["accuracy"]  # same model, same questions
    assert set(report["summary"]["math"]) == {"off", "on"}
    assert "math   on" in stdout
