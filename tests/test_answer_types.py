"""grpo_math.py's answer types: numbers (GSM8K) and symbolic answers (MATH-style, math-verify), one grader for both.

tests/data/math_style.jsonl: 46 MATH-style golds written and checked by hand (fractions, roots, pi, intervals, unions,
equations, sets, matrices, vectors, degrees, percent, complex numbers, pairs, factorials, powers, negative numbers,
decimals, a multiple choice, and a few plain numbers as MATH has them), each with spellings that are right (equal in
value: '0.5', '\\dfrac12', '1/2' for '\\frac{1}{2}') and wrong ('2' for '\\sqrt{2}', '9' for '9\\pi', '(2, \\infty)' for
'[2, \\infty)', '6' for '6!')."""

import json
import re
import shutil
import sys
import threading

import pytest
from conftest import FAST_RUN, REPO, TINY_MODEL, TOY_DATA, run_script

import grpo_math as gm

MATH_STYLE = REPO / "tests" / "data" / "math_style.jsonl"
ROWS = [json.loads(line) for line in MATH_STYLE.read_text().splitlines()]
# The golds of the file that are one plain number, by hand: number mode may read these and no other
PLAIN_GOLDS = {"-7", "0.125", "3.14", "12.5", "0.05", "72", "9"}


def wrap(answer: str) -> str:
    return f"<reasoning>\nworking\n</reasoning>\n<answer>\n{answer}\n</answer>"


# Where a symbolic answer may stand: the answer block, a \boxed{} in it, or with no block the last \boxed{} of the text
LAYOUTS = {"block": wrap, "boxed in the block": lambda a: wrap(f"so \\boxed{{{a}}}"),
           "boxed, no block": lambda a: f"First \\boxed{{0}} is wrong. The answer is $\\boxed{{{a}}}$."}


def grade(answers, gold, answer_type):
    return gm.correctness_reward(answers, answer=[gold] * len(answers), answer_type=[answer_type] * len(answers))


def test_the_data_file_holds_enough_cases():
    assert len(ROWS) >= 40 and len({row["answer"] for row in ROWS}) == len(ROWS)
    assert all(row["question"] and len(row["right"]) >= 2 and len(row["wrong"]) >= 3 for row in ROWS)
    assert PLAIN_GOLDS < {row["answer"] for row in ROWS}


@pytest.mark.parametrize("answer_type", ["symbolic", "auto"])
def test_every_right_spelling_pays_and_every_wrong_one_does_not(answer_type):
    if answer_type == "auto":  # what --answer_type auto makes of this file
        answer_type, why = gm.resolved_answer_type("auto", [row["answer"] for row in ROWS])
        assert answer_type == "symbolic", why
    misgraded = []
    for row in ROWS:
        for layout, spell in LAYOUTS.items():
            right = grade([spell(a) for a in row["right"]], row["answer"], answer_type)
            wrong = grade([spell(a) for a in row["wrong"]], row["answer"], answer_type)
            misgraded += [(row["answer"], a, layout, s) for a, s in zip(row["right"], right) if s != 1.0]
            misgraded += [(row["answer"], a, layout, s) for a, s in zip(row["wrong"], wrong) if s != 0.0]
    assert misgraded == []


def test_no_answer_block_or_box_states_no_answer():
    """Several or unclosed answer blocks state no answer, whatever a \\boxed{} says; nor does a bare answer."""
    for completion in [wrap("0.5") + wrap("0.5"), "<answer>\n0.5", "The answer is 0.5.", "<answer>0.5</answer>"[:-1],
                       "<reasoning>\\boxed{0.5}</reasoning><answer>2</answer>", ""]:
        assert grade([completion], "\\frac{1}{2}", "symbolic") == [0.0], completion


def test_number_type_reads_no_gold_that_is_not_one_plain_number():
    """--answer_type number: a MATH-style gold is refused (None), never reduced to one of its digits."""
    read = {row["answer"] for row in ROWS if grade([""], row["answer"], "number") != [None]}
    assert read == PLAIN_GOLDS  # 39 of the 46 golds refused
    for row in ROWS:
        right, wrong = (grade([wrap(a) for a in row[key]], row["answer"], "number") for key in ("right", "wrong"))
        if row["answer"] in PLAIN_GOLDS:
            assert 1.0 in right and set(wrong) == {0.0}, row  # plain spellings of a plain number pay
        else:
            assert set(right) == set(wrong) == {None}, row


