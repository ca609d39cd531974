"""Benchmark: a hundred tool calls in one episode. GRPO on levels of 8 to 128 required calls, and what an episode
costs as it grows, folded and not.

    python benchmarks/bench_search_deep.py                  # ~15 min on 2 CPU cores: trains, then measures
    python benchmarks/bench_search_deep.py --run DIR        # train into DIR; if it holds a finished run, measure it
    python benchmarks/bench_search_deep.py --max_hops 4 --max_steps 1 --per_level 1   # a quick check, ~2 min
    python benchmarks/bench_search_deep.py --credit 0 1 2 --run DIR   # outcome only, credit per link, search credit
    python benchmarks/bench_search_deep.py --tables                  # the README's and docs' tables, from the JSON

The config is assets/deep_search.yaml: the long demo's model and 1,024-token window over lines of 64 scholars, whose
held-out questions are levels of 8, 32, 64 and 128 required calls (six each). First GRPO as a user runs it
(`grpo_search.py --config assets/deep_search.yaml`): its held-out exact match per level before and after (the run's
own batched, greedy evaluations). Then the trained model answers `--per_level` questions of each level greedily,
one episode at a time so that its wall time is its own, folded (the config's window) and not (--max_context_tokens
0: the whole conversation in view, up to the model's 1,024 positions). Per level and mode: solved, tool calls,
seconds per episode and per call, where a call's time goes (generation, tools, and bookkeeping: the loop's own
work, folds included), tokens prefilled (no cache is kept between turns: each turn prefills its whole context) and
generated per episode, and the peak of tokens in view. The slope of an episode's seconds over its calls, and the
seconds per call at 128 over those at 8, say whether a call's cost grows with the episode. Last, one GRPO step's
sampling on a 128-call question: a group of --num_generations rollouts at the training temperature, timed. Written
to benchmarks/results/search_deep.json, whose tables docs/grpo_search.md shows.

--credit SEED ...: instead, outcome only against credit per link and search credit (more arms: ARMS), one GRPO run of
the config per arm and seed, two at a time on the cores shared out, each started as a user starts it (about 15
minutes a run on 2 CPU cores); their held-out levels before and after, chain_progress in training, and each model's
copy errors (copy_errors: how often it names the wrong scholar in the next call of a folded line of teaching) go to
benchmarks/results/search_deep_credit.json (docs/grpo_search.md, "Credit per link").
"""

import argparse
import datetime
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "search_deep.json"
CONFIG = ROOT / "assets" / "deep_search.yaml"
DATA = ROOT / "assets" / "toy_search_deep"
os.environ.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "TOKENIZERS_PARALLELISM": "false"})
sys.path.insert(0, str(ROOT))

import grpo_search  # noqa: E402

MODES = {"folded": [], "unfolded": ["--max_context_tokens", "0", "--max_completion_length", "4096"]}
CREDIT_RESULTS = ROOT / "benchmarks" / "results" / "search_deep_credit.json"


def weights(**changed) -> list:
    """RUBRIC's weights in its order, with `changed` ones by reward name: a --reward_weights list."""
    return ["--reward_weights", *(changed.get(func.__name__, weight) for func, weight in grpo_search.RUBRIC)]


def arm(turn_credit: bool, scale_rewards: str, **changed) -> list:
    """An arm's flags: RUBRIC's weights with `changed` ones, and --turn_credit and --scale_rewards said outright, so
    that an arm means the same whatever the config sets."""
    return [*weights(**changed), "--turn_credit", str(turn_credit).lower(), "--scale_rewards", scale_rewards]


# Outcome only against credit per link (--credit). search_credit is off in both: it stops paying after two links.
# The credit arm pays chain_progress (how far along the line of mentors the searches got, checked against the
# question's chain) at 0.2, and each turn whose search reached a new link its own advantage (--turn_credit). The
# third arm is RUBRIC's own weights alone, search_credit (the first two links) at 0.2: how the config shipped until
# turn credit. The fourth (not run by default) adds --turn_credit to it: each turn's own advantage, negative for an
# open of an id that no result had shown (a miscopied number: how the search-credit arm's episodes fail); the fifth,
# with --scale_rewards none, leaves every advantage undivided by its group's spread: the config as it ships.
ARMS = {"outcome_only": arm(False, "group", search_credit=0.0, chain_progress=0.0),
        "credit_per_link": arm(True, "group", search_credit=0.0, chain_progress=0.2),
        "search_credit": arm(False, "group"), "turn_credit": arm(True, "group"),
        "turn_credit_unscaled": arm(True, "none")}
ARM_NAMES = {"outcome_only": "outcome only", "credit_per_link": "credit per link", "search_credit": "search credit",
             "turn_credit": "search credit + turn credit", "turn_credit_unscaled": "turn credit, unscaled"}
COST_PARTS = ("generation_seconds", "tool_seconds", "bookkeeping_seconds")


MAX_HOPS = []  # --max_hops K: ["--max_hops", K], passed to every run


