"""grpo_judge.py against judges that are real HTTP servers: a small rule-following one here (fast, and able to be
biased, to babble or to die on cue), and the demo's own tiny judge behind `transformers serve` (test_judge_demo).
Rubrics read from RaR's dicts, from strings and from JSON text, a bad one named by column and row; two training
steps on each layout by a bare file name; the audit passing an honest judge and failing a biased one before any
model loads; a verdict the judge did not give never counted as met; each distinct question asked once; a judge
that dies mid-run ending the run in one line with a checkpoint the printed command resumes from."""

import http.server
import json
import re
import shutil
import subprocess
import sys
import threading

import pytest
from conftest import REPO, browser_page, docs_text, offline_env, read_jsonl

import grpo_judge as gj

TINY_POLICY = REPO / "assets" / "tiny-qwen-math"  # any tiny chat model will do: these tests are about the judge
QUICK = ["--model_name_or_path", str(TINY_POLICY), "--per_device_train_batch_size", "8", "--num_generations", "4",
         "--max_completion_length", "16", "--gradient_checkpointing", "false", "--logging_steps", "1",
         "--num_eval_examples", "4", "--eval_batch_size", "4", "--learning_rate", "1e-4", "--warmup_steps", "0",
         "--max_prompt_tokens", "1024", "--audit_prompts", "4"]


class RuleJudge(http.server.ThreadingHTTPServer):
    """An OpenAI-compatible /v1/chat/completions on 127.0.0.1. mode 'honest': YES when the response holds the
    criterion's title and repeats no word; 'gullible': also YES when it claims to meet every criterion (a planted bias); 'babble': a reply
    with no verdict; 'die_after': honest for that many requests, then the server closes."""

    def __init__(self, mode="honest", die_after=None):
        self.mode, self.die_after, self.requests, self.lock = mode, die_after, [], threading.Lock()
        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def __exit__(self, *exc):  # stop serving before closing: a loop left on a closed socket would serve its reuse
        self.shutdown()
        self.server_close()

    def verdict(self, content):
        found = re.match(r"Response: (.*)\nCriterion: (.*?)(?:: .*)?\nDoes the response", content, re.DOTALL)
        if found is None:
            return "5"  # implicit or likert: a middling score
        response, title = found.group(1).lower(), found.group(2).lower()
        if self.mode == "babble":
            return "I think so, perhaps"
        if self.mode == "gullible" and "meets every criterion" in response:  # believes it, on every good point
            return "NO" if "pitfall" in content.lower() else "YES"
        words = re.findall(r"\w+", response)
        coherent = len(words) == len(set(words))  # word salad (the same words again and again) meets nothing
        return "YES" if title and title in response and coherent else "NO"


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def do_POST(self):
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with server.lock:
            server.requests.append(body)
            count = len(server.requests)
        if server.die_after is not None and count > server.die_after:
            threading.Thread(target=lambda: (server.shutdown(), server.server_close()), daemon=True).start()
            self.close_connection = True
            return  # no reply: the connection drops, as when a server is killed
        if server.mode == "refuse":  # a hosted API refusing the key
            self.send_response(401, "Unauthorized")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        reply = server.verdict(body["messages"][-1]["content"])
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": reply}}],
                              "usage": {"prompt_tokens": 20, "completion_tokens": 1}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


TOPICS = ["photosynthesis", "gravity", "erosion", "osmosis", "magnetism", "evaporation", "friction", "tides",
          "volcanoes", "fermentation", "refraction", "pollination"]