@pytest.mark.parametrize("answer, correct", [
    ("72", True), ("$72.00", True), ("72 clips", True), ("\\boxed{72}", True), ("$\\boxed{72}$", True),
    ("The answer is 72.", True), ("x = 72", True), ("72\\%", True), ("72%", True), ("\\$72", True),
    ("72 \\text{ clips}", True), ("\\left(72\\right)", True), ("72^\\circ", True), ("72^{\\circ}", True),
    # math around the number makes an expression of it, which is not that number
    ("\\sqrt{72}", False), ("\\sqrt72", False), ("72^2", False), ("72^{72}", False), ("72!", False),
    ("72\\pi", False), ("\\frac{72}{1}", False), ("72/1", False), ("72 + 72", False), ("72 - 72", False),
    ("72 \\times 72", False), ("72 \\cdot 1", False), ("x < 72", False), ("\u221272", False), ("\u221a72", False),
    ("72 or 73", False), ("48 + 24 = 72", False),
])
def test_number_type_answers(answer, correct):
    assert grade([wrap(answer)], "#### 72", "number") == [float(correct)]
    assert grade([wrap(answer)], "#### 72", None) == [float(correct)]  # a plain gold: number without the column


def test_number_type_keeps_its_decimals_thousands_and_signs():
    assert grade([wrap("1,000"), wrap("1000"), wrap("1000.0")], "#### 1,000", "number") == [1.0] * 3
    assert grade([wrap("-5"), wrap("5")], "#### -5", "number") == [1.0, 0.0]
    assert grade([wrap("0.5"), wrap(".5"), wrap("5")], "#### 5", "number") == [0.0, 0.0, 1.0]  # '.5' is not 5


def test_gsm8k_grading_never_loads_math_verify(monkeypatch):
    """Numbers are graded without math-verify (cheap): with the package gone, GSM8K still grades."""
    monkeypatch.setitem(sys.modules, "math_verify", None)  # `import math_verify` now fails
    golds = [json.loads(line)["answer"] for line in (TOY_DATA / "train.jsonl").read_text().splitlines()]
    for answer_type in ("number", None):
        scores = gm.correctness_reward([wrap(g.rsplit("#### ", 1)[1]) for g in golds], answer=golds,
                                       answer_type=[answer_type] * len(golds))
        assert scores == [1.0] * len(golds)
    assert gm.resolved_answer_type("auto", golds)[0] == "number"
    with pytest.raises(ImportError):
        gm.math_verify_score.cache_clear()
        grade([wrap("0.5")], "\\frac{1}{2}", "symbolic")


def test_grading_from_another_thread_neither_crashes_nor_hangs():
    """math-verify's time limits are signals, which only the main thread can set: from a worker thread the grader
    sets none (no ValueError), and refuses the answers sympy would compute for hours (no hang)."""
    huge = [("72", "10^{10^{10}}"), ("72", "(10^{10})!"), ("72", "99999999999!"), ("72", "9^{9^{9^{9}}}"),
            ("(x+y+z)^{20}", "(x+y+z)^{100}")]  # sympy: minutes to forever, or gigabytes, each
    cases = [(row["answer"], a, 1.0) for row in ROWS for a in row["right"]]
    cases += [(row["answer"], a, 0.0) for row in ROWS for a in row["wrong"]] + [(g, a, 0.0) for g, a in huge]
    gm.math_verify_score.cache_clear()  # every verdict computed in the thread
    found = {}

    def work():
        found["scores"] = gm.correctness_reward([wrap(a) for _, a, _ in cases], answer=[g for g, _, _ in cases],
                                                answer_type=["symbolic"] * len(cases))

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(timeout=240)
    assert not worker.is_alive(), "grading from a thread hung"
    assert found.get("scores") == [expected for _, _, expected in cases]  # no exception, the same verdicts


def load(tmp_path, data, *flags):
    """load_data on `data`, as main() calls it: (train rows, test rows)."""
    script_args, training_args, model_args, *_ = gm.parse_args(
        ["--model_name_or_path", str(TINY_MODEL), "--dataset_name", str(data), "--num_eval_examples", "10",
         "--output_dir", str(tmp_path / "run"), *flags])
    return gm.load_data(script_args, gm.load_tokenizer(model_args, training_args), training_args.seed)


def test_auto_picks_symbolic_for_math_style_data_and_number_for_gsm8k(tmp_path, capsys):
    train, test = load(tmp_path, MATH_STYLE)
    printed = capsys.readouterr().out
    assert re.search(r"^answer type: symbolic \(--answer_type auto: 39 of 46 golds are not plain numbers, e\.g\. ",
                     printed, re.M), printed
    assert len(train) + len(test) == 46  # every gold graded, none dropped
    assert set(train["answer_type"]) == set(test["answer_type"]) == {"symbolic"}
    train, test = load(tmp_path, TOY_DATA)
    printed = capsys.readouterr().out
    assert re.search(r"^answer type: number \(--answer_type auto: ", printed, re.M), printed
    assert set(train["answer_type"]) == set(test["answer_type"]) == {"number"}
    train, test = load(tmp_path, TOY_DATA, "--answer_type", "symbolic")  # GSM8K graded by math-verify, if asked
    printed = capsys.readouterr().out
    assert "answer type: symbolic (--answer_type symbolic)" in printed and "dropped" not in printed, printed
    assert set(train["answer_type"]) == set(test["answer_type"]) == {"symbolic"}


