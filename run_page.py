"""report.html: one page per run folder, to see what the policy did. One copy, for every script.

    python run_page.py RUN_DIR          # writes RUN_DIR/report.html (any run folder: older runs, --eval_only runs)

Every script writes it at the end of a run (instruments.py calls `write`). The page is one self-contained file: the
run's data inlined as JSON, the project's own HTML, CSS and a little JavaScript, no network (a Content-Security-Policy
forbids any), so it opens from disk (file://) in any browser, and can be mailed or attached to an issue. It shows:
- the run: model, data, the settings that differ from the defaults, the held-out scores before and after, the
  monitor's warnings and training_curves.png;
- training groups by step (train_samples.jsonl): each prompt's rollouts side by side with their rewards, total and
  advantage, the parsed answer against the gold, tool calls folded; sort, filter and search;
- held-out questions before, during and after training (eval_*.jsonl), the ones that flipped marked;
- a long episode (grpo_search.py, ~100 tool calls, its context folded with --max_context_tokens) in parts of
  CALLS_PER_PART calls, each fold marked where it happened with the lines it left in view, and one line of its
  calls, folds, peak tokens in view and cost;
- replay.json's rescored completions, where it exists; the hack lab's marks, where a run has them.
Model text is data: the page inserts it with textContent only, never as HTML, and the inlined JSON escapes `<`,
so a completion holding `</script>` or `onerror=` shows as text. A long run's page holds a stated share of its
rollouts (every k-th logged step), and cuts each message shorter where needed (never below MIN_TEXT), so that it
stays under PAGE_BUDGET bytes: a long episode keeps every call and its answer, each cut, not only its first calls.
"""

import argparse
import base64
import json
import sys
from pathlib import Path

PAGE_BUDGET = 4_000_000  # bytes of inlined data: the page opens quickly, and a demo's page stays under 5 MB
MAX_TEXT = 6000  # characters of one text or message shown; the rest is cut, and the page says how much
MIN_TEXT = 300  # the shortest a message is cut to, to fit a page's budget: enough to tell what a tool result held
MAX_COLUMN = 3000  # characters of one dataset column (hidden tests, documents) shown beside a group
EVAL_FILES = ("eval_before.jsonl", "eval_midrun.jsonl", "eval_after.jsonl", "eval_only.jsonl")


