"""--replay RUN_DIR: a finished run's recorded completions scored again with an edited RUBRIC, no model loaded. Run the
way a user does it: train a short demo run, fork the script, edit its rubric, replay the run with the fork; the
numbers are checked against a hand computation from the run's own files."""

import hashlib
import json
import subprocess
import sys

import pytest
from conftest import FAST_RUN, REPO, offline_env, run_script

import grpo_math as gm
import instruments

BREVITY = '''

def brevity_penalty(completions, **kwargs) -> list[float]:
    """Minus one point per 100 characters."""
    return [-len(completion_text(c)) / 100 for c in completions]


def needs_hidden_tests(completions, tests, **kwargs) -> list[float]:
    return [1.0 for _ in completions]


RUBRIC = RUBRIC + [(brevity_penalty, 0.5), (needs_hidden_tests, 1.0)]
'''


@pytest.fixture(scope="module")
def math_run(tmp_path_factory):
    """A two-step demo run that samples 4 answers a held-out question before training and saves every training
    rollout in whole groups: groups, as GRPO sees them."""
    out = tmp_path_factory.mktemp("replay") / "run"
    result = run_script([*FAST_RUN, "--max_steps", "2", "--num_eval_examples", "6", "--eval_num_samples", "4",
                         "--train_samples_per_log", "-1", "--output_dir", out])
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def fingerprints(run_dir):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in run_dir.iterdir() if p.is_file()
            and not p.name.startswith("replay")}


def replay_with(script, run_dir):
    return subprocess.run([sys.executable, str(script), "--replay", str(run_dir)], capture_output=True, text=True,
                          timeout=300, env=offline_env(), cwd=REPO)


def recorded(run_dir):
    """(file, completion) for every recorded completion, in the order replay reads them."""
    rows = []
    for name in instruments.REPLAYED_FILES:
        if (run_dir / name).is_file():
            for line in (run_dir / name).read_text().splitlines():
                rows.append((name, json.loads(line)))
    return rows


def side(total, mean):
    """-1, 0 or 1: below, at or above the group's mean; within 1e-6 is at it (the mean of equal totals can round
    off by 1e-16, and training's scores are TRL's float32 copies)."""
    return (round(total - mean, 6) > 0) - (round(total - mean, 6) < 0)


def tau_by_hand(old, new):
    """Kendall's tau-b, counted pair by pair."""
    concordant = discordant = ties_old = ties_new = 0
    for i in range(len(old)):
        for j in range(i + 1, len(old)):
            a, b = old[i] - old[j], new[i] - new[j]
            ties_old += a == 0
            ties_new += b == 0
            concordant += a * b > 0
            discordant += a * b < 0
    pairs = len(old) * (len(old) - 1) // 2
    return (concordant - discordant) / ((pairs - ties_old) * (pairs - ties_new)) ** 0.5


def test_the_unchanged_rubric_replays_every_score_as_recorded(math_run):
    before = fingerprints(math_run)
    result = run_script(["--replay", math_run])
    assert result.returncode == 0, result.stderr[-3000:]
    assert fingerprints(math_run) == before  # the run's own files are untouched
    report = json.loads((math_run / "replay.json").read_text())
    records = [json.loads(line) for line in (math_run / "replay.jsonl").read_text().splitlines()]
    rows = recorded(math_run)
    assert len(records) == report["completions"] == sum(len(row["completions"]) for _, row in rows)
    for record in records:
        assert record["after"] == pytest.approx(record["before"])  # training's scores: TRL's float32 copies
        assert record["total_after"] == pytest.approx(record["total_before"])
    assert report["not_replayed"] == {} and report["moved_most"] == []
    groups = report["groups"]
    # 6 held-out questions x 4 samples before training (the evaluation after it is greedy), and every training
    # rollout: one line per prompt, its whole group of --num_generations 8
    train_rows = [row for name, row in rows if name == "train_samples.jsonl"]
    assert len(train_rows) >= 2 and all(len(row["completions"]) == 8 for row in train_rows)
    assert len({(row["step"], json.dumps(row["prompt"])) for row in train_rows}) == len(train_rows)
    assert groups["count"] == 6 + len(train_rows) and groups["completions"] == 6 * 4 + 8 * len(train_rows)
    assert groups["advantage_sign_changed"] == groups["best_completion_changed"] == 0
    assert groups["kendall_tau_mean"] in (None, pytest.approx(1.0))
    assert "correctness_reward" in result.stdout and "replay.json" in result.stdout
    battery = report["hack_battery"]  # rewards.py is beside the script: its audit's hacks, under this rubric
    assert battery["cases"] > 30 and battery["paying_hacks"] == [] and battery["honest_total_min"] > 0


