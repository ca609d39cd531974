"""Chat-template families: does each family TRL ships drive tool calls through grpo_tools.py, in training and in
evaluation, with the trained token ids equal to the sampled ones?

Offline, no download. For each family: a tiny random model whose tokenizer carries TRL's own template file
(byte for byte, so TRL recognises it as it would the real model's) and that template's markers as single tokens,
and a scripted generation (a logits processor that forces the family's tool call, then the answer after the tool's
result) so that every family holds the same conversation: "6 * 7" to the calculator, "42" back, the answer.
Then, through `grpo_tools.main` as a user runs it:
- training: one GRPO step through `environment_factory`, with the held-out evaluation before and after it;
- evaluation: `--eval_only` on the same model;
and, in both, every rollout is checked: the call was parsed and ran, the tool's result was fed back in the family's
own format (the rollout's ids are the template's rendering of the whole conversation), and the ids the model is
trained on are the ids it sampled, turn by turn.

    python benchmarks/bench_families.py                        # every family; writes results/families.json
    python benchmarks/bench_families.py --families qwen3 gptoss
"""

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import torch
import trl
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (AddedToken, GenerationConfig, LogitsProcessor, LogitsProcessorList, PreTrainedTokenizerFast,
                          Qwen3Config, Qwen3ForCausalLM)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
import grpo_tools  # noqa: E402

TEMPLATES = Path(trl.__file__).parent / "chat_templates"
# Each text-only template TRL ships, with the tokens its real models stop on (`eos`: end of turn first), begin with
# (`bos`), and name as the tokenizer's eos_token where that is not the end of turn (Gemma, GLM): TRL cuts the
# rendering of a tool result at the tokenizer's eos_token, so it matters.
FAMILIES = {
    "qwen2_5": dict(eos=["<|im_end|>"]),
    "qwen3": dict(eos=["<|im_end|>"]),
    "qwen3_instruct_2507": dict(eos=["<|im_end|>"]),
    "qwen3_5_nothink": dict(eos=["<|im_end|>"]),
    "qwen3_5_think": dict(eos=["<|im_end|>"]),
    "qwen3_6": dict(eos=["<|im_end|>"]),
    "qwen3_8": dict(eos=["<|im_end|>"]),
    "llama3_1": dict(eos=["<|eot_id|>", "<|eom_id|>"], bos="<|begin_of_text|>"),
    "llama3_2": dict(eos=["<|eot_id|>", "<|eom_id|>"], bos="<|begin_of_text|>"),
    "gemma4": dict(eos=["<turn|>", "<|tool_response>"], bos="<bos>", eos_token="<eos>"),
    "gemma4_v2": dict(eos=["<turn|>", "<|tool_response>"], bos="<bos>", eos_token="<eos>"),
    "gemma4_v3": dict(eos=["<turn|>", "<|tool_response>"], bos="<bos>", eos_token="<eos>"),
    "gemma4_v4": dict(eos=["<turn|>", "<|tool_response>"], bos="<bos>", eos_token="<eos>"),
    "gemma4_v5": dict(eos=["<turn|>", "<|tool_response>"], bos="<bos>", eos_token="<eos>"),
    "glm4moe": dict(eos=["<|user|>", "<|observation|>"], eos_token="<|endoftext|>"),
    "gptoss": dict(eos=["<|return|>", "<|call|>"]),
    "lfm2_v2": dict(eos=["<|im_end|>"], bos="<|startoftext|>"),
    "lfm2_2_5": dict(eos=["<|im_end|>"], bos="<|startoftext|>"),
    "lfm2_2_5_v2": dict(eos=["<|im_end|>"], bos="<|startoftext|>"),
    "nemotron_3_nano": dict(eos=["<|im_end|>"]),
    "nemotron_3_super": dict(eos=["<|im_end|>"]),
    "nemotron_3_ultra": dict(eos=["<|im_end|>"]),
    "nemotron_3_5_lightning": dict(eos=["<|im_end|>"]),
    "deepseek_r1_distill": dict(eos=["<｜end▁of▁sentence｜>"], bos="<｜begin▁of▁sentence｜>"),
    "deepseekv3": dict(eos=["<｜end▁of▁sentence｜>"], bos="<｜begin▁of▁sentence｜>"),
    "llama3": dict(eos=["<|eot_id|>"], bos="<|begin_of_text|>"),
    "gemma": dict(eos=["<end_of_turn>"], bos="<bos>", eos_token="<eos>"),
    "gemma3": dict(eos=["<end_of_turn>"], bos="<bos>", eos_token="<eos>"),
    "phi3": dict(eos=["<|end|>"]),
    "phi3_5": dict(eos=["<|end|>"]),
    "cohere": dict(eos=["<|END_OF_TURN_TOKEN|>"], bos="<BOS_TOKEN>"),
    "cohere2": dict(eos=["<|END_OF_TURN_TOKEN|>"], bos="<BOS_TOKEN>"),
    "lfm2": dict(eos=["<|im_end|>"], bos="<|startoftext|>"),
    "diffusion_gemma": dict(eos=["<turn|>", "<|tool_response>"], bos="<bos>", eos_token="<eos>"),
    "muse_glimmer": dict(eos=["<|eot|>", "<|eom|>"]),
}
# Not in the matrix: vision-language templates need an image processor, and the scripts are text-only.
LEFT_OUT = {name: "vision-language (needs an image processor)" for name in
            ("qwen2_5_vl", "qwen3_vl", "lfm2_2_5_vl", "idefics3", "llava_next", "smolvlm")}
