"""Benchmark: rewards.py's correctness rewards against math-verify, on the same synthetic completions.

    python benchmarks/bench_rewards.py        # ~1 min on 2 CPU cores; prints a table, writes results/rewards.json

(a) correctness_reward vs TRL's accuracy_reward (math-verify) on GSM8K-style completions. TRL's
    reward does not look for <answer> blocks: it gets the content of the completion's one
    <answer> block, inside \\boxed{} (which its extractor reads first), and the bare gold number
    as `solution`. Completions with no single block get their raw text. Verdicts are compared on
    numeric answers (the block states a number: 72, 72.0, $72, 1,000, \\boxed{72}, -72, ...) and
    on everything; each kind of disagreement is printed with an example and the reason.
(b) symbolic_correctness_reward (fast path first, math-verify in a worker process for the rest)
    vs plain math-verify, verify(parse('\\boxed{gold}'), parse('\\boxed{answer}')), on a mixed
    set of numbers, fractions and LaTeX answers, right and wrong: over all answers, then split
    into those the fast path decides and those it sends to math-verify; then on GRPO-style
    groups (8 answers per question, with repeats).
(c) symbolic_correctness_reward vs plain math-verify on the MATH-style (gold, answer) pairs of
    tests/data/math_answers/ (see SOURCES.md there): every disagreement, listed.
Everything is generated from a fixed seed. Both sides start each timed run cold: math-verify's
parse caches and the reward's remembered verdicts are cleared, and the reward gets a fresh
math-verify worker, started and warmed up on other answers outside the timing (repeats within a
run still hit the caches, as in training). Timings are the best of 5 runs (2 for TRL's reward).
"""

import datetime
import functools
import json
import logging
import os
import platform
import random
import sys
import time
from math import gcd
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
logging.disable(logging.WARNING)  # math-verify warns about each timeout it cannot set

import rewards  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "rewards.json"
ITEMS = ["clips", "apples", "dollars", "pages", "eggs", "miles", "cookies", "tickets"]
NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Mark", "Albert", "Ken"]


# --- (a) GSM8K-style completions -----------------------------------------------------------------

