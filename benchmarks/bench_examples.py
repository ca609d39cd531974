"""Benchmark: the worked examples docs/watching.md prints, run as a user runs them, for the figures it quotes.

    python benchmarks/bench_examples.py     # ~4 min on 2 CPU cores; writes results/examples.json

1. `python grpo_math.py --eval_only --eval_num_samples 8`: the held-out line and the signal report of the math demo
   model before training;
2. the replay example: grpo_math.py with a length penalty added to its RUBRIC (the edit the page shows), then
   `--replay` of the run above: the report's lines;
3. `python grpo_tools.py --eval_only --eval_num_samples 8`: the tools demo model's pass@1, pass@8 and groups.
No GPU: the offline demos' tiny models, as a user without one gets them. tests/test_readme_figures.py checks that
the page quotes this file.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "examples.json"
LENGTH_PENALTY = '''
def length_penalty(completions, **kwargs):
    return [-min(1.0, len(completion_text(c)) / 200) for c in completions]

'''


def run(script: Path, *flags, cwd: Path) -> tuple[list[str], float]:
    """The script's printed lines, run with no GPU and no network, and its seconds."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    result = subprocess.run([sys.executable, str(script), *flags], capture_output=True, text=True, cwd=cwd, env=env)
    if result.returncode != 0:
        sys.exit(f"{script.name} {' '.join(flags)} failed:\n{result.stderr[-3000:]}")
    return result.stdout.splitlines(), round(time.monotonic() - start, 1)


def lines_from(lines: list[str], first: str, last: str = None) -> list[str]:
    """The printed lines from the one starting with `first` through the one starting with `last` (or just it)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    end = start if last is None else next(i for i in range(start, len(lines)) if lines[i].startswith(last))
    return lines[start:end + 1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        (work / "assets").symlink_to(ROOT / "assets")  # a fork beside its original finds the demo's assets
        printed, seconds = run(ROOT / "grpo_math.py", "--eval_only", "--eval_num_samples", "8", "--output_dir",
                               work / "before", cwd=work)
        math_eval = {"held_out": lines_from(printed, "held-out (")[0],
                     "signal_report": lines_from(printed, "signal report (")[0], "seconds": seconds}
        fork = work / "grpo_math.py"  # the edit docs/watching.md shows, made the same way
        text = (ROOT / "grpo_math.py").read_text()
        text = text.replace("\nRUBRIC = [\n", LENGTH_PENALTY + "\nRUBRIC = [\n    (length_penalty, 0.5),\n", 1)
        fork.write_text(text)
        shutil.copy(ROOT / "instruments.py", work)
        shutil.copy(ROOT / "rewards.py", work)  # replay's hack battery
        printed, seconds = run(fork, "--replay", work / "before", cwd=work)
        replay = {"report": lines_from(printed, "replay of ", "total"),
                  "groups": lines_from(printed, next(line for line in printed if " groups of samples: " in line))[0],
                  "hack_battery": lines_from(printed, "hack battery (")[0], "seconds": seconds}
        printed, seconds = run(ROOT / "grpo_tools.py", "--eval_only", "--eval_num_samples", "8", "--output_dir",
                               work / "tools", cwd=work)
        tools_eval = {"held_out": lines_from(printed, "held-out (")[0],
                      "signal_report": lines_from(printed, "signal report (")[0], "seconds": seconds}
        evaluation = json.loads((work / "tools" / "eval.json").read_text())
        tools_eval["before"] = {key: value for key, value in evaluation["eval_only"].items()
                                if isinstance(value, (int, float)) or key == "signal"}
    result = {"date": datetime.date.today().isoformat(), "machine": f"{platform.system()} {platform.machine()}, "
              f"{os.cpu_count()} CPU cores", "python": platform.python_version(),
              "math_eval_only": math_eval, "math_replay": replay, "tools_eval_only": tools_eval}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