def trainer_for(flags: list, output_dir: Path):
    """grpo_search.py's trainer and held-out rows for the config plus `flags`, built as main() builds them."""
    argv = ["--config", CONFIG, *flags, *MAX_HOPS, "--output_dir", output_dir]
    script_args, training_args, model_args, *_ = grpo_search.parse_args(list(map(str, argv)))
    tokenizer = grpo_search.load_tokenizer(model_args, training_args)
    train, held_out, *recipe_data = grpo_search.load_data(script_args, tokenizer, training_args.seed)
    rewards = [func for func, _ in grpo_search.RUBRIC]
    trainer = grpo_search.build_trainer(script_args, training_args, model_args, tokenizer, train, rewards, *recipe_data)
    return trainer, held_out


def episodes(trainer, held_out, per_level: int) -> list[dict]:
    """`per_level` held-out questions of each level answered greedily, one at a time (so that an episode's wall time
    is its own): solved, calls, wall seconds, cost, peak tokens in view, folds."""
    grade, taken, hops = grpo_search.outcome_reward(), defaultdict(int), hops_of_questions()
    rows = []
    for k in range(len(held_out)):
        row = held_out.select([k])
        depth = hops[row[0]["question"]]
        if taken[depth] >= per_level:
            continue
        taken[depth] += 1
        started = time.perf_counter()
        (rollout,), = grpo_search.rollouts(trainer, row, batch_size=1)
        wall = time.perf_counter() - started
        score = grade([rollout.messages], answer=[row[0]["answer"]], environments=[rollout.env])[0]
        if not rollout.env.peak_context:  # unfolded, the model saw its whole conversation: prompt and completion
            rollout.env.peak_context = len(trainer.processing_class.apply_chat_template(
                row[0]["prompt"], tools=grpo_search.tools_of(rollout.env), add_generation_prompt=True, tokenize=True,
                return_dict=False)) + len(rollout.completion_ids)
        rows.append({"hops": depth, "required_calls": 2 * depth, "solved": score == 1.0,
                     "tool_calls": rollout.env.calls, "seconds": wall, "cost": dict(rollout.env.cost),
                     "peak_tokens": rollout.env.peak_context or None, "folds": len(rollout.env.folds)})
    return rows


def hops_of_questions() -> dict:
    """{held-out question: its hops} (the loaded rows keep the question, not the data's 'hops' column)."""
    return {json.loads(line)["question"]: json.loads(line)["hops"] for line in (DATA / "test.jsonl").open()}


def chains_of_questions() -> dict:
    """{held-out question: its supporting documents in the chain's order, the asked scholar first}."""
    return {json.loads(line)["question"]: json.loads(line)["supporting_docs"] for line in (DATA / "test.jsonl").open()}


FAILURES = ("search", "open", "stopped", "unreadable_call", "no_answer", "wrong_after_founder")


def why_it_failed(messages: list, chain: list) -> tuple[str, int]:
    """Why an episode that answered wrong failed, read off its tool calls against the question's chain, and the
    link it had reached: 'search' or 'open' (the first call that named a document off the chain, neither the link
    it is on nor the next: a miscopied number), 'stopped' (answered before the founder, every call on the chain),
    'unreadable_call' (on the chain, ended on a call the parser could not read: no tool ran), 'no_answer' (on the
    chain, ended otherwise without an answer: out of calls or tokens), 'wrong_after_founder' (read the founder,
    named another town)."""
    def names(text: str, doc: str) -> bool:
        return re.search(rf"(?<!\w){re.escape(doc)}(?!\w)", text) is not None
    at = 0  # the question names chain[0]; reaching chain[k] is naming it in a call
    for message in messages:
        for call in message.get("tool_calls") or []:
            text = json.dumps(call["function"]["arguments"])
            if at + 1 < len(chain) and names(text, chain[at + 1]):
                at += 1
            elif not names(text, chain[at]):
                return call["function"]["name"], at
    last = (messages[-1].get("content") or "") if messages and messages[-1].get("role") == "assistant" else ""
    return ("wrong_after_founder" if at == len(chain) - 1 else "stopped" if "<answer>" in last
            else "unreadable_call" if "<tool_call>" in last else "no_answer"), at


def run_levels(path: Path) -> dict:
    """The run's own held-out evaluation (eval_before.jsonl, eval_after.jsonl: batched, greedy), per level: exact
    match, tool calls, peak tokens in view, folds, and why the episodes that failed did (why_it_failed)."""
    hops, chains, groups = hops_of_questions(), chains_of_questions(), defaultdict(list)
    for line in path.open():
        row = json.loads(line)
        greedy = next(c for c in row["completions"] if c["greedy"])
        question = next(m["content"] for m in row["prompt"] if m["role"] == "user")
        groups[2 * hops[question]].append((greedy, chains[question]))
    levels = {}
    for level, group in sorted(groups.items()):
        g = [c for c, _ in group]
        failed = [why_it_failed(c["text"], chain) for c, chain in group if c["rewards"]["exact_match_reward"] != 1]
        levels[str(level)] = {"questions": len(g),
                              "exact_match": round(sum(c["rewards"]["exact_match_reward"] == 1 for c in g) / len(g), 3),
                              "tool_calls": round(statistics.mean(c["tool_calls"] for c in g), 1),
                              "peak_tokens_max": max(c["peak_context_tokens"] for c in g),
                              "folds": round(statistics.mean(len(c["folds"]) for c in g), 1),
                              "failed": {kind: sum(k == kind for k, _ in failed) for kind in FAILURES},
                              "failed_at_link": [at for _, at in failed]}
    return levels


