# %% [markdown]
# ## Run
# Train and evaluate, as `python {stem}.py` does: put command-line flags in `flags`, e.g.
# `["--max_steps", "50"]`; each run writes to a new folder, `OUTPUT_DIR`.
# %%
import os
import time

# Command-line flags, e.g. ["--max_steps", "50", "--learning_rate", "1e-5"]. --eval_num_samples 8 samples 8 answers
# per held-out question before training: the signal report (will GRPO learn anything?) prints before the first step.
flags = ["--eval_num_samples", "8"]
# A new folder for each run (or $NOTEBOOK_OUTPUT_DIR). To continue a stopped run, set OUTPUT_DIR to its folder
# and flags to ["--resume_from_checkpoint", "last"].
OUTPUT_DIR = os.environ.get("NOTEBOOK_OUTPUT_DIR") or time.strftime("outputs/{stem}/%Y%m%d-%H%M%S")
results = main(["--output_dir", OUTPUT_DIR, *flags])

# %% [markdown]
# The held-out scores before and after training, the signal report and the run monitor's warnings, also saved in
# `eval.json` in `OUTPUT_DIR`; every answer is in its `eval_*.jsonl` files.
# %%
def number(value):
    return f"{value:.2f}" if isinstance(value, float) else str(value)


width = max(map(len, results["before"]), default=0) + 2
print(f"{'held-out':<{width}}{'before':>8}{'after':>8}")
for key, before in results["before"].items():
    if isinstance(before, (int, float)) and key in results["after"]:
        print(f"{key:<{width}}{number(before):>8}{number(results['after'][key]):>8}")
if "signal" in results["before"]:
    print(instruments.signal_report(results["before"]))
print(f"{len(results['warnings'])} monitor warning(s)", *[w["message"] for w in results["warnings"]], sep="\n")

# %% [markdown]
# The training curves: total reward with held-out accuracy (green), each reward and the completion length.
# %%
from IPython.display import Image, display

curves = os.path.join(OUTPUT_DIR, "training_curves.png")
if os.path.exists(curves):
    display(Image(filename=curves))
else:
    print("no training_curves.png: the run logged nothing (fewer steps than --logging_steps)")
