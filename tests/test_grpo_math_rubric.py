"""The answer semantics and rubric of grpo_math.py, case by case and on random input."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import grpo_math as gm

REWARDS = [func for func, _ in gm.RUBRIC]


def wrap(answer: str, reasoning: str = "Clips: 48 / 2 = 24, 48 + 24 = 72") -> str:
    return f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{answer}\n</answer>"


GSM8K_GOLD = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips.\n#### 72"

# (completion, gold, correct?) -- the semantics the issue spells out, plus hacks that must score 0.
CORRECTNESS_CASES = [
    (wrap("72"), GSM8K_GOLD, True),
    (wrap("72"), "72", True),
    (wrap("72.0"), "72", True),
    (wrap("72.00"), "#### 72", True),
    (wrap("$72"), "72", True),
    (wrap("72 clips"), "72", True),
    (wrap("The answer is 72."), "72", True),
    (wrap("\\boxed{72}"), "72", True),
    (wrap("$\\boxed{72}$"), "72", True),
    (wrap("1,000"), "#### 1,000", True),
    (wrap("1000"), "#### 1,000", True),
    (wrap("1,000"), "1000", True),
    (wrap("$1,234.50"), "#### $1,234.5", True),
    (wrap("-5"), "#### -5", True),
    ("<answer>72</answer>", "72", True),  # correctness alone does not demand the format
    (wrap("72 or 73"), "72", False),
    (wrap("72, 73"), "72", False),
    (wrap("73"), "72", False),
    (wrap("7 2"), "72", False),
    (wrap(""), "72", False),
    (wrap("seventy-two"), "72", False),
    (wrap("\uff17\uff12"), "72", False),  # full-width look-alike digits
    (wrap("72\u0663"), "72", False),  # a trailing Arabic-Indic digit
    (wrap("48 + 24 = 72"), "72", False),  # several different numbers
    ("<reasoning>\n72\n</reasoning>", "72", False),  # no answer block
    ("The answer is 72.", "72", False),
    ("<reasoning>\n...\n</reasoning>\n<answer>\n72", "72", False),  # unclosed
    ("<answer>72</answer><answer>72</answer>", "72", False),  # several blocks
    ("<answer>73</answer><answer>72</answer>", "72", False),
    ("</answer>72<answer>", "72", False),  # reversed tags
    (wrap("72"), "no number here", None),  # a broken gold never pays, nor is it held against the model
    (wrap("1" * 5000), "1" * 5000, None),  # absurdly long numbers are not answers, nor golds
    (wrap("1" * 5000), "72", False),
    ([{"role": "assistant", "content": wrap("72")}], "72", True),  # chat-message completions
    ([{"role": "user", "content": wrap("72")}], "72", False),  # only the assistant's text counts
    ([], "72", False),
]


@pytest.mark.parametrize("completion, gold, correct", CORRECTNESS_CASES)
def test_correctness_semantics(completion, gold, correct):
    assert gm.correctness_reward([completion], answer=[gold]) == [None if correct is None else float(correct)]


def test_gold_number_reads_gsm8k():
    assert gm.gold_number(GSM8K_GOLD) == 72
    assert gm.gold_number("#### 1,000") == 1000
    assert gm.gold_number("#### $5") == 5
    assert gm.gold_number("blah") is None


@pytest.mark.parametrize("text, strict, lenient, tags", [
    (wrap("72"), 1, 1, 1.0),
    (wrap("72") + "\n", 1, 1, 1.0),
    (wrap("72", reasoning="line one\nline two\n\nline four"), 1, 1, 1.0),  # multi-line reasoning
    ("<reasoning>x</reasoning><answer>72</answer>", 0, 1, 1.0),
    ("  <reasoning>\nx\n</reasoning>\n\n<answer> 72 </answer>  ", 0, 1, 1.0),
    (wrap("72") + " and more text", 0, 0, 0.75),  # text after </answer>
    ("<reasoning>\nx\n</reasoning>", 0, 0, 0.5),
    ("<answer>\n72\n</answer>", 0, 0, 0.5),
    (wrap("72") + wrap("72"), 0, 0, 0.0),
    ("", 0, 0, 0.0),
    ("x" * 846 + "</answer>", 0, 0, 0.25),  # the 2025 demo's reward went negative here
])
def test_format_rewards(text, strict, lenient, tags):
    assert gm.strict_format_reward([text]) == [float(strict)]
    assert gm.lenient_format_reward([text]) == [float(lenient)]
    assert gm.tag_count_reward([text]) == [tags]


def total_reward(completion, gold="72"):
    weights = [w for _, w in gm.RUBRIC]
    return sum(w * f([completion], answer=[gold])[0] for f, w in zip(REWARDS, weights))


def test_format_and_bonus_pay_less_than_a_correct_answer():
    correct_weight = dict((f.__name__, w) for f, w in gm.RUBRIC)["correctness_reward"]
    assert sum(w for f, w in gm.RUBRIC if f is not gm.correctness_reward) < correct_weight


HACKS = [
    wrap("73"),  # perfect format, wrong number
    wrap("72 73 74 75"),  # spray numbers
    wrap("72") + wrap("72"),  # several answers
    wrap("73", reasoning="the answer is 72"),  # gold hidden in the reasoning
    "<reasoning></reasoning><answer></answer>",  # tags only
    "",
    wrap("\uff17\uff12"),
    wrap("72") * 50,
]


@pytest.mark.parametrize("hack", HACKS)
def test_no_hack_beats_an_honest_correct_answer(hack):
    honest = total_reward(wrap("72"))
    assert gm.correctness_reward([hack], answer=["72"]) == [0.0]
    assert total_reward(hack) < honest


def test_pathological_inputs_are_fast():
    import time

    inputs = ["<answer>" * 10_000, "<reasoning>\n" * 10_000 + "</answer>" * 10_000, "{" * 50_000 + "72",
              wrap("9" * 100_000), "<reasoning>\n" + "x" * 100_000 + "\n</reasoning>\n<answer>\n72\n</answer>",
              "\n</reasoning>\n<answer>\n" * 10_000]
    for text in inputs:
        start = time.perf_counter()
        for func in REWARDS:
            func([text], answer=["72"])
        assert time.perf_counter() - start < 0.5, text[:40]


messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["assistant", "user", "tool"]),
                                           "content": st.one_of(st.text(), st.none())}), max_size=3)
tag_soup = st.lists(st.sampled_from(["<reasoning>", "</reasoning>", "<answer>", "</answer>", "\n", " ", "72",
                                     "7", "2", ",", ".", "$", "\\boxed{", "}", "-", "or", "\uff17", "x"]),
                    max_size=30).map("".join)


@given(completion=st.one_of(st.text(), tag_soup, messages), gold=st.one_of(st.text(), tag_soup))
def test_rewards_never_raise_and_stay_in_range(completion, gold):
    for func in REWARDS:
        first = func([completion], answer=[gold])
        assert len(first) == 1 and (first[0] is None or 0.0 <= first[0] <= 1.0)  # None: a broken gold
        assert func([completion], answer=[gold]) == first  # deterministic
