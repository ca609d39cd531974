"""grpo_search.py over long chains: context folding on hand-written conversations, a scripted agent that solves a
depth-8 question through the trainer's own tool loop inside the window, folded segments in training, the flags."""

import json
import random
import re
import time

import pytest
import torch
from conftest import REPO, docs_text, run_script

import grpo_search as gs
import context_folding

LONG_CONFIG = REPO / "assets" / "long_search.yaml"
LONG_MODEL = REPO / "assets" / "tiny-qwen-search-long"
LONG_DATA = REPO / "assets" / "toy_search_long"
QUESTION = "Where was the founder of the school of Scholar 318 born?"


def turn(name, result, **arguments):
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return [{"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "name": name, "content": result}]


def conversation(hops):
    """[system, user, then a search and an open per scholar]: hops x 2 turns."""
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": QUESTION}]
    for n in range(hops):
        messages += turn("search", f"[d{n}] Scholar {n}: Scholar {n} studied ...\n[d9{n}] Scholar 9{n}: ...",
                         query=f"Scholar {n}")
        messages += turn("open", f"[d{n}] page 2 of 2\nThe mentor of Scholar {n} was Scholar {n + 1}.", doc_id=f"d{n}",
                         page=2)
    return messages


# ---- folding, by hand ------------------------------------------------------------------------------
def test_a_fold_keeps_the_last_turns_whole_and_leaves_one_line_per_dropped_call():
    messages = conversation(3)  # six turns
    folded, lines = context_folding.fold_context(messages, QUESTION)
    assert folded[0] == messages[0] and folded[2:] == messages[-2 * context_folding.FOLD_KEEP_TURNS:]  # the current turn, whole
    assert len(lines) == 6 - context_folding.FOLD_KEEP_TURNS
    assert lines[0] == '- search("Scholar 0") showed: d0 d90' and lines[1] == '- open("d0", 2) showed: d0'
    assert folded[1]["content"] == f"{QUESTION}\n\n{context_folding.FOLDED}\n" + "\n".join(lines)


def test_folding_again_keeps_earlier_lines_and_notes_outlive_the_cap():
    messages = conversation(1)
    messages[2:2] = turn("note", "Noted.", text="the chain so far: 318 -> 742")
    question, lines_seen = QUESTION, []
    for hop in range(1, 12):  # fold after every new hop, as a long episode would
        messages, lines = context_folding.fold_context(messages, question)
        lines_seen += lines
        block = messages[1]["content"].split(context_folding.FOLDED, 1)[1].strip().splitlines()
        assert len(block) <= context_folding.FOLD_MAX_LINES + 1  # the lines, and at most one count of the others
        assert "- note: the chain so far: 318 -> 742" in block  # the model's note survives every fold
        messages += conversation(hop + 1)[-4:]
    hidden = int(re.search(r"- (\d+) earlier tool calls", messages[1]["content"]).group(1))
    assert hidden + len(block) - 1 == len(lines_seen)  # every folded call is listed or counted, none twice
    assert messages[1]["content"].startswith(QUESTION)


def test_a_hundred_hidden_calls_read_many_and_stay_so():
    """The count of calls no longer listed is a number up to 99, then "many" in every later fold: a three-digit count
    beside three-digit ids is what the hundred-call demo's model miscopied."""
    messages, counts = conversation(1), []
    for hop in range(1, 70):
        messages, _ = context_folding.fold_context(messages, QUESTION)
        counts += re.findall(r"- (\w+) earlier tool calls not listed", messages[1]["content"])
        messages += conversation(hop + 1)[-4:]
    numbers = [int(c) for c in counts if c.isdigit()]
    assert numbers == sorted(numbers) and max(numbers) < context_folding.HIDDEN_MANY <= max(numbers) + 2
    assert counts[len(numbers):] and set(counts[len(numbers):]) == {"many"}  # once many, always many


def test_nothing_to_fold_leaves_the_conversation_as_it_was():
    messages = conversation(1)
    folded, lines = context_folding.fold_context(messages, QUESTION)
    assert lines == [] and folded[2:] == messages[2:]


# ---- a scripted agent through the trainer's own tool loop ------------------------------------------
def scripted_turn(text: str, give_up: bool = False) -> str:
    """The next assistant turn of a perfect agent, from the context it is shown; with give_up, one that answers
    with the town of the scholar it just read about."""
    results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text, re.DOTALL)
    last = results[-1] if results and text.rstrip().endswith("<|im_start|>assistant") and \
        text.rfind("</tool_response>") > text.rfind("<|im_start|>user\nWhere") else None
    if last is None:  # the first turn: search the scholar the question names
        name = re.findall(r"school of (Scholar \d+) born", text)[-1]
        return json.dumps({"name": "search", "arguments": {"query": name}})
    if "page 2 of" not in last:  # a search result: open the first document, page 2
        shown = re.match(r"\[([^\]]+)\]", last).group(1)
        return json.dumps({"name": "open", "arguments": {"doc_id": shown, "page": 2}})
    mentor = re.search(r"The mentor of Scholar \d+ was (Scholar \d+)\.", last)
    if mentor and not give_up:
        return json.dumps({"name": "search", "arguments": {"query": mentor.group(1)}})
    return "<answer>" + re.search(r"was born in (\w+)\.", last).group(1) + "</answer>"


@pytest.fixture
def scripted(monkeypatch):
    """Replace the model's sampling with the scripted agent; record every context it was shown."""
    shown, coin = [], random.Random(0)

    def generate(self, prompt_ids, *args, **kwargs):
        ids = []
        for prompt in prompt_ids:
            text = self.processing_class.decode(prompt)
            shown.append(len(prompt))
            move = scripted_turn(text, give_up=self.model.training and coin.random() < 0.1)
            body = move if move.startswith("<answer>") else f"<tool_call>\n{move}\n</tool_call>"
            ids.append(self.processing_class.encode(body + "<|im_end|>", add_special_tokens=False))
        return ids, None

    monkeypatch.setattr(gs.GRPOTrainer, "_generate_single_turn", generate)
    return shown


def long_flags(tmp_path, *extra):
    return ["--config", LONG_CONFIG, "--model_name_or_path", LONG_MODEL, "--dataset_name", LONG_DATA,
            "--corpus_name", LONG_DATA / "corpus.jsonl", "--output_dir", tmp_path / "run", *extra]


def test_a_scripted_agent_solves_depth_8_questions_inside_the_window(tmp_path, scripted):
    window = 1024
    results = gs.main(long_flags(tmp_path, "--eval_only", "--max_hops", "8", "--num_eval_examples", "100",
                                 "--max_context_tokens", window))["eval_only"]
    rows = [json.loads(line) for line in (tmp_path / "run" / "eval_only.jsonl").open()]
    deepest = [r for r in rows if len(r["completions"][0]["supporting_docs"]) == 8]
    assert deepest and results["accuracy"] == 1.0
    for row in deepest:
        episode = row["completions"][0]
        assert episode["tool_calls"] == 16 and episode["parsed_answer"] in row["answer"]
        assert episode["folds"] and episode["peak_context_tokens"] <= window
        assert all(fold["tokens_after"] < fold["tokens_before"] for fold in episode["folds"])
        assert sum(len(fold["dropped"]) for fold in episode["folds"]) >= 16 - 2 * context_folding.FOLD_KEEP_TURNS
    assert max(scripted) < window  # no context the model was shown passed the window
    # Unfolded, with all the completion budget it wants, the same agent runs out of the model's 1024 positions
    gs.main(long_flags(tmp_path, "--eval_only", "--max_hops", "8", "--num_eval_examples", "100",
                       "--max_context_tokens", "0", "--max_completion_length", "4096", "--output_dir",
                       tmp_path / "unfolded"))
    rows = [json.loads(line) for line in (tmp_path / "unfolded" / "eval_only.jsonl").open()]
    assert all(r["completions"][0]["parsed_answer"] is None for r in rows if len(r["completions"][0]["supporting_docs"]) >= 6)


def test_an_episodes_cost_counts_the_first_turn_too(tmp_path, scripted, monkeypatch):
    """TRL generates the first turn before the tool loop: the cost split counts it with the others, so that each
    turn's generation (a slowed sampler here, one question at a time) is in the episode's generation seconds."""
    pause, sample = 0.05, gs.GRPOTrainer._generate_single_turn  # the scripted agent

    def slow(self, *args, **kwargs):
        time.sleep(pause)
        return sample(self, *args, **kwargs)

    monkeypatch.setattr(gs.GRPOTrainer, "_generate_single_turn", slow)
    gs.main(long_flags(tmp_path, "--eval_only", "--max_hops", "2", "--num_eval_examples", "3", "--eval_batch_size",
                       "1", "--max_context_tokens", "1024"))
    rows = [json.loads(line) for line in (tmp_path / "run" / "eval_only.jsonl").open()]
    for row in rows:
        cost = row["completions"][0]["cost"]
        assert cost["turns"] == row["completions"][0]["tool_calls"] + 1 >= 3
        assert cost["turns"] * pause <= cost["generation_seconds"] < (cost["turns"] + 1) * pause + 1.0


def test_folded_segments_are_trained_with_their_rollouts_advantage(tmp_path, scripted, monkeypatch):
    """One training step with the scripted agent (which gives up now and then, so that groups have mixed rewards):
    every segment of a folded rollout is a row of its own, inside the window, with the rollout's advantage."""
    captured = []
    original = gs.FoldingGRPOTrainer._generate_and_score_completions

    def capture(self, inputs):
        output = original(self, inputs)
        captured.append((output, [len(segments) for segments in self._segments], len(inputs)))
        return output

    monkeypatch.setattr(gs.FoldingGRPOTrainer, "_generate_and_score_completions", capture)
    gs.main(long_flags(tmp_path, "--max_steps", "1", "--num_eval_examples", "0", "--max_hops", "8",
                       "--per_device_train_batch_size", "16", "--logging_steps", "1"))
    (output, segments, rollouts), = captured
    assert sum(segments) > 0 and len(output["prompt_ids"]) == rollouts + sum(segments)
    lengths = output["prompt_mask"].sum(1) + output["completion_mask"].sum(1)
    assert lengths.max() <= 1024  # every trained row is a context the model was shown, inside the window
    advantages = output["advantages"]
    assert advantages[:rollouts].abs().sum() > 0  # mixed groups: something to learn
    row = rollouts
    for rollout, count in enumerate(segments):
        assert torch.equal(advantages[row:row + count], advantages[rollout].expand(count))
        row += count
    loss_mask = output["completion_mask"] * output["tool_mask"]
    assert output["num_items_in_batch"] == loss_mask.sum()
    assert (loss_mask.sum(1) > 0).all()  # each segment holds tokens the model sampled
    log = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    assert log[0]["context/folds_per_rollout"] == pytest.approx(sum(segments) / rollouts)


def test_turn_credit_reaches_the_turns_of_every_segment(tmp_path, scripted, monkeypatch):
    """--turn_credit with folding: each row's turns get the rollout's advantage plus the turn advantage of the
    episode's turn they are (counted across the segments before), not of the row's own turn count."""
    captured, tables = [], []
    original_table = gs.FoldingGRPOTrainer._turn_table
    original = gs.FoldingGRPOTrainer._generate_and_score_completions

    def table(self):
        tables.append(original_table(self))
        return tables[-1]

    def capture(self, inputs):
        output = original(self, inputs)
        captured.append((output, [list(s) for s in self._segments]))
        return output

    monkeypatch.setattr(gs.FoldingGRPOTrainer, "_turn_table", table)
    monkeypatch.setattr(gs.FoldingGRPOTrainer, "_generate_and_score_completions", capture)
    gs.main(long_flags(tmp_path, "--max_steps", "1", "--num_eval_examples", "0", "--max_hops", "8", "--turn_credit",
                       "--per_device_train_batch_size", "16"))
    (output, segments), = captured
    turn_table = tables[-1]
    mask = (output["completion_mask"] * output["tool_mask"]).bool()
    order = [(n, sum(context_folding.turns_in(m) for _, _, m, _ in s)) for n, s in enumerate(segments)]  # own rows: last segment
    for n, s in enumerate(segments):
        order += [(n, sum(context_folding.turns_in(m) for _, _, m, _ in s[:k])) for k in range(len(s))]
    assert len(order) == len(output["advantages"]) and any(len(s) for s in segments)
    checked = 0
    for r, (n, first) in enumerate(order):
        starts = (mask[r] & ~torch.nn.functional.pad(mask[r][:-1], (1, 0))).nonzero().flatten().tolist()
        values = [output["advantages"][r, t].item() for t in starts]
        base = [v - turn_table[n, first + j].item() for j, v in enumerate(values) if first + j < turn_table.shape[1]]
        assert base and max(base) - min(base) < 1e-5  # what is left is one advantage: the rollout's own
        checked += 1
    assert checked == len(order) and turn_table.abs().sum() > 0


# ---- the script as a user runs it ------------------------------------------------------------------
def test_a_short_folding_run_from_the_command_line(tmp_path):
    """`python grpo_search.py --config assets/long_search.yaml` for two steps: it trains, folds, and the trajectory
    files mark every fold and the tokens in view."""
    out = tmp_path / "run"
    result = run_script(["--config", LONG_CONFIG, "--max_steps", "2", "--num_eval_examples", "14",
                         "--mid_eval_steps", "0", "--max_context_tokens", "700", "--output_dir", out],
                        script="grpo_search.py")
    assert result.returncode == 0, result.stderr[-3000:]
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation["max_context_tokens"] == 700 and evaluation["after"]["peak_context_tokens"] <= 700
    log = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert any(entry.get("context/folds_per_rollout", 0) > 0 for entry in log)  # training folded
    folds = 0
    for line in (out / "eval_after.jsonl").read_text().splitlines():
        episode = json.loads(line)["completions"][0]
        assert episode["peak_context_tokens"] <= 700
        for fold in episode["folds"]:
            assert fold["tokens_after"] < fold["tokens_before"] and fold["dropped"]
        folds += len(episode["folds"])
    assert folds > 0  # and so did evaluation


@pytest.mark.parametrize("flags, message", [
    (["--max_context_tokens", "300"], "--max_context_tokens 300 leaves no room after the prompt"),
    (["--beta", "0.04"], "trains folded segments without reference or old log-probs"),
    (["--max_hops", "4", "--dataset_name", REPO / "assets" / "toy_search"], "--max_hops needs a 'hops' column"),
])
def test_bad_folding_flags_are_one_line_errors(tmp_path, flags, message):
    result = run_script(["--config", LONG_CONFIG, *flags, "--max_steps", "1", "--output_dir", tmp_path / "run"],
                        script="grpo_search.py")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert message in result.stderr.strip().splitlines()[-1]


# ---- the benchmark's table in the documentation (docs/grpo_search.md) ----------------------------------------
RESULTS = REPO / "benchmarks" / "results" / "search_long.json"


def test_the_readme_table_is_the_benchmarks():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_search_long", REPO / "benchmarks" / "bench_search_long.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.table(json.loads(RESULTS.read_text())) in docs_text(), \
        "README.md or docs/ does not hold the table of benchmarks/results/search_long.json"


def test_the_long_demo_meets_its_targets():
    """The benchmark's record of the demo as a user runs it (python grpo_search.py --config assets/long_search.yaml):
    trained in at most 10 minutes; held-out exact match at depth 4 at least 30 points above where it started; and
    a held-out question of depth 6 or more solved with at least 16 tool calls, never shown the whole window."""
    report = json.loads(RESULTS.read_text())
    shipped = json.loads((LONG_MODEL / "warm_start.json").read_text())["probe_loss"]
    assert report["warm_start_probe_loss"] == pytest.approx(shipped, rel=1e-6), \
        "benchmarks/results/search_long.json was measured on another model: run python benchmarks/bench_search_long.py"
    assert report["window"] == gs.parse_args(["--config", str(LONG_CONFIG)])[0].max_context_tokens
    assert report["train_seconds"] <= 600
    before, after = report["demo"]["before"]["4"], report["demo"]["after"]["4"]
    assert after["questions"] == before["questions"] == 12
    assert after["exact_match"] >= before["exact_match"] + 0.30
    longest = report["demo"]["longest_solved"]
    assert longest["solved"] and longest["hops"] >= 6 and longest["tool_calls"] >= 16
    assert longest["peak"] < report["window"]


def test_the_readme_quotes_a_full_turn_credit_comparison_on_the_long_chains():
    """benchmarks/results/turn_credit_long.json is the whole comparison docs/grpo_search.md reports (both arms, three
    seeds, the demo's 10 steps, every step scored on all 84 questions), and the page's medians are its own."""
    report = json.loads((REPO / "benchmarks" / "results" / "turn_credit_long.json").read_text())
    settings = report["settings"]
    assert settings["long"] is True and settings["seeds"] == "42,1,2" and settings["max_steps"] == 10
    assert settings["eval_every"] == 1 and settings["eval_examples"] == 84
    assert sorted((r["seed"], r["turn_credit"]) for r in report["runs"]) == sorted(
        (seed, arm) for seed in (42, 1, 2) for arm in (False, True))
    readme = docs_text()  # README.md and docs/ (the comparison is in docs/grpo_search.md)
    grpo, credit = report["grpo"], report["turn_credit"]
    assert f"median {grpo['median_final_exact_match']:.2f} (GRPO) and {credit['median_final_exact_match']:.2f}" in readme
    assert (f"{grpo['targets']['+0.70']['median_seconds']:.1f} (GRPO) against "
            f"{credit['targets']['+0.70']['median_seconds']:.1f} (turn\ncredit)") in readme


# ---- training rows in chunks ------------------------------------------------------------------------------
def test_the_training_pass_takes_rows_in_chunks_with_the_gradients_of_one_pass(tmp_path):
    """A folded rollout adds a training row per segment: the loss goes through the model at most
    --per_device_train_batch_size rows at a time (chunked_loss), and the gradients equal those of one pass over all
    rows, for the token-summed loss (dapo, TRL's default) and a row-mean one (grpo)."""
    args, training_args, model_args, *_ = gs.parse_args(long_flags(tmp_path, "--per_device_train_batch_size", "8"))
    tokenizer = gs.load_tokenizer(model_args, training_args)
    train, _, corpus = gs.load_data(args, tokenizer, 0)
    trainer = gs.build_trainer(args, training_args, model_args, tokenizer, train, [f for f, _ in gs.RUBRIC], corpus)
    generator, rows = torch.Generator().manual_seed(0), 11
    prompt_lengths = torch.randint(3, 12, (rows,), generator=generator)
    completion_lengths = torch.randint(2, 15, (rows,), generator=generator)
    prompt_mask = (torch.arange(12) >= 12 - prompt_lengths[:, None]).long()  # left padding
    completion_mask = (torch.arange(15) < completion_lengths[:, None]).long()  # right padding
    tool_mask = (torch.rand(rows, 15, generator=generator) > 0.3).long()
    inputs = {"prompt_ids": torch.randint(3, len(tokenizer), (rows, 12), generator=generator) * prompt_mask,
              "prompt_mask": prompt_mask, "completion_mask": completion_mask, "tool_mask": tool_mask,
              "completion_ids": torch.randint(3, len(tokenizer), (rows, 15), generator=generator) * completion_mask,
              "advantages": torch.randn(rows, generator=generator),
              "num_items_in_batch": (completion_mask * tool_mask).sum()}
    model, trainer.current_gradient_accumulation_steps = trainer.model, 1  # as the training loop sets it
    model.train()

    def gradients(cap, loss_type):
        trainer.args.per_device_train_batch_size, trainer.loss_type = cap, loss_type
        model.zero_grad()
        loss = trainer.compute_loss(model, inputs)
        trainer.accelerator.backward(loss)  # the Trainer's backward of what compute_loss returns
        return loss.detach(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])

    for loss_type in ("dapo", "grpo"):
        whole_loss, whole = gradients(rows, loss_type)
        chunked_loss, chunked = gradients(4, loss_type)  # chunks of 4, 4 and 3 rows
        assert torch.allclose(whole_loss, chunked_loss, atol=1e-6), loss_type
        assert whole.abs().max() > 0 and torch.allclose(whole, chunked, atol=1e-6, rtol=1e-4), loss_type
    chunk = context_folding.rows_of(inputs, 0, 4, rows)  # a chunk drops the padding no row of it uses
    assert chunk["prompt_ids"].shape[1] == int(prompt_lengths[:4].max())
    assert chunk["completion_ids"].shape[1] == int(completion_lengths[:4].max()) == chunk["tool_mask"].shape[1]


