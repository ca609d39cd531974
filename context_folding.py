"""Context folding for grpo_search.py's --max_context_tokens: the tool loop that folds, and the training rows of
the segments a fold leaves behind. One copy, imported by grpo_search.py, which builds its FoldingGRPOTrainer with
trainer_class(TurnCreditGRPOTrainer, ...); the functions below take that trainer as `trainer`. What a fold keeps
is here too (fold_context and the FOLD_* settings); the `note` tool whose text outlives a fold (--fold_notes) is
the script's NotingEnvironment. It imports nothing from the project: the trainer class and the advantage function
come in as arguments.

Where it plugs in: TRL 1.16's `environment_factory` supplies the tools and `rollout_func` returns one token
sequence per rollout; neither can change what earlier turns the model sees. So FoldingGRPOTrainer runs the tool loop
itself (`tool_call_loop`: TRL's loop for text-only models, plus the fold), and each fold starts a new training
segment: the folded context is that segment's prompt, its turns are the segment's completion. Every segment is
trained with the rollout's advantage (as FoldGRPO does), so each token is scored in the context it was sampled in,
and the evaluation, which runs the same loop, folds alike. The loop calls TRL's internals
(`_generate_single_turn`, `_get_tool_suffix_ids`, `_sync_tool_dicts`): it is tested with TRL 1.16.
"""

import json
import re
import time
from collections import Counter

import torch
from trl import GRPOTrainer


FOLD_KEEP_TURNS = 2    # the latest turns (each a tool call and its results) a fold keeps whole
TURN_ROOM = 0.25       # fold when less than this share of --max_context_tokens is left for the next turn
FOLD_MAX_LINES = 6     # folded calls listed in the user's message; older ones are only counted (notes stay longest)
FOLDED = "Earlier turns, folded to save context:"  # heads the lines a fold leaves in the user's message
HIDDEN_CALLS = "- {} earlier tool calls not listed"
HIDDEN_MANY = 100      # from this many on, the count reads "many": beside three-digit ids, a three-digit count made
                       # the hundred-call demo's model miscopy them (docs/grpo_search.md, "The fold's own number")


def fold_line(call: dict, result: str) -> str:
    """One folded tool call as a line: a note in full; else the call and the [ids] its result showed."""
    function = call.get("function", call)
    name, arguments = function.get("name"), function.get("arguments") or {}
    if name == "note":
        return f"- note: {arguments.get('text', '')}"
    shown = " ".join(dict.fromkeys(re.findall(r"\[([^\[\]\n]{1,40})\]", str(result)))) or "no ids"
    return f"- {name}({', '.join(json.dumps(v) for v in arguments.values())}) showed: {shown}"


def fold_context(messages: list, question: str, keep: int = FOLD_KEEP_TURNS) -> tuple[list, list]:
    """(folded messages, the lines added): every turn but the last `keep` leaves, one line each (fold_line) in the
    user's message, after the lines of earlier folds; past FOLD_MAX_LINES the oldest lines that are not notes give
    way to a count. `messages` = [system, user, then turns: an assistant message and the tool results that follow
    it]; `question` is the user's message as first asked."""
    head, turns = messages[:2], []
    for message in messages[2:]:
        if message.get("role") == "assistant" or not turns:
            turns.append([])
        turns[-1].append(message)
    dropped, kept = turns[:max(0, len(turns) - keep)], turns[max(0, len(turns) - keep):]
    lines = []
    for turn in dropped:
        calls, results = turn[0].get("tool_calls") or [], [m.get("content") for m in turn[1:]]
        lines += [fold_line(call, results[n] if n < len(results) else "") for n, call in enumerate(calls)]
    earlier = head[1]["content"][len(question):].split(FOLDED, 1)[-1].strip().splitlines()
    counted = re.fullmatch(HIDDEN_CALLS.format(r"(\d+|many)"), earlier[0]) if earlier else None
    hidden = (HIDDEN_MANY if counted.group(1) == "many" else int(counted.group(1))) if counted else 0
    earlier = earlier[1:] if counted else earlier
    shown = earlier + lines
    while len(shown) > FOLD_MAX_LINES:  # the oldest call that is not a note goes first; notes go last
        shown.pop(next((n for n, line in enumerate(shown) if not line.startswith("- note:")), 0))
        hidden += 1
    block = ([HIDDEN_CALLS.format(hidden if hidden < HIDDEN_MANY else "many")] if hidden else []) + shown
    user = {**head[1], "content": f"{question}\n\n{FOLDED}\n" + "\n".join(block)}
    return [head[0], user] + [m for turn in kept for m in turn], lines


