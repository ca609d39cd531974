"""sandbox.py as a module: it imports alone with the standard library, its limits are constants a user sets before
the first call, a misconfigured sandbox surfaces as one line instead of a score, and run_hidden_tests caches
results but not failures. What each mode contains is tests/test_sandbox_modes.py's; run_python under misuse,
tests/test_tools_containment.py's; the harness against its hacks, tests/test_code_harness.py's."""

import json
import subprocess
import sys
import time
import uuid

import pytest
from conftest import REPO

import sandbox

ADD = ('def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(5, 7) == 12\n'
       '    assert candidate(-4, 1) == -3\n', "add", 'def add(a, b):\n    """Return a + b."""\n')  # tests, entry, setup


def honest(tag=None):
    """An honest solution to ADD, made unique by `tag` (so that no earlier result is cached for it)."""
    return f"def add(a, b):\n    return a + b  # {tag or uuid.uuid4().hex}\n"


def test_the_module_imports_alone_with_the_standard_library_only():
    program = ("import sys\nsys.path.insert(0, sys.argv[1])\nbefore = set(sys.modules)\nimport sandbox\n"
               "print(sorted({m.split('.')[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names) "
               "- {'sandbox'}))\nprint(sandbox.__doc__)")
    result = subprocess.run([sys.executable, "-I", "-c", program, str(REPO)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    outside, doc = result.stdout.split("\n", 1)
    assert outside == "[]", outside  # no torch, no transformers, nothing of the project
    head = " ".join(doc.split("\n\n")[:2])  # the opening line and paragraph
    assert "grpo_tools.py and grpo_code.py import `run_python`" in head, head
    assert "run_hidden_tests_batch" in head and "standard library" in head, head
    for said in ("sandbox.PYTHON_CPU_S = 10", "GRPO_SANDBOX", "Why the hidden-test harness lives here"):
        assert said in doc, said


def test_public_names_are_the_scripts_old_names():
    for name in ("run_python", "run_hidden_tests", "run_hidden_tests_batch", "_SANDBOX", "_Sandbox",
                 "_start_sandbox", "_sandbox_mode", "_run_in_sandbox", "SANDBOX_MODES", "SCORING_THREADS",
                 "PYTHON_WALL_S", "PYTHON_CPU_S", "PYTHON_MEMORY_BYTES", "PYTHON_FILE_BYTES", "PYTHON_TMP_BYTES",
                 "PYTHON_MAX_PROCESSES", "PYTHON_MAX_CODE_CHARS", "PYTHON_OUTPUT_CHARS", "TEST_CASE_CPU_S",
                 "TESTS_CPU_S", "TEST_WALL_FACTOR", "TEST_ERROR_CHARS", "TEST_REPLY_BYTES"):
        assert hasattr(sandbox, name), name
    assert sandbox.SANDBOX_MODES == ("namespaces", "landlock", "plain")


def test_a_limit_set_before_the_first_call_holds():
    """`sandbox.PYTHON_WALL_S = 1` before the first call: a call that sleeps 3 s is stopped after 1 s."""
    program = ("import sys, time\nsys.path.insert(0, sys.argv[1])\nimport sandbox\nsandbox.PYTHON_WALL_S = 1\n"
               "sandbox.PYTHON_OUTPUT_CHARS = 100\nprint(sandbox.run_python('print(7)'), end='')\n"
               "start = time.monotonic()\nresult = sandbox.run_python('import time\\ntime.sleep(3)\\nprint(1)')\n"
               "print(repr(result), round(time.monotonic() - start, 1))\n"
               "print(len(sandbox.run_python('print(\"x\" * 1000)')))")
    result = subprocess.run([sys.executable, "-I", "-c", program, str(REPO)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    first, timed_out, cut = result.stdout.splitlines()
    assert first == "7"
    text, seconds = timed_out.rsplit(" ", 1)
    assert text == repr("Error: timed out (over 1 s of wall clock: the code sleeps or waits)"), timed_out
    assert float(seconds) < 2.5, timed_out
    assert int(cut) < 200, cut  # PYTHON_OUTPUT_CHARS, read at each call


@pytest.fixture
def no_running_sandbox(monkeypatch):
    """No sandbox started yet, as in a fresh process; the running one is back after the test."""
    monkeypatch.setattr(sandbox, "_SANDBOX", None)


def test_a_bogus_grpo_sandbox_raises_one_line_from_the_reward(monkeypatch, no_running_sandbox):
    """A misconfiguration surfaces: the reward raises the one line naming the modes, instead of scoring every
    solution as failing every test."""
    monkeypatch.setenv("GRPO_SANDBOX", "bogus")
    expected = "GRPO_SANDBOX='bogus': use one of namespaces, landlock, plain, or unset it"
    with pytest.raises(RuntimeError) as batch:
        sandbox.run_hidden_tests_batch([honest(), None], [ADD[0]] * 2, [ADD[1]] * 2, [ADD[2]] * 2)
    assert str(batch.value) == expected
    with pytest.raises(RuntimeError) as one:
        sandbox.run_hidden_tests(honest(), *ADD)
    assert str(one.value) == expected
    assert sandbox._SANDBOX is None  # nothing was started
    # no solution to score needs no sandbox
    assert sandbox.run_hidden_tests_batch([None], [ADD[0]], [ADD[1]], [ADD[2]]) == [
        {"passed": [], "errors": [], "harness_error": None}]


def test_a_forced_mode_that_cannot_start_raises_from_the_reward(monkeypatch, no_running_sandbox):
    monkeypatch.setenv("GRPO_SANDBOX", "landlock")
    monkeypatch.setattr(sandbox, "_start_sandbox", lambda mode, failures, seccomp=True: failures.append(
        "landlock: Landlock: Operation not supported"))
    with pytest.raises(RuntimeError, match=r"^GRPO_SANDBOX=landlock: that mode cannot start here \(landlock: "
                                           r"Landlock: Operation not supported\)$"):
        sandbox.run_hidden_tests_batch([honest()], [ADD[0]], [ADD[1]], [ADD[2]])


def test_a_harness_failure_is_not_cached(monkeypatch):
    """The first call's sandbox fails (no result line): that call scores nothing, and the same solution, asked
    again, is run again and scores properly; once it has, its result is cached."""
    monkeypatch.setattr(sandbox, "_RESULTS", {})
    real, calls = sandbox._run_in_sandbox, []

    def fails_once(code, stdin=b"", **limits):
        calls.append(code)
        if len(calls) == 1:
            raise RuntimeError("the sandbox ended the call without a result")
        return real(code, stdin, **limits)

    monkeypatch.setattr(sandbox, "_run_in_sandbox", fails_once)
    solution = honest()
    failed = sandbox.run_hidden_tests(solution, *ADD)
    assert failed == {"passed": [], "errors": [], "harness_error": "no result from the harness (RuntimeError)"}
    assert sandbox.run_hidden_tests_batch([solution], [ADD[0]], [ADD[1]], [ADD[2]])[0]["passed"] == [True] * 3
    assert len(calls) == 2  # run again, not the failure handed back
    monkeypatch.setattr(sandbox, "_run_in_sandbox", lambda *call, **limits: pytest.fail("not served from the cache"))
    again = sandbox.run_hidden_tests(solution, *ADD)
    assert again == {"passed": [True] * 3, "errors": [None] * 3, "harness_error": None}
    again["passed"].clear()  # a caller that changes its result does not change the cache
    assert sandbox.run_hidden_tests(solution, *ADD)["passed"] == [True] * 3


def test_a_killed_harness_is_not_cached(monkeypatch):
    """The same without a stand-in: a solution that kills the harness leaves no result line, and is run again."""
    monkeypatch.setattr(sandbox, "_RESULTS", {})
    killer = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef add(a, b):\n    return a + b\n"
    first = sandbox.run_hidden_tests(killer, *ADD)
    assert first["passed"] == [] and first["harness_error"].startswith("no result from the harness"), first
    assert sandbox._RESULTS == {}


def test_the_cache_is_bounded_and_keeps_the_most_recently_used(monkeypatch):
    monkeypatch.setattr(sandbox, "_RESULTS", {})
    monkeypatch.setattr(sandbox, "TEST_CACHE_SIZE", 2)
    runs = []

    def canned(code, stdin=b"", **limits):
        runs.append(json.loads(stdin)["solution"])
        return 0, '\n{"passed": [true], "errors": [null], "harness_error": null}\n', False

    monkeypatch.setattr(sandbox, "_run_in_sandbox", canned)
    a, b, c = honest("a"), honest("b"), honest("c")
    for solution in (a, b, a, c):  # a used again before c arrives: b is the one dropped
        assert sandbox.run_hidden_tests(solution, *ADD)["passed"] == [True]
    assert runs == [a, b, c] and [key[0] for key in sandbox._RESULTS] == [a, c]
    sandbox.run_hidden_tests(b, *ADD)
    assert runs == [a, b, c, b] and len(sandbox._RESULTS) == 2
    sandbox.run_hidden_tests(b, *ADD, cache=False)
    assert runs[-1] == b and len(runs) == 5  # cache=False runs it anyway


def test_concurrent_scoring_of_one_solution_is_consistent(monkeypatch):
    """Threads scoring the same and different solutions at once (as run_hidden_tests_batch does) all get their
    own right result, and the cache holds one entry per solution."""
    monkeypatch.setattr(sandbox, "_RESULTS", {})
    solutions = [honest("same")] * 6 + ["def add(a, b):\n    return a - b\n"] * 2
    start = time.monotonic()
    results = sandbox.run_hidden_tests_batch(solutions, [ADD[0]] * 8, [ADD[1]] * 8, [ADD[2]] * 8)
    assert [r["passed"] for r in results] == [[True] * 3] * 6 + [[False, False, False]] * 2
    assert len(sandbox._RESULTS) == 2 and time.monotonic() - start < 30