def test_an_edited_rubric_is_checked_against_a_hand_computation(math_run, tmp_path):
    fork, original = tmp_path / "my_grpo_math.py", (REPO / "grpo_math.py").read_text()
    fork.write_text(original.replace("\n# %% [markdown]\n# ## Training\n", BREVITY + "\n# %% [markdown]\n# ## Training\n", 1))
    assert fork.read_text() != original
    (tmp_path / "instruments.py").write_text((REPO / "instruments.py").read_text())  # rewards.py stays behind
    result = replay_with(fork, math_run)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((math_run / "replay.json").read_text())
    records = [json.loads(line) for line in (math_run / "replay.jsonl").read_text().splitlines()]
    # by hand: every old reward is unchanged, so the new total is the old one plus half the brevity penalty
    expected, groups = [], []
    for name, row in recorded(math_run):
        start = len(expected)
        for completion in row["completions"]:
            text = completion["text"]
            expected.append((completion["total"], completion["total"] - 0.5 * len(text) / 100, completion["greedy"]))
        sampled = [i for i in range(start, len(expected)) if not expected[i][2]]
        if len(sampled) > 1:
            groups.append(sampled)
    assert [r["total_after"] for r in records] == pytest.approx([new for _, new, _ in expected])
    assert all(r["after"]["brevity_penalty"] == pytest.approx(-len(r["text"]) / 100) for r in records)
    # the reward that needs a column the recording lacks: named, left out, never scored 0
    assert list(report["not_replayed"]) == ["needs_hidden_tests"] and "tests" in report["not_replayed"][
        "needs_hidden_tests"]
    assert all(r["after"]["needs_hidden_tests"] is None for r in records)
    assert "not replayed: needs_hidden_tests" in result.stdout
    flips, taus, best = 0, [], 0
    for group in groups:
        old, new = [expected[i][0] for i in group], [expected[i][1] for i in group]
        mean_old, mean_new = sum(old) / len(old), sum(new) / len(new)
        flips += sum(side(o, mean_old) != side(n, mean_new) for o, n in zip(old, new))
        if len(set(old)) > 1 and len(set(new)) > 1:
            taus.append(tau_by_hand(old, new))
        best += old.index(max(old)) != new.index(max(new))
    g = report["groups"]
    assert (g["count"], g["advantage_sign_changed"], g["best_completion_changed"]) == (len(groups), flips, best)
    assert g["kendall_tau_mean"] == (pytest.approx(sum(taus) / len(taus)) if taus else None)
    moved = sorted(abs(new - old) for old, new, _ in expected)[::-1][:len(report["moved_most"])]
    assert [abs(m["total_after"] - m["total_before"]) for m in report["moved_most"]] == pytest.approx(moved)
    assert report["rewards"]["brevity_penalty"]["before"] is None  # new: nothing recorded
    assert "rewards.py" in report["hack_battery"]["skipped"]  # a fork on its own: no battery beside it