def gsm8k_completions(rng: random.Random, questions: int = 80) -> list:
    """(kind, completion, gold text) for `questions` questions, each answered in every variant below."""
    rows = []
    for _ in range(questions):
        a, b = rng.randint(2, 900), rng.randint(2, 60)
        op = rng.choice(["+", "*", "-"])
        gold = {"+": a + b, "*": a * b, "-": a - b}[op]
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        reasoning = (f"{name} starts with {a} {item}. The question needs {a} {op} {b}.\n"
                     f"{a} {op} {b} = {gold}, so {name} has {gold} {item}.")
        gold_text = f"{name} has {a} {op} {b} = <<{a}{op}{b}={gold}>>{gold} {item}.\n#### {gold}"
        wrong = gold + rng.choice([-10, -2, -1, 1, 2, 10])

        def block(content, layout="strict"):
            if layout == "strict":
                return f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{content}\n</answer>"
            return f"<reasoning>{reasoning}</reasoning> <answer>{content}</answer>"

        fullwidth = str(gold).translate(str.maketrans("0123456789-", "０１２３４５６７８９-"))
        variants = [
            ("numeric: plain", block(f"{gold}")),
            ("numeric: plain, lenient layout", block(f"{gold}", "lenient")),
            ("numeric: decimal", block(f"{gold}.0")),
            ("numeric: two decimals", block(f"{gold}.00")),
            ("numeric: dollar", block(f"${gold}")),
            ("numeric: thousands comma", block(f"{gold:,}")),
            ("numeric: boxed", block(f"\\boxed{{{gold}}}")),
            ("numeric: $boxed$", block(f"$\\boxed{{{gold}}}$")),
            ("numeric: wrong", block(f"{wrong}")),
            ("numeric: wrong, boxed", block(f"\\boxed{{{wrong:,}}}")),
            ("numeric: sign flipped", block(f"{-gold}")),
            ("words: with units", block(f"{gold} {item}")),
            ("words: sentence", block(f"The answer is {gold}.")),
            ("hack: two numbers", block(f"{gold} or {wrong}")),
            ("hack: unevaluated expression", block(f"{a} {op} {b}")),
            ("hack: full-width digits", block(fullwidth)),
            ("structure: no answer block", f"<reasoning>\n{reasoning}\n</reasoning>"),
            ("structure: two answer blocks", block(f"{wrong}") + f"\n<answer>\n{gold}\n</answer>"),
            ("structure: unclosed block", f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{gold}"),
        ]
        rows += [(kind, completion, gold_text) for kind, completion in variants]
    return rows


WHY = {  # what makes the two verdicts differ, by kind of completion
    "words: with units": "math-verify drops the units it knows (miles, dollars) but reads other words as "
                         "products of symbols (72*c*l*i*p*s); correctness_reward takes the one number",
    "words: sentence": "math-verify parses the whole sentence inside \\boxed{} as symbols; correctness_reward "
                       "takes the one number",
    "hack: full-width digits": "math-verify turns full-width digits into 72; correctness_reward refuses "
                               "look-alike digits",
    "hack: unevaluated expression": "math-verify computes the expression; correctness_reward wants the result",
    "structure: no answer block": "TRL's reward gets the raw text and finds a number in it; correctness_reward "
                                  "needs the one <answer> block",
    "structure: two answer blocks": "TRL's reward gets the raw text and takes some number of it; several blocks "
                                    "always score 0 here",
    "structure: unclosed block": "TRL's reward gets the raw text; an unclosed block scores 0 here",
}


def trl_view(completion: str) -> str:
    """What TRL's accuracy_reward is given: the one <answer> block's content, in \\boxed{} unless boxed already."""
    content = rewards.extract_xml_answer(completion)
    if content is None:
        return completion
    content = content.strip()
    return content if "\\boxed" in content else f"\\boxed{{{content}}}"


def clear_math_verify_caches():
    from math_verify import parser

    for name in ("parse_latex_cached", "parse_expr_cached", "extract_latex"):
        getattr(getattr(parser, name, None), "cache_clear", lambda: None)()


def best_of(runs: int, func, setup=lambda: None) -> float:
    """The fastest of `runs` calls, in seconds: the least disturbed by other work on the machine."""
    times = []
    for _ in range(runs):
        setup()  # untimed
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_gsm8k(rng: random.Random) -> dict:
    from trl.rewards import accuracy_reward

    rows = gsm8k_completions(rng)
    completions = [completion for _, completion, _ in rows]
    golds = [gold for _, _, gold in rows]
    trl_completions = [[{"role": "assistant", "content": trl_view(completion)}] for completion in completions]
    solutions = [rewards.extract_gsm8k_gold(gold) for gold in golds]

    accuracy_reward(trl_completions[:20], solutions[:20])  # warm-up: imports, regex compilation
    rewards.correctness_reward(completions[:20], answer=golds[:20])
    ours_seconds = best_of(5, lambda: rewards.correctness_reward(completions, answer=golds))
    ours = rewards.correctness_reward(completions, answer=golds)

    def trl_cold():
        clear_math_verify_caches()
        return accuracy_reward(trl_completions, solutions)

    trl_seconds = best_of(2, trl_cold)
    theirs = trl_cold()

    by_kind = {}
    for (kind, completion, _), mine, trl in zip(rows, ours, theirs):
        entry = by_kind.setdefault(kind, {"n": 0, "agree": 0, "ours_correct": 0, "trl_correct": 0, "example": None})
        entry["n"] += 1
        entry["agree"] += mine == trl
        entry["ours_correct"] += mine == 1.0
        entry["trl_correct"] += trl == 1.0
        if mine != trl and entry["example"] is None:
            entry["example"] = {"trl_input": trl_view(completion)[-60:], "ours": mine, "trl": trl}
    numeric = [(m, t) for (kind, _, _), m, t in zip(rows, ours, theirs) if kind.startswith("numeric")]
    return {
        "completions": len(rows),
        "numeric_answers": len(numeric),
        "numeric_agreement": sum(m == t for m, t in numeric) / len(numeric),
        "overall_agreement": sum(m == t for m, t in zip(ours, theirs)) / len(rows),
        "ours_seconds": ours_seconds,
        "trl_seconds": trl_seconds,
        "speedup": trl_seconds / ours_seconds,
        "by_kind": by_kind,
    }


# --- (b) a mixed set of numbers, fractions and LaTeX ----------------------------------------------

def mixed_question(rng: random.Random) -> tuple:
    """(kind, gold, answers, weights): half integers, then decimals, fractions and LaTeX expressions.

    `answers` holds right answers (spelled like the gold or not) and wrong ones; `weights` says how
    often a model gives each.
    """
    roll = rng.random()
    if roll < 0.5:
        n = rng.randint(-50, 5000)
        return "integer", str(n), [str(n), f"{n}.0", f"{n:,}", str(n + rng.choice([-1, 1, 10])), str(-n - 1)], \
            [2, 1, 1, 1, 1]
    if roll < 0.65:
        tenths = rng.randint(1, 999)
        value = f"{tenths / 10:.1f}"
        fraction = f"{tenths // gcd(tenths, 10)}/{10 // gcd(tenths, 10)}"
        return "decimal", value, [value, value + "0", fraction, f"{(tenths + 1) / 10:.1f}"], [1, 1, 1, 1]
    if roll < 0.8:
        den = rng.randint(2, 12)
        num = rng.choice([k for k in range(1, 3 * den) if gcd(k, den) == 1])
        gold = f"\\frac{{{num}}}{{{den}}}"
        answers = [gold, f"\\dfrac{{{num}}}{{{den}}}", f"{num}/{den}", f"\\frac{{{2 * num}}}{{{2 * den}}}",
                   f"\\frac{{{num + 1}}}{{{den}}}", f"{den}/{num}"]
        return "fraction", gold, answers, [2, 1, 1, 1, 1, 1]
    k, m = rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7])
    forms = [  # (gold, the same with other spacing, the same value written differently, a wrong answer)
        (f"{k}\\sqrt{{{m}}}", f"{k} \\sqrt{{{m}}}", f"\\sqrt{{{k * k * m}}}", f"{k + 1}\\sqrt{{{m}}}"),
        (f"\\frac{{\\sqrt{{{m}}}}}{{{k}}}", f"\\dfrac{{\\sqrt{{{m}}}}}{{{k}}}", f"\\frac{{1}}{{{k}}}\\sqrt{{{m}}}",
         f"\\frac{{\\sqrt{{{m}}}}}{{{k + 1}}}"),
        (f"{k}\\pi", f"{k} \\pi", f"\\frac{{{2 * k}\\pi}}{{2}}", f"{k + 1}\\pi"),
        (f"\\frac{{\\pi}}{{{k}}}", f"\\dfrac{{\\pi}}{{{k}}}", f"\\frac{{1}}{{{k}}}\\pi", f"\\frac{{\\pi}}{{{k + 1}}}"),
        (f"x^2+{k}x+{m}", f"x^2 + {k}x + {m}", f"x(x+{k})+{m}", f"x^2+{m}x+{k}"),
        (f"({k},{k + m}]", f"({k}, {k + m}]", f"(\\frac{{{2 * k}}}{{2}},{k + m}]", f"[{k},{k + m}]"),
        (f"\\{{{k},{k + m}\\}}", f"\\{{{k}, {k + m}\\}}", f"\\{{{k + m},{k}\\}}", f"\\{{{k},{k + m + 1}\\}}"),
    ]
    gold, same, equivalent, wrong = rng.choice(forms)
    return "latex", gold, [gold, same, equivalent, wrong], [5, 2, 1, 2]  # models mostly copy the gold's style


