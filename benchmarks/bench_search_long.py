"""Benchmark: long research chains, with and without a context that folds.

    python benchmarks/bench_search_long.py                 # ~15 min on 2 CPU cores: trains the demo, then the table
    python benchmarks/bench_search_long.py --run DIR       # the table only, for a finished run of the demo

First the long-horizon demo, exactly as a user runs it (`grpo_search.py --config assets/long_search.yaml`, the
tiny model, chains of 2 to 8 scholars, --max_context_tokens 1024), timed: its held-out exact match per depth
before and after training, and the longest episode it solved. Then the trained model is evaluated, greedy, on the
held-out questions three ways: folding off (the whole conversation in view, as far as the model's positions and
--max_completion_length allow), rule-based folding (the default: older calls become one line each), and folding
with the `note` tool offered (--fold_notes: what the model writes survives every fold). Reported per depth k and
mode: exact match, tool calls per episode, and the peak of tokens in view (the mean over episodes and the most).
Results go to benchmarks/results/search_long.json, and docs/grpo_search.md's table is printed.
"""

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "search_long.json"
CONFIG = ROOT / "assets" / "long_search.yaml"
DATA = ROOT / "assets" / "toy_search_long"
os.environ.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "TOKENIZERS_PARALLELISM": "false"})
sys.path.insert(0, str(ROOT))

import grpo_search  # noqa: E402

DEPTHS = (2, 4, 6, 8)
MODES = {"off": ["--max_context_tokens", "0", "--max_completion_length", "4096"],
         "rule": [],
         "model": ["--fold_notes", "--max_prompt_tokens", "512"]}  # the note tool lengthens the prompt


def episodes(path: Path) -> list[dict]:
    """One record per held-out question (the greedy rollout), with its depth from the data's 'hops' column."""
    hops = {json.loads(line)["question"]: json.loads(line)["hops"] for line in (DATA / "test.jsonl").open()}
    rows = []
    for line in path.open():
        row = json.loads(line)
        greedy = next(c for c in row["completions"] if c["greedy"])
        question = next(m["content"] for m in row["prompt"] if m["role"] == "user")
        rows.append({"hops": hops[question], "step": row["step"], "solved": greedy["rewards"]["exact_match_reward"] == 1,
                     "tool_calls": greedy["tool_calls"], "peak": greedy["peak_context_tokens"],
                     "folds": len(greedy["folds"])})
    return rows


def by_depth(rows: list[dict]) -> dict:
    """{k: exact match, tool calls per episode, peak tokens in view (mean, max), folds per episode}."""
    groups = defaultdict(list)
    for row in rows:
        groups[row["hops"]].append(row)
    return {str(k): {"exact_match": round(sum(r["solved"] for r in g) / len(g), 3),
                     "tool_calls": round(sum(r["tool_calls"] for r in g) / len(g), 1),
                     "peak_tokens_mean": round(sum(r["peak"] for r in g) / len(g)),
                     "peak_tokens_max": max(r["peak"] for r in g),
                     "folds": round(sum(r["folds"] for r in g) / len(g), 1), "questions": len(g)}
            for k, g in sorted(groups.items())}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, default=None, help="a finished run of the demo: skip training")
    parser.add_argument("--max_steps", type=int, default=None, help="train for this many steps (default: the demo's)")
    parser.add_argument("--eval_examples", type=int, default=None, help="held-out questions (default: the demo's)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # the config's paths are relative to the repository
    common = ["--config", CONFIG] + (["--num_eval_examples", args.eval_examples] if args.eval_examples else [])
    report = {"date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
              "window": grpo_search.parse_args(["--config", CONFIG])[0].max_context_tokens,
              "warm_start_probe_loss": json.loads((ROOT / "assets" / "tiny-qwen-search-long" /
                                                   "warm_start.json").read_text())["probe_loss"]}
    with tempfile.TemporaryDirectory() as scratch:
        run = args.run or Path(scratch) / "demo"
        if args.run is None:
            started = time.perf_counter()
            grpo_search.main([*common, "--output_dir", run, "--print_samples_every", 0,
                              *(["--max_steps", args.max_steps] if args.max_steps else [])])
            report["train_seconds"] = round(time.perf_counter() - started, 1)
        evaluation = json.loads((run / "eval.json").read_text())
        report["demo"] = {"wall_time_seconds": evaluation["wall_time_seconds"], "steps": evaluation["global_step"],
                          "before": by_depth(episodes(run / "eval_before.jsonl")),
                          "after": by_depth(episodes(run / "eval_after.jsonl")), "warnings": evaluation["warnings"]}
        solved = [r for r in episodes(run / "eval_after.jsonl") if r["solved"]]
        longest = max(solved, key=lambda r: r["tool_calls"], default=None)
        report["demo"]["longest_solved"] = longest
        report["modes"] = {}
        for mode, flags in MODES.items():
            out = Path(scratch) / mode
            grpo_search.main([*common, "--model_name_or_path", run, "--eval_only", "--output_dir", out, *flags])
            report["modes"][mode] = by_depth([r for r in episodes(out / "eval_only.jsonl") if r["hops"] in DEPTHS])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))
    print(f"wrote {args.out}")
    return report


def table(report: dict) -> str:
    """docs/grpo_search.md's table: per depth, each mode's exact match, tool calls and peak tokens in view."""
    lines = ["| k | folding | exact match | tool calls / episode | peak tokens in view (mean / most) |",
             "| --- | --- | --- | --- | --- |"]
    for k in map(str, DEPTHS):
        for mode, label in (("off", "off"), ("rule", "rule-based"), ("model", "model notes offered")):
            row = report["modes"][mode].get(k)
            if row:
                lines.append(f"| {k} | {label} | {row['exact_match']:.2f} | {row['tool_calls']:.1f} | "
                             f"{row['peak_tokens_mean']} / {row['peak_tokens_max']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
