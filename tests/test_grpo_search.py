"""grpo_search.py: its tools on hand-written calls, the index, the rubric on hand-written trajectories (hacks
included), turn-level credit on a real batch, data in every layout, the script run as a user runs it, and the
offline demo."""

import json
from types import SimpleNamespace

import pytest
import torch
from conftest import REPO, run_script

import grpo_search as gs
import instruments

TINY_SEARCH_MODEL = REPO / "assets" / "tiny-qwen-search"
TOY_SEARCH_DATA = REPO / "assets" / "toy_search"
FAST_RUN = ["--model_name_or_path", str(TINY_SEARCH_MODEL), "--dataset_name", str(TOY_SEARCH_DATA),
            "--corpus_name", str(TOY_SEARCH_DATA / "corpus.jsonl"), "--search_top_k", "2", "--search_budget", "3",
            "--learning_rate", "2e-4", "--per_device_train_batch_size", "16", "--gradient_accumulation_steps", "1",
            "--num_generations", "8", "--max_completion_length", "256", "--max_tool_calling_iterations", "3",
            "--gradient_checkpointing", "false", "--logging_steps", "1", "--num_eval_examples", "16",
            "--eval_batch_size", "16", "--warmup_steps", "0"]

DOCS = [
    {"id": "Ilsa Varn", "title": "Ilsa Varn", "text": "Ilsa Varn was born in Dunmoor. The mentor of Ilsa Varn was Oren Dask."},
    {"id": "Oren Dask", "title": "Oren Dask", "text": "Oren Dask was born in Tollmere. The mentor of Oren Dask was Kai Lo."},
    {"id": "Kai Lo", "title": "Kai Lo", "text": "Kai Lo was born in Ardmore. The mentor of Kai Lo was Ilsa Varn."},
    {"id": "d4", "title": "Tollmere", "text": " ".join(f"Tollmere fact number {n}." for n in range(60))},
]
SUPPORTING = ["Ilsa Varn", "Oren Dask"]


@pytest.fixture
def index(tmp_path, monkeypatch):
    built = gs.SearchIndex(DOCS, tmp_path / "index")
    monkeypatch.setattr(gs.ToolEnvironment, "index", built)
    monkeypatch.setattr(gs.ToolEnvironment, "top_k", 2)
    monkeypatch.setattr(gs.ToolEnvironment, "budget", 3)
    # gs.main sets these on the class from its flags: a run earlier in the same process (long_search.yaml's
    # 40-character snippets) must not change what these tests see
    monkeypatch.setattr(gs.ToolEnvironment, "snippet_chars", 200)
    monkeypatch.setattr(gs.ToolEnvironment, "page_chars", 1000)
    return built


def environment(supporting=SUPPORTING):
    env = gs.ToolEnvironment()
    env.reset(supporting_docs=supporting, question="q", answer=["Tollmere"])
    return env


# ---- the tools ------------------------------------------------------------------------------------
def test_search_returns_ids_titles_and_snippets(index):
    env = environment()
    assert env.search("Ilsa Varn").splitlines() == [
        "[Ilsa Varn] Ilsa Varn was born in Dunmoor. The mentor of Ilsa Varn was Oren Dask.",
        "[Kai Lo] Kai Lo was born in Ardmore. The mentor of Kai Lo was Ilsa Varn."]
    long_result = env.search("Tollmere fact")
    first_line = long_result.splitlines()[0]
    assert first_line.startswith("[d4] Tollmere: Tollmere fact number 0.") and first_line.endswith(" ...")
    assert len(first_line) <= len("[d4] Tollmere: ") + env.snippet_chars + len(" ...")
    assert (env.calls, env.failures, env.searches) == (2, 0, 2)


def test_open_pages_through_a_long_document(index):
    env = environment()
    first = env.open("d4")
    assert first.startswith("[d4] page 1 of ") and "Tollmere fact number 0." in first
    pages = int(first.splitlines()[0].rsplit(" ", 1)[1])
    assert pages >= 2 and env.open("d4", pages).startswith(f"[d4] page {pages} of {pages}")
    assert "Tollmere fact number 59." in env.open("d4", pages)
    text = "".join(index.pages("d4", env.page_chars))
    assert text.replace(" ", "") == DOCS[3]["text"].replace(" ", "")  # the pages hold the whole text, in order
    assert all(len(page) <= env.page_chars for page in index.pages("d4", env.page_chars))