# ---- the hundred-call levels (assets/deep_search.yaml) ------------------------------------------------------------
DEEP_CONFIG = REPO / "assets" / "deep_search.yaml"
DEEP_DATA = REPO / "assets" / "toy_search_deep"


def test_the_deep_levels_rebuild_from_the_seed_and_need_the_calls_they_say(tmp_path):
    """`make_demo_assets.py --demo search_deep` writes the shipped data byte for byte; the held-out questions are six
    per level of 8, 32, 64 and 128 required calls (two per scholar up to the founder), on lines no training
    question touches."""
    result = run_script(["--demo", "search_deep", "--out", tmp_path], script="assets/make_demo_assets.py", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("train.jsonl", "test.jsonl", "corpus.jsonl"):
        assert (tmp_path / "toy_search_deep" / name).read_bytes() == (DEEP_DATA / name).read_bytes(), name
    test = [json.loads(line) for line in (DEEP_DATA / "test.jsonl").open()]
    train = [json.loads(line) for line in (DEEP_DATA / "train.jsonl").open()]
    assert sorted(2 * row["hops"] for row in test) == sorted([8, 32, 64, 128] * 6)
    assert all(len(row["supporting_docs"]) == row["hops"] for row in test + train)
    held_out_documents = {d for row in test for d in row["supporting_docs"]}
    assert not held_out_documents & {d for row in train for d in row["supporting_docs"]}
    documents = {json.loads(line)["id"]: json.loads(line)["text"] for line in (DEEP_DATA / "corpus.jsonl").open()}
    for row in test:  # the chain holds: each document names the next as its mentor, the last is the founder's
        chain = row["supporting_docs"]
        assert all(f"The mentor of {a} was {b}." in documents[a] for a, b in zip(chain, chain[1:]))
        assert "founded the school" in documents[chain[-1]] and f"born in {row['answer']}." in documents[chain[-1]]