def mixed_pairs(rng: random.Random, size: int = 1000) -> list:
    """(kind, gold, answer): one answer to each of `size` questions."""
    pairs = []
    for _ in range(size):
        kind, gold, answers, weights = mixed_question(rng)
        pairs.append((kind, gold, rng.choices(answers, weights)[0]))
    return pairs


def grpo_groups(rng: random.Random, questions: int = 125, group: int = 8) -> list:
    """(kind, gold, answer): `group` sampled answers to each question, as GRPO scores them."""
    pairs = []
    for _ in range(questions):
        kind, gold, answers, weights = mixed_question(rng)
        pairs += [(kind, gold, answer) for answer in rng.choices(answers, weights, k=group)]
    return pairs


def bench_symbolic(rng: random.Random) -> dict:
    from math_verify import parse, verify

    pairs = mixed_pairs(rng)
    start = time.perf_counter()
    start_worker = functools.partial(rewards.symbolic_correctness_reward, ["<answer>(1,2)</answer>"],
                                     answer=["\\{1,2\\}"])  # a pair only math-verify decides
    start_worker()
    warm_up = [(kind, gold, answer) for _ in range(100) for kind, gold, answers, _ in [mixed_question(random.Random(
        f"warm-up {_}"))] if kind == "latex" for answer in answers]  # every LaTeX form, none of the pairs timed
    worker_start_seconds = time.perf_counter() - start
    verify(parse("\\boxed{x}"), parse("\\boxed{x}"))  # warm-up in this process too
    remembered = rewards.symbolic_correctness_reward._math_verify_worker.setdefault("verdicts", {})
    # Which answers the fast path decides: those that never reach the worker.
    slow = [needs_math_verify(gold, answer) for _, gold, answer in pairs]

    def run(subset):  # (our verdicts, our seconds, math-verify's verdicts, its seconds), both cold
        completions = [f"<reasoning>\n...\n</reasoning>\n<answer>\n{answer}\n</answer>" for _, _, answer in subset]
        golds = [gold for _, gold, _ in subset]

        def fresh_worker():  # empty parse caches, as in this process, but warmed up like a long run's worker
            worker = rewards.symbolic_correctness_reward._math_verify_worker
            worker["process"].kill()
            worker["process"].wait()
            worker["process"] = None
            rewards.symbolic_correctness_reward([f"<answer>{answer}</answer>" for _, _, answer in warm_up],
                                                answer=[gold for _, gold, _ in warm_up])

        def ours_cold():  # forget earlier verdicts: every answer is new, as for plain math-verify
            remembered.clear()
            return rewards.symbolic_correctness_reward(completions, answer=golds)

        ours_seconds = best_of(5, ours_cold, setup=fresh_worker)
        ours = ours_cold()
        def math_verify_cold():
            clear_math_verify_caches()
            return [float(verify(parse("\\boxed{" + gold + "}"), parse("\\boxed{" + answer + "}")))
                    for _, gold, answer in subset]

        mv_seconds = best_of(5, math_verify_cold)
        return ours, ours_seconds, math_verify_cold(), mv_seconds

    ours, ours_seconds, theirs, mv_seconds = run(pairs)
    split = {name: run([pair for pair, is_slow in zip(pairs, slow) if is_slow == want])
             for name, want in (("fast_path", False), ("math_verify", True))}
    grouped = grpo_groups(rng)
    group_ours, group_seconds, group_theirs, group_mv_seconds = run(grouped)
    kinds = {}
    for (kind, gold, answer), mine, mv in zip(pairs, ours, theirs):
        entry = kinds.setdefault(kind, {"n": 0, "agree": 0, "correct": 0})
        entry["n"] += 1
        entry["agree"] += mine == mv
        entry["correct"] += mv == 1.0
    differ = [{"gold": g, "answer": a, "ours": m, "math_verify": t}
              for (_, g, a), m, t in zip(pairs, ours, theirs) if m != t]
    return {
        "pairs": len(pairs),
        "agreement": sum(m == t for m, t in zip(ours, theirs)) / len(pairs),
        "differences": differ[:10],
        "fast_path_share": 1 - sum(slow) / len(pairs),
        "ours_seconds": ours_seconds,
        "math_verify_seconds": mv_seconds,
        "speedup": mv_seconds / ours_seconds,
        "by_path": {name: {"n": len(result[0]), "ours_seconds": result[1], "math_verify_seconds": result[3],
                           "speedup": result[3] / result[1], "agreement": sum(
                               m == t for m, t in zip(result[0], result[2])) / max(1, len(result[0]))}
                    for name, result in split.items()},
        "grpo_groups": {"completions": len(grouped), "group_size": 8, "ours_seconds": group_seconds,
                        "math_verify_seconds": group_mv_seconds, "speedup": group_mv_seconds / group_seconds,
                        "agreement": sum(m == t for m, t in zip(group_ours, group_theirs)) / len(grouped)},
        "worker_start_seconds": worker_start_seconds,
        "by_kind": kinds,
    }


