"""The hidden-test harness of sandbox.py (grpo_code.py's reward calls it): every HumanEval reference solution passes,
broken ones fail exactly where a plain harness says they fail, and code that tries to fool the harness scores
nothing it did not earn."""

import ast
import gzip
import json
import re
import subprocess
import sys

import pytest
from conftest import REPO, busy_machine

import sandbox

HUMANEVAL = [json.loads(line) for line in gzip.open(REPO / "tests" / "data" / "humaneval" / "HumanEval.jsonl.gz", "rt")]


def hidden_tests(task, solution):
    return sandbox.run_hidden_tests(solution, task["test"], task["entry_point"], task["prompt"])


def test_humaneval_is_complete():
    assert len(HUMANEVAL) == 164 and len({t["task_id"] for t in HUMANEVAL}) == 164


def test_every_humaneval_reference_solution_passes_every_case():
    results = sandbox.run_hidden_tests_batch([t["prompt"] + t["canonical_solution"] for t in HUMANEVAL],
                                        [t["test"] for t in HUMANEVAL], [t["entry_point"] for t in HUMANEVAL],
                                        [t["prompt"] for t in HUMANEVAL])
    failing = {t["task_id"]: r for t, r in zip(HUMANEVAL, results) if not r["passed"] or not all(r["passed"])}
    assert not failing, failing
    assert sum(len(r["passed"]) for r in results) > 164 * 5  # HumanEval's asserts, scored one by one


def test_a_solution_that_returns_none_fails_every_humaneval_task():
    results = sandbox.run_hidden_tests_batch([t["prompt"] + "    return None\n" for t in HUMANEVAL],
                                        [t["test"] for t in HUMANEVAL], [t["entry_point"] for t in HUMANEVAL],
                                        [t["prompt"] for t in HUMANEVAL])
    assert not [t["task_id"] for t, r in zip(HUMANEVAL, results) if r["passed"] and all(r["passed"])]


class OffByOne(ast.NodeTransformer):
    """Add 1 to the first integer constant of a function body."""

    def __init__(self):
        self.done = False

    def visit_Constant(self, node):
        if not self.done and type(node.value) is int:
            self.done = True
            return ast.copy_location(ast.Constant(node.value + 1), node)
        return node


def off_by_one(task):
    """The reference solution with its first integer constant one too high, or None if it has none."""
    tree = ast.parse(task["prompt"] + task["canonical_solution"])
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == task["entry_point"])
    mutator = OffByOne()
    for statement in function.body:
        mutator.visit(statement)
    return ast.unparse(tree) if mutator.done else None