def settings_problem(script_args, training_args) -> str | None:
    """What keeps --max_context_tokens from working with these flags, as one line naming the fix; None when nothing."""
    window = script_args.max_context_tokens
    if window and window <= script_args.max_prompt_tokens:
        return (f"--max_context_tokens {window} leaves no room after the prompt: make it larger than "
                f"--max_prompt_tokens ({script_args.max_prompt_tokens}), or 0 to turn folding off")
    if window and (training_args.use_vllm or training_args.beta or training_args.num_iterations > 1
                   or training_args.gradient_accumulation_steps % training_args.steps_per_generation):
        return ("--max_context_tokens trains folded segments without reference or old log-probs: use --beta 0 "
                "--num_iterations 1, no --use_vllm, and the default --steps_per_generation")
    return None


def trainer_class(base, per_token_advantages):
    """`base` (grpo_search.py's TurnCreditGRPOTrainer) with the folding tool loop: the class behind
    --max_context_tokens, which trains every segment of a folded rollout with the rollout's advantage (per turn with
    --turn_credit, through `per_token_advantages`)."""

    class FoldingGRPOTrainer(base):
        max_context_tokens, turn_credit = 0, False  # build_trainer sets them from --max_context_tokens, --turn_credit
        turn_room = TURN_ROOM
        fold = staticmethod(fold_context)

        def _tool_call_loop(self, *args):  # TRL's tool loop (text-only models), folding before a turn that won't fit
            return tool_call_loop(self, *args)

        def _generate_single_turn(self, *args, **kwargs):  # timed: TRL generates the first turn before the loop,
            started = time.perf_counter()                  # whose cost split then counts it
            generated = super()._generate_single_turn(*args, **kwargs)
            self._generation_seconds = time.perf_counter() - started
            return generated

        def _generate_and_score_completions(self, inputs):  # TRL's, plus a training row per earlier segment
            return generate_and_score(self, inputs)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # rows in chunks
            return chunked_loss(self, model, inputs, num_items_in_batch,
                                lambda rows: base.compute_loss(self, model, rows, return_outputs, num_items_in_batch))

    FoldingGRPOTrainer.per_token_advantages = staticmethod(per_token_advantages)
    return FoldingGRPOTrainer