def needs_math_verify(gold: str, answer: str) -> bool:
    """True when symbolic_correctness_reward sends this pair to math-verify (counted with a stub worker)."""
    counter = {"calls": 0}
    original = json.dumps

    def counting(obj, *args, **kwargs):
        counter["calls"] += 1
        return original(obj, *args, **kwargs)

    json.dumps = counting  # the worker protocol is the only json.dumps call in the reward
    rewards.symbolic_correctness_reward._math_verify_worker.get("verdicts", {}).clear()
    try:
        rewards.symbolic_correctness_reward([f"<answer>{answer}</answer>"], answer=[gold])
    finally:
        json.dumps = original
    return counter["calls"] > 0


# --- (c) public MATH-style answers ----------------------------------------------------------------

MATH_ANSWERS = ROOT / "tests" / "data" / "math_answers" / "cases.jsonl"


def bench_public_answers() -> dict:
    """symbolic_correctness_reward against math-verify on tests/data/math_answers: every disagreement."""
    from math_verify import parse, verify

    cases = [json.loads(line) for line in MATH_ANSWERS.read_text().splitlines()]
    ours = rewards.symbolic_correctness_reward([f"<answer>{case['answer']}</answer>" for case in cases],
                                               answer=[case["gold"] for case in cases])
    theirs = []
    for case in cases:
        try:
            theirs.append(float(verify(parse("\\boxed{" + case["gold"] + "}", parsing_timeout=None),
                                       parse("\\boxed{" + case["answer"] + "}", parsing_timeout=None),
                                       timeout_seconds=None)))
        except Exception:
            theirs.append(0.0)
    refused = [case for case, o, t in zip(cases, ours, theirs) if t == 1.0 and o != 1.0]
    paid = [case for case, o, t in zip(cases, ours, theirs) if t == 0.0 and o == 1.0]
    return {"pairs": len(cases), "math_verify_right": theirs.count(1.0), "gold_unreadable": ours.count(None),
            "refused_that_math_verify_accepts": [[c["gold"], c["answer"]] for c in refused],
            "false_negative_rate": len(refused) / max(1, theirs.count(1.0)),
            "paid_that_math_verify_refuses": [[c["gold"], c["answer"]] for c in paid]}