def lines_of_teaching(split: str) -> list[list]:
    """Each line of the data's `split` (train or test) as its longest chain: the asked scholar first, the founder
    last."""
    longest = {}
    for line in (DATA / f"{split}.jsonl").open():
        chain = json.loads(line)["supporting_docs"]
        if len(chain) > len(longest.get(chain[-1], [])):
            longest[chain[-1]] = chain
    return list(longest.values())


def copy_cases(trainer, system: dict, lines: int | None = None) -> list[tuple]:
    """(split, tool, the id the call must name, the messages in view) for every call from a line's third scholar on:
    the teacher's episode (search a scholar, open its page 2, search its mentor, ... up to the founder) folded as the
    tool loop folds it at the config's window, the model's next call the case. `lines`: at most that many per split."""
    import context_folding
    window = trainer.max_context_tokens
    room, cases = int(context_folding.TURN_ROOM * window), []
    for split in ("train", "test"):
        for chain in lines_of_teaching(split)[:lines]:
            env = grpo_search.ToolEnvironment()
            env.reset(supporting_docs=chain)
            tools = grpo_search.tools_of(env)
            question = f"Where was the founder of the school of {chain[0]} born?"
            view = [system, {"role": "user", "content": question}]
            for k, doc in enumerate(chain):
                for tool, argument in (("search", {"query": doc}), ("open", {"doc_id": doc, "page": 2})):
                    if k >= 2:
                        cases.append((split, tool, doc, list(view)))
                    result = getattr(env, tool)(**argument)
                    view += [{"role": "assistant", "content": "", "tool_calls": [
                        {"type": "function", "function": {"name": tool, "arguments": argument}}]},
                        {"role": "tool", "name": tool, "content": result}]
                    if len(trainer.processing_class.apply_chat_template(
                            view, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False)) > \
                            window - room:
                        view = context_folding.fold_context(view, question)[0]
    return cases


LATE_OPENS = "open_past_100_hidden_calls"  # copy_errors' opens whose view counts 100 or more calls no longer listed
IN_DIGITS = LATE_OPENS + "_in_digits"      # ... the same views with that count in digits, as the fold wrote it before


def copy_errors(model: Path | None, scratch: Path, lines: int | None = None, batch_size: int = 64) -> dict:
    """How often the model names the wrong scholar in the call a line of teaching needs next (copy_cases), greedily:
    {tool: {split: [wrong, calls]}}; the same for the opens whose view counts 100 or more calls no longer listed
    (LATE_OPENS: the fold writes that count as "many"), and for those views with the count in digits (IN_DIGITS, as
    context_folding wrote it before). Episodes at 128 calls fail on such miscopied numbers (why_it_failed): at a
    rate p per open, a 64-open episode succeeds with chance (1 - p) ** 64. `model`: a model folder, None for the
    config's."""
    import context_folding
    trainer, held_out = trainer_for(["--model_name_or_path", model] if model else [], scratch)
    tokenizer, generator, system = trainer.processing_class, trainer.model, held_out[0]["prompt"][0]
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    tools = grpo_search.tools_of(grpo_search.ToolEnvironment())
    count_line = re.compile(context_folding.HIDDEN_CALLS.format(r"(\d+|many)"))

    def late(view: list) -> bool:  # the view counts 100 or more calls no longer listed
        hidden = count_line.search(view[1]["content"])
        return hidden is not None and (hidden.group(1) == "many" or int(hidden.group(1)) >= 100)

    def wrong_calls(cases: list) -> list[bool]:
        wrong = []
        for start in range(0, len(cases), batch_size):
            batch = cases[start:start + batch_size]
            texts = [tokenizer.apply_chat_template(view, tools=tools, add_generation_prompt=True, tokenize=False)
                     for *_, view in batch]
            encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.no_grad():
                out = generator.generate(**encoded, max_new_tokens=40, do_sample=False,
                                         pad_token_id=tokenizer.pad_token_id)
            for (split, tool, doc, view), ids in zip(batch, out[:, encoded["input_ids"].shape[1]:]):
                call = re.search(r'"name": "(\w+)", "arguments": \{"\w+": "([^"]*)"', tokenizer.decode(ids))
                wrong.append(call is None or call.groups() != (tool, doc))
        return wrong

    generator.eval()
    try:
        cases = copy_cases(trainer, system, lines)
        many, context_folding.HIDDEN_MANY = context_folding.HIDDEN_MANY, 10 ** 9  # the count in digits, however large
        try:
            in_digits = [case for case in copy_cases(trainer, system, lines) if case[1] == "open" and late(case[3])]
        finally:
            context_folding.HIDDEN_MANY = many
        counts = {kind: {split: [0, 0] for split in ("train", "test")} for kind in ("search", "open", LATE_OPENS,
                                                                                    IN_DIGITS)}
        scored = [((tool, LATE_OPENS) if tool == "open" and late(view) else (tool,), split, wrong)
                  for (split, tool, _, view), wrong in zip(cases, wrong_calls(cases))]
        scored += [((IN_DIGITS,), split, wrong) for (split, *_), wrong in zip(in_digits, wrong_calls(in_digits))]
        for kinds, split, wrong in scored:
            for kind in kinds:
                counts[kind][split][0] += wrong
                counts[kind][split][1] += 1
    finally:
        tokenizer.padding_side = side
    return counts