def tool_call_loop(trainer, prompts, prompt_ids, completion_ids, completions, logprobs, images,
                   multimodal_fields):
    """TRL's tool loop (text only), folding the context before a turn that would not fit. On return,
    prompt_ids/completion_ids hold each rollout's last segment; the earlier ones are in trainer._segments."""
    from trl.chat_template_utils import parse_response  # what TRL's own loop parses with

    limit, room = trainer.max_context_tokens, int(trainer.turn_room * trainer.max_context_tokens)
    count = len(completion_ids)
    tool_mask = [[1] * len(ids) for ids in completion_ids]
    envs = trainer.environments or [None] * count
    trainer._segments = [[] for _ in range(count)]
    active = [list(prompts[i]) + list(completions[i]) for i in range(count)]
    questions = [prompts[i][1]["content"] for i in range(count)]
    calls = failures = rounds = 0
    first_turn = getattr(trainer, "_generation_seconds", 0.0) / max(1, count)  # each rollout's share of that call
    for i in range(count):  # the first turn: its prompt and tokens are within the window
        completion_ids[i] = completion_ids[i][:max(0, limit - len(prompt_ids[i]))]
        tool_mask[i] = tool_mask[i][:len(completion_ids[i])]
        if logprobs is not None:
            logprobs[i] = logprobs[i][:len(completion_ids[i])]
        note_context(envs[i], len(prompt_ids[i]) + len(completion_ids[i]))
        note_cost(envs[i], generation_seconds=first_turn, prefilled_tokens=len(prompt_ids[i]),
                  generated_tokens=len(completion_ids[i]), turns=1)
    pending = [i for i in range(count) if completions[i] and completions[i][-1].get("tool_calls")]
    while pending and rounds < trainer.max_tool_calling_iterations:
        contexts, going = [], []
        for i in pending:
            results = []
            for call in completions[i][-1]["tool_calls"]:
                calls += 1
                function = call.get("function", {})
                tool = trainer._sync_tool_dicts[i].get(function.get("name"))
                started = time.perf_counter()
                try:
                    result = tool(**function.get("arguments", {})) if tool else \
                        {"error": f"Tool {function.get('name')} not found."}
                except Exception as error:
                    result = {"error": str(error)}
                note_cost(envs[i], tool_seconds=time.perf_counter() - started)
                failures += isinstance(result, dict) and "error" in result
                results.append({"role": "tool", "name": function.get("name"), "content": str(result)})
            completions[i] += results
            active[i] += results
            started = time.perf_counter()  # the bookkeeping: the results' tokens, and the fold when one is due
            suffix = trainer._get_tool_suffix_ids(results)
            context = prompt_ids[i] + completion_ids[i] + suffix
            folded, lines = trainer.fold(active[i], questions[i]) if len(context) > limit - room else (None, [])
            ids = trainer.processing_class.apply_chat_template(
                folded, tools=trainer._env_tools[trainer._batch_environments[i]], add_generation_prompt=True,
                tokenize=True, return_dict=False, **trainer.chat_template_kwargs) if lines else context
            note_cost(envs[i], bookkeeping_seconds=time.perf_counter() - started)
            if len(ids) < len(context):  # fold: this segment ends here, a new one starts
                trainer._segments[i].append((prompt_ids[i], completion_ids[i], tool_mask[i],
                                          logprobs[i] if logprobs is not None else None))
                if envs[i] is not None and hasattr(envs[i], "folds"):
                    envs[i].folds.append({"after_tool_calls": sum(len(m.get("tool_calls") or []) for m in
                                                                  completions[i]), "tokens_before": len(context),
                                          "tokens_after": len(ids), "dropped": lines})
                active[i], prompt_ids[i], completion_ids[i], tool_mask[i] = folded, ids, [], []
                if logprobs is not None:
                    logprobs[i] = []
                context, suffix = ids, []
            if len(context) >= limit:  # not even folding leaves room for another turn: the episode ends here
                continue
            tool_mask[i] += [0] * len(suffix)
            if logprobs is not None:
                logprobs[i] += [0.0] * len(suffix)
            completion_ids[i] = completion_ids[i] + suffix
            contexts.append(context)
            going.append(i)
        if not going:
            break
        started = time.perf_counter()
        new_ids, new_logprobs = trainer._generate_single_turn(contexts, None, {}, num_generations=1)
        spent = (time.perf_counter() - started) / len(going)  # one batched call: each rollout's share
        pending = []
        for n, i in enumerate(going):
            ids = new_ids[n][:max(0, min(limit - len(contexts[n]),
                                        trainer.max_completion_length - len(completion_ids[i])))]
            note_cost(envs[i], generation_seconds=spent, prefilled_tokens=len(contexts[n]),
                      generated_tokens=len(new_ids[n]), turns=1)
            completion_ids[i] = completion_ids[i] + ids
            tool_mask[i] += [1] * len(ids)
            if logprobs is not None:
                logprobs[i] += new_logprobs[n][:len(ids)]
            note_context(envs[i], len(contexts[n]) + len(ids))
            if ids:
                message = parse_response(trainer._tokenizer, ids, prefix=contexts[n],
                                         tools=trainer._env_tools[trainer._batch_environments[i]])
                completions[i].append(message)
                active[i].append(message)
                if message.get("tool_calls"):
                    pending.append(i)
        rounds += 1
    return tool_mask, completions, completion_ids, logprobs, calls, failures, [[] for _ in range(count)]

def note_context(env, tokens: int):
    """Keep the largest context a rollout's model saw, for the evaluation's peak_context_tokens."""
    if env is not None and hasattr(env, "peak_context"):
        env.peak_context = max(env.peak_context, tokens)

