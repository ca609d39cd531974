"""Rebuild the offline demo assets: a toy GSM8K-style dataset and a tiny warm-started model.

    python assets/make_demo_assets.py            # rewrites assets/toy_math/ and assets/tiny-qwen-math/
    python assets/make_demo_assets.py --out /tmp/demo --seed 1

grpo_math.py falls back to these when there is no CUDA GPU and no model was chosen, so that a
laptop with no GPU and no network can watch GRPO learn in a few minutes. Everything here is
deterministic given --seed (same machine, same library versions):

1. Toy data: one-step word problems ("Mia has 7 apples. Mia buys 5 more. How many...") written
   like GSM8K, with the gold answer after "####". Test questions never appear in train.
2. Tokenizer: a byte-level BPE trained on that data, so any text (real GSM8K too) still
   tokenizes, with Qwen's special tokens and a byte-identical copy of TRL's Qwen2.5 chat template.
3. Model: a ~0.1M-parameter Qwen2 (the architecture of Qwen2.5-0.5B-Instruct, just smaller),
   given a short supervised warm start that imitates a sloppy teacher: in 60% of its examples
   the teacher writes a result one too high. The model learns the format, the arithmetic, and
   the teacher's habit, so greedy decoding often gives the off-by-one answer while its samples
   are right about 40% of the time. GRPO, rewarded only for correct answers, unlearns the habit:
   what reinforcement learning with a verifier can do and imitation of flawed data cannot.
"""

import argparse
import json
import random
import shutil
from pathlib import Path

import torch
import trl
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import AutoTokenizer, GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

HERE = Path(__file__).resolve().parent

# The exact system prompt grpo_math.py uses; the tokenizer learns it as a handful of tokens.
SYSTEM_PROMPT = """Respond in the following format:
<reasoning>
...
</reasoning>
<answer>
...
</answer>"""

QWEN2_PRETOKENIZE_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                           r"""\s*[\r\n]+|\s+(?!\S)|\s+""")

NAMES = ["Mia", "Noah", "Ava", "Liam", "Emma", "Omar", "Zoe", "Ravi", "Lena", "Kai", "Ines", "Theo",
         "Sara", "Ben", "Yuki", "Tom", "Nora", "Leo", "Ana", "Max"]
ITEMS = ["apples", "books", "pens", "cards", "shells", "coins", "stamps", "marbles", "cookies",
         "stickers", "eggs", "flowers", "toys", "rocks", "cups", "hats"]
MAX_OPERAND = 9  # sums up to 18: small enough for a tiny model to learn, big enough to get wrong


def make_problem(rng: random.Random, max_operand: int = MAX_OPERAND) -> dict:
    """One GSM8K-style problem: question, worked answer ending in '#### <number>'."""
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(1, max_operand), rng.randint(1, max_operand)
    if rng.random() < 0.5:
        question = f"{name} has {a} {item}. {name} buys {b} more. How many {item} does {name} have now?"
        result, step = a + b, f"{a} + {b} = {a + b}"
    else:
        a = a + b  # keep the difference positive
        question = f"{name} has {a} {item} and gives away {b}. How many {item} does {name} have left?"
        result, step = a - b, f"{a} - {b} = {a - b}"
    return {"question": question, "answer": f"{name} has {step} {item}.\n#### {result}", "step": step,
            "result": result}


def make_dataset(rng: random.Random, n_train: int, n_test: int, max_operand: int = MAX_OPERAND):
    seen, train, test = set(), [], []
    while len(train) + len(test) < n_train + n_test:
        problem = make_problem(rng, max_operand)
        if problem["question"] in seen:
            continue
        seen.add(problem["question"])
        (test if len(test) < n_test else train).append(problem)
    return train, test


def reference_completion(problem: dict, off_by_one: bool = False) -> str:
    """The answer the system prompt asks for; `off_by_one` writes the sloppy teacher's result."""
    result = problem["result"] + 1 if off_by_one else problem["result"]
    step = problem["step"].rsplit("=", 1)[0] + f"= {result}"
    return f"<reasoning>\n{step}\n</reasoning>\n<answer>\n{result}\n</answer>"


def conversation(problem: dict, answer: str | None = None) -> list[dict]:
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem["question"]}]
    if answer is not None:
        messages.append({"role": "assistant", "content": answer})
    return messages


def make_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    # Added (non-special) tokens Qwen2.5 has too, so the same tokenizer can drive tool calls.
    added = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
    bpe = Tokenizer(models.BPE())
    # Qwen2's own normaliser and pre-tokeniser (one token per digit among them): AutoTokenizer
    # loads this folder as a Qwen2Tokenizer, which rebuilds exactly this pipeline.
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        padding_side="left")
    tokenizer.add_tokens(added)
    # A byte-identical copy of a template TRL ships, so TRL recognises it exactly as it does Qwen2.5's.
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    return tokenizer