def by_level(rows: list[dict]) -> dict:
    """{required calls: exact match, calls, seconds per episode and per call, the cost's parts per call, tokens}."""
    groups = defaultdict(list)
    for row in rows:
        groups[row["required_calls"]].append(row)
    table = {}
    for level, group in sorted(groups.items()):
        calls = sum(r["tool_calls"] for r in group)
        costed = [r for r in group if r["cost"]]
        table[str(level)] = {
            "questions": len(group), "exact_match": round(sum(r["solved"] for r in group) / len(group), 3),
            "tool_calls": round(calls / len(group), 1),
            "seconds_per_episode": round(statistics.mean(r["seconds"] for r in group), 2),
            "seconds_per_call": round(sum(r["seconds"] for r in group) / calls, 4) if calls else None,
            **({f"{part}_per_call": round(sum(r["cost"].get(part, 0) for r in costed) / calls, 4)
                for part in COST_PARTS} if costed and calls else {}),
            **({f"{name}_per_episode": round(statistics.mean(r["cost"].get(name, 0) for r in costed))
                for name in ("prefilled_tokens", "generated_tokens")} if costed else {}),
            "peak_tokens_max": max((r["peak_tokens"] or 0) for r in group),
            "folds": round(statistics.mean(r["folds"] for r in group), 1)}
    return table


def slope(rows: list[dict]) -> dict:
    """Least squares of an episode's seconds over its tool calls: seconds per extra call, and the intercept."""
    points = [(r["tool_calls"], r["seconds"]) for r in rows if r["tool_calls"]]
    if len({x for x, _ in points}) < 2:
        return {"seconds_per_call": None, "intercept_seconds": None}
    mean_x, mean_y = statistics.mean(x for x, _ in points), statistics.mean(y for _, y in points)
    b = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)
    return {"seconds_per_call": round(b, 4), "intercept_seconds": round(mean_y - b * mean_x, 2)}


def group_rollout_seconds(trainer, held_out, level: int) -> dict:
    """One GRPO step's sampling on a question of `level` required calls: num_generations rollouts, as training
    samples them (TRL's _generate at the training temperature, the loop folding), timed."""
    hops = hops_of_questions()
    k = next(k for k in range(len(held_out)) if 2 * hops[held_out[k]["question"]] == level)
    row = held_out.select([k])
    started = time.perf_counter()
    found, = grpo_search.rollouts(trainer, row, batch_size=1, num_samples=trainer.num_generations)
    wall = time.perf_counter() - started
    sampled = found[1:]
    return {"level": level, "rollouts": len(sampled), "seconds": round(wall, 1),
            "tool_calls": [r.env.calls for r in sampled], "solved": sum(
                score == 1.0 for score in grpo_search.outcome_reward()(
                    [r.messages for r in sampled], answer=[row[0]["answer"]] * len(sampled),
                    environments=[r.env for r in sampled]))}


def measure(model: Path, scratch: Path, per_level: int) -> dict:
    """Episodes one at a time, folded and not, and one GRPO step's group of rollouts on a 128-call question."""
    report = {}
    for mode, flags in MODES.items():
        trainer, held_out = trainer_for(["--model_name_or_path", model, *flags], scratch / mode)
        rows = episodes(trainer, held_out, per_level)
        report[mode] = {"levels": by_level(rows), "slope": slope(rows), "episodes": rows}
        if mode == "folded":
            report["group_rollout"] = group_rollout_seconds(trainer, held_out, max(r["required_calls"] for r in rows))
    return report


def memory_rows(cap: int) -> list[dict]:
    """The rows of a group of 8 rollouts of 8 calls (~32) and of 128 calls (~1,000), `cap` at a time, and 256 rows in
    one pass, as before chunking (1,000 in one pass would take about 13 GiB on this model)."""
    return [training_pass_memory(32, cap), training_pass_memory(1000, cap), training_pass_memory(256, 256)]


def memory_table(report: dict) -> str:
    lines = ["| segment rows (800 tokens each) | rows through the model at a time | peak memory above the loaded "
             "model (MiB) | seconds |", "| --- | --- | --- | --- |"]
    for row in report["training_pass_memory"]:
        lines.append(f"| {row['rows']:,} | {row['rows_at_a_time']} | {row.get('peak_mib', row.get('error'))} | "
                     f"{row.get('seconds', '-')} |")
    return "\n".join(lines)


