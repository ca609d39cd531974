"""--skip_zero_signal N: a prompt whose group all scored the same sits out its next N turns. The sampler unit by unit
(TRL's order when nothing rests, the rest rule, full chunks, processes that disagree), then real runs: one process,
whose prompts must be exactly the ones the rule predicts from the run's own saved groups, and two processes, whose
groups span both ranks."""

import json

import pytest
from conftest import FAST_RUN, REPO, TOY_DATA, run_script
from test_multiprocess import torchrun
from trl.trainer.utils import RepeatSampler

import grpo_math as gm
import instruments  # noqa: E402


def chunks(sampler, take: int, group: int):
    """The first `take` chunks an iterator over `sampler` yields, as lists of distinct prompts."""
    stream = iter(sampler)
    per_chunk = sampler.batch_size * sampler.mini_repeat_count * sampler.repeat_count
    return stream, [[next(stream) for _ in range(per_chunk)][::group][:sampler.batch_size] for _ in range(take)]


@pytest.mark.parametrize("shuffle", [True, False])
def test_with_nothing_resting_the_order_is_trls_own(shuffle):
    settings = dict(batch_size=3, mini_repeat_count=4, repeat_count=2, seed=42, shuffle=shuffle)
    ours = instruments.ZeroSignalSampler(size=12, rest=1, **settings)
    trl = RepeatSampler(data_source=range(12), **settings)
    assert len(ours) == len(trl) == 12 * 4 * 2
    assert list(ours) == list(trl)


def test_a_quiet_prompt_sits_out_its_next_turn_and_comes_back():
    sampler = instruments.ZeroSignalSampler(size=6, batch_size=2, mini_repeat_count=2, repeat_count=1, seed=0,
                                   shuffle=False, rest=1)
    stream = iter(sampler)
    first = [next(stream) for _ in range(4)]
    assert first == [0, 0, 1, 1]
    quiet = sampler.record(first, [0.0, 0.0, 0.7, -0.7], group_size=2)  # prompt 0: all the same; prompt 1: signal
    assert quiet == 1 and sampler.resting == {0: 1}
    seen = first + list(stream) + list(sampler) + list(sampler)
    prompts = seen[::2]
    # the 2nd pass skips 0 (its one turn out), and every chunk is still full: its place goes to the next in line
    assert prompts == [0, 1, 2, 3, 4, 5] + [1, 2, 3, 4, 5, 0] + [1, 2, 3, 4, 5, 0]
    assert sampler.passed_over == 1 and len(seen) == 3 * len(sampler)


def test_a_longer_rest_and_everything_resting():
    sampler = instruments.ZeroSignalSampler(size=2, batch_size=2, mini_repeat_count=1, repeat_count=1, seed=0,
                                   shuffle=False, rest=2)
    stream = iter(sampler)
    first = [next(stream), next(stream)]
    sampler.record(first, [0.0, 0.0], group_size=1)
    sampler.record(first, [1.0, 1.0], group_size=1)  # one rollout per group: a group of one teaches nothing either
    assert sampler.resting == {0: 2, 1: 2}
    assert list(sampler) == [0, 1]  # both sat out two turns (passed over), then came back: no endless loop
    assert sampler.passed_over == 4 and sampler.resting == {0: 0, 1: 0}


def test_samplers_that_disagree_are_caught():
    sampler = instruments.ZeroSignalSampler(size=4, batch_size=2, mini_repeat_count=2, repeat_count=1, seed=0,
                                   shuffle=True, rest=1)
    with pytest.raises(RuntimeError, match="different prompts"):
        sampler.record([3, 3, 1, 2], [0.0] * 4, group_size=2)


def test_a_negative_value_is_refused():
    result = run_script([*FAST_RUN, "--max_steps", "1", "--skip_zero_signal", "-1", "--output_dir", "/tmp/unused"])
    assert result.returncode != 0
    assert "--skip_zero_signal" in result.stderr.strip().splitlines()[-1]


def small_dataset(folder, prompts: int):
    folder.mkdir()
    train = (TOY_DATA / "train.jsonl").read_text().splitlines()[:prompts]
    (folder / "train.jsonl").write_text("\n".join(train) + "\n")
    (folder / "test.jsonl").write_text("\n".join((TOY_DATA / "test.jsonl").read_text().splitlines()[:8]) + "\n")
    return [json.loads(line)["question"] for line in train]


