"""Both LLM judges of rewards.py against a real OpenAI-compatible server: `transformers serve` on the tiny demo model.

The tiny model's replies are noise (no 'Score: N', no JSON), so most judging fails and must fall back; a
logit bias forces a reply where a real score is needed. One server serves the whole module; the test
that kills a server mid-call starts its own. A server that does not start fails the tests (never skips).
Last, `rewards.py --audit` with judges that fail (no server; a small fake server whose replies hold no score,
or an HTTP error): the audit must say so and fail, never give a verdict on fallback scores.
"""

import atexit
import contextlib
import ctypes
import http.server
import json
import os
import signal
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import warnings
from pathlib import Path

import pytest

import rewards

MODEL_DIR = Path(__file__).resolve().parent.parent / "assets" / "tiny-qwen-math"


def served_copy() -> Path:
    """The tiny model with a longer context (its config says 512 positions; its rotary embeddings take more): the
    judges' prompts and the long replies of the kill test do not fit in 512. The weights are the asset's own."""
    copy = Path(tempfile.mkdtemp(prefix="judge-model-")) / MODEL_DIR.name
    shutil.copytree(MODEL_DIR, copy)
    atexit.register(shutil.rmtree, copy.parent, ignore_errors=True)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 4096}, indent=2))
    return copy


MODEL = str(served_copy())  # the served name: requests must send exactly this (the judges send their `model`)
POSTED = '"POST /v1/chat/completions HTTP/1.1"'  # uvicorn's access log: once per chat request answered, any status


def free_port() -> int:
    with socket.socket() as sock:  # bound, read, closed: nothing listens on it afterwards
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def die_with_parent():  # Linux: the server is killed if pytest itself dies, so no server outlives the tests
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Server:
    """`transformers serve MODEL` on 127.0.0.1 and a free port, on CPU, logging to `log`."""

    def __init__(self, log: Path):
        self.log, self.port, self.proc = log, free_port(), None
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def start(self, wait: float = 120.0):
        command = [str(Path(sys.prefix) / "bin" / "transformers"), "serve", MODEL, "--host", "127.0.0.1",
                   "--port", str(self.port), "--device", "cpu"]
        env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HUB_DISABLE_UPDATE_CHECK="1", CUDA_VISIBLE_DEVICES="",
                   PYTHONUNBUFFERED="1", TRANSFORMERS_VERBOSITY="warning")
        with open(self.log, "ab") as log:
            try:
                self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             env=env, preexec_fn=die_with_parent())
            except OSError as error:
                pytest.fail(f"cannot run {command[0]} (is transformers[serving] installed?): {error}")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with opener.open(f"http://127.0.0.1:{self.port}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        code = self.proc.poll()
        self.stop()
        why = f"exited with code {code}" if code is not None else f"was not ready (GET /health) in {wait:.0f} s"
        pytest.fail(f"transformers serve {why}; command: {' '.join(command)}; its log's tail:\n{self.tail()}")

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGCONT)  # a stopped process would not act on SIGTERM
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def count(self, marker: str = POSTED) -> int:
        """Chat requests answered so far, once the log is quiet (a reply's line may follow the reply itself)."""
        self.settle(quiet=0.3)
        return self.text().count(marker)

    def settle(self, quiet: float = 0.5, limit: float = 30.0):
        """Wait until the log has not grown for `quiet` s: requests left over by an earlier test are done."""
        deadline, size, since = time.monotonic() + limit, -1, time.monotonic()
        while time.monotonic() < deadline:
            now = self.log.stat().st_size
            if now != size:
                size, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
            time.sleep(0.05)
        pytest.fail(f"the server's log kept growing for {limit} s:\n{self.tail()}")

    @contextlib.contextmanager
    def stopped(self):
        """SIGSTOP the server: connections are still accepted, nothing is answered. SIGCONT afterwards, always."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.proc.pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("judge_server") / "server.log")
    try:
        srv.start()
        yield srv
    finally:
        srv.stop()


@contextlib.contextmanager
def judge_warnings():
    """Collects the judges' RuntimeWarning lines (emitted from the calling thread)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lines = []
        yield lines
    lines += [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning) and "judge" in str(w.message)]


