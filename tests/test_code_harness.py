"""The hidden-test harness of sandbox.py (grpo_code.py's reward calls it): every HumanEval reference solution passes,
broken ones fail exactly where a plain harness says they fail, and code that tries to fool the harness scores
nothing it did not earn."""

import ast
import gzip
import json
import subprocess
import sys

import pytest
from conftest import REPO

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
    "a daemon that prints later": "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(0.5)\n"
                                  f"    print({RESULT_LINE!r})\n    os._exit(0)\ndef add(a, b):\n    return None\n",
}


@pytest.mark.parametrize("name", HACKS)
def test_a_hack_passes_no_test_case(name):
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