# The template's markers, each made a single token: <|...|>, <｜...｜>, <|x>, <x|>, Gemma's turns, and the tags
# Qwen and GLM tokenizers hold as tokens.
MARKERS = re.compile(r'<\|[^|<>\s]{1,30}\|>|<｜[^｜]{1,40}｜>|<\|[a-z_"]{1,20}>|<[a-z_]{1,20}\|>'
                     r"|<(?:start|end)_of_turn>"
                     r"|</?(?:tool_call|tool_response|think|arg_key|arg_value|sop)>")
QUESTION, EXPRESSION, RESULT = "A school has 6 classes with 7 pupils each. How many pupils are there?", "6 * 7", "42"
ANSWER = f"<answer>{RESULT}</answer>"


def build_model(family: str, folder: Path) -> Path:
    """A tiny random Qwen3-architecture model whose tokenizer carries the family's template and markers."""
    settings = FAMILIES[family]
    template = (TEMPLATES / f"{family}.jinja").read_text(encoding="utf-8")
    eos_token = settings.get("eos_token", settings["eos"][0])
    stops = [eos_token] + [token for token in settings["eos"] if token != eos_token]
    markers = sorted(set(MARKERS.findall(template)) | set(stops) | {settings.get("bos") or "<|eos|>"})
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    texts = [grpo_tools.SYSTEM_PROMPT, QUESTION, ANSWER, json.dumps({"name": "calculator", "arguments": EXPRESSION}),
             grpo_tools.calculator.__doc__, grpo_tools.sandbox.run_python.__doc__] * 20
    bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>"], show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=eos_token, pad_token="<pad>",
                                        bos_token=settings.get("bos"), padding_side="left")
    # Structural markers are special tokens, as in the real tokenizers; tags like <tool_call> are plain added tokens.
    tokenizer.add_tokens([AddedToken(m, special=m.startswith(("<|", "<｜")) or m.endswith("|>") or "_of_turn" in m
                                     or m in stops or m == settings.get("bos"), normalized=False)
                          for m in markers])
    tokenizer.chat_template = template
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=8192,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.convert_tokens_to_ids(stops),
                                               pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id)
    model.save_pretrained(folder)
    tokenizer.init_kwargs.pop("local_files_only", None)
    tokenizer.save_pretrained(folder)
    return folder


class ScriptedTurns(LogitsProcessor):
    """Forces each row's next turn: the tool call until the context holds it, then the answer; eos after either."""

    def __init__(self, call_ids: list[int], answer_ids: list[int], eos_id: int):
        self.call_ids, self.answer_ids, self.eos_id = call_ids, answer_ids, eos_id
        self.start, self.targets = None, None

    def __call__(self, input_ids, scores):
        if self.start is None:  # the first step of this generate(): choose each row's turn from its context
            self.start = input_ids.shape[1]
            self.targets = [self.answer_ids if contains(row.tolist(), self.call_ids) else self.call_ids
                            for row in input_ids]
        step = input_ids.shape[1] - self.start
        forced = torch.full_like(scores, float("-inf"))
        for row, target in enumerate(self.targets):
            forced[row, target[step] if step < len(target) else self.eos_id] = 0.0
        return forced


def contains(ids: list[int], part: list[int]) -> bool:
    return any(ids[i:i + len(part)] == part for i in range(len(ids) - len(part) + 1))


def conversation(call: bool, result: bool, answer: bool) -> list[dict]:
    messages = [{"role": "system", "content": grpo_tools.SYSTEM_PROMPT}, {"role": "user", "content": QUESTION}]
    if call:
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "calculator", "arguments": {"expression": EXPRESSION}}}]})
    if result:
        messages.append({"role": "tool", "name": "calculator", "content": RESULT})
    if answer:
        messages.append({"role": "assistant", "content": ANSWER})
    return messages


def rendered(tokenizer, template, messages, generation_prompt=False) -> list[int]:
    return tokenizer.apply_chat_template(messages, tools=grpo_tools.tools_of(grpo_tools.ToolEnvironment()),
                                         chat_template=template, add_generation_prompt=generation_prompt,
                                         tokenize=True, return_dict=False)


