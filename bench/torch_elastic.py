#!/usr/bin/python3
"""The TorchElastic side of bench/recovery: data-parallel training of the same transformer shape
under torchrun (CPU, gloo), with torch.save checkpoints.

Every worker appends one line per finished step to <dir>/rank-<r>.log:
    <restart count> <step> <CLOCK_MONOTONIC ns>
and writes its pid to <dir>/rank-<r>.pid when it starts. Rank 0 saves the model and optimizer
every --save-every steps (write, fsync, rename; its stall logged as "save <step> <ns>"); every
worker, started or restarted, loads the newest checkpoint before training.

With --api the script runs on rekindle's worker API instead (level 1, as the job.command of a
rekindle job): rk.snapshot every --save-every steps in place of torch.save, rk.restore after a
failure, the restart count being the epoch - 1; a survivor keeps its process and logs a "resumed"
line for each new epoch. Each snapshot's stall is logged as "snapshot <step> <ns>".

`torch_elastic.py torchrun ARGS...` runs torchrun itself (with Debian's torch 1.13 on Python 3.11,
torchrun's --redirects/--tee parsing returns None; the launcher here supplies the values).
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


class GPT(nn.Module):
    """Token and position embeddings, pre-norm blocks (12C^2 + 13C parameters each), tied head."""

    def __init__(self, vocab, width, layers, heads, seq_len):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(seq_len, width)
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.lnf = nn.LayerNorm(width)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq_len), persistent=False)

    def forward(self, x):
        h = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
        h = self.blocks(h, mask=self.mask)
        return self.lnf(h) @ self.wte.weight.T


def train_step(a, ddp, opt, loss_fn, step, rank, world):
    """One optimizer step on this rank's micro-batch of `step` (the same whatever came before)."""
    g = torch.Generator().manual_seed(step * world + rank)
    tokens = torch.randint(0, a.vocab, (a.micro_batch, a.seq_len + 1), generator=g)
    logits = ddp(tokens[:, :-1])
    loss = loss_fn(logits.reshape(-1, a.vocab), tokens[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--save-every", type=int, required=True)
    p.add_argument("--width", type=int, required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--api", action="store_true", help="run on rekindle's worker API (level 1)")
    a = p.parse_args()
    if a.api:
        return main_api(a)

    torch.set_num_threads(1)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    with open(os.path.join(a.dir, f"rank-{rank}.pid"), "w") as f:
        f.write(f"{os.getpid()}\n")

    torch.manual_seed(1)
    model = GPT(a.vocab, a.width, a.layers, a.heads, a.seq_len)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ckpt = os.path.join(a.dir, "checkpoint.pt")
    step = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = state["step"]
    log = open(os.path.join(a.dir, f"rank-{rank}.log"), "a", buffering=1)
    log.write(f"{restart} {step} {time.monotonic_ns()} resumed\n")
    loss_fn = nn.CrossEntropyLoss()
    while step < a.steps:
        train_step(a, ddp, opt, loss_fn, step, rank, world)
        step += 1
        if rank == 0 and step % a.save_every == 0:
            t0 = time.monotonic_ns()
            tmp = ckpt + ".tmp"
            with open(tmp, "wb") as f:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, ckpt)
            log.write(f"save {step} {time.monotonic_ns() - t0}\n")
        log.write(f"{restart} {step} {time.monotonic_ns()}\n")
    dist.destroy_process_group()


def main_api(a):
    import rekindle

    torch.set_num_threads(1)
    rk = rekindle.init()
    torch.manual_seed(1)
    model = GPT(a.vocab, a.width, a.layers, a.heads, a.seq_len)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    while True:
        try:
            rank, world, restart = rk.rank, rk.world_size, rk.epoch - 1
            with open(os.path.join(a.dir, f"rank-{rank}.pid"), "w") as f:
                f.write(f"{os.getpid()}\n")
            step = rk.restore(model, opt)
            ddp = DistributedDataParallel(model, process_group=rk.group)
            log = open(os.path.join(a.dir, f"rank-{rank}.log"), "a", buffering=1)
            log.write(f"{restart} {step} {time.monotonic_ns()} resumed\n")
            while step < a.steps:
                loss = train_step(a, ddp, opt, loss_fn, step, rank, world)
                step += 1
                rk.step_done(step, loss.item())
                if step % a.save_every == 0:
                    t0 = time.monotonic_ns()
                    rk.snapshot(step, model, opt)
                    log.write(f"snapshot {step} {time.monotonic_ns() - t0}\n")
                log.write(f"{restart} {step} {time.monotonic_ns()}\n")
            break
        except Exception as e:
            ddp = None
            rk.reconfigure(e)
    rk.finish()


def torchrun(args):
    from torch.distributed.elastic.multiprocessing.api import Std
    import torch.distributed.run as run

    def from_str(vm):
        if "," in vm or ":" in vm:
            return {int(i): Std(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
        return Std(int(vm))

    Std.from_str = staticmethod(from_str)
    run.main(args)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "torchrun":
        torchrun(sys.argv[2:])
    else:
        main()