# --- report ---------------------------------------------------------------------------------------

def main():
    started = time.perf_counter()
    rng = random.Random(20250501)
    gsm8k = bench_gsm8k(rng)
    symbolic = bench_symbolic(rng)
    public = bench_public_answers()

    print(f"(a) correctness_reward vs trl.rewards.accuracy_reward, {gsm8k['completions']} GSM8K-style completions")
    print(f"    {'kind':<32}{'n':>5}{'agree':>7}{'ours=1':>8}{'trl=1':>7}")
    for kind, entry in gsm8k["by_kind"].items():
        print(f"    {kind:<32}{entry['n']:>5}{entry['agree'] / entry['n']:>7.0%}{entry['ours_correct']:>8}"
              f"{entry['trl_correct']:>7}")
    print(f"    numeric answers ({gsm8k['numeric_answers']}): identical verdicts {gsm8k['numeric_agreement']:.1%}; "
          f"all completions: {gsm8k['overall_agreement']:.1%}")
    for kind, entry in gsm8k["by_kind"].items():
        if entry["example"]:
            example = entry["example"]
            print(f"    differs on '{kind}', e.g. TRL given ...{example['trl_input']!r}: ours {example['ours']}, "
                  f"TRL {example['trl']}. {WHY.get(kind, '')}")
    print(f"    time: ours {gsm8k['ours_seconds'] * 1e3:.1f} ms, TRL {gsm8k['trl_seconds'] * 1e3:.0f} ms: "
          f"{gsm8k['speedup']:.0f}x faster\n")

    print(f"(b) symbolic_correctness_reward vs plain math-verify, {symbolic['pairs']} mixed answers")
    print(f"    {'kind':<12}{'n':>6}{'agree':>8}{'right':>7}")
    for kind, entry in symbolic["by_kind"].items():
        print(f"    {kind:<12}{entry['n']:>6}{entry['agree'] / entry['n']:>8.0%}{entry['correct']:>7}")
    print(f"    identical verdicts {symbolic['agreement']:.1%}; decided by the fast path "
          f"{symbolic['fast_path_share']:.0%}")
    for difference in symbolic["differences"]:
        print(f"    differs: {difference}")
    label = f"all answers ({symbolic['pairs']})"
    print(f"    {label:<28}ours {symbolic['ours_seconds'] * 1e3:6.0f} ms, math-verify "
          f"{symbolic['math_verify_seconds'] * 1e3:6.0f} ms: {symbolic['speedup']:5.1f}x faster")
    for name, label in (("fast_path", "fast path decides"), ("math_verify", "sent to math-verify")):
        part = symbolic["by_path"][name]
        label = f"{label} ({part['n']})"
        print(f"    {label:<28}ours {part['ours_seconds'] * 1e3:6.0f} ms, math-verify "
              f"{part['math_verify_seconds'] * 1e3:6.0f} ms: {part['speedup']:5.1f}x faster")
    groups = symbolic["grpo_groups"]
    label = f"GRPO groups ({groups['completions'] // groups['group_size']} x {groups['group_size']})"
    print(f"    {label:<28}ours {groups['ours_seconds'] * 1e3:6.0f} ms, math-verify "
          f"{groups['math_verify_seconds'] * 1e3:6.0f} ms: {groups['speedup']:5.1f}x faster "
          f"(identical verdicts {groups['agreement']:.1%}; repeated answers are verified once)")
    print(f"    (plus, once per process, the worker's start: {symbolic['worker_start_seconds']:.1f} s)\n")

    print(f"(c) symbolic_correctness_reward vs plain math-verify, {public['pairs']} MATH-style pairs "
          f"({MATH_ANSWERS.relative_to(ROOT)}; math-verify accepts {public['math_verify_right']})")
    print(f"    refused, math-verify accepts: {len(public['refused_that_math_verify_accepts'])} "
          f"({public['false_negative_rate']:.1%}): {public['refused_that_math_verify_accepts']}")
    print(f"    paid, math-verify refuses: {len(public['paid_that_math_verify_refuses'])}, e.g. "
          f"{public['paid_that_math_verify_refuses'][:6]}")

    import math_verify
    import trl

    report = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(), "python": platform.python_version()},
        "versions": {"trl": trl.__version__, "math_verify": getattr(math_verify, "__version__", None)
                     or _version("math-verify")},
        "gsm8k_vs_trl_accuracy_reward": gsm8k,
        "symbolic_vs_math_verify": symbolic,
        "symbolic_on_public_math_answers": public,
        "benchmark_seconds": time.perf_counter() - started,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {RESULTS.relative_to(ROOT)} ({report['benchmark_seconds']:.0f} s; {report['machine']['platform']}, "
          f"{report['machine']['cpu_count']} CPUs)")


def _version(distribution: str):
    from importlib.metadata import version

    return version(distribution)


if __name__ == "__main__":
    main()