def dropped_counts(printed: str, read_as: str) -> tuple:
    found = re.findall(r"^dropped (\d+) of (\d+) rows whose answer correctness_reward cannot grade \(e\.g\. .*, "
                       rf"read as {read_as}\): check --answer_type and --answer_column$", printed, re.M)
    return sum(int(n) for n, _ in found), sum(int(total) for _, total in found)


def test_a_gold_no_type_can_read_is_dropped_with_the_flags_named(tmp_path, capsys):
    rows = ROWS + [{"question": "Q?", "answer": answer} for answer in ("see the solution manual", "", "  ")]
    data = tmp_path / "mixed.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    train, test = load(tmp_path, data)
    printed = capsys.readouterr().out
    assert "answer type: symbolic" in printed and dropped_counts(printed, "symbolic") == (3, 49), printed
    assert len(train) + len(test) == 46
    train, test = load(tmp_path, MATH_STYLE, "--answer_type", "number")  # number mode keeps the plain numbers only
    printed = capsys.readouterr().out
    assert dropped_counts(printed, "number") == (39, 46), printed
    assert set(train["answer"]) | set(test["answer"]) == PLAIN_GOLDS
    data.write_text("".join(json.dumps(row) + "\n" for row in rows[-3:] * 4))
    with pytest.raises(gm.RecipeError, match=r"correctness_reward can grade no answer of dataset .*\(e\.g\. .*, read "
                                             r"as number\): check --answer_type and --answer_column"):
        load(tmp_path, data)


def test_a_user_points_the_script_at_a_math_style_file(tmp_path):
    """As a user runs it: a bare file name in the current folder, the tiny model, one step."""
    shutil.copy(MATH_STYLE, tmp_path / "math_style.jsonl")
    flags = [flag for flag in FAST_RUN if flag != str(TOY_DATA)]
    flags.remove("--dataset_name")
    result = run_script([*flags, "--dataset_name", "math_style.jsonl", "--max_steps", "1", "--num_eval_examples", "8",
                         "--eval_batch_size", "8", "--output_dir", "out"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "answer type: symbolic (--answer_type auto: 39 of 46 golds are not plain numbers" in result.stdout
    evaluation = json.loads((tmp_path / "out" / "eval.json").read_text())
    assert evaluation["before"]["num_examples"] == evaluation["after"]["num_examples"] == 8


def test_the_before_after_table_reports_the_right_accuracy_on_symbolic_data(tmp_path, monkeypatch, capsys):
    """The model's answers replaced by known ones: a right spelling for the golds of even rows of the file, a wrong
    one for the others; eval.json's accuracy (and the table) is the share of even rows among the held-out ones."""
    by_gold = {row["answer"]: (row["right"][-1] if i % 2 == 0 else row["wrong"][0], i % 2 == 0)
               for i, row in enumerate(ROWS)}
    shares = []

    def known_answers(trainer, dataset, batch_size, num_samples=0):
        trainer._questions_per_process = [len(dataset)]
        shares.append(sum(by_gold[gold][1] for gold in dataset["answer"]) / len(dataset))
        return [[wrap(by_gold[gold][0])] * (1 + num_samples) for gold in dataset["answer"]]

    monkeypatch.setattr(gm, "generate_answers", known_answers)
    data = tmp_path / "math_style.jsonl"
    shutil.copy(MATH_STYLE, data)
    flags = [flag for flag in FAST_RUN if flag != str(TOY_DATA)]
    flags.remove("--dataset_name")
    gm.main([*flags, "--dataset_name", str(data), "--max_steps", "1", "--num_eval_examples", "20",
             "--eval_batch_size", "20", "--output_dir", str(tmp_path / "run")])
    evaluation = json.loads((tmp_path / "run" / "eval.json").read_text())
    expected = shares[0]
    assert 0.2 < expected < 0.8 and shares[-1] == expected  # both evaluations saw the same held-out rows
    assert evaluation["before"]["accuracy"] == evaluation["after"]["accuracy"] == pytest.approx(expected)
    assert re.search(rf"^accuracy\s+{expected:.2f}\s+{expected:.2f}$", capsys.readouterr().out, re.M)
    trajectories = [json.loads(line) for line in (tmp_path / "run" / "eval_before.jsonl").read_text().splitlines()]
    assert [t["completions"][0]["rewards"]["correctness_reward"] for t in trajectories] == \
        [float(by_gold[t["answer"]][1]) for t in trajectories]