def test_the_hack_battery_reports_a_hack_the_edited_rubric_pays_for(math_run, tmp_path):
    """A rubric that pays for format and a number anywhere, not for the right one: the battery's 'gold in reasoning,
    wrong answer' now earns what an honest answer earns."""
    fork = tmp_path / "my_grpo_math.py"
    fork.write_text((REPO / "grpo_math.py").read_text().replace(
        "\n# %% [markdown]\n# ## Training\n",
        "\nRUBRIC = [(lenient_format_reward, 1.0), (numeric_answer_reward, 1.0)]\n\n# %% [markdown]\n# ## Training\n", 1)
        .replace('OUTCOME_REWARD = "correctness_reward"', 'OUTCOME_REWARD = "numeric_answer_reward"', 1))
    for module in ("rewards.py", "instruments.py"):
        (tmp_path / module).write_text((REPO / module).read_text())
    result = replay_with(fork, math_run)
    assert result.returncode == 0, result.stderr[-3000:]
    battery = json.loads((math_run / "replay.json").read_text())["hack_battery"]
    paying = {hack["case"]: hack["total"] for hack in battery["paying_hacks"]}
    assert paying["gold in reasoning, wrong answer"] == pytest.approx(2.0) == battery["honest_total_min"]
    assert "empty output" not in paying
    assert "gold in reasoning, wrong answer" in result.stdout


def test_replay_of_a_folder_without_a_run_is_a_one_line_error(tmp_path):
    result = run_script(["--replay", tmp_path])
    assert result.returncode != 0
    assert "pass the --output_dir of a finished run" in result.stderr.strip().splitlines()[-1]
    (tmp_path / "eval_before.jsonl").write_text('{"step": 0, "prompt": [{"role": "user", "con')  # cut short
    result = run_script(["--replay", tmp_path])
    assert result.returncode != 0
    assert "no readable completions in eval_before.jsonl" in result.stderr.strip().splitlines()[-1]


def test_a_line_cut_short_by_a_stopped_run_is_skipped_and_named(math_run, tmp_path):
    """A run stopped while writing leaves half a line: replay scores the rest and says which line it skipped."""
    run = tmp_path / "stopped"
    run.mkdir()
    for name in ("eval_before.jsonl", "train_samples.jsonl"):
        (run / name).write_text((math_run / name).read_text())
    with open(run / "train_samples.jsonl", "a") as f:
        f.write('{"step": 2, "prompt": [{"role": "us')
    result = run_script(["--replay", run])
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((run / "replay.json").read_text())
    cut = len((run / "train_samples.jsonl").read_text().splitlines())
    assert report["unreadable_lines"] == [f"train_samples.jsonl:{cut}"]
    assert report["completions"] == sum(len(json.loads(line)["completions"]) for name in ("eval_before.jsonl",
                                        "train_samples.jsonl") for line in (math_run / name).read_text().splitlines())
    assert f"train_samples.jsonl:{cut}" in result.stdout


def replayed_as_recorded(out, script, flags=()):
    """Replay `out` with the script's unchanged rubric: every score, the environments' included, must come back."""
    result = run_script(["--replay", out, *flags], script=script)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "replay.json").read_text())
    assert report["not_replayed"] == {}
    records = [json.loads(line) for line in (out / "replay.jsonl").read_text().splitlines()]
    for record in records:
        assert record["total_after"] == pytest.approx(record["total_before"])
        assert record["after"] == pytest.approx({k: v for k, v in record["before"].items()})
    return report, records


def calls_in(records) -> int:
    """Tool calls that ran: each left a tool message in the trajectory."""
    return sum(m.get("role") == "tool" for r in records if isinstance(r["text"], list) for m in r["text"])