@pytest.mark.parametrize("call, expected", [
    (lambda env: env.search(""), "Error: empty query"),
    (lambda env: env.search("   "), "Error: empty query"),
    (lambda env: env.search("x " * 200), "Error: the query has 399 characters"),  # stripped first
    (lambda env: env.open("Nobody"), "Error: no document with id 'Nobody'"),
    (lambda env: env.open("Kai Lo", 2), "Error: page 2 is out of range: 'Kai Lo' has 1 page(s)"),
    (lambda env: env.open("Kai Lo", 0), "Error: page 0 is out of range"),
    (lambda env: env.open("Kai Lo", "two"), "Error: page must be a number"),
])
def test_bad_arguments_are_readable_errors(index, call, expected):
    env = environment()
    assert call(env).startswith(expected)
    assert (env.calls, env.failures, env.credited) == (1, 1, 0)


def test_no_match_is_a_result_not_an_error(index):
    env = environment()
    assert env.search("zebra quantum").startswith("No results for 'zebra quantum'")
    assert (env.calls, env.failures) == (1, 0)


def test_a_page_given_as_text_is_read(index):
    assert environment().open("Kai Lo", "1").startswith("[Kai Lo] page 1 of 1")


def test_the_index_is_built_once_and_cached(tmp_path, monkeypatch):
    import bm25s

    first = gs.SearchIndex(DOCS, tmp_path)
    assert (first.path / "params.index.json").exists()
    monkeypatch.setattr(bm25s.BM25, "index", lambda *a, **k: pytest.fail("indexed again"))
    again = gs.SearchIndex(DOCS, tmp_path)  # loaded from disk
    assert again.search("Oren Dask", 3) == first.search("Oren Dask", 3)
    monkeypatch.undo()
    changed = gs.SearchIndex(DOCS[:3] + [{**DOCS[3], "text": "changed"}], tmp_path)
    assert changed.path != first.path and changed.search("changed", 1) == ("d4",)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bm25s-")]  # no half-written folder left


def test_an_unwritable_cache_folder_still_gives_an_index(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert gs.SearchIndex(DOCS, blocker / "index").search("Kai Lo", 1) == ("Kai Lo",)


def test_a_replay_searches_its_own_corpus_not_the_one_this_process_trained_on(tmp_path, monkeypatch):
    """A notebook that trained on one corpus and replays a run of another: the replay's --corpus_name is searched,
    with the replay's own search flags; the same corpus again reuses the index already built."""
    for attribute in ("index", "index_corpus", "top_k", "snippet_chars", "page_chars", "budget"):
        monkeypatch.setattr(gs.ToolEnvironment, attribute, getattr(gs.ToolEnvironment, attribute))
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text("".join(json.dumps(doc) + "\n" for doc in DOCS))
    second.write_text(json.dumps({"id": "x1", "title": "Zebra Quay", "text": "Zebra Quay lies on the coast."}) + "\n")
    trained = gs.ScriptArguments(corpus_name=str(first))
    gs.set_up_search(trained, gs.load_corpus(trained, []))  # as build_trainer does
    built = gs.ToolEnvironment.index
    assert "x1" not in gs.replay_environment(gs.ScriptArguments(corpus_name=str(first)), {}).search("Zebra Quay")
    assert gs.ToolEnvironment.index is built  # the same corpus: not indexed again
    replayed = gs.replay_environment(gs.ScriptArguments(corpus_name=str(second), search_top_k=1), {})
    assert "[x1]" in replayed.search("Zebra Quay") and gs.ToolEnvironment.top_k == 1


# ---- the rubric -----------------------------------------------------------------------------------
def search_turn(env, query):
    return [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "search", "arguments": {"query": query}}}]},
        {"role": "tool", "name": "search", "content": env.search(query)}]


def answer(text):
    return {"role": "assistant", "content": f"<answer>{text}</answer>"}


def total(trajectory, env, gold="Tollmere"):
    return instruments.score(gs.RUBRIC, [trajectory], answer=[[gold]], environments=[env])[0]