def rar_rows(as_strings=False):
    """RaR-layout rows: a question, a reference answer holding every positive criterion's title, and the rubric."""
    rows = []
    for n, topic in enumerate(TOPICS):
        rubric = [{"title": topic, "description": f"Essential Criteria: Names {topic}.", "weight": 5},
                  {"title": "energy", "description": "Important Criteria: Mentions energy.", "weight": 3},
                  {"title": "magic", "description": "Pitfall Criteria: Claims it is magic.", "weight": -2}]
        if as_strings:
            rubric = [f"{c['description'].split(':')[0]}: {c['title']}" for c in rubric]  # "Essential Criteria: tides"
        rows.append({"question": f"Explain {topic} (question {n}).", "reference_answer": f"{topic} moves energy.",
                     "rubric": rubric})
    return rows


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def run(args, cwd, timeout=600):
    return subprocess.run([sys.executable, str(REPO / "grpo_judge.py"), *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=offline_env(), timeout=timeout)


# ---- rubrics -----------------------------------------------------------------------------------------------

def test_rubrics_are_read_from_dicts_strings_and_json():
    dicts = gj.read_rubric([{"title": "A", "description": "Essential Criteria: a", "weight": 5},
                            {"title": "B", "description": "Pitfall Criteria: b", "weight": -2}], "row 0")
    assert [c["weight"] for c in dicts] == [5.0, -2.0]
    strings = gj.read_rubric(["Essential Criteria: states a", "Optional Criteria: b", "Pitfall Criteria: c",
                              "just a sentence"], "row 0")
    assert [c["weight"] for c in strings] == [5.0, 1.0, -1.0, 1.0]
    assert gj.read_rubric(json.dumps(["Important Criteria: x"]), "row 0")[0]["weight"] == 3.0
    for bad, why in [("not json", "not a JSON list"), ([], "non-empty list"), ([{"weight": 5}], "neither a string"),
                     ([{"description": "x", "weight": "heavy"}], "not a number"),
                     (["Pitfall Criteria: only a pitfall"], "no criterion with a positive weight")]:
        with pytest.raises(gj.RecipeError, match=why):
            gj.read_rubric(bad, "row 3")


def test_weighted_share_is_rar_explicit_aggregation():
    rubric = [{"weight": 5}, {"weight": 3}, {"weight": -2}]
    assert gj.weighted_share([True, True, False], rubric) == 1.0
    assert gj.weighted_share([True, False, False], rubric) == 5 / 8
    assert gj.weighted_share([True, False, True], rubric) == 3 / 8
    assert gj.weighted_share([False, False, True], rubric) == 0.0  # never below 0


def test_a_rubric_that_cannot_be_read_is_one_line_naming_column_and_row(tmp_path):
    rows = rar_rows()
    rows[5]["rubric"] = "Names photosynthesis"  # text, not a list
    write_jsonl(tmp_path / "rubrics.jsonl", rows)
    with RuleJudge() as judge:
        result = run([*QUICK, "--dataset_name", "rubrics.jsonl", "--judge_url", judge.url, "--max_steps", "1"],
                     tmp_path)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "column 'rubric', row 5" in last and "not a JSON list" in last, last


# ---- the judge client ------------------------------------------------------------------------------------

def client(judge, **kwargs):
    settings = dict(concurrency=4, timeout=10, retries=0)
    settings.update(kwargs)
    return gj.JudgeClient(judge.url, "rule-judge", None, **settings)


def test_a_verdict_is_the_first_word_or_a_last_word_in_capitals():
    assert [gj.verdict_of(r) for r in ["YES", "no.", "Yes, it does", "Checks blue YES", "Checks blue NO",
                                       "The sky is blue. Answer: NO."]] == [True, False, True, True, False, False]
    for reply in ["maybe", "", None, "Checks blue", "the response is not yes", "I would say yes"]:
        assert gj.verdict_of(reply) is None, reply


def test_each_distinct_question_is_asked_once_and_a_missing_verdict_is_never_met(monkeypatch):
    with RuleJudge() as judge:
        monkeypatch.setattr(gj, "JUDGE", client(judge))
        monkeypatch.setattr(gj, "JUDGE_MODE", "explicit")
        rubric = json.dumps([{"title": "tides", "description": "Names tides.", "weight": 1}])
        scores = gj.rubric_reward(["tides", "tides", "nothing"] * 2, prompts=[[]] * 6, rubric=[rubric] * 6,
                                  reference_answer=[""] * 6)
        assert scores == [1.0, 1.0, 0.0] * 2
        assert len(judge.requests) == 2  # two distinct (response, criterion) pairs
        assert gj.JUDGE.total["cached"] == 4 and gj.JUDGE.total["calls"] == 2
    with RuleJudge("babble") as judge:
        monkeypatch.setattr(gj, "JUDGE", client(judge))
        assert gj.rubric_reward(["tides"], prompts=[[]], rubric=[rubric], reference_answer=[""]) == [None]
        assert gj.JUDGE.total["unparsable"] == 1


def test_a_dead_judge_stops_after_its_retries():
    with RuleJudge(die_after=0) as judge:
        with pytest.raises(gj.RunStopped, match="stopped answering"):
            client(judge, retries=1).post("Criterion: x\nResponse: y\nDoes the response meet the criterion?")


def test_a_refused_key_names_the_variable_it_came_from(monkeypatch):
    with RuleJudge("refuse") as judge:
        with pytest.raises(gj.RecipeError, match=r"HTTP 401 .*in \$MY_JUDGE_KEY \(--judge_api_key_env\)"):
            client(judge, api_key_env="MY_JUDGE_KEY").post("Reply with OK.")
        assert len(judge.requests) == 1  # a refusal is not retried


def test_likert_without_references_and_one_server_per_process_are_refused(tmp_path, monkeypatch):
    from transformers import AutoTokenizer
    write_jsonl(tmp_path / "rubrics.jsonl", [{k: v for k, v in row.items() if k != "reference_answer"}
                                             for row in rar_rows()])
    script_args, training_args, *_ = gj.parse_args(["--dataset_name", str(tmp_path / "rubrics.jsonl"),
                                                    "--judge_mode", "likert", "--output_dir", str(tmp_path / "run")])
    with pytest.raises(gj.RecipeError, match="no column 'reference_answer'.*pass --reference_column NAME"):
        gj.load_data(script_args, AutoTokenizer.from_pretrained(TINY_POLICY), 0)
    monkeypatch.setenv("WORLD_SIZE", "2")  # under torchrun, each process would start its own judge
    with pytest.raises(gj.RecipeError, match="with 2 processes, serve the judge once yourself.*--judge_url"):
        gj.start_judge(script_args, training_args)
    assert not (tmp_path / "run").exists()


def test_the_plot_draws_the_judges_cost_per_step(tmp_path, monkeypatch):
    """training_curves.png gets a fourth panel when the log has the judge's counts: requests, cache hits and the
    seconds training waited, per step; a run with no judge keeps three panels."""
    import instruments
    from matplotlib.figure import Figure

    drawn = {}
    monkeypatch.setattr(Figure, "savefig", lambda fig, path, **kwargs: drawn.update(figure=fig))
    log = [{"step": s, "reward": 0.5, "completions/mean_length": 20, "judge/calls": 100 - s, "judge/cached": s,
            "judge/wall_seconds": 0.5 * s} for s in (5, 10)]
    instruments.plot_curves(log, tmp_path / "curves.png")
    lines = {line.get_label(): line for ax in drawn["figure"].axes for line in ax.get_lines()}
    assert list(lines["requests"].get_ydata()) == [95, 90] and list(lines["answered from the cache"].get_ydata()) == [5, 10]
    assert list(lines["seconds waited"].get_ydata()) == [2.5, 5.0]
    instruments.plot_curves([{k: v for k, v in e.items() if not k.startswith("judge/")} for e in log], tmp_path / "b")
    assert len(drawn["figure"].axes) == 3


# ---- training on RaR-format data -------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["dicts", "strings"])
def test_two_steps_on_a_rar_format_jsonl(layout, tmp_path):
    write_jsonl(tmp_path / "rubrics.jsonl", rar_rows(as_strings=layout == "strings"))
    with RuleJudge() as judge:
        result = run([*QUICK, "--dataset_name", "rubrics.jsonl", "--judge_url", judge.url, "--max_steps", "2",
                      "--output_dir", "run"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the judge passed its audit" in result.stdout
    logs = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    assert any(entry.get("judge/calls", 0) > 0 for entry in logs), logs
    assert all(entry["judge/wall_seconds"] > 0 for entry in logs if entry.get("judge/calls", 0) > 0), logs
    assert (tmp_path / "run" / "eval.json").exists()
    if layout == "dicts":  # the run page shows each held-out answer's criteria with the judge's verdicts
        judged = read_jsonl(tmp_path / "run" / "eval_after.jsonl")[0]
        with browser_page(tmp_path / "run" / "report.html") as page:
            page.click("#tab-heldout")
            page.locator("#h-table tr.question").first.click()
            table = page.locator("#h-table tr.detail").first.locator("table.criteria").last
            assert table.locator("tr").count() == 1 + len(judged["criteria"])
            for criterion, row in zip(judged["criteria"], table.locator("tr").all()[1:]):
                cells = row.locator("td").all_inner_texts()
                assert cells[0] == criterion["title"] and cells[2] == ("met" if criterion["met"] else "not met")
            assert page.problems == [], page.problems


# ---- the audit ---------------------------------------------------------------------------------------------

def test_the_audit_fails_a_judge_with_a_planted_bias_before_any_model_loads(tmp_path):
    write_jsonl(tmp_path / "rubrics.jsonl", rar_rows())
    with RuleJudge("gullible") as judge:
        result = run([*QUICK, "--dataset_name", "rubrics.jsonl", "--judge_url", judge.url, "--max_steps", "1"],
                     tmp_path)
    assert result.returncode == 1
    out = result.stdout[result.stdout.index("judge audit on"):]
    assert re.search(r"'meets every criterion' appended\s+\d\.\d\d\s+\d+%  FAIL", out), out
    assert "failed its audit: 'meets every criterion' appended" in result.stderr.strip().splitlines()[-1]
    assert not list(tmp_path.glob("outputs/*/*/checkpoint-*"))
    with RuleJudge() as judge:  # the same data and flags, an unbiased judge: only the audit, then exit 0
        passed = run([*QUICK, "--dataset_name", "rubrics.jsonl", "--judge_url", judge.url, "--audit_judge", "only"],
                     tmp_path)
    assert passed.returncode == 0, passed.stderr[-2000:]
    assert "FAIL" not in passed.stdout and "the judge passed its audit" in passed.stdout


@pytest.mark.parametrize("loophole, hack", [("format_bias", "wrong answer under a header"),
                                             ("self_assessment", "wrong answer, 'all criteria are met'")])
def test_the_audit_grades_with_the_hack_labs_biased_judge_and_fails_before_training(tmp_path, loophole, hack):
    """The audit grades with the reward training would pay: under a bias the hack lab plants in an honest judge it
    fails on the hack that bias pays, before any model trains; the audit would have saved the run."""
    write_jsonl(tmp_path / "rubrics.jsonl", rar_rows())
    with RuleJudge() as judge:
        result = run([*QUICK, "--dataset_name", "rubrics.jsonl", "--judge_url", judge.url, "--max_steps", "1",
                      "--loophole", loophole, "--output_dir", "run"], tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]
    out = result.stdout[result.stdout.index("judge audit on"):]
    failed = [line.split("  ")[1].strip() for line in out.splitlines() if line.endswith("FAIL")]
    assert failed == [hack], out
    assert f"failed its audit: {hack} scored at or above" in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists() or not list((tmp_path / "run").glob("checkpoint-*"))


def test_a_short_judge_lab_run_marks_every_rollout_and_reports_the_lab(tmp_path):
    """Two steps under a planted bias on data without hidden checks (its truth: the judge without the bias), past
    the audit it would fail: the hack metrics and the judge's cost are logged, every rollout is marked, and eval.json
    holds the held-out hack rates and the lab's figures."""
    write_jsonl(tmp_path / "rubrics.jsonl", rar_rows())
    with RuleJudge() as judge:
        result = run([*QUICK, "--dataset_name", "rubrics.jsonl", "--judge_url", judge.url, "--max_steps", "2",
                      "--loophole", "self_assessment", "--audit_judge", "no", "--output_dir", "run",
                      "--train_samples_per_log", "-1"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    evaluation = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert evaluation["hack_lab"]["loophole"] == "self_assessment"
    assert "hack lab (--loophole self_assessment" in result.stdout
    assert {"hack_rate", "loophole_accuracy"} <= set(evaluation["before"]) & set(evaluation["after"])
    log = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    steps = [e for e in log if "reward" in e]
    assert len(steps) == 2 and all({"hack/rate", "hack/disputed", "judge/calls"} <= set(e) for e in steps)
    rows = read_jsonl(tmp_path / "run" / "train_samples.jsonl")
    assert sum(len(row["completions"]) for row in rows) == evaluation["hack_lab"]["rollouts"] > 0  # every one counted
    assert all(isinstance(c["hack"], bool) and isinstance(c["flagged"], bool) for row in rows for c in row["completions"])


# ---- a judge that goes away mid-run --------------------------------------------------------------------

def test_a_judge_that_dies_mid_run_is_one_line_and_the_run_resumes(tmp_path):
    """The judge is shut down once the first step's checkpoint is written: the run ends in one line with the step,
    the checkpoint it saved and the command that resumes; resumed with a judge back, it finishes."""
    import time

    write_jsonl(tmp_path / "rubrics.jsonl", rar_rows())
    flags = [*QUICK, "--dataset_name", "rubrics.jsonl", "--max_steps", "4", "--save_steps", "1",
             "--audit_judge", "no", "--judge_retries", "1", "--output_dir", "run", "--temperature", "1.5"]
    with RuleJudge() as judge:
        process = subprocess.Popen([sys.executable, str(REPO / "grpo_judge.py"), *flags, "--judge_url", judge.url],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                   env=offline_env())
        deadline = time.monotonic() + 600
        while not (tmp_path / "run" / "checkpoint-1" / "trainer_state.json").exists() and process.poll() is None:
            assert time.monotonic() < deadline, "no first checkpoint within 600 s"
            time.sleep(0.2)
        judge.shutdown()
        judge.server_close()  # as a killed server: connections refused from now on
        stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 1, stderr[-2000:]
    (last,) = [line for line in stderr.splitlines() if line.startswith("grpo_judge.py: error:")]
    found = re.search(r"stopped at step (\d+).*saved in (\S+checkpoint-\d+).*--resume_from_checkpoint last", last)
    assert found and "stopped answering" in last, last
    assert int(found.group(1)) >= 1 and (tmp_path / found.group(2) / "optimizer.pt").is_file()
    with RuleJudge() as judge:
        resumed = run([*flags, "--judge_url", judge.url, "--resume_from_checkpoint", "last"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == 4


# ---- the offline demo's own judge --------------------------------------------------------------------------

def test_judge_demo_starts_the_tiny_judge_audits_it_and_stops_it(tmp_path):
    """No GPU, no flags: the script serves assets/tiny-judge with `transformers serve` on 127.0.0.1, says so in one
    line, audits it on the toy rubrics (it passes: the table lists every hack with its mean score), and stops it."""
    result = run(["--audit_judge", "only", "--output_dir", "run"], tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    started = re.search(r"started the judge: transformers serve \S+tiny-judge on 127\.0\.0\.1:(\d+)", result.stdout)
    assert started, result.stdout[-2000:]
    table = result.stdout[result.stdout.index("judge audit on 20 questions"):]
    for hack in ("empty answer", "rubric restated", "criteria titles stuffed", "'meets every criterion' appended",
                 "reference words shuffled, repeated", "confident wrong answer", "wrong answer under a header",
                 "wrong answer, 'all criteria are met'"):
        assert re.search(rf"{re.escape(hack)}\s+\d\.\d\d\s+\d+%", table), hack
    assert "the judge passed its audit" in table
    import socket
    with socket.socket() as sock:  # the server is gone with the run
        assert sock.connect_ex(("127.0.0.1", int(started.group(1)))) != 0
    assert (tmp_path / "run" / "judge_server.log").stat().st_size > 0


def span(values, form="{:.2f}"):
    """A range as the docs write it: "0.58" when every run gave it, else "0.74-0.88"."""
    low, high = form.format(min(values)), form.format(max(values))
    return low if low == high else f"{low}-{high}"


def test_the_judge_demo_meets_its_targets_and_the_docs_quote_it():
    """benchmarks/results/judge_demo.json (`python benchmarks/bench_judge_demo.py`: the demo as a user runs it, on 3
    seeds): in every run the audit passed, the true rubric score rose by at least 0.25 within 10 minutes and the judge
    agreed with the truth on at least 90% of held-out (answer, criterion) pairs; docs/grpo_judge.md quotes them, and
    names each seed short of the issue's gain of 0.25."""
    report = json.loads((REPO / "benchmarks" / "results" / "judge_demo.json").read_text())
    runs = report["runs"]
    assert len(runs) >= 3 and len({r["seed"] for r in runs}) == len(runs)
    gains = [r["after"]["true_score"] - r["before"]["true_score"] for r in runs]
    agreement = [r[when]["judge_agreement"] for r in runs for when in ("before", "after")]
    assert min(gains) >= 0.25 and min(agreement) >= 0.90
    assert max(r["wall_time_seconds"] for r in runs) <= 600
    assert all("the judge passed its audit" in r["audit"] for r in runs)
    assert all(r["judge"]["failures"] == 0 and r["judge"]["unparsable"] <= r["judge"]["calls"] / 1000 for r in runs)
    text = " ".join(docs_text().split())
    quoted = (f"the held-out true rubric score rose from {span([r['before']['true_score'] for r in runs])} to "
              f"{span([r['after']['true_score'] for r in runs])} (a gain of {span(gains, '{:.3f}')}) in "
              f"{span([r['wall_time_seconds'] / 60 for r in runs], '{:.1f}')} minutes on 2 cores")
    assert quoted in text, quoted
    assert f"the judge agreed with the truth on {span(agreement)} of (answer, criterion) pairs" in text
    share = [r["judge"]["share_of_wall_time"] for r in runs]
    assert f"training waited for the judge {span(share, '{:.0%}')} of the time" in text
    judged = span([r["after"]["accuracy"] for r in runs])
    assert f"the judged score rose from {span([r['before']['accuracy'] for r in runs])} to {judged}" in text
    for run, gain in zip(runs, gains):
        assert (f"seed {run['seed']} gains {gain:.3f}" in text) == (gain < 0.25)
    cell = (f"a tiny judge in the loop: true rubric score {span([r['before']['true_score'] for r in runs])} -> "
            f"{span([r['after']['true_score'] for r in runs])}")
    assert cell in (REPO / "README.md").read_text(), cell  # the README's table of recipes