"""A real Hugging Face `Trainer` run started by hand on the CPU, as the operator starts one
(`nohup python train.py > train.log` in the run folder, output_dir `checkpoints/`): a tiny
Llama built from a config with random weights (nothing downloaded), LoRA through peft, saves
every SAVE steps, each step slowed so that a poll sees it between saves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SAVE = 10
SCRIPT = r"""
import sys, time, torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments, TrainerCallback
from peft import LoraConfig, get_peft_model

steps, pace = int(sys.argv[1]), float(sys.argv[2])
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)
model = get_peft_model(LlamaForCausalLM(cfg), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))

class Rows(torch.utils.data.Dataset):
    def __len__(self):
        return 10_000
    def __getitem__(self, i):
        ids = torch.randint(0, 64, (16,))
        return {"input_ids": ids, "labels": ids.clone()}

class Slow(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        time.sleep(pace)

args = TrainingArguments(output_dir="checkpoints", max_steps=steps, per_device_train_batch_size=2,
                         logging_steps=2, save_steps=%(save)d, report_to=[], use_cpu=True,
                         disable_tqdm=False, dataloader_num_workers=0)
Trainer(model=model, args=args, train_dataset=Rows(), callbacks=[Slow()]).train()
model.save_pretrained("adapter")
""".replace("%(save)d", str(SAVE))


def start_real_trainer(run: Path, steps: int, pace: float) -> subprocess.Popen:
    run.mkdir(parents=True)
    (run / "train.py").write_text(SCRIPT)
    log = open(run / "train.log", "wb")  # noqa: SIM115 - handed to the child, closed below
    try:
        return subprocess.Popen(
            [sys.executable, "train.py", str(steps), str(pace)],
            cwd=run,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={
                "PYTHONUNBUFFERED": "1",
                "PATH": "/usr/bin:/bin",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "HOME": str(run),
            },
        )
    finally:
        log.close()