def training_pass_memory(rows: int, cap: int, length: int = 800) -> dict:
    """One training pass (loss and backward) over `rows` segment rows of `length` tokens, at most `cap` rows through
    the model at a time, in a fresh process: its peak resident memory above the process's after loading, and seconds.
    A group of 8 rollouts of 8 calls makes about 32 rows (a row per segment), of 128 calls about 1,000."""
    code = f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import bench_search_deep as b; " \
           f"b.memory_probe({rows}, {cap}, {length})"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    if result.returncode:
        return {"rows": rows, "rows_at_a_time": cap, "error": result.stderr.strip().splitlines()[-1][:300]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def memory_probe(rows: int, cap: int, length: int):
    """training_pass_memory's child: prints {rows, rows_at_a_time, peak_mib, seconds} as its last line."""
    import resource

    import torch
    with tempfile.TemporaryDirectory() as scratch:
        trainer, _ = trainer_for(["--per_device_train_batch_size", cap], Path(scratch))
    generator, vocab = torch.Generator().manual_seed(0), len(trainer.processing_class)
    prompt, completion = length // 2, length - length // 2
    inputs = {"prompt_ids": torch.randint(3, vocab, (rows, prompt), generator=generator),
              "prompt_mask": torch.ones(rows, prompt, dtype=torch.long),
              "completion_ids": torch.randint(3, vocab, (rows, completion), generator=generator),
              "completion_mask": torch.ones(rows, completion, dtype=torch.long),
              "tool_mask": torch.ones(rows, completion, dtype=torch.long),
              "advantages": torch.randn(rows, generator=generator)}
    inputs["num_items_in_batch"] = inputs["completion_mask"].sum()
    trainer.current_gradient_accumulation_steps = 1  # as the training loop sets it
    trainer.model.train()
    gc.collect()
    # The high-water mark is reset first (Linux: clear_refs 5), so that loading, whose peak can pass the training
    # pass's, is not what gets measured; elsewhere it stays the process's peak so far, and the figure a lower bound.
    try:
        Path("/proc/self/clear_refs").write_text("5")
        before, reset = resident_kib("VmRSS"), True
    except OSError:
        before, reset = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, False
    started = time.perf_counter()
    trainer.accelerator.backward(trainer.compute_loss(trainer.model, inputs))
    seconds = time.perf_counter() - started
    peak = resident_kib("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"rows": rows, "rows_at_a_time": cap, "tokens_per_row": length,
                      "peak_mib": round((peak - before) / 1024), "seconds": round(seconds, 1)}))


