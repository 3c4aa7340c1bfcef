"""A rank that misuses the worker API on purpose, under a real rekindle job of one rank.

Epoch 1: a snapshot larger than the slot, a non-tensor in the state, a snapshot of a step not past
the restore step, step times out of range; then a good snapshot of step 5, then a deliberate failure (exit 3). Epoch 2
(rekindle restarts it from its slot): restore, then restore again; then it finishes. Every
outcome is printed as "check NAME: ..." for the test to read.
"""

import sys

import rekindle
import torch


def check(name, fn):
    try:
        fn()
        print(f"check {name}: no error", flush=True)
    except Exception as e:  # the test reads the type and message
        print(f"check {name}: {type(e).__name__}: {e}", flush=True)


rk = rekindle.init()
model = torch.nn.Linear(4, 4)
if rk.restore_step == 0:
    huge = torch.nn.Linear(2048, 2048)  # 16 MiB of weights: over the slot's 8 MiB
    check("too_large", lambda: rk.snapshot(1, huge))
    check("non_tensor", lambda: rk.snapshot(1, model, extra={"loader": open(__file__)}))
    check("step_zero", lambda: rk.snapshot(0, model))
    check("negative_time", lambda: rk.step_done(4, 1.0, data=-1))
    check("hour_long_step", lambda: rk.step_done(4, 1.0, compute=7200))
    rk.step_done(5, 1.0, compute=0.25, data=0.5)
    rk.snapshot(5, model, extra={"position": 5, "note": "kept"})
    print(f"snapshot weight {model.weight.sum().item().hex()}", flush=True)
    sys.exit(3)
extra = {}
with torch.no_grad():
    model.weight.zero_()
step = rk.restore(model, extra=extra)
print(f"restored step {step} extra {extra} weight {model.weight.sum().item().hex()}", flush=True)
check("restore_twice", lambda: rk.restore(model))
rk.finish()
