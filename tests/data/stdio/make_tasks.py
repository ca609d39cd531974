"""Builds tasks.jsonl: small stdin/stdout programming tasks written for this repository's tests, in the layout of
CodeContests and APPS. Each has a problem text with one worked example, a reference program, hidden tests whose
outputs are the reference's own outputs on generated inputs (the example is not among them), and a wrong program
that fails some of them. Run it again to rebuild the file: python tests/data/stdio/make_tasks.py"""

import json
import random
import subprocess
import sys
from pathlib import Path

TASKS = [
    dict(name="sum", prompt="Read an integer n, then n integers on the next line. Print their sum.",
         example="3\n1 2 3\n",
         solution="n = int(input())\nprint(sum(map(int, input().split())))\n",
         wrong="n = int(input())\nprint(sum(map(int, input().split()[1:])))\n",
         inputs=lambda r: [f"{n}\n{' '.join(str(r.randint(-1000, 1000)) for _ in range(n))}\n"
                           for n in (1, 2, 5, 10, 50, 200)]),
    dict(name="distinct", prompt="Read an integer n, then n integers on the next line. Print how many different "
                                 "values there are.",
         example="5\n1 2 2 3 3\n",
         solution="input()\nprint(len(set(input().split())))\n",
         wrong="input()\nvalues = input().split()\nprint(sum(a != b for a, b in zip(values, values[1:])) + 1)\n",
         inputs=lambda r: [f"{n}\n{' '.join(str(r.randint(0, 9)) for _ in range(n))}\n" for n in (1, 3, 8, 20, 40)]),
    dict(name="max_subarray", prompt="Read an integer n, then n integers. Print the largest sum of a non-empty run "
                                     "of consecutive numbers.",
         example="5\n-2 1 -3 4 -1\n",
         solution="import sys\ndata = sys.stdin.read().split()\nbest, run = None, 0\nfor x in map(int, data[1:]):\n"
                  "    run = max(x, run + x)\n    best = run if best is None else max(best, run)\nprint(best)\n",
         wrong="import sys\ndata = sys.stdin.read().split()\nbest = run = 0\nfor x in map(int, data[1:]):\n"
               "    run = max(0, run + x)\n    best = max(best, run)\nprint(best)\n",
         inputs=lambda r: [f"{n}\n{' '.join(str(r.randint(-20, 10)) for _ in range(n))}\n" for n in (1, 2, 6, 15, 60)]
                          + ["3\n-5 -2 -9\n"]),
    dict(name="brackets", prompt="Read an integer q, then q lines, each a string of the characters ()[]. For each "
                                 "line print YES if its brackets are balanced, else NO.",
         example="2\n([])\n(]\n",
         solution="def ok(s):\n    stack = []\n    for c in s:\n        if c in '([':\n            stack.append(c)\n"
                  "        elif not stack or stack.pop() != '(['[')]'.index(c)]:\n            return False\n"
                  "    return not stack\n\nfor _ in range(int(input())):\n    print('YES' if ok(input().strip()) else 'NO')\n",
         wrong="for _ in range(int(input())):\n    s = input().strip()\n"
               "    print('YES' if s.count('(') == s.count(')') and s.count('[') == s.count(']') else 'NO')\n",
         inputs=lambda r: [f"{q}\n" + "".join("".join(r.choice("()[]") for _ in range(r.randint(0, 8)) ) + "\n"
                                              for _ in range(q)) for q in (1, 4, 10, 25)]),
    dict(name="transpose", prompt="Read two integers r and c, then r lines of c integers: a matrix. Print its "
                                  "transpose: c lines of r integers, separated by spaces.",
         example="2 3\n1 2 3\n4 5 6\n",
         solution="r, c = map(int, input().split())\nm = [input().split() for _ in range(r)]\n"
                  "for j in range(c):\n    print(' '.join(m[i][j] for i in range(r)))\n",
         wrong="r, c = map(int, input().split())\nm = [input().split() for _ in range(r)]\n"
               "for row in m:\n    print(' '.join(row))\n",
         inputs=lambda r: [f"{a} {b}\n" + "".join(" ".join(str(r.randint(0, 99)) for _ in range(b)) + "\n"
                                                  for _ in range(a)) for a, b in ((1, 1), (2, 2), (3, 1), (4, 5))]),
    dict(name="mean", prompt="Read an integer n, then n integers. Print their mean; answers within 1e-6 of the "
                             "exact value are accepted.",
         example="3\n1 2 4\n",
         solution="n = int(input())\nprint(f'{sum(map(int, input().split())) / n:.9f}')\n",
         wrong="n = int(input())\nprint(sum(map(int, input().split())) // n)\n",
         inputs=lambda r: [f"{n}\n{' '.join(str(r.randint(-50, 50)) for _ in range(n))}\n" for n in (1, 3, 7, 30)]),
]


def run(program: str, stdin: str) -> str:
    return subprocess.run([sys.executable, "-I", "-c", program], input=stdin, capture_output=True, text=True,
                          timeout=10, check=True).stdout


def main():
    rng, rows = random.Random(0), []
    for task in TASKS:
        inputs = task["inputs"](rng)
        prompt = (f"{task['prompt']}\n\nExample input:\n{task['example']}\nExample output:\n"
                  f"{run(task['solution'], task['example'])}")
        rows.append({"name": task["name"], "prompt": prompt, "solution": task["solution"], "wrong": task["wrong"],
                     "tests": {"inputs": inputs, "outputs": [run(task["solution"], x) for x in inputs]}})
    path = Path(__file__).with_name("tasks.jsonl")
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    print(f"wrote {len(rows)} tasks to {path}")


if __name__ == "__main__":
    main()