def resident_kib(field: str) -> int:
    """This process's resident memory from /proc/self/status (VmRSS: now; VmHWM: its peak since the last reset)."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field + ":"))
    return int(line.split()[1])


def readme_table(report: dict) -> str:
    """README.md's long-horizon table: per level, the run's held-out exact match before and after GRPO with its tool
    calls and peak tokens in view after; the trained model's seconds per call, timed one at a time; and how many of
    the same questions it solved with its whole conversation in view (no folding)."""
    lines = ["| required tool calls | exact match before -> after GRPO | tool calls / episode | peak tokens in view | "
             "s / call | solved without folding |", "| --- | --- | --- | --- | --- | --- |"]
    before, after = report["levels"]["before"], report["levels"]["after"]
    folded, unfolded = report["timed"]["folded"]["levels"], report["timed"]["unfolded"]["levels"]
    for level in sorted(after, key=int):
        solved = f"{round(unfolded[level]['exact_match'] * unfolded[level]['questions'])} of " \
                 f"{unfolded[level]['questions']}" if level in unfolded else "-"
        per_call = f"{folded[level]['seconds_per_call']:.3f}" if folded.get(level, {}).get("seconds_per_call") else "-"
        lines.append(f"| {level} | {before[level]['exact_match']:.2f} -> {after[level]['exact_match']:.2f} | "
                     f"{after[level]['tool_calls']:.0f} | {after[level]['peak_tokens_max']} | {per_call} | {solved} |")
    return "\n".join(lines)


def credit_run(arm: str, seed: int, folder: Path, threads: int, max_steps: int | None) -> Path:
    """One GRPO run of the config with `arm`'s rubric and `seed`, as a user starts it, into folder/ARM-seedSEED; a
    finished run there (eval.json) is kept. Its output goes to that folder's log.txt."""
    run = folder / f"{arm}-seed{seed}"
    if (run / "eval.json").exists():
        return run
    run.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(ROOT / "grpo_search.py"), "--config", CONFIG, "--seed", seed, "--output_dir", run,
               "--print_samples_every", 0, *MAX_HOPS, *ARMS[arm], *(["--max_steps", max_steps] if max_steps else [])]
    threads = {name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    with open(run / "log.txt", "w") as log:
        done = subprocess.run(list(map(str, command)), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                              env={**os.environ, **threads})
    if done.returncode:
        raise SystemExit(f"{arm} seed {seed} failed (exit {done.returncode}): see {run / 'log.txt'}")
    return run


def credit_result(run: Path, copy_lines: int | None = None) -> dict:
    """A credit run's held-out levels before and after, chain_progress in training (first and last logged), and the
    trained model's copy errors (copy_errors, over `copy_lines` lines of each split; None: all)."""
    logged = [e for e in json.loads((run / "trainer_state.json").read_text())["log_history"]
              if "rewards/chain_progress/mean" in e]
    evaluation = json.loads((run / "eval.json").read_text())
    with tempfile.TemporaryDirectory() as scratch:
        copied = copy_errors(run, Path(scratch), copy_lines)  # the trained model, saved in the run's folder
    return {"levels": {when: run_levels(run / f"eval_{when}.jsonl") for when in ("before", "after")},
            "copy_errors_after": copied,
            "steps": evaluation["global_step"], "wall_seconds": round(evaluation.get("wall_time_seconds") or 0),
            "chain_progress_in_training": [round(logged[0]["rewards/chain_progress/mean"], 3),
                                           round(logged[-1]["rewards/chain_progress/mean"], 3)] if logged else None}


def credit(seeds: list, folder: Path, jobs: int, max_steps: int | None, arms: list,
           copy_lines: int | None = None) -> dict:
    """Each arm on every seed, `jobs` runs at a time (the cores shared out), then each run's held-out levels."""
    from concurrent.futures import ThreadPoolExecutor
    runs = [(arm, seed) for seed in seeds for arm in arms]
    threads = max(1, (os.cpu_count() or 1) // jobs)
    with ThreadPoolExecutor(jobs) as pool:
        folders = list(pool.map(lambda run: credit_run(*run, folder, threads, max_steps), runs))
    results = {arm: {} for arm in arms}
    for (arm, seed), run in zip(runs, folders):
        results[arm][str(seed)] = credit_result(run, copy_lines)
    summary = {}
    for arm, by_seed in results.items():
        levels = next(iter(by_seed.values()))["levels"]["after"]
        summary[arm] = {level: {"exact_match_after": [r["levels"]["after"][level]["exact_match"]
                                                      for r in by_seed.values()]} for level in levels}
        for level, row in summary[arm].items():
            row["mean"] = round(statistics.mean(row["exact_match_after"]), 3)
    before = next(iter(results[arms[0]].values()))["levels"]["before"]  # one model, greedy: the same in every run
    with tempfile.TemporaryDirectory() as scratch:
        copied = copy_errors(None, Path(scratch), copy_lines)  # the config's model
    return {"seeds": seeds, "arms": {arm: ARMS[arm] for arm in arms}, "before": before, "copy_errors_before": copied,
            "runs": results, "summary": summary}


def credit_table(report: dict) -> str:
    """docs/grpo_search.md's table: held-out exact match per level before, and after each arm (each seed, mean)."""
    seeds = "/".join(map(str, report["seeds"]))
    arms = list(report["summary"])
    lines = ["| required calls | before | " + " | ".join(f"{ARM_NAMES[arm]}, after (seeds {seeds}: mean)"
                                                     for arm in arms) + " |", "| --- " * (2 + len(arms)) + "|"]
    for level in sorted(report["before"], key=int):
        cells = [" / ".join(f"{v:.2f}" for v in report["summary"][arm][level]["exact_match_after"])
                 + f": {report['summary'][arm][level]['mean']:.2f}" for arm in arms]
        lines.append(f"| {level} | {report['before'][level]['exact_match']:.2f} | " + " | ".join(cells) + " |")
    progress = {arm: " / ".join(f"{r['chain_progress_in_training'][0]:.2f} -> {r['chain_progress_in_training'][1]:.2f}"
                                for r in report["runs"][arm].values() if r["chain_progress_in_training"])
                for arm in arms}
    longest = max(report["before"], key=int)
    calls = {arm: " / ".join(f"{r['levels']['after'][longest]['tool_calls']:.0f}" for r in report["runs"][arm].values())
             for arm in arms}
    lines += ["", "chain_progress in training, first -> last logged step, by seed: " + "; ".join(
        f"{ARM_NAMES[arm]} {progress[arm]}" for arm in arms) + ".", "",
        f"tool calls per episode after GRPO at {longest} required calls, by seed: " + "; ".join(
            f"{ARM_NAMES[arm]} {calls[arm]}" for arm in arms) + "."]
    long_levels = sorted(report["before"], key=int)[-2:]
    after = {arm: [r["levels"]["after"][level] for r in report["runs"][arm].values() for level in long_levels]
             for arm in arms}
    if all("failed" in level for arm in arms for level in after[arm]):  # recorded since why_it_failed
        lines += ["", f"why the episodes that failed after GRPO failed, at {' and '.join(long_levels)} required "
                  "calls, all seeds: " + "; ".join(f"{ARM_NAMES[arm]} {failures(after[arm])}" for arm in arms) + "."]
    if "copy_errors_before" in report and all("copy_errors_after" in r for arm in arms
                                              for r in report["runs"][arm].values()):
        lines += ["", "opens that named the wrong scholar, the teacher's lines folded as the loop folds them "
                  "(copy_errors), held-out lines / training lines: before " + miscopied(report["copy_errors_before"])
                  + "; after, by seed: " + "; ".join(f"{ARM_NAMES[arm]} " + ", ".join(
                      miscopied(r["copy_errors_after"]) for r in report["runs"][arm].values()) for arm in arms) + "."]
        if LATE_OPENS in report["copy_errors_before"]:
            runs = [report["copy_errors_before"]] + [r["copy_errors_after"] for arm in arms
                                                     for r in report["runs"][arm].values()]
            lines += ["", "of those, the opens whose view counts 100 or more calls no longer listed, held-out / "
                      "training lines, before then after by seed: the count as the fold writes it ('many') "
                      + "; ".join(miscopied(run, LATE_OPENS) for run in runs) + "; the count in digits "
                      + "; ".join(miscopied(run, IN_DIGITS) for run in runs) + "."]
    return "\n".join(lines)


def miscopied(counts: dict, kind: str = "open") -> str:
    """'10/372 (2.7%) / 13/496 (2.6%)': copy_errors' opens (or another kind), held-out lines then training lines."""
    return " / ".join(f"{wrong}/{calls} ({wrong / calls:.1%})" if calls else "0/0" for wrong, calls in
                      (counts[kind]["test"], counts[kind]["train"]))


def summary_table(paths: list[Path]) -> str:
    """Every credit results file's arms in one table: steps, held-out exact match at the two longest levels (mean,
    and each seed), and the opens miscopied on held-out lines after (copy_errors; '-' where not measured)."""
    lines = ["| rubric | steps | 64 calls: mean (by seed) | 128 calls: mean (by seed) | held-out opens miscopied, "
             "before -> after (by seed) | results |", "| --- | --- | --- | --- | --- | --- |"]
    for path in paths:
        report = json.loads(path.read_text())
        for arm, runs in report["runs"].items():
            steps = {run["steps"] for run in runs.values()}
            resumed = {run.get("resumed_from_step") for run in runs.values()} - {None}
            cells = []
            for level in ("64", "128"):
                scores = [run["levels"]["after"][level]["exact_match"] for run in runs.values()]
                cells.append(f"{statistics.mean(scores):.2f} ({' / '.join(f'{v:.2f}' for v in scores)})")
            copied = [run["copy_errors_after"]["open"]["test"] for run in runs.values() if "copy_errors_after" in run]
            before = report.get("copy_errors_before", {}).get("open", {}).get("test")
            copies = f"{before[0] / before[1]:.1%} -> " + " / ".join(f"{w / n:.1%}" for w, n in copied) \
                if before and len(copied) == len(runs) else "-"
            lines.append(f"| {ARM_NAMES[arm]} | {'/'.join(map(str, sorted(steps)))}"
                         f"{f' (resumed at {min(resumed)})' if resumed else ''} | {cells[0]} | {cells[1]} | {copies} | "
                         f"{path.name} |")
    return "\n".join(lines)


FAILURE_NAMES = {"search": "searched off the chain", "open": "opened off the chain",
                 "stopped": "answered before the founder", "unreadable_call": "ended on a call it could not parse",
                 "no_answer": "ended without an answer",
                 "wrong_after_founder": "named another town after the founder"}


def failures(levels: list[dict]) -> str:
    """'N failed: K opened off the chain, ...' over these levels' failed episodes (why_it_failed), or 'none failed'."""
    counts = {kind: sum(level["failed"][kind] for level in levels) for kind in FAILURES}
    total = sum(counts.values())
    return f"{total} failed: " + ", ".join(f"{n} {FAILURE_NAMES[k]}" for k, n in counts.items() if n) if total \
        else "none failed"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, default=None,
                        help="train into this folder (default: a temporary one); if it holds a finished run of the "
                             "config (eval.json), measure that run without training")
    parser.add_argument("--max_steps", type=int, default=None, help="train for this many steps (default: the config's)")
    parser.add_argument("--per_level", type=int, default=2, help="questions per level timed one at a time")
    parser.add_argument("--per_device_rows", type=int, default=16,
                        help="the training pass's rows at a time in the memory measure (the config's batch size)")
    parser.add_argument("--max_hops", type=int, default=0, help="only the levels of at most 2 x this many calls, in "
                        "training and measures alike (a quick check; 0: every level)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--memory_only", action="store_true",
                        help="only the training pass's memory, added to the results file --out")
    parser.add_argument("--credit", type=int, nargs="+", metavar="SEED", default=None,
                        help="instead: outcome only against credit per link (--arms), a run of each per seed, into "
                             f"{CREDIT_RESULTS.relative_to(ROOT)} (--run: the runs' parent folder, kept to resume)")
    parser.add_argument("--jobs", type=int, default=2, help="with --credit: runs at a time, the cores shared out")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS)[:3],
                        help="with --credit: these arms (default: the first three; turn_credit adds "
                             "--turn_credit to search_credit, turn_credit_unscaled is the config as it ships)")
    parser.add_argument("--copy_lines", type=int, default=None, help="with --credit: copy errors over this many lines "
                        "of each split (default: all 14; a quick check: 1)")
    parser.add_argument("--tables", action="store_true", help="only print the tables of the results files (--out, "
                        f"and {CREDIT_RESULTS.relative_to(ROOT)} where it exists), as the README and docs show them")
    args = parser.parse_args(argv)
    if args.copy_lines is not None and args.copy_lines < 1:
        parser.error(f"--copy_lines {args.copy_lines}: give 1 or more lines (or leave it out: all 14)")
    if args.tables:
        if not args.out.exists():
            raise SystemExit(f"{args.out} does not exist: run python benchmarks/bench_search_deep.py first (~15 min), "
                             "or give --out a results file")
        report = json.loads(args.out.read_text())
        credits = sorted(CREDIT_RESULTS.parent.glob(CREDIT_RESULTS.stem + "*.json"))
        print("\n\n".join([readme_table(report), table(report), memory_table(report)] + (
            [credit_table(json.loads(CREDIT_RESULTS.read_text()))] if CREDIT_RESULTS.exists() else []) + (
            [summary_table(credits)] if credits else [])))
        return report
    command = command_line(argv if argv is not None else sys.argv[1:])
    if args.credit:
        MAX_HOPS[:] = ["--max_hops", args.max_hops] if args.max_hops else []
        out = CREDIT_RESULTS if args.out == RESULTS else args.out
        with tempfile.TemporaryDirectory() as scratch:
            report = credit(args.credit, args.run.resolve() if args.run else Path(scratch), args.jobs,
                            args.max_steps, args.arms, args.copy_lines)
        report = {"date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                  "command": command, **report}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        print(credit_table(report))
        print(f"wrote {out}")
        return report
    if args.memory_only:
        report = json.loads(args.out.read_text())
        report["training_pass_memory"] = memory_rows(args.per_device_rows)
        report["command"] += "; " + command_line(argv if argv is not None else sys.argv[1:])
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(memory_table(report))
        return report
    MAX_HOPS[:] = ["--max_hops", args.max_hops] if args.max_hops else []
    os.chdir(ROOT)
    report = {"date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
              "command": command_line(argv if argv is not None else sys.argv[1:])}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        run = args.run or scratch / "run"
        if not (run / "eval.json").exists():
            started = time.perf_counter()
            grpo_search.main(["--config", CONFIG, "--output_dir", run, "--print_samples_every", 0, *MAX_HOPS,
                              *(["--max_steps", args.max_steps] if args.max_steps else [])])
            report["train_seconds"] = round(time.perf_counter() - started, 1)
        evaluation = json.loads((run / "eval.json").read_text())
        report["steps"] = evaluation["global_step"]
        report["levels"] = {when: run_levels(run / f"eval_{when}.jsonl") for when in ("before", "after")}
        report["timed"] = measure(run, scratch / "timed", args.per_level)
        report["timed"]["ratio_per_call_longest_to_shortest"] = per_call_ratio(report["timed"]["folded"]["levels"])
    if not MAX_HOPS:  # the quick check leaves it out
        report["training_pass_memory"] = memory_rows(args.per_device_rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))
    if "training_pass_memory" in report:
        print(memory_table(report))
    print(f"wrote {args.out}")
    return report