def test_two_hops_earn_the_answer_and_both_credits(index):
    env = environment()
    trajectory = [*search_turn(env, "Ilsa Varn"), *search_turn(env, "Oren Dask"), answer("Tollmere")]
    scored = total(trajectory, env)
    assert scored["rewards"] == {"exact_match_reward": 1.0, "f1_reward": 1.0, "answer_format_reward": 1.0,
                                 "search_credit": 1.0, "search_budget_penalty": 0.0,
                                 "chain_progress": 1.0}
    assert gs.turn_rewards(trajectory, env) == [1.0, 1.0, 0.0]


def test_an_answer_copied_from_the_first_hop_earns_one_credit_only(index):
    """The shortcut: answer from the first result without the second search (here the person's own town)."""
    env = environment()
    trajectory = [*search_turn(env, "Ilsa Varn"), *search_turn(env, "Ilsa Varn mentor"), answer("Dunmoor")]
    scored = total(trajectory, env)
    assert scored["rewards"]["exact_match_reward"] == 0.0 and scored["rewards"]["search_credit"] == 0.5
    assert gs.turn_rewards(trajectory, env) == [1.0, 0.0, 0.0]


def test_the_same_search_ten_times_earns_nothing_extra(index):
    once, many = environment(), environment()
    one = [*search_turn(once, "Oren Dask"), answer("Tollmere")]
    ten = [message for _ in range(10) for message in search_turn(many, "Oren Dask")] + [answer("Tollmere")]
    assert total(ten, many)["rewards"]["search_credit"] == total(one, once)["rewards"]["search_credit"] == 0.5
    assert total(ten, many)["rewards"]["search_budget_penalty"] == -1.0
    assert total(ten, many)["total"] < total(one, once)["total"]
    assert gs.turn_rewards(ten, many) == [1.0] + [0.0] * 10


def open_turn(env, doc_id):
    return [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "open", "arguments": {"doc_id": doc_id}}}]},
        {"role": "tool", "name": "open", "content": env.open(doc_id)}]


def test_an_open_of_an_id_no_result_showed_costs_its_turn(index):
    """Turn credit's -1.0: opening "Oren Dask" before any result showed it (a miscopied number, in the hundred-call
    levels) costs that turn, though the document exists and supports the answer; an id a search showed costs
    nothing, and the rollout's own rewards are unchanged by it."""
    env = environment()
    trajectory = [*search_turn(env, "Ilsa Varn"), *open_turn(env, "Kai Lo"), *open_turn(env, "Oren Dask"),
                  *search_turn(env, "Oren Dask"), answer("Tollmere")]
    assert gs.turn_rewards(trajectory, env) == [1.0, 0.0, -1.0, 0.0, 0.0]
    assert total(trajectory, env)["rewards"]["search_credit"] == 0.5  # the open brought Oren Dask in, not a search

    # an id the question itself names is shown: a fork whose questions hand the agent ids may open them at once
    env = gs.ToolEnvironment()
    env.reset(supporting_docs=SUPPORTING, question="Where was Oren Dask's pupil born?", answer=["Tollmere"])
    trajectory = [*open_turn(env, "Oren Dask"), *open_turn(env, "Oren D"), answer("Tollmere")]  # "Oren D" is no id
    assert gs.turn_rewards(trajectory, env) == [0.0, 0.0, 0.0]
    env.reset(supporting_docs=SUPPORTING, question="Where was Oren Daskell born?", answer=["Tollmere"])
    assert gs.turn_rewards([*open_turn(env, "Oren Dask"), answer("Tollmere")], env) == [-1.0, 0.0]  # whole ids only


def test_one_search_that_finds_both_documents_is_credited_once(index):
    env = environment(supporting=["Ilsa Varn", "Kai Lo"])  # "Ilsa Varn" finds both
    trajectory = [*search_turn(env, "Ilsa Varn"), answer("Ardmore")]
    assert total(trajectory, env, gold="Ardmore")["rewards"]["search_credit"] == 0.5


def test_a_document_opened_first_is_not_new_to_a_later_search(index):
    env = environment(supporting=["Oren Dask"])
    trajectory = [{"role": "tool", "name": "open", "content": env.open("Oren Dask")},
                  *search_turn(env, "Oren Dask"), answer("Tollmere")]
    assert env.credited == 0 and total(trajectory, env)["rewards"]["search_credit"] == 0.0