def note_cost(env, **amounts):
    """Add to a rollout's cost (env.cost, where its environment keeps one): the seconds spent generating (its share
    of each batched call), in its tools and in bookkeeping, and the tokens prefilled (the whole context, at each turn:
    no cache is kept between turns) and generated."""
    if env is not None and hasattr(env, "cost"):
        for name, amount in amounts.items():
            env.cost[name] = env.cost.get(name, 0) + amount

def generate_and_score(trainer, inputs):
    """FoldingGRPOTrainer._generate_and_score_completions: TRL's, plus a row per earlier segment."""
    output = GRPOTrainer._generate_and_score_completions(trainer, inputs)  # advantages per rollout; turns below
    if "old_per_token_logps" in output or "ref_per_token_logps" in output or "sampling_per_token_logps" in output:
        raise RuntimeError("--max_context_tokens trains folded segments without per-token reference or old "
                          "log-probs: use --beta 0, --num_iterations 1, no --use_vllm, and gradient_accumulation"
                          "_steps a multiple of steps_per_generation")
    rows = [(p, c, m, n) for n, segments in enumerate(trainer._segments) for p, c, m, _ in segments]
    trainer._metrics["train"]["context/folds_per_rollout"].append(len(rows) / max(1, len(trainer._segments)))
    chunks = trainer.args.steps_per_generation  # TRL splits the batch into this many equal parts
    rows += [([trainer._tokenizer.pad_token_id], [trainer._tokenizer.pad_token_id], [0], None)] * \
        (-(len(rows) + len(output["prompt_ids"])) % chunks)  # empty rows (nothing trained) to split evenly
    if rows:
        add_segment_rows(trainer, output, rows)
    if trainer.turn_credit:  # each row's turns are the episode's turns from the row's first one on
        table, owners, first, seen = trainer._turn_table(), [], [], Counter()
        for n, segments in enumerate(trainer._segments):  # a rollout's own row holds its last segment
            owners.append(n)
            first.append(sum(turns_in(m) for _, _, m, _ in segments))
        for *_, n in rows:  # then its earlier segments, in order
            owners.append(n)
            first.append(sum(turns_in(m) for _, _, m, _ in trainer._segments[n][:seen[n]]) if n is not None else 0)
            seen[n] += 1
        shifted = torch.zeros(len(owners), table.shape[1], device=table.device)
        for r, (n, start) in enumerate(zip(owners, first)):
            if n is not None and start < table.shape[1]:
                shifted[r, :table.shape[1] - start] = table[n, start:]
        mask = output["completion_mask"] * output["tool_mask"]
        output["advantages"] = trainer.per_token_advantages(output["advantages"], shifted, mask,
                                                            trainer.turn_credit_weight)
    return output

def add_segment_rows(trainer, output, rows):
    """Append the earlier segments (prompt ids, completion ids, tool mask, rollout) as rows of their own."""
    device, pad_id = trainer.accelerator.device, trainer._tokenizer.pad_token_id
    width_p = max(output["prompt_ids"].shape[1], max(len(p) for p, *_ in rows))
    width_c = max(output["completion_ids"].shape[1], max(len(c) for _, c, *_ in rows))

    def block(values, width, left, fill):
        return torch.tensor([[fill] * (width - len(v)) + list(v) if left else list(v) + [fill] * (width - len(v))
                             for v in values], device=device, dtype=torch.long)

    def widen(tensor, width, left, fill):
        extra = torch.full((tensor.shape[0], width - tensor.shape[1]), fill, device=device, dtype=tensor.dtype)
        return torch.cat([extra, tensor] if left else [tensor, extra], dim=1)

    output["prompt_ids"] = torch.cat([widen(output["prompt_ids"], width_p, True, pad_id),
                                      block([p for p, *_ in rows], width_p, True, pad_id)])
    output["prompt_mask"] = torch.cat([widen(output["prompt_mask"], width_p, True, 0),
                                       block([[1] * len(p) for p, *_ in rows], width_p, True, 0)])
    output["completion_ids"] = torch.cat([widen(output["completion_ids"], width_c, False, pad_id),
                                          block([c for _, c, *_ in rows], width_c, False, pad_id)])
    output["completion_mask"] = torch.cat([widen(output["completion_mask"], width_c, False, 0),
                                           block([[1] * len(c) for _, c, *_ in rows], width_c, False, 0)])
    output["tool_mask"] = torch.cat([widen(output["tool_mask"], width_c, False, 1),
                                     block([m for _, _, m, _ in rows], width_c, False, 0)])
    advantages = [output["advantages"][n] if n is not None else 0.0 * output["advantages"][0] for *_, n in rows]
    output["advantages"] = torch.cat([output["advantages"], torch.stack(advantages)])
    loss_mask = output["completion_mask"] * output["tool_mask"]
    output["num_items_in_batch"] = trainer.accelerator.gather(loss_mask.sum()).sum()