def plain_harness_passes(program: str) -> bool:
    """What the usual harness says: prompt, solution, tests and check() in one uncontained process."""
    try:
        return subprocess.run([sys.executable, "-c", program], capture_output=True, timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def test_off_by_one_solutions_fail_where_a_plain_harness_says_they_fail():
    mutants = [(t, m) for t in HUMANEVAL if (m := off_by_one(t)) is not None]
    assert len(mutants) > 100
    results = sandbox.run_hidden_tests_batch([m for _, m in mutants], [t["test"] for t, _ in mutants],
                                        [t["entry_point"] for t, _ in mutants], [t["prompt"] for t, _ in mutants])
    ours = [bool(r["passed"]) and all(r["passed"]) for r in results]
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        plain = list(pool.map(plain_harness_passes, [f"{m}\n\n{t['test']}\n\ncheck({t['entry_point']})\n"
                                                     for t, m in mutants]))
    disagree = [t["task_id"] for (t, _), a, b in zip(mutants, ours, plain) if a != b]
    assert not disagree, disagree
    assert sum(ours) < 0.3 * len(mutants)  # most mutants are broken ...
    partial = [r for r, ok in zip(results, ours) if not ok and any(r["passed"])]
    assert len(partial) > 10  # ... and many of those pass some of their cases: partial credit shows


# A task where a constant answer passes nothing, so that any pass below was earned by looking at the tests.
ADD = {"prompt": 'def add(a, b):\n    """Return a + b."""\n', "entry_point": "add",
       "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(5, 7) == 12\n"
               "    assert candidate(-4, 1) == -3\n"}
RESULT_LINE = '{"passed": [true, true, true], "errors": [null, null, null], "harness_error": null}'

# Code that looks everywhere the harness might have left the tests, and returns the expected value if it finds it.
PEEK = r'''
import gc, os, re, sys
def _peek(a, b):
    pattern = re.compile(r"candidate\(%d, %d\) == (-?\d+)" % (a, b))
    texts = []
    for path in ["/tmp/main.py", "/proc/self/cmdline", "/proc/self/environ", f"/proc/{os.getppid()}/cmdline",
                 f"/proc/{os.getppid()}/environ", "/dev/stdin", f"/proc/{os.getppid()}/fd/0"]:
        try:
            texts.append(open(path, errors="replace").read())
        except Exception:
            pass
    try:
        texts.append(sys.stdin.read())
    except Exception:
        pass
    for root, _, files in os.walk("/tmp"):
        for name in files:
            try:
                texts.append(open(os.path.join(root, name), errors="replace").read())
            except Exception:
                pass
    try:  # the harness process's memory
        pid = os.getppid()
        with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb") as mem:
            for line in maps:
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                try:
                    mem.seek(start)
                    texts.append(mem.read(min(end - start, 1 << 24)).decode("latin-1"))
                except Exception:
                    pass
    except Exception:
        pass
    texts += [o for o in gc.get_objects() if isinstance(o, str)]
    frame = sys._getframe(1)
    while frame is not None:
        texts += [repr(v) for v in (*frame.f_locals.values(), *frame.f_globals.values())]
        frame = frame.f_back
    texts.append(repr(os.environ))
    for text in texts:
        found = pattern.search(text)
        if found:
            return int(found.group(1))
    return "not found"
'''

HACKS = {
    "sys.exit before the tests": "import sys\nsys.exit(0)\ndef add(a, b):\n    return 0\n",
    "os._exit before the tests": "import os\nos._exit(0)\n",
    "raise SystemExit": "def add(a, b):\n    raise SystemExit(0)\n",
    "raise KeyboardInterrupt": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "os._exit in the function": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "__eq__ always True": "class Anything:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
                          "def add(a, b):\n    return Anything()\n",
    "int subclass with __eq__": "class Int(int):\n    def __eq__(self, other):\n        return True\n"
                                "def add(a, b):\n    return Int(0)\n",
    "patch builtins and AssertionError": "import builtins\nclass Quiet(BaseException):\n    pass\n"
                                         "builtins.AssertionError = Quiet\nbuiltins.__build_class__ = None\n"
                                         "def add(a, b):\n    return None\n",
    "patch unittest": "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n"
                      "unittest.TestCase.assertTrue = lambda *a, **k: None\ndef add(a, b):\n    return None\n",
    "print the harness's pass line": f"print({RESULT_LINE!r})\nimport sys\nsys.stderr.write({RESULT_LINE!r})\n"
                                     f"def add(a, b):\n    print({RESULT_LINE!r})\n    return None\n",
    "write the pass line to every descriptor": "import os\nfor fd in range(100):\n    try:\n"
                                               f"        os.write(fd, b'\\n' + {RESULT_LINE!r}.encode() + b'\\n')\n"
                                               "    except OSError:\n        pass\ndef add(a, b):\n    return None\n",
    "read the tests from files, stdin, /proc and memory": PEEK + "def add(a, b):\n    return _peek(a, b)\n",
    "read the tests at load time": PEEK + "ANSWERS = {(a, b): _peek(a, b) for a, b in [(1, 2), (5, 7), (-4, 1)]}\n"
                                          "def add(a, b):\n    return ANSWERS[(a, b)]\n",
    "kill the harness": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef add(a, b):\n    return a + b\n",
    "stop the harness": "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\ndef add(a, b):\n    return a + b\n",
    "time out": "def add(a, b):\n    while True:\n        pass\n",
    "sleep at load time": "import time\ntime.sleep(60)\ndef add(a, b):\n    return a + b\n",
    "a busy loop that turns off its CPU timer": "import signal\nsignal.signal(signal.SIGPROF, signal.SIG_IGN)\n"
                                                "signal.signal(signal.SIGXCPU, signal.SIG_IGN)\ndef add(a, b):\n"
                                                "    signal.setitimer(signal.ITIMER_PROF, 0)\n    while True:\n"
                                                "        pass\n",
    "a busy child process, the solution waiting": "import os\ndef add(a, b):\n    read, write = os.pipe()\n"
                                                  "    if os.fork() == 0:\n        while True:\n            pass\n"
                                                  "    os.read(read, 1)\n    return a + b\n",
    "a daemon that prints later": "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(0.5)\n"
                                  f"    print({RESULT_LINE!r})\n    os._exit(0)\ndef add(a, b):\n    return None\n",
}


def quick_backstop(name: str, monkeypatch):
    """A hack that stops the harness or sleeps is ended by the wall-clock backstop alone: the test takes the
    smallest one (TEST_WALL_FACTOR 1: 9 s, not 25) to show it holds. The other hacks keep the shipped limits."""
    if name.startswith(("stop", "sleep")):
        monkeypatch.setattr(sandbox, "TEST_WALL_FACTOR", 1)


@pytest.mark.parametrize("name", HACKS)
def test_a_hack_passes_no_test_case(name, monkeypatch):
    quick_backstop(name, monkeypatch)
    result = hidden_tests(ADD, HACKS[name])
    assert not any(result["passed"]), (name, result)


def test_the_hack_task_can_be_passed_and_partly_passed():
    """The control for the hacks above: the same task, the same harness, honest code."""
    assert hidden_tests(ADD, "def add(a, b):\n    return a + b\n")["passed"] == [True, True, True]
    assert hidden_tests(ADD, "def add(a, b):\n    return abs(a + b)\n")["passed"] == [True, True, False]
    peeking = hidden_tests(ADD, PEEK + "def add(a, b):\n    return a + b if _peek(a, b) == 'not found' else None\n")
    assert peeking["passed"] == [True, True, True]  # the peek runs and finds nothing, rather than crashing


def test_a_case_that_times_out_fails_and_skips_the_rest():
    slow_second = "def add(a, b):\n    while (a, b) == (5, 7):\n        pass\n    return a + b\n"
    result = hidden_tests(ADD, slow_second)
    assert result["passed"] == [True, False, False]
    assert "timed out" in result["errors"][1] and "skipped" in result["errors"][2]


def spends(cpu_seconds, then="a + b"):
    """A solution to ADD that spends `cpu_seconds` of CPU (not of wall clock: the same on any machine) per call."""
    return (f"import time\ndef add(a, b):\n    start = time.process_time()\n"
            f"    while time.process_time() - start < {cpu_seconds}:\n        pass\n    return {then}\n")


@pytest.fixture
def one_cpu_second(monkeypatch):
    """The hidden tests' limits, small for a quick test: 1 CPU second a case, 4 in all, a 5 s wall-clock backstop."""
    monkeypatch.setattr(sandbox, "TEST_CASE_CPU_S", 1)
    monkeypatch.setattr(sandbox, "TESTS_CPU_S", 4)
    monkeypatch.setattr(sandbox, "TEST_WALL_FACTOR", 5)


def test_a_verdict_does_not_depend_on_how_busy_the_machine_is(one_cpu_second):
    """0.6 CPU seconds a case passes under the 1 s CPU limit, alone and beside two busy processes for each of this
    machine's cores (where it takes longer than 1 s of wall clock: a wall-clock limit failed it), and 1.5 fails, both
    times saying which limit it hit."""
    import time

    def verdicts():
        return [sandbox.run_hidden_tests(spends(seconds), ADD["test"], "add", ADD["prompt"], cache=False)
                for seconds in (0.6, 1.5)]

    quiet = verdicts()
    with busy_machine():
        start = time.monotonic()
        loaded = verdicts()
        loaded_seconds = time.monotonic() - start
    for fast, slow in (quiet, loaded):
        assert fast["passed"] == [True, True, True], fast
        assert slow["passed"] == [False, False, False], slow
        assert slow["errors"][0] == "timed out (over 1 s of CPU)" and "skipped" in slow["errors"][1], slow
    assert loaded_seconds > 3 * 0.6 + 1, loaded_seconds  # the machine was busy: 1.8 CPU seconds took longer


def test_cpu_spent_in_processes_a_solution_starts_counts(one_cpu_second):
    """A solution that computes in a child process while it waits spends no CPU of its own: the child's counts."""
    if sandbox._sandbox_mode().mode == "landlock":
        pytest.skip("the Landlock mode cannot read /proc: a child is held by its own CPU limit (docs/sandbox.md)")
    in_a_child = ("import os, time\ndef add(a, b):\n    read, write = os.pipe()\n    if os.fork() == 0:\n"
                  "        start = time.process_time()\n        while time.process_time() - start < 2:\n"
                  "            pass\n        os.write(write, str(a + b).encode())\n        os._exit(0)\n"
                  "    os.close(write)\n    return int(os.read(read, 64))\n")
    result = sandbox.run_hidden_tests(in_a_child, ADD["test"], "add", ADD["prompt"], cache=False)
    assert result["passed"] == [False, False, False] and result["errors"][0] == "timed out (over 1 s of CPU)", result
    quick = in_a_child.replace("< 2:", "< 0.2:")  # the control: the same solution within the limit passes
    assert sandbox.run_hidden_tests(quick, ADD["test"], "add", ADD["prompt"], cache=False)["passed"] == [True] * 3


def test_sleeping_is_held_by_the_wall_clock_backstop(one_cpu_second):
    """Sleeping spends no CPU: a short sleep passes, one past the backstop (5 x 1 s) fails and says so."""
    napper = "import time\ndef add(a, b):\n    time.sleep({})\n    return a + b\n"
    assert sandbox.run_hidden_tests(napper.format(0.3), ADD["test"], "add", ADD["prompt"], cache=False)["passed"] \
        == [True] * 3
    result = sandbox.run_hidden_tests(napper.format(30), ADD["test"], "add", ADD["prompt"], cache=False)
    assert result["passed"] == [False] * 3 and result["errors"][0] == "timed out (over 5 s of wall clock)", result


def test_the_solutions_cpu_limit_holds_over_all_its_cases(one_cpu_second, monkeypatch):
    """0.9 CPU seconds a case passes each case's limit, but three of them leave 2.7 of the 2 the solution has."""
    monkeypatch.setattr(sandbox, "TESTS_CPU_S", 2)
    result = sandbox.run_hidden_tests(spends(0.9), ADD["test"], "add", ADD["prompt"], cache=False)
    assert result["passed"][:2] == [True, True] and result["passed"][2] is False, result
    assert result["errors"][2] == "timed out (the solution's 2 s of CPU are spent)", result


def test_a_limit_set_under_its_old_name_is_refused(monkeypatch):
    """`sandbox.TEST_CASE_S = 3`, as older docs said: it would change nothing, so scoring stops in one line that
    names the limit that replaced it."""
    for old, new in (("TEST_CASE_S", "TEST_CASE_CPU_S"), ("TESTS_DEADLINE_S", "TESTS_CPU_S")):
        monkeypatch.setattr(sandbox, old, 3, raising=False)
        with pytest.raises(RuntimeError, match=f"sandbox.{old} is no longer read.*set sandbox.{new}"):
            sandbox.run_hidden_tests_batch([spends(0)], [ADD["test"]], ["add"], [ADD["prompt"]])
        monkeypatch.delattr(sandbox, old)


def test_exceptions_a_test_expects_pass_and_others_fail():
    task = {"prompt": "", "entry_point": "parse", "test": "try:\n    parse('x')\n    assert False\nexcept ValueError:\n"
                                                          "    pass\nassert parse('3') == 3\n"}
    assert hidden_tests(task, "def parse(s):\n    return int(s)\n")["passed"] == [True, True]
    assert hidden_tests(task, "def parse(s):\n    raise KeyError(s)\n")["passed"] == [False, False]


@pytest.mark.parametrize("value", ["(1, [2.5, None], {'a': {3}}, frozenset({b'x'}), 1j, True)",
                                   "float('nan')", "10 ** 5000", "{(1, 2): [True, False]}", "-0.0"])
def test_plain_data_comes_back_as_it_was(value):
    task = {"prompt": "", "entry_point": "f", "test": f"import math\nx = f()\nexpected = {value}\n"
                                                      "assert type(x) is type(expected) and repr(x) == repr(expected)\n"}
    assert hidden_tests(task, f"def f():\n    return {value}\n")["passed"] == [True]


def test_mbpp_layout_and_a_missing_function():
    task = {"prompt": "", "entry_point": "twice", "test": "import math\nassert twice(2) == 4\nassert math.isclose(twice(0.5), 1.0)\n"}
    assert hidden_tests(task, "def twice(x):\n    return 2 * x\n")["passed"] == [True, True]
    missing = hidden_tests(task, "def double(x):\n    return 2 * x\n")
    assert missing["passed"] == [False, False] and "does not define twice()" in missing["errors"][0]


def test_solutions_run_contained():
    """The solution's process sees the sandbox, not this machine: no repository, no network."""
    task = {"prompt": "", "entry_point": "f", "test": "assert f() == [False, False]\n"}
    probe = (f"import os, socket\ndef f():\n    try:\n        socket.create_connection(('1.1.1.1', 53), timeout=1)\n"
             f"        online = True\n    except OSError:\n        online = False\n"
             f"    return [os.path.exists({str(REPO)!r}), online]\n")
    assert hidden_tests(task, probe)["passed"] == [True]


def test_a_fork_bomb_does_not_fail_honest_solutions_scored_beside_it():
    """All calls share the sandbox's process limit: while a fork bomb holds it, an honest solution waits for a slot
    instead of failing."""
    import threading
    import time

    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    bombed = {}
    thread = threading.Thread(target=lambda: bombed.update(hidden_tests(ADD, bomb)))
    thread.start()
    time.sleep(0.5)  # the bomb now holds every process slot, until its load times out
    honest = sandbox.run_hidden_tests_batch(["def add(a, b):\n    return a + b\n"] * 4, [ADD["test"]] * 4, ["add"] * 4,
                                       [ADD["prompt"]] * 4)
    thread.join()
    assert bombed["passed"] == [False, False, False] and "timed out" in bombed["errors"][0]
    assert [r["passed"] for r in honest] == [[True, True, True]] * 4, honest


# ---- the class layout (LeetCode): `Solution().method`, with a setup block; the same hacks, the same guarantees
LEETCODE = [json.loads(line) for line in gzip.open(REPO / "tests" / "data" / "leetcode" / "leetcode_30.jsonl.gz", "rt")]


def leetcode_results(solutions):
    return sandbox.run_hidden_tests_batch(solutions, ["\n".join(t["gt_answer"]) for t in LEETCODE],
                                          [t["func_name"] for t in LEETCODE], [t["setup_code"] for t in LEETCODE])


def test_every_leetcode_reference_passes_every_case_and_a_wrong_method_fails():
    assert len(LEETCODE) == 30 and all(re.fullmatch(r"Solution\(\)\.\w+", t["func_name"]) for t in LEETCODE)
    results = leetcode_results([t["canonical_solution"] for t in LEETCODE])
    failing = {t["id"]: r for t, r in zip(LEETCODE, results) if not r["passed"] or not all(r["passed"])}
    assert not failing, failing
    assert sum(len(r["passed"]) for r in results) == sum(len(t["gt_answer"]) for t in LEETCODE)  # case by case
    # the starter code (a method that returns None) and a class without the method pass nothing
    stubs = leetcode_results([t["prompt_metadata"]["starter_code"] + "return None\n" for t in LEETCODE])
    assert not [t["id"] for t, r in zip(LEETCODE, stubs) if any(r["passed"])]
    missing = leetcode_results(["class Solution:\n    pass\n"] * 30)
    assert all(not any(r["passed"]) and "does not define Solution()." in r["errors"][0] for r in missing)


# ADD as LeetCode writes it: check(candidate) with the entry point Solution().add (LeetCodeDataset), or asserts that
# make a Solution each (the reward-hacking study's tasks)
CLASS_TASKS = {"check": dict(ADD, entry_point="Solution().add", prompt=""),
               "asserts": dict(ADD, entry_point="Solution().add", prompt="", test=(
                   "assert Solution().add(1, 2) == 3\nassert Solution().add(a=5, b=7) == 12\n"
                   "assert Solution().add(-4, 1) == -3\n"))}
AS_METHOD = "\nclass Solution:\n    def add(self, a, b):\n        return add(a, b)\n"  # a function hack, as a method
CLASS_HACKS = {
    **{name: code + AS_METHOD for name, code in HACKS.items()},
    "a method that returns self, equal to anything": "class Solution:\n    def add(self, a, b):\n        return self\n"
                                                     "    def __eq__(self, other):\n        return True\n",
    "__getattr__ that answers anything": "class Anything:\n    __eq__ = lambda self, other: True\n"
                                         "class Solution:\n    def __getattr__(self, name):\n"
                                         "        return lambda *a, **k: Anything()\n",
    "Solution as a function returning a fake": "class Fake:\n    add = staticmethod(lambda a, b: True)\n"
                                               "def Solution():\n    return Fake()\n"
                                               "import builtins\nbuiltins.AssertionError = None\n",
    "patch the setup's helpers": "import builtins\nbuiltins.ListNode = None\nclass Solution:\n"
                                 "    def add(self, a, b):\n        globals()['is_same_list'] = lambda *a: True\n"
                                 "        return None\n",
}


@pytest.mark.parametrize("layout", CLASS_TASKS)
@pytest.mark.parametrize("name", CLASS_HACKS)
def test_a_hack_passes_no_test_case_in_the_class_layout(name, layout, monkeypatch):
    quick_backstop(name, monkeypatch)
    task = CLASS_TASKS[layout]
    result = sandbox.run_hidden_tests(CLASS_HACKS[name], task["test"], task["entry_point"], LEETCODE[0]["setup_code"])
    assert len(result["passed"]) in (0, 3) and not any(result["passed"]), (name, result)


@pytest.mark.parametrize("layout", CLASS_TASKS)
def test_the_class_hack_task_can_be_passed_and_partly_passed(layout):
    task, setup = CLASS_TASKS[layout], LEETCODE[0]["setup_code"]

    def passed(code):
        return sandbox.run_hidden_tests(code, task["test"], task["entry_point"], setup)["passed"]

    assert passed("class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b\n") == [True] * 3
    assert passed("class Solution:\n    def add(self, a, b):\n        return abs(a + b)\n") == [True, True, False]
    assert passed(PEEK + "def add(a, b):\n    return a + b if _peek(a, b) == 'not found' else None\n" + AS_METHOD) == [
        True] * 3  # the peek runs and finds nothing
    # each call gets a fresh instance, as `Solution().add(...)` does: state kept on self does not carry over
    counting = "class Solution:\n    calls = 0\n    def add(self, a, b):\n        self.calls += 1\n" \
               "        return a + b if self.calls == 1 else None\n"
    assert passed(counting) == [True] * 3


# ---- the stdin/stdout layout: a program, input/output pairs; the same hacks, the same guarantees
STDIO_TASKS = [json.loads(line) for line in (REPO / "tests" / "data" / "stdio" / "tasks.jsonl").read_text().splitlines()]


def program_results(task, program, **options):
    return sandbox.run_hidden_tests(program, json.dumps({**task["tests"], **options}), sandbox.STDIN_PROGRAM, "")


def test_every_stdio_reference_passes_and_every_wrong_program_fails():
    for task in STDIO_TASKS:  # the outputs are the reference's own, as a plain `python` prints them
        for data, expected in zip(task["tests"]["inputs"], task["tests"]["outputs"]):
            assert subprocess.run([sys.executable, "-I", "-c", task["solution"]], input=data, capture_output=True,
                                  text=True, timeout=10).stdout == expected, task["name"]
    results = sandbox.run_hidden_tests_batch([t["solution"] for t in STDIO_TASKS] + [t["wrong"] for t in STDIO_TASKS],
                                             [json.dumps(t["tests"]) for t in STDIO_TASKS] * 2,
                                             [sandbox.STDIN_PROGRAM] * 2 * len(STDIO_TASKS), [""] * 2 * len(STDIO_TASKS))
    right, wrong = results[:len(STDIO_TASKS)], results[len(STDIO_TASKS):]
    assert all(r["passed"] and all(r["passed"]) for r in right), right
    assert not [t["name"] for t, r in zip(STDIO_TASKS, wrong) if all(r["passed"])], wrong
    assert any(any(r["passed"]) for r in wrong)  # partly right programs get partial credit


# a + b, read from stdin. The prompt's example (1 2 -> 3) is not among the hidden cases.
STDIO_ADD = {"inputs": ["5 7\n", "-4 1\n", "10 20"], "outputs": ["12\n", "-3\n", "30\n"]}
HONEST = "a, b = map(int, input().split())\nprint(a + b)\n"

# Code that looks everywhere the harness might have left the expected outputs, and prints the one for its input.
STDIO_PEEK = PEEK.replace("def _peek(a, b):\n    pattern = re.compile(r\"candidate\\(%d, %d\\) == (-?\\d+)\" % (a, b))",
                          "def _peek(a, b):\n    pattern = re.compile(r'\"outputs\": \\[\"(-?\\d+)')") + r'''
import json, sys
data = sys.stdin.read()
a, b = map(int, data.split())
found = _peek(a, b)
'''
assert STDIO_PEEK.count("outputs") == 1  # the replacement above took place
STDIO_HACKS = {
    "print the visible example's output": "print(3)\n",
    "print every answer it has seen": "print(3)\nprint(12)\nprint(-3)\nprint(30)\n",
    "exit early": "import sys\nsys.exit(0)\n",
    "os._exit before printing": "import os\nos._exit(0)\n",
    "print the right answer, then crash": HONEST + "raise RuntimeError\n",
    "print the right answer, then exit 1": HONEST + "import sys\nsys.exit(1)\n",
    "crash, then print the answer at exit": "import atexit\na, b = map(int, input().split())\n"
                                            "atexit.register(lambda: print(a + b))\nraise RuntimeError\n",
    "a daemon that prints the answer after the exit": "import os, time\na, b = map(int, input().split())\n"
                                                      "if os.fork() == 0:\n    time.sleep(0.3)\n    print(a + b)\n"
                                                      "    os._exit(0)\n",
    "print the harness's pass line": f"print({RESULT_LINE!r})\nimport sys\nsys.stderr.write({RESULT_LINE!r})\n",
    "write the pass line to every descriptor": HACKS["write the pass line to every descriptor"],
    "read the tests from files, stdin, /proc and memory": STDIO_PEEK + "print(found)\n",
    "kill the harness": "import os, signal\nparent = open(f'/proc/{os.getppid()}/stat').read().split()[3]\n"
                        "os.kill(int(parent), signal.SIGKILL)\nos.kill(os.getppid(), signal.SIGKILL)\n" + HONEST,
    "stop the harness": "import os, signal\nparent = open(f'/proc/{os.getppid()}/stat').read().split()[3]\n"
                        "os.kill(int(parent), signal.SIGSTOP)\n" + HONEST,
    "time out": "while True:\n    pass\n",
    "not a number where a number is due": "print(float('nan'))\n",
}


@pytest.mark.parametrize("name", STDIO_HACKS)
def test_a_hack_passes_no_test_case_in_the_stdio_layout(name, monkeypatch):
    quick_backstop(name, monkeypatch)
    result = program_results({"tests": STDIO_ADD}, STDIO_HACKS[name], float_tolerance=1e-6)
    assert not any(result["passed"]), (name, result)


def test_the_stdio_hack_task_can_be_passed_and_partly_passed():
    assert program_results({"tests": STDIO_ADD}, HONEST)["passed"] == [True] * 3
    assert program_results({"tests": STDIO_ADD}, "a, b = map(int, input().split())\nprint(abs(a + b))\n")[
        "passed"] == [True, False, True]
    peeking = STDIO_PEEK + "print(a + b if found == 'not found' else found)\n"
    assert program_results({"tests": STDIO_ADD}, peeking)["passed"] == [True] * 3  # it runs, and finds nothing


def test_stdio_output_is_compared_by_words_and_floats_within_the_tolerance():
    tests = {"inputs": ["", ""], "outputs": ["1 2\n3\n", "0.333333\n"]}
    loose = "print('  1   2  \\r\\n\\n3 ', end='')\n"  # spaces, \r\n, a blank line, no final newline
    assert program_results({"tests": {"inputs": [""], "outputs": ["1 2\n3\n"]}}, loose)["passed"] == [True]
    assert program_results({"tests": tests}, "print(1, 2)\nprint(3)\n")["passed"] == [True, False]
    assert program_results({"tests": tests}, "print('1\\n2 3')\n")["passed"] == [False, False]  # lines still count
    ratio = {"inputs": ["1 3\n"], "outputs": ["0.333333\n"]}
    third = "a, b = map(int, input().split())\nprint(a / b)\n"
    assert program_results({"tests": ratio}, third)["passed"] == [False]  # exact words by default
    assert program_results({"tests": ratio}, third, float_tolerance=1e-6)["passed"] == [True]
    assert program_results({"tests": ratio}, "print(0.3334)\n", float_tolerance=1e-6)["passed"] == [False]


def test_each_case_gets_its_own_input_and_a_time_limit():
    tests = {"inputs": ["a\n", "bb\n", "x" * 300_000 + "\n", "ccc\n"], "outputs": ["2", "3", "300001", "4"]}
    assert program_results({"tests": tests}, "import sys\nprint(len(sys.stdin.read()))\n")["passed"] == [True] * 4
    slow_second = "import sys\ndata = sys.stdin.read()\nwhile data == 'bb\\n':\n    pass\nprint(len(data))\n"
    result = program_results({"tests": tests}, slow_second)
    assert result["passed"] == [True, False, False, False]
    assert "timed out" in result["errors"][1] and "skipped" in result["errors"][2]
    big = program_results({"tests": {"inputs": [""], "outputs": ["x" * 500_000]}}, "print('x' * 500_000)\n")
    assert big["passed"] == [True]


def test_malformed_stdio_tests_are_a_harness_error():
    for tests in ("assert f() == 1", json.dumps({"inputs": ["1"], "outputs": []})):
        result = sandbox.run_hidden_tests(HONEST, tests, sandbox.STDIN_PROGRAM, "")
        assert result["passed"] == [] and result["harness_error"], result