@pytest.mark.parametrize("text, gold, exact, f1, formatted", [
    ("<answer>Tollmere</answer>", "Tollmere", 1.0, 1.0, 1.0),
    ("<answer>the Tollmere.</answer>", "tollmere", 1.0, 1.0, 1.0),  # articles, case and punctuation
    ("<answer>Tollmere town</answer>", "Tollmere", 0.0, 2 / 3, 1.0),
    ("<answer>Tower Eiffel</answer>", "Eiffel Tower", 0.0, 1.0, 1.0),  # the right words in another order
    ("<answer>yes</answer>", "no", 0.0, 0.0, 1.0),
    ("<answer>no it is</answer>", "no", 0.0, 0.0, 1.0),  # a yes/no gold needs exactly yes/no (official rule)
    ("<answer>Tollmere is it</answer>", "Tollmere", 0.0, 0.5, 1.0),
    ("<answer>Dunmoor</answer><answer>Tollmere</answer>", "Tollmere", 1.0, 1.0, 0.0),  # the last block; bad format
    ("Tollmere", "Tollmere", 0.0, 0.0, 0.0),  # no block
    ("<answer></answer>", "Tollmere", 0.0, 0.0, 0.0),
    ("<answer>" + "Tollmere " * 11 + "</answer>", "Tollmere", 0.0, pytest.approx(2 / 12), 0.0),  # a paragraph
])
def test_answer_rewards_on_hand_written_answers(text, gold, exact, f1, formatted):
    completion = [{"role": "assistant", "content": text}]
    assert gs.exact_match_reward([completion], answer=[[gold]]) == [exact]
    assert gs.f1_reward([completion], answer=[gold]) == [f1]  # a plain string works too
    assert gs.answer_format_reward([completion]) == [formatted]


def test_any_accepted_answer_counts_and_an_empty_gold_has_no_say():
    completion = [answer("NYC")]
    assert gs.exact_match_reward([completion], answer=[["New York City", "NYC"]]) == [1.0]
    assert gs.exact_match_reward([completion], answer=[["the"]]) == [None]
    assert gs.f1_reward([completion], answer=[[]]) == [None]


def test_partial_format_and_search_terms_can_never_outweigh_a_right_answer():
    weights = dict((f.__name__, w) for f, w in gs.RUBRIC)
    assert weights["exact_match_reward"] == 1.0
    best_wrong = sum(w for name, w in weights.items() if name not in ("exact_match_reward", "search_budget_penalty"))
    assert best_wrong <= 0.5 * weights["exact_match_reward"]
    assert weights["search_credit"] <= 0.2  # the intermediate credit, well below a right answer


def test_search_credit_has_no_say_without_supporting_documents(index):
    env = environment(supporting=[])
    search_turn(env, "Ilsa Varn")
    assert gs.search_credit([[]], [env]) == [None]


def test_a_result_the_model_never_saw_earns_nothing(index):
    """TRL drops a tool result that would overflow max_completion_length: the call ran, the model did not read it."""
    env = environment()
    trajectory = search_turn(env, "Ilsa Varn")
    cut = search_turn(env, "Oren Dask")[:1]  # the call, without its (dropped) result
    assert env.credited == 2
    assert gs.search_credit([trajectory + cut], [env]) == [0.5]
    assert gs.turn_rewards(trajectory + cut, env) == [1.0, 0.0]


def test_chain_progress_counts_the_links_reached_in_order_and_only_what_the_model_read(index):
    """Each document names the next (Ilsa Varn -> Oren Dask -> Kai Lo): a link counts once those before it were shown
    in the trajectory's results; a document found out of order waits for the gap, a dropped result shows nothing."""
    chain = ["Ilsa Varn", "Oren Dask", "Kai Lo"]
    env = environment(supporting=chain)
    trajectory = search_turn(env, "Ilsa Varn")  # shows Ilsa Varn, and Kai Lo (whose text names her) out of order
    assert gs.chain_progress([trajectory], [env]) == [pytest.approx(1 / 3)]
    trajectory += [{"role": "assistant", "content": "", "tool_calls": [  # a miscopied name: no further along
        {"type": "function", "function": {"name": "open", "arguments": {"doc_id": "d4"}}}]},
        {"role": "tool", "name": "open", "content": env.open("d4")}]
    assert gs.chain_progress([trajectory], [env]) == [pytest.approx(1 / 3)]
    dropped = search_turn(env, "Oren Dask")
    assert "Oren Dask" in env.seen and gs.chain_progress([trajectory + dropped[:1]], [env]) == [pytest.approx(1 / 3)]
    assert gs.chain_progress([trajectory + dropped], [env]) == [1.0]  # the gap filled: Kai Lo counts now
    assert gs.chain_progress([[]], [environment(supporting=[])]) == [None]
    assert dict((f.__name__, w) for f, w in gs.RUBRIC)["chain_progress"] == 0.0  # logged; --reward_weights turns it on