def turn(tokenizer, template, before: list[dict], after: list[dict], eos_ids: list[int]) -> list[int]:
    """The ids a model of the family writes after `before`'s generation prompt to produce the new message in `after`,
    up to its first stop token. Where the generation prompt opens more than the rendered message keeps (a thinking
    template's "<think>\n"), what it opened is taken off the message's text."""
    start, full = rendered(tokenizer, template, before, True), rendered(tokenizer, template, after)
    if full[:len(start)] == start:
        ids = full[len(start):]
    else:
        start_text, full_text = tokenizer.decode(start), tokenizer.decode(full)
        common = len(os.path.commonprefix([start_text, full_text]))
        opened, rest = start_text[common:].strip(), full_text[common:]
        if not rest.startswith(opened):
            raise ValueError(f"the generation prompt opens {opened!r}, which the rendered turn {rest[:40]!r} lacks")
        ids = tokenizer(rest[len(opened):].lstrip(), add_special_tokens=False)["input_ids"]
    end = next((i for i, token in enumerate(ids) if token in eos_ids), len(ids) - 1)
    return ids[:end + 1]


def check_family(family: str, workdir: Path, extra_flags: tuple = ()) -> dict:
    """Train one step and evaluate (before, after, and with --eval_only) on the family's tiny model; every rollout
    of every call to TRL's generation step is checked. `extra_flags` go after the matrix's own."""
    from transformers import AutoTokenizer
    from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving

    started = time.time()
    model_dir = build_model(family, workdir / family)
    data = workdir / f"{family}-data"
    data.mkdir()
    for split, n in (("train", 8), ("test", 2)):
        rows = [{"question": QUESTION, "answer": f"{EXPRESSION} = {RESULT}\n#### {RESULT}"}] * n
        (data / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    flags = ["--model_name_or_path", str(model_dir), "--dataset_name", str(data), "--max_prompt_tokens", "8192",
             "--per_device_train_batch_size", "4", "--num_generations", "2", "--gradient_accumulation_steps", "1",
             "--max_completion_length", "512", "--max_tool_calling_iterations", "3", "--num_eval_examples", "2",
             "--eval_batch_size", "2", "--mid_eval_steps", "0", "--logging_steps", "1", "--report_to", "none",
             "--gradient_checkpointing", "false", "--bf16", "false", "--save_strategy", "no", *extra_flags]
    result = {"family": family, "accepted": False, "training": False, "evaluation": False, "tokens_agree": False}
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    calls, generated = [], []  # per call of TRL's generation step: (mode, its output); per generate(): new ids
    eos_ids = tokenizer.convert_tokens_to_ids(FAMILIES[family]["eos"])  # end of turn first
    original_generate, original_step = Qwen3ForCausalLM.generate, grpo_tools.GRPOTrainer._generate

    try:
        template = None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)
        call_ids = turn(tokenizer, template, conversation(False, False, False), conversation(True, False, False),
                        eos_ids)
        answer_ids = turn(tokenizer, template, conversation(True, True, False), conversation(True, True, True),
                          eos_ids)
        after_result = tokenizer.decode(rendered(tokenizer, template, conversation(True, True, False), True))
    except (ValueError, TypeError, Exception) as error:  # a template TRL cannot patch, or one that cannot render
        template = call_ids = answer_ids = after_result = None
        result["render_error"] = str(error).splitlines()[0][:200]

    def scripted_generate(self, *args, **kwargs):
        prompt_length = kwargs["input_ids"].shape[1]
        kwargs["logits_processor"] = LogitsProcessorList([ScriptedTurns(call_ids, answer_ids, eos_ids[0])])
        output = original_generate(self, *args, **kwargs)
        rows = output[:, prompt_length:].tolist()
        ends = [next((i for i, token in enumerate(row) if token in eos_ids), len(row) - 1) for row in rows]
        generated[-1].append([row[:end + 1] for row, end in zip(rows, ends)])  # TRL keeps each turn to its eos
        return output

    def recorded_step(self, prompts):
        generated.append([])
        output = original_step(self, prompts)
        calls.append(("train" if self.model.training else "eval", output, generated.pop()))
        return output

    Qwen3ForCausalLM.generate, grpo_tools.GRPOTrainer._generate = scripted_generate, recorded_step
    try:
        grpo_tools.main([*flags, "--max_steps", "1", "--output_dir", str(workdir / f"{family}-run")])
        grpo_tools.main([*flags, "--eval_only", "--output_dir", str(workdir / f"{family}-eval")])
        result["accepted"] = True
    except grpo_tools.RecipeError as error:
        result["error"] = str(error)
    finally:
        Qwen3ForCausalLM.generate, grpo_tools.GRPOTrainer._generate = original_generate, original_step
    if not result["accepted"]:
        result["seconds"] = round(time.time() - started, 1)
        return result

    checks = {"train": [], "eval": []}
    for mode, output, sampled in calls:
        prompt_ids, completion_ids, tool_mask, completions = output[:4]
        for i, (messages, ids, mask) in enumerate(zip(completions, completion_ids, tool_mask)):
            turns = sum(m.get("role") == "assistant" for m in messages)
            # The rows in each generate() call: those that had that many assistant turns, in order
            own = [sampled[k][[j for j, c in enumerate(completions)
                               if sum(m.get("role") == "assistant" for m in c) > k].index(i)] for k in range(turns)]
            trained = [token for token, keep in zip(ids, mask) if keep]
            tool_calls = [call for m in messages for call in m.get("tool_calls") or []]
            checks[mode].append({
                "parsed": [c["function"]["name"] for c in tool_calls] == ["calculator"]
                and tool_calls[0]["function"]["arguments"] == {"expression": EXPRESSION},
                "ran": [m.get("content") for m in messages if m.get("role") == "tool"] == [RESULT],
                "answered": grpo_tools.extract_answer(grpo_tools.completion_text(messages)) == RESULT,
                "fed_back": all(RESULT in text and text in after_result for text in masked_runs(tokenizer, ids, mask)),
                "as_rendered": after_result is not None and tokenizer.decode(prompt_ids[i] + ids[:last_masked(mask)])
                == after_result,
                "tokens": trained == [token for part in own for token in part]})
    evaluation = json.loads((workdir / f"{family}-eval" / "eval.json").read_text())["eval_only"]
    training_run = json.loads((workdir / f"{family}-run" / "eval.json").read_text())
    result.update(
        rollouts={mode: len(found) for mode, found in checks.items()},
        longest_rollout_ids={mode: max((len(output[1][i]) for m, output, _ in calls if m == mode
                                        for i in range(len(output[1]))), default=0) for mode in checks},
        call_ids=len(call_ids),
        failed_checks=sorted({f"{mode}:{name}" for mode, found in checks.items() for c in found
                              for name, ok in c.items() if not ok}),
        eval_only_accuracy=evaluation["accuracy"], eval_only_tool_calls=evaluation["mean_tool_calls"],
        trained_steps=training_run["global_step"])
    fine = {mode: bool(found) and all(c["parsed"] and c["ran"] and c["answered"] and c["fed_back"] for c in found)
            for mode, found in checks.items()}
    result["training"] = fine["train"] and training_run["global_step"] == 1
    result["evaluation"] = fine["eval"] and evaluation["accuracy"] == 1.0 and evaluation["mean_tool_calls"] == 1.0
    result["tokens_agree"] = all(c["tokens"] for found in checks.values() for c in found)
    result["as_rendered"] = all(c["as_rendered"] for found in checks.values() for c in found)
    result["seconds"] = round(time.time() - started, 1)
    return result


