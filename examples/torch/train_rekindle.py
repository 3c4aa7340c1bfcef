#!/usr/bin/env python3
"""train.py on rekindle's worker API: the same model, data and loop, with a few lines added.

`diff train.py train_rekindle.py` shows them: the rank joins with rekindle.init() (which builds
its process group), snapshots its state into the node's memory every checkpoint.snapshot_every
steps instead of torch.save, and when another rank fails it rolls back from memory in place —
its process stays, only the failed rank's starts again. Its samples come from rekindle.GlobalBatch,
so a world that shrinks (a node lost, no spare) trains the same global batch. Run it as the job.command of a rekindle
job (docs/WORKER_API.md); rekindle persists the snapshots as checkpoints.
"""

import argparse
import os
import sys
import time

import rekindle
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


class TinyGPT(nn.Module):
    """Bytes in, next-byte logits out: an embedding, causal self-attention blocks, a head."""

    def __init__(self, width, heads, layers, seq_len):
        super().__init__()
        self.token = nn.Embedding(256, width)
        self.position = nn.Embedding(seq_len, width)
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(block, layers)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 256)
        self.register_buffer("mask", torch.triu(torch.full((seq_len, seq_len), float("-inf")), diagonal=1))

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token(tokens) + self.position(positions)
        x = self.blocks(x, mask=self.mask[: tokens.shape[1], : tokens.shape[1]])
        return self.head(self.norm(x))


def corpus(path, seed):
    """The text file's bytes, or 64 KiB of seeded pseudo-text."""
    if path:
        with open(path, "rb") as f:
            return torch.tensor(list(f.read()), dtype=torch.long)
    g = torch.Generator().manual_seed(seed)
    words = torch.randint(97, 123, (4096, 6), generator=g)
    words[:, -1] = 32
    return words.flatten()[: 64 * 1024]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--global-batch", type=int, default=16, help="sequences per step, over all ranks (kept when the world shrinks)")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default="", help="a text file (default: seeded pseudo-text)")
    p.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep per step (for tests)")
    args = p.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    net = TinyGPT(args.width, 2, args.layers, args.seq_len)
    optimizer = torch.optim.AdamW(net.parameters(), lr=args.lr)
    data = corpus(args.data, args.seed)
    samples = rekindle.GlobalBatch(len(data) - args.seq_len - 1, args.global_batch, args.seed)
    rk = rekindle.init()  # a warm standby waits here, torch imported and its model built
    while True:
        try:
            rank, world = rk.rank, rk.world_size
            step = rk.restore(net, optimizer)
            model = DistributedDataParallel(net, process_group=rk.group)
            model.register_comm_hook(rk.group, rekindle.exact_allreduce)  # bitwise-equal restarts
            print(f"rank {rank} of {world}: pid {os.getpid()} epoch {rk.epoch} starting at step {step}", flush=True)
            share = len(samples.indices(step, rank, world))
            print(f"rank {rank} of {world}: {share} of the global batch's {args.global_batch} sequences", flush=True)
            loss = torch.tensor(0.0)
            while step < args.steps:
                loading = time.monotonic()
                starts = samples.indices(step, rank, world)
                x = torch.stack([data[s : s + args.seq_len] for s in starts])
                y = torch.stack([data[s + 1 : s + args.seq_len + 1] for s in starts])
                loading = time.monotonic() - loading
                loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
                optimizer.zero_grad()
                (loss * samples.weight(rank, world)).backward()  # DDP's mean is the global batch's
                optimizer.step()
                step += 1
                if args.step_delay > 0:
                    time.sleep(args.step_delay)
                rk.step_done(step, loss.item(), len(starts) * args.seq_len, data=loading)
                if step % rk.snapshot_every == 0:
                    rk.snapshot(step, net, optimizer)
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            break
        except Exception as e:  # another rank failed: wait for the new epoch, roll back, go on
            model = None
            rk.reconfigure(e)
    print(f"rank {rank} of {world}: done at step {step}, loss {mean.item() / world:.4f} "
          f"({(mean.item() / world).hex()})", flush=True)
    rk.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