def test_malformed_calls_count_against_the_budget(index):
    """A call with a wrong argument name never reaches the tool (TRL answers {'error': ...}), but it is a call."""
    env = environment()
    bad = [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "search", "arguments": {"q": "x"}}}]},
        {"role": "tool", "name": "search", "content": "{'error': \"unexpected keyword argument 'q'\"}"}]
    assert env.calls == 0 and gs.search_budget_penalty([bad * 6], [env]) == [-1.0]


# ---- turn-level credit ----------------------------------------------------------------------------
def test_turn_advantages_are_normalised_within_the_group_per_turn():
    rewards = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    advantages = gs.turn_advantages(rewards, group_size=2, scale=False)
    assert advantages.tolist() == [[0.0, 0.5, 0.0], [0.0, -0.5, 0.0], [-0.5, -0.5, 0.0], [0.5, 0.5, 0.0]]
    scaled = gs.turn_advantages(rewards, group_size=2)
    assert scaled[0, 1] == pytest.approx(0.5 / (2 ** 0.5 / 2 + 1e-4))


def test_per_token_advantages_follow_the_turns_and_skip_tool_tokens():
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 0, 1, 0], [1, 1, 1, 1, 0, 0, 0, 0, 0]])  # turns between tool results
    turns = torch.tensor([[0.5, -0.5, 2.0], [1.0, 0.0, 0.0]])
    result = gs.per_token_advantages(torch.tensor([1.0, -1.0]), turns, mask, weight=2.0)
    assert result.tolist() == [[2.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 5.0, 0.0],
                               [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]]


def test_turn_credit_on_a_real_batch(tmp_path, monkeypatch):
    """A short --turn_credit run: the advantages are per token, differ between the turns of a rollout where the
    turns earned different credit, and are zero on tool results."""
    captured = []
    original = gs.TurnCreditGRPOTrainer._generate_and_score_completions

    def capture(self, inputs):
        output = original(self, inputs)
        captured.append((output, list(self._turn_rewards)))
        return output

    monkeypatch.setattr(gs.TurnCreditGRPOTrainer, "_generate_and_score_completions", capture)
    gs.main([*FAST_RUN, "--turn_credit", "--max_steps", "2", "--num_eval_examples", "0",
             "--output_dir", str(tmp_path / "run")])
    mixed_turns = 0
    for output, rewards in captured:
        advantages, mask = output["advantages"], output["completion_mask"] * output["tool_mask"]
        assert advantages.shape == output["completion_ids"].shape
        assert (advantages[(output["completion_mask"] * (1 - output["tool_mask"])).bool()] == 0).all()
        for row, turn in enumerate(rewards):
            starts = (mask[row].bool() & ~torch.nn.functional.pad(mask[row].bool()[:-1], (1, 0))).nonzero().flatten()
            assert len(starts) == len(turn)  # one run of trained tokens per assistant turn
            values = [advantages[row, s].item() for s in starts]
            ends = list(starts[1:]) + [mask.shape[1]]
            for start, end, value in zip(starts, ends, values):  # one advantage for all of a turn's tokens
                span = advantages[row, start:end][mask[row, start:end].bool()]
                assert torch.allclose(span, torch.full_like(span, value))
            mixed_turns += len(set(round(v, 6) for v in values)) > 1
    assert mixed_turns > 0, "no rollout whose turns got different advantages"


# ---- data -----------------------------------------------------------------------------------------
def hotpot_row(question, answer, titles, supporting, layout="hub"):
    paragraphs = [[f"{t} is a place.", f" It is near {t}ville."] for t in titles]
    if layout == "hub":
        return {"id": question[:8], "question": question, "answer": answer, "type": "bridge", "level": "easy",
                "supporting_facts": {"title": supporting, "sent_id": [0] * len(supporting)},
                "context": {"title": titles, "sentences": paragraphs}}
    return {"_id": question[:8], "question": question, "answer": answer,
            "supporting_facts": [[t, 0] for t in supporting], "context": [[t, p] for t, p in zip(titles, paragraphs)]}