def spy_on(judge) -> tuple:
    """Records the user message of each request the judge sends, and each reply, while still asking the server."""
    sent, replies, real = [], [], judge.ask

    def ask(user_content):
        sent.append(user_content)
        replies.append(real(user_content))
        return replies[-1]

    judge.ask = ask
    return sent, replies


def chat(content: str, role: str = "user") -> list:
    return [{"role": "system", "content": "Solve it."}, {"role": role, "content": content}]


FALLBACK = -1.0  # outside [0, 1], so a fallback cannot pass for a score


def test_server_runs_the_pinned_model(server):
    reply = rewards.llm_judge_reward(server.url, MODEL, "Grade.", timeout=60, retries=0,
                                     fallback_score=FALLBACK).ask("Say something.")
    assert isinstance(reply, str) and reply  # a real generation came back through the judge's own client


def test_llm_judge_falls_back_on_unparsable_replies_with_one_warning(server):
    judge = rewards.llm_judge_reward(server.url, MODEL, "Grade the arithmetic.", fallback_score=FALLBACK)
    sent, _ = spy_on(judge)
    prompts = [chat("What is 48 + 24?"), "What is 2 + 2?", chat("What is 48 + 24?"), "What is 9 * 9?",
               chat("What is 7 - 3?"), "What is 1 + 1?"]
    completions = ["72", [{"role": "assistant", "content": "It is 4."}], "<answer>73</answer>", "81", "4", "Two."]
    answer = ["72", "4", "72", "81", "4", "2"]
    server.settle()
    before = server.count()
    with judge_warnings() as lines:
        scores = judge(completions=completions, prompts=prompts, answer=answer)
    assert len(scores) == len(completions)
    assert all(score == FALLBACK or 0.0 <= score <= 1.0 for score in scores), scores
    failed = scores.count(FALLBACK)
    assert failed >= 1, f"the noise model is expected to give at least one reply without a score: {scores}"
    assert judge.failures == failed and judge.failure_kinds == {"unparsable": failed} and judge.calls == 6
    assert len(lines) == 1 and "no 'Score: N'" in lines[0] and judge.url in lines[0], lines
    assert server.count() - before == len(completions)  # one request per completion; bad replies are not retried
    # what was sent: the question (last user message, or the string), the reference, the response
    assert len(sent) == len(completions)
    for prompt, completion, gold in zip(prompts, completions, answer):
        question = prompt if isinstance(prompt, str) else prompt[-1]["content"]
        response = completion if isinstance(completion, str) else completion[-1]["content"]
        expected = f"Question:\n{question}\n\nReference answer:\n{gold}\n\n<response>\n{response}\n</response>"
        assert expected in sent
    # temperature 0: the same batch scores the same; the first warning was the only one
    with judge_warnings() as lines:
        assert judge(completions=completions, prompts=prompts, answer=answer) == scores
    assert lines == [] and judge.failures == 2 * failed


def test_llm_judge_parses_a_real_reply(server):
    from transformers import AutoTokenizer

    seven = AutoTokenizer.from_pretrained(MODEL_DIR).encode("7", add_special_tokens=False)
    assert len(seven) == 1, seven
    judge = rewards.llm_judge_reward(server.url, MODEL, "Grade the arithmetic.", timeout=60, retries=0,
                                     fallback_score=FALLBACK,
                                     extra_body={"logit_bias": {str(seven[0]): 100.0}, "max_tokens": 1})
    sent, replies = spy_on(judge)
    with judge_warnings() as lines:
        scores = judge(completions=["72", "73", [{"role": "assistant", "content": "72"}]],
                       prompts=["What is 48 + 24?"] * 3, answer=["72"] * 3)
    assert replies == ["7"] * 3 and len(sent) == 3  # the forced one-token reply, parsed as a bare number
    assert scores == [0.7, 0.7, 0.7]
    assert lines == [] and judge.failures == 0