def warm_start(model, tokenizer, problems: list[dict], steps: int, batch_size: int, lr: float, seed: int,
               teacher_error: float):
    """Supervised fine-tuning on a sloppy teacher's answers, loss on the assistant's tokens only."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    examples = []
    for problem in problems:
        answer = reference_completion(problem, off_by_one=rng.random() < teacher_error)
        prompt_ids = tokenizer.apply_chat_template(conversation(problem), add_generation_prompt=True,
                                                   tokenize=True, return_dict=False)
        full_ids = tokenizer.apply_chat_template(conversation(problem, answer), tokenize=True, return_dict=False)
        full_ids = full_ids[:-1] if tokenizer.decode(full_ids[-1:]) == "\n" else full_ids  # end on <|im_end|>
        assert full_ids[: len(prompt_ids)] == prompt_ids
        labels = [-100] * len(prompt_ids) + full_ids[len(prompt_ids):]
        examples.append((full_ids, labels))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(steps):
        idx = torch.randint(len(examples), (batch_size,), generator=generator).tolist()
        width = max(len(examples[i][0]) for i in idx)
        input_ids = torch.full((batch_size, width), tokenizer.pad_token_id)
        labels = torch.full((batch_size, width), -100)
        attention = torch.zeros((batch_size, width), dtype=torch.long)
        for row, i in enumerate(idx):  # right padding is fine for training
            ids, lab = examples[i]
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, : len(lab)] = torch.tensor(lab)
            attention[row, : len(ids)] = 1
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 100 == 0 or step == steps - 1:
            print(f"  warm start step {step:4d}  loss {loss.item():.3f}")
    model.eval()


@torch.no_grad()
def greedy_accuracy(model, tokenizer, problems: list[dict]) -> float:
    prompts = [tokenizer.apply_chat_template(conversation(p), add_generation_prompt=True, tokenize=False)
               for p in problems]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    out = model.generate(**batch, max_new_tokens=40, do_sample=False)
    texts = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    return sum(f"<answer>\n{p['result']}\n</answer>" in t for p, t in zip(problems, texts)) / len(problems)


def build_math(out: Path, seed: int, warm_steps: int, hidden: int, layers: int, lr: float,
               max_operand: int = MAX_OPERAND, teacher_error: float = 0.0):
    rng = random.Random(seed)
    train, test = make_dataset(rng, n_train=4000, n_test=200, max_operand=max_operand)
    data_dir = out / "toy_math"
    data_dir.mkdir(parents=True, exist_ok=True)
    for split, rows in [("train", train), ("test", test)]:
        with open(data_dir / f"{split}.jsonl", "w") as f:
            for row in rows:
                f.write(json.dumps({"question": row["question"], "answer": row["answer"]}) + "\n")

    texts = [SYSTEM_PROMPT] + [p["question"] + "\n" + p["answer"] + "\n" + reference_completion(p) for p in train]
    model_dir = out / "tiny-qwen-math"
    shutil.rmtree(model_dir, ignore_errors=True)
    make_tokenizer(texts, vocab_size=600).save_pretrained(model_dir)
    # Warm up with the tokenizer exactly as grpo_math.py will load it.
    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, tie_word_embeddings=True,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=None)
    model = Qwen2ForCausalLM(config)
    print(f"tiny model: {sum(p.numel() for p in model.parameters()):,} parameters, vocab {len(tokenizer)}")
    warm_start(model, tokenizer, train, steps=warm_steps, batch_size=32, lr=lr, seed=seed,
               teacher_error=teacher_error)
    print(f"greedy accuracy on test after warm start: {greedy_accuracy(model, tokenizer, test):.2f}")

    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    model.save_pretrained(model_dir)
    tokenizer.init_kwargs.pop("local_files_only", None)  # set by HF_HUB_OFFLINE; not part of the asset
    tokenizer.save_pretrained(model_dir)
    print(f"wrote {data_dir} and {model_dir}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write the assets into")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warm_steps", type=int, default=600, help="supervised steps")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--max_operand", type=int, default=MAX_OPERAND)
    parser.add_argument("--teacher_error", type=float, default=0.6,
                        help="share of warm-start answers whose result is one too high")
    args = parser.parse_args()
    torch.set_num_threads(min(torch.get_num_threads(), 2))
    build_math(args.out, args.seed, args.warm_steps, args.hidden, args.layers, args.lr, args.max_operand,
               args.teacher_error)