@pytest.mark.parametrize("layout", ["hub", "original"])
def test_hotpotqa_rows_give_questions_a_corpus_and_supporting_documents(tmp_path, layout):
    rows = [hotpot_row(f"Question {n}?", f"Answer {n}", [f"Title {n}", f"Title {n + 1}", "Shared"],
                       [f"Title {n}", "Shared"], layout) for n in range(8)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:6]))
    (tmp_path / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[6:]))
    script_args, *_ = gs.parse_args(["--dataset_name", str(tmp_path), "--model_name_or_path", str(TINY_SEARCH_MODEL)])
    tokenizer = gs.load_tokenizer(SimpleNamespace(model_name_or_path=str(TINY_SEARCH_MODEL), model_revision=None),
                                  SimpleNamespace(trust_remote_code=False))
    train, test, corpus = gs.load_data(script_args, tokenizer, seed=0)
    assert (len(train), len(test)) == (6, 2)  # the validation split is the evaluation set
    assert train[0]["answer"] == ["Answer 0"] and train[0]["supporting_docs"] == ["Title 0", "Shared"]
    assert train[0]["prompt"][-1] == {"role": "user", "content": "Question 0?"}
    ids = [doc["id"] for doc in corpus]
    assert len(ids) == len(set(ids)) == 10  # Title 0-8 and Shared, once each, from both splits
    assert next(d for d in corpus if d["id"] == "Title 3")["text"] == "Title 3 is a place. It is near Title 3ville."


def test_supporting_ids_and_answers_in_any_shape():
    assert gs.supporting_ids("Oren Dask") == ["Oren Dask"]
    assert gs.supporting_ids([["A", 0], ["A", 1], ["B", 0]]) == ["A", "B"]
    assert gs.supporting_ids({"title": ["A", "B", "A"], "sent_id": [0, 1, 2]}) == ["A", "B"]
    assert gs.supporting_ids(None) == []
    rows = __import__("datasets").Dataset.from_list([{"question": "q", "answer": None}, {"question": "q", "answer": "x"}])
    args = SimpleNamespace(question_column="question", answer_column="answer", supporting_column=None, max_hops=0)
    assert [q["answer"] for q in gs.to_questions(rows, args, "data")] == [[], ["x"]]  # null: no gold, not "None"
    assert gs.exact_match_reward([[answer("None")]], answer=[[]]) == [None]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def local_args(tmp_path, *extra):
    questions = write_jsonl(tmp_path / "questions.jsonl", [
        {"q": f"Where was the mentor of person {n} born?", "gold": ["Tollmere", "Tollmere town"], "docs": ["a", "b"]}
        for n in range(10)])
    corpus = write_jsonl(tmp_path / "docs.jsonl", [{"doc_id": "a", "text": "A text."}, {"doc_id": "b", "text": "B."}])
    return gs.parse_args(["--dataset_name", str(questions), "--corpus_name", str(corpus), "--question_column", "q",
                          "--answer_column", "gold", "--model_name_or_path", str(TINY_SEARCH_MODEL),
                          "--num_eval_examples", "4", *extra])[0]


def tokenizer():
    return gs.load_tokenizer(SimpleNamespace(model_name_or_path=str(TINY_SEARCH_MODEL), model_revision=None),
                             SimpleNamespace(trust_remote_code=False))


def test_local_questions_and_corpus_through_the_flags(tmp_path):
    train, test, corpus = gs.load_data(local_args(tmp_path, "--supporting_column", "docs"), tokenizer(), seed=0)
    assert (len(train), len(test)) == (6, 4)  # no test split: held-out questions
    assert train[0]["answer"] == ["Tollmere", "Tollmere town"] and train[0]["supporting_docs"] == ["a", "b"]
    assert corpus == [{"id": "a", "title": "a", "text": "A text."}, {"id": "b", "title": "b", "text": "B."}]
    assert gs.index_folder(local_args(tmp_path)) == tmp_path / "docs.jsonl.bm25s-index"  # cached beside the corpus