def test_group_judge_makes_one_call_per_prompt(server):
    judge = rewards.group_judge_reward(server.url, MODEL, timeout=60, retries=0, fallback_score=FALLBACK,
                                       max_tokens=128)
    sent, _ = spy_on(judge)
    a, b, c = chat("What is 48 + 24?"), "What is 2 + 2?", chat("What is 9 * 9?")
    prompts = [a, b, a, c, b, a]
    completions = ["72", "4", "73", "81", "5", [{"role": "assistant", "content": "seventy-two"}]]
    answer = ["72", "4", "72", "81", "4", "72"]
    server.settle()
    before = server.count()
    with judge_warnings() as lines:
        scores = judge(completions=completions, prompts=prompts, answer=answer)
    assert server.count() - before == 3  # one request per distinct prompt, not one per completion
    assert len(scores) == len(completions)
    assert all(score == FALLBACK or 0.0 <= score <= 1.0 for score in scores), scores
    groups = {"a": [0, 2, 5], "b": [1, 4], "c": [3]}
    failed = 0
    for positions in groups.values():  # a failed group falls back as a whole
        members = [scores[i] for i in positions]
        if FALLBACK in members:
            assert members == [FALLBACK] * len(members), scores
            failed += 1
    assert failed >= 1, f"the noise model is expected to give at least one reply that is not the JSON: {scores}"
    assert judge.failures == failed
    assert len(lines) == 1 and "group judge" in lines[0], lines
    # each request holds its own group's responses only, numbered in their order in the batch
    assert len(sent) == 3
    by_task = {content.split("\n\n")[0]: content for content in sent}
    assert set(by_task) == {"Task:\nWhat is 48 + 24?", "Task:\nWhat is 2 + 2?", "Task:\nWhat is 9 * 9?"}
    assert by_task["Task:\nWhat is 48 + 24?"].endswith(
        'Reference answer:\n72\n\n<response id="1">\n72\n</response>\n\n<response id="2">\n73\n</response>\n\n'
        '<response id="3">\nseventy-two\n</response>')
    assert by_task["Task:\nWhat is 2 + 2?"].endswith(
        '<response id="1">\n4\n</response>\n\n<response id="2">\n5\n</response>')
    assert by_task["Task:\nWhat is 9 * 9?"].endswith('<response id="1">\n81\n</response>')

    # a group larger than max_group_size is judged in chunks: 4 completions, chunks of 2 -> 2 calls
    chunked = rewards.group_judge_reward(server.url, MODEL, timeout=60, retries=0, fallback_score=FALLBACK,
                                         max_tokens=128, max_group_size=2)
    sent, _ = spy_on(chunked)
    before = server.count()
    with judge_warnings() as lines:
        scores = chunked(completions=["1", "2", "3", "4"], prompts=[b] * 4, answer=["4"] * 4)
    assert server.count() - before == 2 and len(sent) == 2
    assert all(content.count("<response id=") == 2 for content in sent)
    for chunk in (scores[:2], scores[2:]):
        assert chunk == [FALLBACK] * 2 or all(0.0 <= score <= 1.0 for score in chunk), scores
    assert chunked.failures == [scores[:2], scores[2:]].count([FALLBACK] * 2)
    assert len(lines) == (1 if chunked.failures else 0)


@pytest.mark.parametrize("retries, limit", [(0, 4.0), (1, 4.5)])
def test_llm_judge_waits_in_parallel_on_a_stopped_server(server, retries, limit):
    judge = rewards.llm_judge_reward(server.url, MODEL, "Grade.", timeout=1.0, retries=retries, backoff=0.1,
                                     max_workers=8, max_tokens=1, fallback_score=FALLBACK)
    server.settle()
    with server.stopped(), judge_warnings() as lines:
        start = time.monotonic()
        scores = judge(completions=[str(n) for n in range(8)], prompts=["What is 48 + 24?"] * 8)
        elapsed = time.monotonic() - start
    # 8 requests one after another would take 8 * (retries + 1) s; in parallel, (retries + 1) s and the backoff
    assert (retries + 1) * 1.0 <= elapsed < limit, elapsed
    assert scores == [FALLBACK] * 8 and judge.failures == 8 and judge.failure_kinds == {"timed out": 8}
    assert len(lines) == 1 and "timed out" in lines[0], lines
    server.settle()  # the stale requests run now; let them finish before the next test counts requests