def read_jsonl(path: Path) -> list:
    """The readable lines of a JSONL file (a run stopped while writing leaves its last line cut short)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def cut(value, limit: int = MAX_TEXT):
    """Text (or a conversation's messages) with each string cut to `limit` characters, the cut stated."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + f"\n[... {len(value) - limit:,} more characters]"
    if isinstance(value, list):
        return [cut(v, limit) for v in value]
    if isinstance(value, dict):
        return {k: cut(v, limit) for k, v in value.items()}
    return value


def fitting_limit(completions: list, budget: int, shortest: int = MIN_TEXT) -> int | None:
    """The longest cut, from MAX_TEXT down to `shortest` characters a message (and a fold's line), that brings the
    completions' texts and folds under `budget` bytes; None where even `shortest` does not."""
    limit = MAX_TEXT
    while len(json.dumps([cut([c.get("text"), c.get("folds")], limit) for c in completions])) > budget:
        if limit <= shortest:
            return None
        limit = max(shortest, limit * 2 // 3)
    return limit


def cut_texts(completions: list, limit: int) -> None:
    """Cut each message of the completions' texts, and each line of their folds, to `limit` characters."""
    for c in completions:
        c["text"] = cut(c.get("text"), limit)
        if c.get("folds"):
            c["folds"] = cut(c["folds"], limit)


def episode_of(completion: dict) -> dict:
    """What grpo_search.py's evaluation records of a multi-turn rollout, where it does: its tool calls, its folds
    (each: after_tool_calls, tokens_before, tokens_after, and `dropped`, the lines it left for the calls it folded
    away), the most tokens it had in view, its cost (seconds and tokens)."""
    return {key: completion[key] for key in ("tool_calls", "folds", "peak_context_tokens", "cost")
            if completion.get(key) is not None}


def right(rewards: dict, outcome: str | None):
    """Right: the outcome reward paid its full 1.0 (each script's outcome reward pays 1.0 for a right answer).
    None where the run names no outcome reward or the reward had no say."""
    value = (rewards or {}).get(outcome) if outcome else None
    return None if value is None else value >= 1 - 1e-6


def outcome_of(evaluation: dict, rows: list) -> str | None:
    """The outcome reward's name: eval.json says it; an older run's folder is read for one of the scripts' own."""
    if evaluation.get("outcome_reward"):
        return evaluation["outcome_reward"]
    names = {name for row in rows[:20] for c in row.get("completions", []) for name in c.get("rewards", {})}
    return next((n for n in ("correctness_reward", "tests_passed_reward", "exact_match_reward") if n in names), None)


def training_groups(rows: list, outcome: str | None, budget: int) -> tuple[list, dict]:
    """train_samples.jsonl's groups, every k-th logged step (the last one always) for the smallest k whose groups
    fit in `budget` bytes, each message cut shorter if even those do not. Returns the groups and what share of the
    file they are."""
    steps = sorted({row["step"] for row in rows})
    sizes = {}
    for row in rows:
        sizes[row["step"]] = sizes.get(row["step"], 0) + len(json.dumps(cut(row)))
    every = 1
    while every < len(steps) and sum(sizes[s] for s in steps[::every] + steps[-1:]) > budget:
        every += 1
    kept = set(steps[::every] + steps[-1:])
    groups = []
    for row in rows:
        if row["step"] not in kept:
            continue
        completions = [{"text": c.get("text"), "parsed": c.get("parsed_answer"), "rewards": c.get("rewards", {}),
                        "total": c.get("total"), "advantage": c.get("advantage"),
                        "right": right(c.get("rewards"), outcome), "hack": c.get("hack"), "flagged": c.get("flagged"),
                        **episode_of(c)}
                       for c in row.get("completions", [])]
        advantages = [c["advantage"] for c in completions if c["advantage"] is not None]
        totals = [c["total"] for c in completions if c["total"] is not None]
        no_signal = (len(completions) > 1 and (all(abs(a) < 1e-6 for a in advantages) if advantages else
                                               len(set(totals)) <= 1))
        groups.append({"step": row["step"], "prompt": cut(row.get("prompt")), "answer": cut(row.get("answer")),
                       "columns": {k: cut(v if isinstance(v, str) else json.dumps(v), MAX_COLUMN)
                                   for k, v in (row.get("columns") or {}).items()},
                       "completions": completions, "no_signal": no_signal})
    # The first and last steps stay whatever their size: where they pass the budget (long episodes), each message
    # is cut shorter
    limit = fitting_limit([c for g in groups for c in g["completions"]], budget) or MIN_TEXT
    cut_texts([c for g in groups for c in g["completions"]], limit)
    share = {"groups": len(groups), "groups_in_file": len(rows),
             "rollouts": sum(len(g["completions"]) for g in groups),
             "rollouts_in_file": sum(len(row.get("completions", [])) for row in rows),
             "steps": len(kept), "steps_in_file": len(steps), "every": every,
             "cut_to": limit if limit < MAX_TEXT else None}
    return groups, share


def held_out(folder: Path, outcome: str | None, budget: int) -> dict:
    """Each held-out question across the evaluations (before, mid-run steps, after; or --eval_only), its greedy
    answer right or wrong at each, and whether it flipped between the first and the last."""
    evaluations, questions = [], {}
    for name in EVAL_FILES:
        for row in read_jsonl(folder / name):
            label = {"eval_before.jsonl": "before", "eval_after.jsonl": "after", "eval_only.jsonl": "eval only"}.get(
                name, f"step {row.get('step')}")
            if label not in evaluations:
                evaluations.append(label)
            greedy = next((c for c in row.get("completions", []) if c.get("greedy")), None)
            if greedy is None:
                continue
            key = json.dumps(row.get("prompt"), sort_keys=True)
            question = questions.setdefault(key, {"prompt": cut(row.get("prompt")), "answer": cut(row.get("answer")),
                                                  "results": {}})
            question["results"][label] = {"right": right(greedy.get("rewards"), outcome), "text": greedy.get("text"),
                                          "parsed": greedy.get("parsed_answer"), "total": greedy.get("total"),
                                          "hack": greedy.get("hack"), "criteria": criteria_of(row),
                                          "time_limit": time_limit_of(greedy), **episode_of(greedy)}
    questions = list(questions.values())
    # Texts: every evaluation's where they fit whole, else the first and last evaluations', else the last one's, each
    # message then cut as short as MIN_TEXT to fit (a long episode keeps all its calls). The marks all stay.
    ends = [e for e in evaluations if e in (evaluations[0], evaluations[-1])]
    for texts_of, shortest in ((evaluations, MAX_TEXT), (ends, MIN_TEXT), (evaluations[-1:], MIN_TEXT)):
        limit = fitting_limit([r for q in questions for e, r in q["results"].items() if e in texts_of], budget,
                              shortest)
        if limit:
            break
    limit = limit or MIN_TEXT
    for q in questions:
        for label, result in q["results"].items():
            if label in texts_of:
                cut_texts([result], limit)
            else:
                result["text"] = None
                result.pop("folds", None)
        marks = [q["results"][e]["right"] for e in evaluations if e in q["results"]]
        first, last = (marks[0], marks[-1]) if len(marks) > 1 else (None, None)
        q["flip"] = ("wrong to right" if first is False and last is True else
                     "right to wrong" if first is True and last is False else None)
    return {"evaluations": evaluations, "questions": questions, "texts_of": texts_of,
            "cut_to": limit if limit < MAX_TEXT else None}


def time_limit_of(completion: dict) -> str | None:
    """Which time limit decided a code answer's hidden tests (grpo_code.py's `tests`), e.g. "timed out (over 2 s of
    CPU)"; None where none did, or the answer has no tests."""
    tests = completion.get("tests")
    errors = tests.get("errors") if isinstance(tests, dict) else None
    return next((cut(e, 200) for e in errors or [] if isinstance(e, str) and e.startswith("timed out")), None)


def criteria_of(row: dict) -> list | None:
    """A judged answer's rubric (grpo_judge.py): each criterion's title, weight, the judge's verdict and, where the
    data has one, the truth; None for rows without a rubric."""
    criteria = row.get("criteria")
    if not isinstance(criteria, list):
        return None
    return [{"title": cut(c.get("title") or c.get("description"), 200), "weight": c.get("weight"),
             "met": c.get("met"), "truth": c.get("truth")} for c in criteria if isinstance(c, dict)]


def replayed(folder: Path) -> dict | None:
    """replay.json's summary and replay.jsonl's completions, each with its total before and after and whether its
    advantage (its total against its group's mean) changed sign."""
    summary_path = folder / "replay.json"
    if not summary_path.is_file():
        return None
    records = read_jsonl(folder / "replay.jsonl")
    groups = {}
    for r in records:
        if not r.get("greedy"):
            groups.setdefault((r.get("file"), r.get("line")), []).append(r)
    for members in groups.values():
        if len(members) < 2 or members[0].get("line") is None:
            continue
        before = sum(m["total_before"] for m in members) / len(members)
        after = sum(m["total_after"] for m in members) / len(members)
        for m in members:
            old, new = m["total_before"] - before, m["total_after"] - after
            m["sign_flip"] = (old > 1e-6 and new < -1e-6) or (old < -1e-6 and new > 1e-6)
    rows = [{"file": r.get("file"), "step": r.get("step"), "text": cut(r.get("text"), 2000),
             "total_before": r.get("total_before"), "total_after": r.get("total_after"),
             "sign_flip": r.get("sign_flip", False)} for r in records]
    rows.sort(key=lambda r: -abs((r["total_after"] or 0) - (r["total_before"] or 0)))
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{summary_path} is not JSON ({error}): run --replay again, or move it aside") from None
    return {"summary": {k: summary.get(k) for k in ("completions", "rewards", "groups", "not_replayed")},
            "rows": rows[:500], "rows_in_file": len(rows)}


def page_data(folder: Path) -> dict:
    """Everything the page shows, read from the run folder."""
    evaluation_path = folder / "eval.json"
    try:
        evaluation = json.loads(evaluation_path.read_text(encoding="utf-8")) if evaluation_path.is_file() else {}
    except json.JSONDecodeError as error:
        raise ValueError(f"{evaluation_path} is not JSON ({error}): a run stopped while writing it? Move it aside "
                         "to draw the page from the other files") from None
    samples = read_jsonl(folder / "train_samples.jsonl")
    outcome = outcome_of(evaluation, samples or read_jsonl(folder / "eval_before.jsonl")
                         or read_jsonl(folder / "eval_only.jsonl"))
    groups, share = training_groups(samples, outcome, PAGE_BUDGET * 3 // 5)
    plot = folder / "training_curves.png"
    scores = {name: {k: v for k, v in (evaluation.get(name) or {}).items() if isinstance(v, (int, float))}
              for name in ("before", "after", "eval_only") if evaluation.get(name)}
    return {
        "folder": str(folder.resolve()),
        "run": {key: evaluation.get(key) for key in ("model", "dataset", "global_step", "num_processes",
                                                     "wall_time_seconds") if evaluation.get(key) is not None},
        "outcome": outcome, "flags": evaluation.get("flags", {}), "scores": scores,
        "warnings": evaluation.get("warnings", []), "hack_lab": evaluation.get("hack_lab"),
        "curves": "data:image/png;base64," + base64.b64encode(plot.read_bytes()).decode() if plot.is_file() else None,
        "groups": groups, "share": share,
        "held_out": held_out(folder, outcome, PAGE_BUDGET // 4),
        "replay": replayed(folder),
    }


def write(folder) -> Path:
    """RUN_DIR/report.html from what the run folder holds. Returns its path."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder: pass a run's --output_dir")
    if not any((folder / name).is_file() for name in ("eval.json", "train_samples.jsonl", *EVAL_FILES)):
        raise FileNotFoundError(f"{folder} holds no eval.json, train_samples.jsonl or eval_*.jsonl: pass the "
                                "--output_dir of a run")
    data = json.dumps(finite(page_data(folder)), ensure_ascii=False, default=str)
    # Inside <script type="application/json">, only "</script" or "<!--" could end the block: no "<" is left
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    head, tail = TEMPLATE.split("__DATA__")
    page = head.replace("__TITLE__", escape(f"{folder.resolve().name}: GRPO run")) + data + tail
    path = folder / "report.html"
    temporary = path.with_name(".report.html.tmp")  # the old page stays whole until the new one is written
    temporary.write_text(page, encoding="utf-8")
    temporary.replace(path)
    return path


def finite(value):
    """NaN and infinities as None: JSON.parse refuses them (a reward with no say is NaN in TRL's log)."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, list):
        return [finite(v) for v in value]
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    return value


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


TEMPLATE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d1d1f; background: #f6f6f7; }
header { background: #20232a; color: #fff; padding: 10px 18px; }
header h1 { font-size: 17px; margin: 0; } header .sub { color: #bbb; font-size: 12px; }
nav { display: flex; gap: 4px; padding: 8px 18px 0; background: #e9e9ec; }
nav button { border: 0; background: none; padding: 7px 12px; cursor: pointer; font: inherit; border-radius: 6px 6px 0 0; }
nav button.on { background: #f6f6f7; font-weight: 600; }
main { padding: 12px 18px 40px; } section { display: none; } section.on { display: block; }
table { border-collapse: collapse; background: #fff; margin: 6px 0 14px; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f2; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.controls { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; margin: 6px 0 10px; }
.controls input[type=search] { width: 260px; }
.count { color: #555; } .note { color: #555; font-size: 12px; }
.group { background: #fff; border: 1px solid #ddd; border-radius: 8px; margin: 0 0 14px; padding: 8px 10px; }
.group.nosignal { border-left: 5px solid #b0b0b0; }
.ghead { display: flex; gap: 12px; flex-wrap: wrap; align-items: baseline; }
.badge { display: inline-block; font-size: 11px; padding: 1px 6px; border-radius: 9px; background: #eee; }
.badge.nosignal { background: #ddd; } .badge.hack { background: #c62828; color: #fff; }
.badge.flagged { background: #ef6c00; color: #fff; } .badge.right { background: #2e7d32; color: #fff; }
.badge.wrong { background: #9e9e9e; color: #fff; } .badge.flip { background: #6a1b9a; color: #fff; }
.rollouts { display: flex; gap: 8px; overflow-x: auto; padding: 6px 0 2px; }
.rollout { flex: 0 0 320px; min-width: 0; overflow-wrap: anywhere; border: 1px solid #e2e2e2; border-radius: 6px; padding: 6px; background: #fcfcfd; }
.rollout.best { border-color: #2e7d32; box-shadow: 0 0 0 1px #2e7d32 inset; }
.scores { font-size: 12px; color: #333; } .scores span { margin-right: 8px; display: inline-block; }
.adv { position: relative; height: 10px; background: #eee; margin: 4px 0; border-radius: 2px; }
.adv i { position: absolute; top: 0; bottom: 0; } .adv .mid { left: 50%; width: 1px; background: #777; }
pre { white-space: pre-wrap; word-break: break-word; margin: 4px 0; font: 12px/1.4 ui-monospace, monospace;
      background: #f3f3f5; padding: 5px; border-radius: 4px; max-height: 360px; overflow: auto; }
details { margin: 3px 0; } summary { cursor: pointer; color: #1a4f9c; }
.fold { border-left: 4px solid #6a1b9a; background: #f5effa; padding: 2px 8px; margin: 4px 0; font-size: 12px; }
details.part { border-left: 2px solid #ccc; padding-left: 6px; } details.part > summary { font-weight: 600; }
.facts { font-size: 12px; color: #333; margin: 2px 0; }
.msg-role { font-size: 11px; color: #666; text-transform: uppercase; letter-spacing: .04em; }
tr.flip td:first-child { border-left: 4px solid #6a1b9a; }
td.r { background: #e6f4e7; } td.w { background: #f9e3e3; }
table.criteria { font-size: 12px; margin: 4px 0 8px; } tr.disagree td:first-child { border-left: 4px solid #ef6c00; }
img.curves { max-width: 100%; background: #fff; border: 1px solid #ddd; }
.warn { background: #fff3e0; border: 1px solid #ffb74d; border-radius: 6px; padding: 6px 10px; margin: 4px 0; }
</style></head>
<body>
<header><h1 id="title"></h1><div class="sub" id="subtitle"></div></header>
<nav id="tabs"></nav>
<main>
<section id="run"></section>
<section id="groups"></section>
<section id="heldout"></section>
<section id="replay"></section>
</main>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);

// Every piece of run text goes in through textContent: nothing from the data is ever parsed as HTML.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value; else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value); else node.setAttribute(key, value);
  }
  for (const child of children) if (child !== null && child !== undefined)
    node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  return node;
}
const fmt = (x, digits = 3) => x === null || x === undefined ? "-" : typeof x === "number" ?
  (Number.isInteger(x) ? String(x) : x.toFixed(digits)) : String(x);
const thousands = x => typeof x === "number" ? x.toLocaleString("en-US") : fmt(x);  // 512,345
const ordinal = n => n + ([11, 12, 13].includes(n % 100) ? "th" : ["th", "st", "nd", "rd"][n % 10] || "th");
const asText = v => v === null || v === undefined ? "" : typeof v === "string" ? v : JSON.stringify(v, null, 1);
function lastUser(prompt) {  // a chat prompt's question: its last user message
  if (!Array.isArray(prompt)) return asText(prompt);
  const users = prompt.filter(m => m && m.role === "user");
  return asText((users.length ? users[users.length - 1] : prompt[prompt.length - 1] || {}).content);
}
function plain(value) {  // all the text of a completion, for the search
  if (!Array.isArray(value)) return asText(value);
  return value.map(m => asText(m.content) + " " + JSON.stringify(m.tool_calls || "")).join(" ");
}
function messageNodes(m) {  // one message: its text, its tool calls and a tool's result folded
  if (m.role === "tool")
    return [el("details", {class: "tool-result"}, el("summary", {text: "tool result" + (m.name ? " (" + m.name + ")" : "")}),
               el("pre", {text: asText(m.content)}))];
  const nodes = [];
  if (m.content !== undefined && m.content !== null && asText(m.content) !== "")
    nodes.push(el("div", {}, el("div", {class: "msg-role", text: m.role || ""}), el("pre", {text: asText(m.content)})));
  for (const call of m.tool_calls || []) {
    const f = call.function || call;
    const args = typeof f.arguments === "string" ? f.arguments : JSON.stringify(f.arguments, null, 1);
    nodes.push(el("details", {class: "tool-call"}, el("summary", {text: "tool call: " + (f.name || "?")}), el("pre", {text: args})));
  }
  return nodes;
}
const callsIn = messages => Array.isArray(messages) ? messages.reduce((n, m) => n + ((m && m.tool_calls) || []).length, 0) : 0;
const CALLS_PER_PART = 16;  // a longer or folded episode is shown in parts of this many tool calls
function conversation(value, rollout) {  // a completion: its text, or its messages; a long episode in parts
  if (!Array.isArray(value)) return el("pre", {text: asText(value)});
  const folds = (rollout && rollout.folds) || [];
  if (folds.length || callsIn(value) > CALLS_PER_PART) return inParts(value, folds);
  return el("div", {class: "conv"}, ...value.filter(m => m).flatMap(messageNodes));
}
// Parts of CALLS_PER_PART calls, each starting at a turn, collapsed but the last (which holds the answer); each fold
// marked where it happened, after the results of its last call. Parts, not one per fold: once a small window is
// full, a fold comes every turn or two.
function inParts(messages, folds) {
  const parts = [], tools = new Set();  // tools in the order the episode first used them: each header alike
  let part = null, calls = 0, next = 0;
  const foldsUpTo = n => {  // the folds made once n calls had their results
    for (; next < folds.length && folds[next].after_tool_calls <= n; next++) {
      part.nodes.push(foldMark(folds[next], next + 1));
      part.folds.push(next + 1);
    }
  };
  for (const m of messages.filter(m => m)) {
    if (m.role === "assistant" && part) foldsUpTo(calls);
    if (!part || (m.role === "assistant" && part.calls >= CALLS_PER_PART))
      parts.push(part = {nodes: [], first: calls + 1, calls: 0, tools: {}, folds: []});
    for (const call of m.tool_calls || []) {
      const name = (call.function || call).name || "?";
      tools.add(name);
      part.tools[name] = (part.tools[name] || 0) + 1;
    }
    part.calls += (m.tool_calls || []).length; calls += (m.tool_calls || []).length;
    part.nodes.push(...messageNodes(m));
  }
  if (!part) parts.push(part = {nodes: [], first: 1, calls: 0, tools: {}, folds: []});
  foldsUpTo(Infinity);  // a fold after the last turn (the episode ended there) is marked too
  const last = messages[messages.length - 1];
  const answered = last && last.role === "assistant" && !(last.tool_calls || []).length;
  return el("div", {class: "conv"}, ...parts.map((p, n) => {
    const label = [p.calls ? "calls " + p.first + "-" + (p.first + p.calls - 1) : "no calls",
      [...tools].filter(name => p.tools[name]).map(name => name + " ×" + p.tools[name]).join(", "),
      p.folds.length ? (p.folds.length > 1 ? "folds " + p.folds[0] + "-" + p.folds[p.folds.length - 1] : "fold " + p.folds[0]) : "",
      n === parts.length - 1 && answered ? "the answer" : ""].filter(x => x).join(" · ");
    return el("details", n === parts.length - 1 ? {class: "part", open: ""} : {class: "part"}, el("summary", {text: label}), ...p.nodes);
  }));
}
function foldMark(fold, number) {  // what grpo_search.py records of a fold (context_folding.py's tool_call_loop)
  const lines = fold.dropped || [];
  return el("div", {class: "fold", "data-after": String(fold.after_tool_calls)},
    el("b", {text: "fold " + number + " after call " + fold.after_tool_calls}),
    ": " + thousands(fold.tokens_before) + " → " + thousands(fold.tokens_after) + " tokens in view; the " + lines.length +
    " line(s) it left in the user's message for the calls folded away:", el("pre", {text: lines.join("\n")}));
}
function rolloutFacts(rollout) {  // one line: tool calls, folds, peak tokens in view, cost; where recorded or long
  const recorded = ["tool_calls", "folds", "peak_context_tokens", "cost"].some(k => rollout[k] !== undefined);
  if (!recorded && callsIn(rollout.text) <= CALLS_PER_PART) return null;
  const folds = rollout.folds || [], cost = rollout.cost || {};
  const seconds = Object.entries(cost).filter(([k]) => k.endsWith("_seconds"));
  const facts = [thousands(rollout.tool_calls ?? callsIn(rollout.text)) + " tool calls",
    rollout.folds ? folds.length + " folds" + (folds.length ? " (after calls " + folds.map(f => f.after_tool_calls).join(", ") + ")" : "") : "",
    rollout.peak_context_tokens ? "peak " + thousands(rollout.peak_context_tokens) + " tokens in view" : "",
    seconds.length ? fmt(seconds.reduce((t, [, v]) => t + v, 0), 1) + " s (" +
      seconds.map(([k, v]) => k.replace(/_seconds$/, "") + " " + fmt(v, 2)).join(", ") + ")" : "",
    cost.prefilled_tokens !== undefined ? thousands(cost.prefilled_tokens) + " tokens prefilled, " + thousands(cost.generated_tokens) + " generated" : ""];
  return el("div", {class: "facts", text: facts.filter(x => x).join(" · ")});
}
function foldedPrompt(prompt) {
  return el("details", {}, el("summary", {text: "whole prompt"}), conversation(prompt));
}

// ---- tabs
const SECTIONS = [["run", "Run"], ["groups", "Training groups"], ["heldout", "Held-out questions"]];
if (D.replay) SECTIONS.push(["replay", "Replay"]);
function show(id) {
  for (const [key] of SECTIONS) {
    document.getElementById(key).classList.toggle("on", key === id);
    document.getElementById("tab-" + key).classList.toggle("on", key === id);
  }
}
for (const [key, label] of SECTIONS)
  document.getElementById("tabs").appendChild(el("button", {id: "tab-" + key, text: label, onclick: () => show(key)}));
const short = name => String(name || "?").startsWith("/") ? String(name).split("/").filter(Boolean).pop() : String(name || "?");
document.getElementById("title").textContent = short(D.run.model) + " on " + short(D.run.dataset);  // a folder by its name
document.getElementById("subtitle").textContent = D.folder;

// ---- the run
(function () {
  const s = document.getElementById("run");
  const facts = el("table", {id: "facts"});
  for (const [key, value] of Object.entries(D.run)) facts.appendChild(el("tr", {}, el("th", {text: key}), el("td", {text: fmt(value)})));
  if (D.outcome) facts.appendChild(el("tr", {}, el("th", {text: "right means"}),
                                      el("td", {text: D.outcome + " paid its full 1.0"})));
  s.appendChild(el("h2", {text: "The run"})); s.appendChild(facts);
  const names = ["before", "after", "eval_only"].filter(n => D.scores[n]);
  if (names.length) {
    const keys = [...new Set(names.flatMap(n => Object.keys(D.scores[n])))];
    const table = el("table", {id: "scores"}, el("tr", {}, el("th", {text: "held-out"}), ...names.map(n => el("th", {text: n}))));
    for (const key of keys) table.appendChild(el("tr", {}, el("td", {text: key}),
      ...names.map(n => el("td", {class: "num", text: fmt(D.scores[n][key])}))));
    s.appendChild(el("h2", {text: "Held-out scores"})); s.appendChild(table);
  }
  s.appendChild(el("h2", {text: "Run monitor: " + D.warnings.length + " warning(s)"}));
  for (const w of D.warnings) s.appendChild(el("div", {class: "warn"}, el("b", {text: "step " + w.step + " (" + w.rule + "): "}), w.message || ""));
  if (D.hack_lab) {
    const t = el("table", {id: "hacklab"});
    for (const [key, value] of Object.entries(D.hack_lab))
      t.appendChild(el("tr", {}, el("th", {text: key}), el("td", {text: typeof value === "object" ? JSON.stringify(value) : fmt(value)})));
    s.appendChild(el("h2", {text: "Hack lab"})); s.appendChild(t);
  }
  if (D.curves) { s.appendChild(el("h2", {text: "Training curves"})); s.appendChild(el("img", {class: "curves", src: D.curves, alt: "training curves"})); }
  const flags = Object.entries(D.flags || {});
  const ft = el("table", {id: "flags"});
  for (const [key, value] of flags) ft.appendChild(el("tr", {}, el("td", {text: "--" + key}), el("td", {text: fmt(value, 6)})));
  s.appendChild(el("h2", {text: "Settings that differ from the defaults (" + flags.length + ")"}));
  s.appendChild(flags.length ? ft : el("p", {class: "note", text: "not recorded by this run"}));
})();

// ---- training groups
const G = D.groups.map((g, index) => {
  const totals = g.completions.map(c => c.total).filter(x => x !== null && x !== undefined);
  const advantages = g.completions.map(c => c.advantage).filter(x => x !== null && x !== undefined);
  return Object.assign(g, {index, mean: totals.length ? totals.reduce((a, b) => a + b, 0) / totals.length : 0,
    topAdvantage: advantages.length ? Math.max(...advantages) : 0,
    spread: totals.length ? Math.max(...totals) - Math.min(...totals) : 0,
    haystack: (lastUser(g.prompt) + " " + asText(g.answer) + " " + g.completions.map(c => plain(c.text)).join(" ")).toLowerCase()});
});
const PAGE = 40;
let shownGroups = PAGE;
function groupCard(g) {
  const maxAdv = Math.max(1e-9, ...g.completions.map(c => Math.abs(c.advantage || 0)));
  const best = g.completions.reduce((b, c, i) => (c.advantage ?? c.total ?? 0) > (g.completions[b].advantage ?? g.completions[b].total ?? 0) ? i : b, 0);
  const head = el("div", {class: "ghead"}, el("b", {text: "step " + g.step}),
    el("span", {class: "question", text: lastUser(g.prompt).slice(0, 300)}),
    el("span", {text: "gold: " + asText(g.answer).slice(-80)}),
    el("span", {class: "count", text: "mean total " + fmt(g.mean, 2)}),
    g.no_signal ? el("span", {class: "badge nosignal", text: "no signal: every rollout scored the same"}) : null);
  const extra = el("div", {}, foldedPrompt(g.prompt), ...Object.entries(g.columns).map(([k, v]) =>
    el("details", {}, el("summary", {text: "column: " + k}), el("pre", {text: v}))));
  const row = el("div", {class: "rollouts"});
  const order = g.completions.map((c, i) => i);
  if (document.getElementById("g-order").checked)
    order.sort((i, j) => (g.completions[j].advantage ?? g.completions[j].total ?? 0) - (g.completions[i].advantage ?? g.completions[i].total ?? 0));
  order.forEach(i => {
    const c = g.completions[i];
    const adv = c.advantage || 0, width = 50 * Math.abs(adv) / maxAdv;
    const bar = el("div", {class: "adv", title: "advantage " + fmt(c.advantage)}, el("i", {class: "mid"}),
      el("i", {style: "background:" + (adv >= 0 ? "#2e7d32" : "#c62828") + ";" + (adv >= 0 ? "left:50%" : "right:50%") + ";width:" + width + "%"}));
    const rewards = el("div", {class: "scores"}, ...Object.entries(c.rewards || {}).map(([k, v]) =>
      el("span", {text: k.replace(/_reward$/, "") + " " + fmt(v, 2)})));
    const marks = el("div", {},
      c.right === true ? el("span", {class: "badge right", text: "right"}) : c.right === false ? el("span", {class: "badge wrong", text: "wrong"}) : null,
      c.hack ? el("span", {class: "badge hack", text: "hack (truth)"}) : null,
      c.flagged ? el("span", {class: "badge flagged", text: "flagged by the detector"}) : null,
      " answer: ", el("code", {text: c.parsed === null || c.parsed === undefined ? "none" : asText(c.parsed).trim().slice(0, 120)}));
    row.appendChild(el("div", {class: "rollout" + (i === best && !g.no_signal ? " best" : ""), "data-total": fmt(c.total, 6),
                           "data-advantage": fmt(c.advantage, 6)},
      el("div", {}, el("b", {text: "total " + fmt(c.total, 2)}), "  advantage ", el("span", {class: "advantage", text: fmt(c.advantage, 2)})),
      bar, rewards, marks, rolloutFacts(c), conversation(c.text, c)));
  });
  return el("div", {class: "group" + (g.no_signal ? " nosignal" : ""), "data-step": g.step, "data-mean": g.mean}, head, extra, row);
}
function selectedGroups() {
  const step = document.getElementById("g-step").value, filter = document.getElementById("g-filter").value;
  const sort = document.getElementById("g-sort").value, query = document.getElementById("g-search").value.trim().toLowerCase();
  let list = G.filter(g => (step === "all" || String(g.step) === step) && (!query || g.haystack.includes(query)));
  const any = (g, f) => g.completions.some(f);
  if (filter === "some-right") list = list.filter(g => any(g, c => c.right === true));
  if (filter === "all-wrong") list = list.filter(g => !any(g, c => c.right !== false));
  if (filter === "no-signal") list = list.filter(g => g.no_signal);
  if (filter === "signal") list = list.filter(g => !g.no_signal);
  if (filter === "hack") list = list.filter(g => any(g, c => c.hack));
  if (filter === "flagged") list = list.filter(g => any(g, c => c.flagged));
  const by = {"step": (a, b) => a.step - b.step || a.index - b.index, "step-desc": (a, b) => b.step - a.step || a.index - b.index,
    "mean-desc": (a, b) => b.mean - a.mean, "mean": (a, b) => a.mean - b.mean, "spread-desc": (a, b) => b.spread - a.spread,
    "advantage-desc": (a, b) => b.topAdvantage - a.topAdvantage};
  return list.slice().sort(by[sort]);
}
function drawGroups() {
  const list = selectedGroups(), box = document.getElementById("g-list");
  box.replaceChildren(...list.slice(0, shownGroups).map(groupCard));
  const rollouts = list.reduce((n, g) => n + g.completions.length, 0);
  document.getElementById("g-count").textContent = list.length + " groups, " + rollouts + " rollouts match; showing " + Math.min(shownGroups, list.length);
  document.getElementById("g-more").style.display = list.length > shownGroups ? "" : "none";
}
(function () {
  const s = document.getElementById("groups"), sh = D.share;
  s.appendChild(el("h2", {text: "Training groups"}));
  s.appendChild(el("p", {class: "note", id: "g-share", text: sh.groups_in_file ?
    "From train_samples.jsonl: " + sh.groups + " of " + sh.groups_in_file + " groups (" + sh.rollouts + " of " + sh.rollouts_in_file +
    " rollouts), " + (sh.every > 1 ? "every " + ordinal(sh.every) + " logged step (" + sh.steps + " of " + sh.steps_in_file + ")." : "every logged step.") +
    (sh.cut_to ? " Each message cut to " + sh.cut_to + " characters to fit the page." : "") +
    " Each group is one prompt's rollouts side by side; the bar is GRPO's advantage (green above the group's mean, red below)." :
    "This run saved no training groups (--train_samples_per_log 0, or an --eval_only run)."}));
  const steps = [...new Set(G.map(g => g.step))].sort((a, b) => a - b);
  const option = (v, t) => el("option", {value: v, text: t});
  s.appendChild(el("div", {class: "controls"},
    el("label", {}, "step ", el("select", {id: "g-step", onchange: redraw}, option("all", "all"), ...steps.map(x => option(String(x), String(x))))),
    el("label", {}, "show ", el("select", {id: "g-filter", onchange: redraw}, option("all", "all groups"),
      option("some-right", "a rollout right"), option("all-wrong", "every rollout wrong"), option("signal", "groups with signal"),
      option("no-signal", "no signal"), option("hack", "a hack (truth)"), option("flagged", "a flagged rollout"))),
    el("label", {}, "sort ", el("select", {id: "g-sort", onchange: redraw}, option("step", "step"), option("step-desc", "step, last first"),
      option("mean-desc", "mean total, high first"), option("mean", "mean total, low first"), option("spread-desc", "spread of totals"),
      option("advantage-desc", "largest advantage"))),
    el("label", {}, el("input", {type: "checkbox", id: "g-order", checked: "", onchange: redraw}), " rollouts by advantage, best first"),
    el("input", {type: "search", id: "g-search", placeholder: "search prompts and completions", oninput: redraw}),
    el("span", {class: "count", id: "g-count"})));
  s.appendChild(el("div", {id: "g-list"}));
  s.appendChild(el("button", {id: "g-more", text: "show more", onclick: () => { shownGroups += PAGE; drawGroups(); }}));
  function redraw() { shownGroups = PAGE; drawGroups(); }
  drawGroups();
})();

// ---- held-out questions
(function () {
  const s = document.getElementById("heldout"), H = D.held_out;
  s.appendChild(el("h2", {text: "Held-out questions"}));
  if (!H.questions.length) { s.appendChild(el("p", {class: "note", text: "No eval_*.jsonl in this run folder."})); return; }
  const flips = H.questions.filter(q => q.flip);
  const limited = H.questions.reduce((n, q) => n + Object.values(q.results).filter(r => r.time_limit).length, 0);
  s.appendChild(el("p", {class: "note", id: "h-summary", text: H.questions.length + " questions; greedy answer right (green) or wrong (red) at each evaluation. " +
    H.questions.filter(q => q.flip === "wrong to right").length + " flipped wrong to right, " +
    H.questions.filter(q => q.flip === "right to wrong").length + " right to wrong (first against last evaluation). Click a row for the answers." +
    (limited ? " " + limited + " answers failed on a time limit, marked (time limit): the limits, not only the code, decided them." : "") +
    (H.texts_of.length < H.evaluations.length ? " Texts kept for " + H.texts_of.join(" and ") + " only." : "") +
    (H.cut_to ? " Each message cut to " + H.cut_to + " characters to fit the page." : "")}));
  const select = el("select", {id: "h-filter", onchange: draw}, el("option", {value: "all", text: "all questions"}),
    el("option", {value: "flipped", text: "flipped (" + flips.length + ")"}), el("option", {value: "wrong to right", text: "wrong to right"}),
    el("option", {value: "right to wrong", text: "right to wrong"}));
  const search = el("input", {type: "search", id: "h-search", placeholder: "search questions", oninput: draw});
  s.appendChild(el("div", {class: "controls"}, el("label", {}, "show ", select), search));
  const table = el("table", {id: "h-table"}); s.appendChild(table);
  function draw() {
    const f = select.value, query = search.value.trim().toLowerCase();
    const rows = [el("tr", {}, el("th", {text: "question"}), el("th", {text: "gold"}), ...H.evaluations.map(e => el("th", {text: e})), el("th", {text: "flip"}))];
    for (const q of H.questions) {
      if (f === "flipped" ? !q.flip : f !== "all" && q.flip !== f) continue;
      if (query && !lastUser(q.prompt).toLowerCase().includes(query)) continue;
      const cells = H.evaluations.map(e => {
        const r = q.results[e];
        return r ? el("td", {class: r.right === true ? "r" : r.right === false ? "w" : "", title: r.time_limit || "", text: (r.right === true ? "right" : r.right === false ? "wrong" : "?") + (r.hack ? " (hack)" : "") + (r.time_limit ? " (time limit)" : "")}) : el("td", {text: ""});
      });
      const detail = el("tr", {class: "detail", style: "display:none"}, el("td", {colspan: String(H.evaluations.length + 3)},
        ...H.evaluations.filter(e => q.results[e] && q.results[e].text !== null).map(e =>
          el("details", {open: ""}, el("summary", {text: e + ": answer " + asText(q.results[e].parsed).trim().slice(0, 100) +
            (q.results[e].time_limit ? " | hidden tests: " + q.results[e].time_limit : "")}), rolloutFacts(q.results[e]),
            conversation(q.results[e].text, q.results[e]),
            ...(q.results[e].criteria ? [criteriaTable(q.results[e].criteria)] : [])))));
      const row = el("tr", {class: "question" + (q.flip ? " flip" : ""), onclick: () => { detail.style.display = detail.style.display ? "" : "none"; }},
        el("td", {text: lastUser(q.prompt).slice(0, 200)}), el("td", {text: asText(q.answer).slice(-60)}), ...cells,
        el("td", {}, q.flip ? el("span", {class: "badge flip", text: q.flip}) : ""));
      rows.push(row, detail);
    }
    table.replaceChildren(...rows);
  }
  draw();
})();

// A judged answer's rubric: each criterion, the judge's verdict, and the truth where the data has one
function criteriaTable(criteria) {
  const mark = v => v === true ? "met" : v === false ? "not met" : v === null || v === undefined ? "" : "?";
  const withTruth = criteria.some(c => c.truth !== null && c.truth !== undefined);
  return el("table", {class: "criteria"}, el("tr", {}, el("th", {text: "criterion"}), el("th", {text: "weight"}),
      el("th", {text: "judge"}), ...(withTruth ? [el("th", {text: "truth"})] : [])),
    ...criteria.map(c => el("tr", {class: withTruth && c.truth !== null && c.met !== c.truth ? "disagree" : ""},
      el("td", {text: asText(c.title)}), el("td", {text: String(c.weight)}),
      el("td", {class: c.met === true ? "r" : c.met === false ? "w" : "", text: mark(c.met) || "no verdict"}),
      ...(withTruth ? [el("td", {class: c.truth === true ? "r" : c.truth === false ? "w" : "", text: mark(c.truth)})] : []))));
}

// ---- replay
(function () {
  if (!D.replay) return;
  const s = document.getElementById("replay"), R = D.replay;
  s.appendChild(el("h2", {text: "Replay: the recorded completions scored with the rubric as it is now"}));
  const flips = R.rows.filter(r => r.sign_flip).length;
  s.appendChild(el("p", {class: "note", id: "r-summary", text: R.rows_in_file + " completions replayed (" + R.rows.length +
    " shown, the most moved first); " + flips + " of those shown changed the sign of their advantage."}));
  const t = el("table", {id: "r-table"}, el("tr", {}, ...["file", "step", "total before", "total after", "advantage sign", "completion"].map(h => el("th", {text: h}))));
  for (const r of R.rows) t.appendChild(el("tr", {class: r.sign_flip ? "flip" : ""}, el("td", {text: r.file}), el("td", {text: fmt(r.step)}),
    el("td", {class: "num", text: fmt(r.total_before, 2)}), el("td", {class: "num", text: fmt(r.total_after, 2)}),
    el("td", {}, r.sign_flip ? el("span", {class: "badge flip", text: "flipped"}) : ""), el("td", {}, el("details", {}, el("summary", {text: "text"}), conversation(r.text)))));
  s.appendChild(t);
})();

show(location.hash.slice(1) && SECTIONS.some(([k]) => k === location.hash.slice(1)) ? location.hash.slice(1) : "run");
</script>
</body></html>
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a run's --output_dir (several may be given)")
    args = parser.parse_args(argv)
    for folder in args.run_dirs:
        try:
            path = write(folder)
        except (FileNotFoundError, ValueError) as error:  # ValueError: an unreadable eval.json or replay.json
            sys.exit(f"run_page.py: {error}")
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB): open it in a browser (file://{path.resolve()})")


if __name__ == "__main__":
    main()