@pytest.mark.parametrize("extra, message", [
    (["--question_column", "nope"], "has no column 'nope'"),
    (["--supporting_column", "nope"], "has no column 'nope'"),
    (["--corpus_name", "CORPUS_WITHOUT_TEXT"], "needs an id (or title) and a text column"),
    (["--corpus_name", "NO_CORPUS"], "no context column to build a corpus from: pass --corpus_name"),
])
def test_bad_data_is_one_clear_error(tmp_path, extra, message):
    args = local_args(tmp_path)
    if "CORPUS_WITHOUT_TEXT" in extra:
        args.corpus_name = str(write_jsonl(tmp_path / "bad.jsonl", [{"id": "a", "body": "x"}]))
    elif "NO_CORPUS" in extra:
        args.corpus_name = None
    else:
        args = local_args(tmp_path, *extra)
    with pytest.raises(gs.RecipeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        gs.load_data(args, tokenizer(), seed=0)


# ---- the script as a user runs it ------------------------------------------------------------------
def test_short_run_writes_eval_and_plot(tmp_path):
    out = tmp_path / "run"
    result = run_script([*FAST_RUN, "--max_steps", "3", "--output_dir", out], script="grpo_search.py")
    assert result.returncode == 0, result.stderr[-3000:]
    evaluation = json.loads((out / "eval.json").read_text())
    for when in ("before", "after"):
        for key in ("accuracy", "f1", "supporting_found", "tool_call_success"):
            assert 0.0 <= evaluation[when][key] <= 1.0, key
        assert 0 <= evaluation[when]["supporting_searches"] <= evaluation[when]["searches"]
    assert evaluation["corpus_size"] == 300 and evaluation["turn_credit"] is False
    logged = {k for e in json.loads((out / "trainer_state.json").read_text())["log_history"] for k in e}
    for name in ("rewards/exact_match_reward/mean", "rewards/search_credit/mean", "tools/calls_per_rollout"):
        assert name in logged, name
    assert (out / "training_curves.png").read_bytes().startswith(b"\x89PNG")
    line = json.loads((out / "eval_after.jsonl").read_text().splitlines()[0])
    assert {"documents_seen", "supporting_docs", "parsed_answer"} <= set(line["completions"][0])


@pytest.mark.parametrize("flags, message", [
    (["--search_top_k", "0"], "--search_top_k, --snippet_chars, --page_chars and --search_budget must be 1 or more"),
    (["--corpus_name", "missing.jsonl"], "no such file or folder: missing.jsonl (check the path given to --corpus_name)"),
    (["--dataset_test_split", "dev"], "has no split 'dev'"),
])
def test_bad_flags_are_one_line_errors(tmp_path, flags, message):
    result = run_script([*FAST_RUN, *flags, "--max_steps", "1", "--output_dir", tmp_path / "run"],
                        script="grpo_search.py")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert message in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "run" / "eval.json").exists()


# ---- agreement with rewards.py --------------------------------------------------------------------
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

ANSWER_CASES = [("<answer>Tollmere</answer>", "Tollmere"), ("<answer>the Tollmere.</answer>", ["x", "tollmere"]),
                ("<answer>no it is</answer>", "no"), ("<answer>yes</answer>", "yes"), ("Tollmere", "Tollmere"),
                ("<answer>a b c</answer>", "b c d e"), ("<answer>x</answer><answer>y</answer>", "y"),
                ("<answer>x</answer>", "the"), ("<answer>x</answer>", []), ("<answer> An  Apple </answer>", "apple")]


@pytest.mark.parametrize("text, gold", ANSWER_CASES)
def test_answer_rewards_agree_with_rewards_py(text, gold):
    import rewards

    for completion in (text, [{"role": "assistant", "content": text}]):
        assert gs.exact_match_reward([completion], answer=[gold]) == rewards.exact_match_reward([completion], answer=[gold])
        assert gs.f1_reward([completion], answer=[gold]) == rewards.f1_reward([completion], answer=[gold])


@given(text=st.text(), gold=st.one_of(st.text(), st.lists(st.text(), max_size=3)))
def test_answer_rewards_agree_with_rewards_py_on_random_input(text, gold):
    import rewards

    for completion in (text, f"<answer>{text}</answer>", [{"role": "assistant", "content": f"<answer>{text}</answer>"}]):
        assert gs.exact_match_reward([completion], answer=[gold]) == rewards.exact_match_reward([completion], answer=[gold])
        assert gs.f1_reward([completion], answer=[gold]) == rewards.f1_reward([completion], answer=[gold])