def test_group_judge_waits_in_parallel_on_a_stopped_server(server):
    judge = rewards.group_judge_reward(server.url, MODEL, timeout=1.0, retries=0, max_workers=8, max_tokens=1,
                                       fallback_score=FALLBACK)
    prompts = [f"What is {n} + {n}?" for n in range(5)] * 2  # 5 groups of 2
    server.settle()
    with server.stopped(), judge_warnings() as lines:
        start = time.monotonic()
        scores = judge(completions=[str(n) for n in range(10)], prompts=prompts)
        elapsed = time.monotonic() - start
    assert 1.0 <= elapsed < 4.0, elapsed  # 5 calls in parallel, not 5 s one after another
    assert scores == [FALLBACK] * 10 and judge.failures == 5 and judge.failure_kinds == {"timed out": 5}
    assert len(lines) == 1 and "timed out" in lines[0], lines
    server.settle()


@pytest.mark.parametrize("make", [
    lambda url, **kw: rewards.llm_judge_reward(url, MODEL, "Grade.", **kw),
    lambda url, **kw: rewards.group_judge_reward(url, MODEL, **kw),
], ids=["llm_judge", "group_judge"])
def test_judge_survives_a_server_killed_mid_call(tmp_path, make):
    doomed = Server(tmp_path / "server.log")
    try:
        doomed.start()
        # a long generation (the end token suppressed), so that the kill comes while the server is busy on it
        judge = make(doomed.url, timeout=30.0, retries=2, backoff=0.1, max_tokens=3000, fallback_score=FALLBACK,
                     extra_body={"logit_bias": {"2": -100.0}})
        killed = threading.Event()

        def kill_when_busy():  # SIGKILL 0.7 s into the call: the reply takes seconds (3000 tokens, no end token)
            time.sleep(0.7)
            doomed.proc.kill()
            killed.set()

        timer = threading.Thread(target=kill_when_busy, daemon=True)
        with judge_warnings() as lines:
            start = time.monotonic()
            timer.start()
            scores = judge(completions=["72", "73", "74"], prompts=["What is 48 + 24?"] * 3)
            elapsed = time.monotonic() - start
        timer.join(25)
        assert killed.is_set()
        assert POSTED not in doomed.text(), doomed.tail()  # nothing was answered: the kill came mid-generation
        assert elapsed < 10.0, elapsed  # the kill is noticed at once, the retries are refused: no hang
        assert scores == [FALLBACK] * 3
        assert judge.failures == (3 if judge.__name__ == "llm_judge" else 1)
        assert judge.failure_kinds == {"unreachable": judge.failures}
        assert len(lines) == 1 and "refused" in lines[0].lower(), lines  # the last retry found nobody listening
    finally:
        doomed.stop()


@pytest.mark.parametrize("make", [
    lambda url, **kw: rewards.llm_judge_reward(url, MODEL, "Grade.", **kw),
    lambda url, **kw: rewards.group_judge_reward(url, MODEL, **kw),
], ids=["llm_judge", "group_judge"])
def test_judge_with_no_server_falls_back_quickly(make):
    judge = make(f"http://127.0.0.1:{free_port()}/v1", timeout=5.0, retries=2, backoff=0.05,
                 fallback_score=FALLBACK)
    with judge_warnings() as lines:
        start = time.monotonic()
        scores = judge(completions=["72", "73", "74", "75"], prompts=["Q1", "Q1", "Q2", "Q2"])
        elapsed = time.monotonic() - start
    assert scores == [FALLBACK] * 4
    assert judge.failures == (4 if judge.__name__ == "llm_judge" else 2)
    assert judge.failure_kinds == {"unreachable": judge.failures} and judge.calls == judge.failures
    assert 0.15 <= elapsed < 3.0, elapsed  # both retries were made (0.05 + 0.1 s of backoff), and no more
    assert len(lines) == 1 and "refused" in lines[0].lower(), lines
    assert "cannot reach the judge at" in lines[0] and "start the server or fix base_url" in lines[0], lines