def test_a_run_trains_exactly_the_prompts_the_rule_predicts(tmp_path):
    """16 prompts, 2 a step (one generation, trained in 2 micro-steps, as TRL repeats it), 20 steps: 2.5 passes.
    Every rollout is saved (whole groups), so the test knows which groups were quiet and can replay the rule: the
    run's prompts, step by step, must be the predicted ones."""
    questions = small_dataset(tmp_path / "data", 16)
    out = tmp_path / "run"
    result = run_script([*FAST_RUN, "--dataset_name", tmp_path / "data", "--num_eval_examples", "8",
                         "--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2",
                         "--max_steps", "20", "--skip_zero_signal", "1", "--train_samples_per_log", "-1",
                         "--seed", "3", "--output_dir", out])
    assert result.returncode == 0, result.stderr[-3000:]
    weights = {func.__name__: weight for func, weight in gm.RUBRIC}
    steps = {}
    for line in (out / "train_samples.jsonl").read_text().splitlines():
        group = json.loads(line)
        index = questions.index(group["prompt"][-1]["content"])
        totals = [sum(weights[name] * value for name, value in c["rewards"].items() if value is not None)
                  for c in group["completions"]]
        assert len(totals) == 8
        steps.setdefault(group["step"], []).append((index, max(totals) - min(totals) < 1e-6))
    assert sorted(steps) == list(range(20))  # the saving wrapper sees the step before it is counted

    # The rule, replayed: a step's prompts are drawn after the previous step was scored (the loader reads one
    # batch ahead, but TRL's repeats of the generation batch come first)
    sampler = instruments.ZeroSignalSampler(size=16, batch_size=2, mini_repeat_count=8, repeat_count=2, seed=3,
                                   shuffle=True, rest=1)
    stream = iter(sampler)
    for step in range(20):
        drawn = [next(stream) for _ in range(32)][:16:8]
        assert [index for index, _ in steps[step]] == drawn, f"step {step + 1}"
        quiet = [index for index, still in steps[step] for _ in range(8)]
        sampler.record(quiet, [0.0 if still else 1.0 for _, still in steps[step] for _ in range(8)], group_size=8)
        if step % 8 == 7:
            stream = iter(sampler)  # the trainer's next epoch: 16 prompts, 2 a step
    assert sampler.passed_over > 0, "no group was quiet: the run shows nothing; pick another --seed"

    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    logged = [(e["zero_signal/quiet_groups"], e["frac_reward_zero_std"]) for e in history if "zero_signal/quiet_groups" in e]
    assert len(logged) == 20 and all(quiet == round(share * 2) for quiet, share in logged)  # TRL's own count agrees
    assert history[-2]["zero_signal/passed_over"] == sampler.passed_over


def test_two_processes_draw_the_same_groups(tmp_path):
    """Each rank generates 4 of a group's 8 rollouts, so every group spans both ranks: a rank whose sampler drew
    another prompt would put two prompts in one group, which record() refuses."""
    small_dataset(tmp_path / "data", 8)
    out = tmp_path / "two"
    result = torchrun("grpo_math.py", ["--model_name_or_path", REPO / "assets" / "tiny-qwen-math", "--dataset_name",
                                       tmp_path / "data", "--max_completion_length", "40",
                                       "--per_device_train_batch_size", "4", "--num_generations", "8",
                                       "--learning_rate", "2e-4", "--warmup_steps", "0", "--gradient_checkpointing",
                                       "false", "--logging_steps", "1", "--max_steps", "12", "--save_steps", "100",
                                       "--num_eval_examples", "4", "--eval_batch_size", "4", "--seed", "3",
                                       "--skip_zero_signal", "1", "--output_dir", out])
    assert result.returncode == 0, result.stderr[-3000:]
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    passed = [e["zero_signal/passed_over"] for e in history if "zero_signal/passed_over" in e]
    assert len(passed) == 12
    assert passed[-1] > 0, "no prompt rested: the run shows nothing; pick another --seed"