def masked_runs(tokenizer, ids: list[int], mask: list[int]) -> list[str]:
    """The text of each run of ids outside the loss (the tool results and the template around them)."""
    runs, run = [], []
    for token, keep in zip(ids + [None], mask + [1]):
        if not keep:
            run.append(token)
        elif run:
            runs.append(tokenizer.decode(run))
            run = []
    return runs or ["(no tool result)"]


def last_masked(mask: list[int]) -> int:
    """The position after the last id outside the loss: where the answer turn starts."""
    return max((n + 1 for n, keep in enumerate(mask) if not keep), default=0)


def table(results: list[dict]) -> str:
    """docs/grpo_tools.md's table: one row per family."""
    mark = {True: "yes", False: "**no**"}
    lines = ["| family (TRL's template) | training | evaluation | tokens agree | context as the template renders it |",
             "| --- | --- | --- | --- | --- |"]
    for r in results:
        if r["accepted"]:
            lines.append(f"| {r['family']} | {mark[r['training']]} | {mark[r['evaluation']]} | "
                         f"{mark[r['tokens_agree']]} | {mark[r['as_rendered']]} |")
        else:
            lines.append(f"| {r['family']} | refused before training, one-line error | - | - | - |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="*", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "families.json"))
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for family in args.families:
            results.append(check_family(family, Path(workdir)))
            r = results[-1]
            print(f"{family}: " + (f"training {r['training']}, evaluation {r['evaluation']}, tokens agree "
                                   f"{r['tokens_agree']}, as rendered {r['as_rendered']}" if r["accepted"]
                                   else f"refused: {r['error']}") + f" ({r['seconds']} s)", flush=True)
    report = {"trl": trl.__version__, "left_out": LEFT_OUT, "families": results}
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(table(results))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