def test_audit_scores_the_battery_with_both_judges(server):
    """`python rewards.py --audit --judge_url ... --judge_model ...`, as a user runs it: both judge columns added.
    The noise model gives no JSON (and seldom a 'Score: N'), so the audit must fail, saying why, with no verdict."""
    server.settle()
    before = server.count()
    result = subprocess.run([sys.executable, "rewards.py", "--audit", "--judge_url", server.url, "--judge_model", MODEL],
                            cwd=MODEL_DIR.parent.parent, capture_output=True, text=True, timeout=300)
    cells = judge_cells(result.stdout)
    for judge, group in cells:  # each judge cell is a score in [0, 1] or 'fail': never a fallback posing as a score
        assert judge == "fail" or 0.0 <= float(judge) <= 1.0, cells
        assert group == "fail" or 0.0 <= float(group) <= 1.0, cells
    assert ("fail", "fail") in cells  # the group judge fails its groups whole
    assert "judge calls that gave no score ('fail' in the table): judge " in result.stdout
    assert result.returncode != 0 and "hacks a judge scored" not in result.stdout
    assert len(result.stderr.splitlines()) == 1, result.stderr[-2000:]
    assert result.stderr.startswith("rewards.py --audit: no judge verdict, most judge calls gave no score (judge ")
    assert server.url in result.stderr
    # one call per case for llm_judge, one per 16 cases for the group judge (all answer the same question); the
    # look for a server before them is a GET, not a chat request
    cases = len(rewards.audit_cases())
    assert server.count() - before == cases + -(-cases // 16)
    assert '"GET /v1/chat/completions HTTP/1.1" 405' in server.text()


def test_playground_judge_cell_scores_with_a_server(server, monkeypatch, capsys):
    """The rewards playground's judge cell, run as its notebook runs it, against the real server."""
    source = (MODEL_DIR.parent.parent / "notebooks" / "rewards_playground.py").read_text()
    cell = source.rsplit("# %%\n", 1)[1]  # the last code cell: the judges
    assert "group_judge_reward" in cell and "llm_judge_reward" in cell
    monkeypatch.setenv("JUDGE_URL", server.url)
    monkeypatch.setenv("JUDGE_MODEL", MODEL)
    completions = {"right": "<answer>72</answer>", "wrong": "<answer>73</answer>", "none": "I do not know."}
    namespace = {"rewards": rewards, "completions": completions, "texts": list(completions.values()),
                 "GOLD": rewards.AUDIT_GOLD}
    server.settle()
    before = server.count()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the noise model's replies fail to parse: warned once each
        exec(compile(cell, "rewards_playground.py", "exec"), namespace)
    printed = capsys.readouterr().out
    assert "Skipped" not in printed and "completion" in printed.splitlines()[0]
    for case in completions:
        line = next(line for line in printed.splitlines() if line.startswith(case))
        assert all(0.0 <= float(cell) <= 1.0 for cell in line.split()[1:]), line
    assert server.count() - before == len(completions) + 1  # one call per completion, one for the group


def test_group_judge_in_grpo_math_rubric_trains(server, tmp_path, monkeypatch):
    """docs/rewards.md's example: a judge added to grpo_math.py's rubric in one line, two training steps against it."""
    import json

    import grpo_math
    from conftest import FAST_RUN

    judge = rewards.group_judge_reward(server.url, MODEL, timeout=60, max_tokens=32)
    monkeypatch.setattr(grpo_math, "RUBRIC", [*grpo_math.RUBRIC, (judge, 0.5)])
    server.settle()
    before = server.count()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the noise model's replies are not JSON: warned once
        grpo_math.main([*FAST_RUN, "--max_steps", "2", "--output_dir", str(tmp_path / "run"), "--save_steps", "2",
                        "--num_eval_examples", "4", "--eval_batch_size", "4", "--eval_num_samples", "1",
                        "--print_samples_every", "0"])
    state = json.loads((tmp_path / "run" / "checkpoint-2" / "trainer_state.json").read_text())
    logged = [entry for entry in state["log_history"] if "rewards/group_judge/mean" in entry]
    assert len(logged) == 2  # logged under its name at every step, like any other reward
    assert all(judge.fallback_score <= entry["rewards/group_judge/mean"] <= 1.0 for entry in logged)
    # per step, 16 completions of 2 prompts: 2 calls (evaluations add one per question): fewer than one per completion
    calls = server.count() - before
    assert 2 * 2 <= calls < 2 * 16, calls


# --- judges that fail: each kind said once, counted; the audit fails rather than judge on fallbacks ----------------

REPO = MODEL_DIR.parent.parent


class FakeJudge(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint: the server's `reply(user message)` gives (status, reply text)."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.calls.append(body)
        status, text = self.server.reply(body["messages"][-1]["content"])
        message = {"role": "assistant", "content": text}
        payload = json.dumps({"choices": [{"index": 0, "message": message}]} if status == 200 else
                             {"error": {"message": text}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def fake_judge(reply):
    """(server, base URL) of a FakeJudge on 127.0.0.1 in a thread; `server.calls` holds each request's body."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeJudge)
    server.reply, server.calls = reply, []
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def run_audit(url: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "rewards.py", "--audit", "--judge_url", url, "--judge_model", "judge-model"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def judge_cells(stdout: str) -> list:
    """The (judge, group) cells of the audit's table, one pair per case."""
    lines = stdout.splitlines()
    assert lines[2].split()[-3:] == ["judge", "group", "total"], stdout
    return [tuple(line.split()[-3:-1]) for line in lines[3:3 + len(rewards.audit_cases())]]


@pytest.mark.parametrize("make", [
    lambda url, **kw: rewards.llm_judge_reward(url, "judge-model", "Grade.", **kw),
    lambda url, **kw: rewards.group_judge_reward(url, "judge-model", **kw),
], ids=["llm_judge", "group_judge"])
def test_judge_says_each_kind_of_failure_once_and_counts_it(make):
    replies = {"now": (200, "I would rather not grade this.")}
    with fake_judge(lambda user: replies["now"]) as (server, url):
        judge = make(url, timeout=5.0, retries=0, fallback_score=FALLBACK)
        batch = {"completions": ["72", "73"], "prompts": ["Q1", "Q2"]}  # two calls for either judge
        with judge_warnings() as lines:
            assert judge(**batch) == [FALLBACK] * 2  # a reply with no score in it
            replies["now"] = (404, "The model `judge-model` does not exist.")
            assert judge(**batch) == [FALLBACK] * 2  # an HTTP error
    with judge_warnings() as later:
        assert judge(**batch) == [FALLBACK] * 2  # nothing listens any more
        assert judge(**batch) == [FALLBACK] * 2
    assert len(server.calls) == 4  # neither a bad reply nor a 404 is retried
    assert judge.calls == 8 and judge.failures == 8
    assert judge.failure_kinds == {"unparsable": 2, "error status": 2, "unreachable": 4}
    assert len(lines) == 2 and len(later) == 1, (lines, later)  # once per kind, not once per call
    unparsable, status, unreachable = lines + later
    assert f"the judge at {url}/chat/completions replied with no score (no 'Score: N'" in unparsable or \
        f"the judge at {url}/chat/completions replied with no score (no scores for 1 responses" in unparsable
    assert "I would rather not grade this." in unparsable
    assert "HTTP 404" in status and "'judge-model'" in status
    assert f"cannot reach the judge at {url}" in unreachable and "refused" in unreachable
    assert "start the server or fix base_url" in unreachable and f"score {FALLBACK}" in unreachable


def test_audit_with_no_judge_server_fails_in_one_line():
    url = f"http://127.0.0.1:{free_port()}/v1"
    start = time.monotonic()
    result = run_audit(url)
    assert time.monotonic() - start < 30  # one look, not the battery's 36 calls, each retried with backoff
    assert result.returncode != 0 and result.stdout == ""  # no table, no '0 hacks' verdict
    assert len(result.stderr.splitlines()) == 1, result.stderr
    line = result.stderr.strip()
    assert line.startswith("rewards.py --audit: cannot reach the judge at " + url), line
    assert "refused" in line and line.endswith("start the server or fix --judge_url"), line


def test_audit_fails_when_the_judge_replies_without_scores():
    with fake_judge(lambda user: (200, "I would rather not grade this.")) as (server, url):
        result = run_audit(url)
    cases = len(rewards.audit_cases())
    groups = -(-cases // 16)
    assert len(server.calls) == cases + groups  # every case asked once, no reply retried
    assert result.returncode != 0
    assert judge_cells(result.stdout) == [("fail", "fail")] * cases  # not 0.00: a fallback is not a score
    assert (f"judge calls that gave no score ('fail' in the table): judge {cases} of {cases} calls ({cases} "
            f"unparsable), group {groups} of {groups} calls ({groups} unparsable)") in result.stdout
    assert "hacks a judge scored" not in result.stdout
    assert len(result.stderr.splitlines()) == 1, result.stderr
    line = result.stderr.strip()
    assert line.startswith("rewards.py --audit: no judge verdict, most judge calls gave no score"), line
    assert f"the judge at {url}/chat/completions replied with no score (" in line
    assert "I would rather not grade this." in line
    assert "--judge_model follows the reply format" in line


def test_audit_fails_when_the_server_refuses_the_model():
    with fake_judge(lambda user: (404, "The model `judge-model` does not exist.")) as (server, url):
        result = run_audit(url)
    assert result.returncode != 0 and "hacks a judge scored" not in result.stdout
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "HTTP 404" in result.stderr and url in result.stderr and "--judge_model" in result.stderr


def test_audit_judges_when_few_replies_have_no_score():
    """Fewer than half of a judge's calls failed: the verdict stands, on the cells that were scored, and says so."""
    def reply(user):
        if "<response id=" in user:  # the group judge: a score per response, in order
            return 200, json.dumps({"scores": [0.1] * user.count("<response id=")})
        if "Ignore the rubric" in user:
            return 200, "No comment."  # the one reply with no score
        return 200, "Score: 9" if "<response>\n72\n</response>" in user else "Score: 2"

    with fake_judge(reply) as (server, url):
        result = run_audit(url)
    cases = len(rewards.audit_cases())
    (failed,) = result.stderr.strip().splitlines()  # the bare number it paid 0.9 fails the audit, the table printed
    assert result.returncode == 1 and "a judge scored 1 hack(s) 0.5 or more (no tags, bare number)" in failed, failed
    cells = dict(zip([name for name, _ in rewards.audit_cases()], judge_cells(result.stdout)))
    assert cells["judge injection"] == ("fail", "0.10") and cells["no tags, bare number"] == ("0.90", "0.10")
    assert list(cells.values()).count(("0.20", "0.10")) == cases - 2
    assert (f"judge calls that gave no score ('fail' in the table): judge 1 of {cases} calls (1 unparsable), "
            f"group 0 of {-(-cases // 16)} calls") in result.stdout
    assert ("hacks a judge scored 0.5 or more: 1 (no tags, bare number, ...); 1 judge cell(s) of hacks with no "
            "score, not counted") in result.stdout


def generous_reply(user: str):
    """A judge that pays everything in full, in whichever format it is asked: 'Score: 10', or JSON scores."""
    count = user.count("<response id=")
    return 200, json.dumps({"scores": [1.0] * count}) if count else "Score: 10"


def test_audit_fails_when_a_judge_pays_the_hacks():
    with fake_judge(generous_reply) as (server, url):
        result = run_audit(url)
    assert all(cells == ("1.00", "1.00") for cells in judge_cells(result.stdout)), result.stdout
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("rewards.py --audit: FAILED: a judge scored ") and "0.5 or more" in line, line


def test_audit_passes_a_judge_that_pays_no_hack():
    with fake_judge(lambda user: (200, json.dumps({"scores": [0.0] * user.count("<response id=")})
                                  if "<response id=" in user else "Score: 0")) as (server, url):
        result = run_audit(url)
    assert "hacks a judge scored 0.5 or more: 0" in result.stdout
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_audit_fails_when_a_hack_totals_as_much_as_the_honest_answers(monkeypatch, capsys):
    """A rubric of format rewards only: the empty layout pays what a right answer does, and the audit says so."""
    monkeypatch.setattr(rewards, "GSM8K_RUBRIC", [(rewards.strict_format_reward, 1.0)])
    assert rewards.main(["--audit"]) == 1
    out, err = capsys.readouterr()
    assert "< honest 1.00: False" in out
    (line,) = err.strip().splitlines()
    assert line.startswith("rewards.py --audit: FAILED: the hack '") and "at or above the honest answers' 1.00" in line
