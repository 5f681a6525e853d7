"""A trainer started by hand, as the operator starts one (`nohup python train.py > train.log`
in the run folder): a real process writing what a Hugging Face Trainer writes (tqdm's counter
with \\r, the log dicts, a checkpoint every SAVE steps, a Traceback when it dies of an error, the
final adapter at the end)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SAVE = 10
TRAINER = r"""
import json, os, struct, sys, time
total, pace, die_at = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
def weights(folder):
    os.makedirs(folder, exist_ok=True)
    h = json.dumps({"w": {"dtype": "U8", "shape": [64], "data_offsets": [0, 64]}}).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(folder, "adapter_model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + os.urandom(64))
    with open(os.path.join(folder, "adapter_config.json"), "w") as f:
        f.write("{}")
print("loading model", flush=True)
history = []
for step in range(1, total + 1):
    time.sleep(pace)
    pct = 100 * step // total
    sys.stdout.write("\r%3d%%|#####     | %d/%d [00:%02d<00:10,  %.2fs/it]" % (pct, step, total, step, pace))
    sys.stdout.flush()
    if step % 5 == 0:
        loss = 3.0 - step / 100
        history.append({"loss": loss, "step": step})
        sys.stdout.write("\n{'loss': %.4f, 'grad_norm': 1.25, 'learning_rate': 0.0001, 'epoch': %.2f}\n" % (loss, step / total))
        sys.stdout.flush()
    if step == die_at:
        raise RuntimeError("CUDA out of memory. Tried to allocate 1.04 GiB")
    if step % %(save)d == 0:
        ck = os.path.join("checkpoints", "checkpoint-%d" % step)
        weights(ck)
        with open(os.path.join(ck, "trainer_state.json"), "w") as f:
            json.dump({"global_step": step, "max_steps": total, "save_steps": %(save)d,
                       "log_history": history}, f)
while os.path.exists("hold-before-adapter"):  # a test holds the trainer here: saving at the end
    time.sleep(0.05)
weights("adapter")
print("\ndone", flush=True)
""".replace("%(save)d", str(SAVE))


def start_trainer(
    run: Path, total: int, pace: float, die_at: int = 0, hold: bool = False
) -> subprocess.Popen:
    """Start the trainer in `run`; `hold`: after its last step it waits, its final adapter not
    yet written, until the test removes `run/hold-before-adapter`."""
    run.mkdir(parents=True)
    if hold:
        (run / "hold-before-adapter").write_text("")
    (run / "train.py").write_text(TRAINER)
    log = open(run / "train.log", "wb")  # noqa: SIM115 - handed to the child, closed below
    try:
        return subprocess.Popen(
            [sys.executable, "train.py", str(total), str(pace), str(die_at)],
            cwd=run,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()