SUMMED_LOSSES = ("dapo", "cispo", "vespo")        # TRL divides by the whole batch's token count: chunks add up
ROW_MEAN_LOSSES = ("grpo", "sapo", "dr_grpo", "luspo")  # a mean over rows: a chunk counts by its share of rows


def chunked_loss(trainer, model, inputs, num_items_in_batch, loss_of):
    """The training loss of `inputs` with at most --per_device_train_batch_size rows through the model at a time.
    Every segment of a folded rollout is a row, so a 128-call episode brings dozens: in one pass their activations
    would grow with the episode. Each chunk but the last is backpropagated here, scaled as the Trainer scales the loss
    it is returned; the last is returned (plus the others' loss, detached, for the log) for the Trainer to
    backpropagate. Gradients are those of one pass (tested). Loss types whose normaliser is not a sum over rows or
    tokens (bnpo), and the entropy bonus, take one pass as before."""
    rows, cap = inputs["prompt_ids"].shape[0], trainer.args.per_device_train_batch_size
    if rows <= cap or not model.training or getattr(trainer, "_entropy_bonus_enabled", False) or \
            trainer.loss_type not in SUMMED_LOSSES + ROW_MEAN_LOSSES:
        return loss_of(inputs)
    scaled = trainer.loss_is_scaled_for_ga  # transformers' Trainer.training_step: is the loss already scaled for GA?
    if scaled is None:
        scaled = (trainer.model_accepts_loss_kwargs and num_items_in_batch is not None) or \
            trainer.compute_loss_func is not None
    scale = 1.0 if scaled else 1.0 / trainer.current_gradient_accumulation_steps
    done = 0.0
    for start in range(0, rows, cap):
        chunk = rows_of(inputs, start, min(rows, start + cap), rows)
        loss = loss_of(chunk)
        if trainer.loss_type in ROW_MEAN_LOSSES:
            loss = loss * (chunk["prompt_ids"].shape[0] / rows)
        if start + cap >= rows:
            return loss + done
        trainer.accelerator.backward(loss * scale)
        done = done + loss.detach()


def rows_of(inputs: dict, start: int, end: int, rows: int) -> dict:
    """Rows start..end of a training batch: every tensor with a row per sequence is cut, the rest kept; the padding
    columns no row of the chunk uses (prompts are padded on the left, completions on the right) are dropped."""
    chunk = {key: value[start:end] if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == rows
             else value for key, value in inputs.items()}
    used = chunk["prompt_mask"].any(0).nonzero()
    first = int(used[0]) if len(used) else chunk["prompt_mask"].shape[1] - 1
    last = int(chunk["completion_mask"].any(0).nonzero().max()) + 1 if chunk["completion_mask"].any() else 1
    for key in list(chunk):
        value = chunk[key]
        if not isinstance(value, torch.Tensor) or value.dim() < 2 or value.shape[0] != end - start:
            continue
        if key.startswith("prompt_") and value.shape[1] == inputs["prompt_ids"].shape[1]:
            chunk[key] = value[:, first:]
        elif value.shape[1] == inputs["completion_ids"].shape[1] and not key.startswith("prompt_"):
            chunk[key] = value[:, :last]
    return chunk


def turns_in(mask: list) -> int:
    """Assistant turns in a segment: runs of 1s in its tool mask."""
    return sum(1 for j, bit in enumerate(mask) if bit and (j == 0 or not mask[j - 1]))