def test_a_tool_run_replays_its_tool_calls_into_fresh_environments(tmp_path):
    """grpo_tools.py: the rewards that read the environment are scored again on fresh environments into which the
    recorded calls are replayed; unchanged, they give the recorded scores back. A tighter --tool_call_budget in the
    replay then changes tool_budget_penalty, and only where a rollout called more than the new budget."""
    out = tmp_path / "run"
    result = run_script(["--max_steps", "1", "--num_eval_examples", "4", "--eval_num_samples", "2",
                         "--output_dir", out], script="grpo_tools.py")
    assert result.returncode == 0, result.stderr[-3000:]
    _, records = replayed_as_recorded(out, "grpo_tools.py")
    assert calls_in(records) > 0 and any(r["before"]["successful_call_credit"] for r in records)

    result = run_script(["--replay", out, "--tool_call_budget", "0"], script="grpo_tools.py")
    assert result.returncode == 0, result.stderr[-3000:]
    for line in (out / "replay.jsonl").read_text().splitlines():
        record = json.loads(line)
        calls = calls_in([record])
        assert record["after"]["tool_budget_penalty"] == (-1.0 if calls else 0.0)


def test_code_and_search_runs_replay_their_tool_calls_and_hidden_tests(tmp_path):
    """grpo_code.py (hidden tests and run_python, from the columns the trajectory keeps) and grpo_search.py
    (searches over the demo corpus): an evaluation's recorded rollouts, replayed unchanged, score as recorded."""
    for script in ("grpo_code.py", "grpo_search.py"):
        out = tmp_path / script
        result = run_script(["--eval_only", "--num_eval_examples", "3", "--eval_num_samples", "2",
                             "--output_dir", out], script=script)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "columns" in json.loads((out / "eval_only.jsonl").read_text().splitlines()[0])
        _, records = replayed_as_recorded(out, script)
        assert calls_in(records) > 0, script


def test_replayed_calls_are_those_trl_ran_and_junk_is_passed_over():
    """Only calls answered by a tool message are run again (a capped loop's last call never ran); lines of a
    hand-edited file that are not messages, or whose tool_calls are not a list, are passed over, not fatal."""
    from types import SimpleNamespace

    import grpo_tools as gt

    call = {"type": "function", "function": {"name": "calculator", "arguments": '{"expression": "2 * 3"}'}}
    bad = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "2 +"}}}
    trajectory = ["not a message", {"role": "assistant", "tool_calls": {"not": "a list"}},
                  {"role": "assistant", "tool_calls": [call, bad]}, {"role": "tool", "content": "6"},
                  {"role": "tool", "content": "Error"}, {"role": "assistant", "tool_calls": [call]}]  # unanswered
    env = instruments.replayed_environment(gt, SimpleNamespace(tool_call_budget=3), {}, trajectory)
    assert (env.calls, env.failures) == (2, 1)
    assert instruments.replayed_environment(gm, SimpleNamespace(), {}, trajectory) is None  # no tools in grpo_math.py


def test_a_read_only_run_folder_is_replayed_into_the_replays_own_folder(math_run, tmp_path, monkeypatch):
    """A run folder that cannot be written to (an archived or shared run) is read, and the replay's files go to the
    replay's own --output_dir, said in one line; with neither writable, one line names the fix."""
    from pathlib import Path
    from types import SimpleNamespace

    original = Path.write_text

    def refuse_in(*folders):
        def write_text(path, *args, **kwargs):
            if path.parent in folders:
                raise PermissionError(13, "Permission denied")
            return original(path, *args, **kwargs)
        return write_text

    monkeypatch.setattr(Path, "write_text", refuse_in(math_run))
    report = instruments.replay(math_run, gm, SimpleNamespace(), tmp_path / "elsewhere")
    assert report["written_to"] == str(tmp_path / "elsewhere")
    assert json.loads((tmp_path / "elsewhere" / "replay.json").read_text())["completions"] == report["completions"]
    monkeypatch.setattr(Path, "write_text", refuse_in(math_run, tmp_path / "nowhere"))
    with pytest.raises(gm.RecipeError, match="pass a writable --output_dir"):
        instruments.replay(math_run, gm, SimpleNamespace(), tmp_path / "nowhere")