def command_line(argv: list) -> str:
    """The command as the results file records it: this machine's folders (--run, --out) named for what they are."""
    argv, shown = list(map(str, argv)), []
    for previous, value in zip([None, *argv], argv):
        shown.append({"--run": "DIR", "--out": "FILE"}.get(previous, value))
    return " ".join(["python benchmarks/bench_search_deep.py", *shown])


def per_call_ratio(levels: dict) -> float | None:
    """Seconds per call at the longest level over those at the shortest: 1.0 when a call costs the same."""
    longest, shortest = levels[max(levels, key=int)], levels[min(levels, key=int)]
    if not longest.get("seconds_per_call") or not shortest.get("seconds_per_call"):
        return None
    return round(longest["seconds_per_call"] / shortest["seconds_per_call"], 3)


def table(report: dict) -> str:
    """docs/grpo_search.md's tables: the run's held-out levels before and after GRPO; then the trained model's
    episodes timed one at a time, folded and not."""
    lines = ["| required calls | exact match before -> after GRPO | tool calls / episode after | folds / episode "
             "after | peak tokens in view after |", "| --- | --- | --- | --- | --- |"]
    before, after = report["levels"]["before"], report["levels"]["after"]
    for level in sorted(after, key=int):
        lines.append(f"| {level} | {before[level]['exact_match']:.2f} -> {after[level]['exact_match']:.2f} | "
                     f"{after[level]['tool_calls']:.1f} | {after[level]['folds']:.1f} | "
                     f"{after[level]['peak_tokens_max']} |")
    lines += ["", "| required calls | folding | solved | calls / episode | s / episode | s / call (generation / tools "
                  "/ bookkeeping) | tokens prefilled / generated per episode | peak tokens in view |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for level in sorted(report["timed"]["folded"]["levels"], key=int):
        for mode in MODES:
            row = report["timed"][mode]["levels"].get(level)
            if not row:
                continue
            parts = " / ".join(f"{row[f'{p}_per_call']:.3f}" for p in COST_PARTS) \
                if f"{COST_PARTS[0]}_per_call" in row else "not split"
            tokens = f"{row['prefilled_tokens_per_episode']:,} / {row['generated_tokens_per_episode']:,}" \
                if "prefilled_tokens_per_episode" in row else "not counted"
            per_call = f"{row['seconds_per_call']:.3f}" if row["seconds_per_call"] else "-"
            lines.append(f"| {level} | {mode} | {round(row['exact_match'] * row['questions'])} of {row['questions']} | "
                         f"{row['tool_calls']:.1f} | {row['seconds_per_episode']:.1f} | {per_call} ({parts}) | "
                         f"{tokens} | {row['peak_tokens_max']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
