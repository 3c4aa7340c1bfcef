"""rekindle.export: a checkpoint of a program on the worker API as files plain torch.load reads.

`rekindle checkpoint export DIR --out OUT` runs this module with the shards of one committed
checkpoint (their headers and checksums verified as they are read); it writes OUT/rank-R.pt for
every rank R:

    {"step": int, "model": {name: tensor}, "optimizer": optimizer.state_dict() or None,
     "extra": {name: tensor or value}, "rng": {"torch": ByteTensor, "python": random.getstate(),
     "cuda": [ByteTensor per device]}}

Each file is written beside, fsynced and renamed: an interrupted export leaves no half file.

    python3 -m rekindle.export --out OUT --step STEP SHARD_FILE:RANK ...
"""

import argparse
import os
import sys

import torch

from . import _core
from . import Error, _State


def state_of(path, step, rank):
    """The state in the shard file `path` of `rank` at `step`, as torch objects."""
    state = _State(_core.Shard(path, step, rank))
    out = {"step": state.meta["step"], "model": state.model(), "optimizer": None, "extra": state.extra(),
           "rng": {"torch": state.load("rng/torch"), "python": state.meta["python_rng"], "cuda": state.cuda_rng()}}
    if state.meta["optimizer"] is not None:
        out["optimizer"] = state.optimizer(step)
    return out


def write(state, file):
    tmp = file + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, file)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m rekindle.export", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="the folder for rank-R.pt (created)")
    p.add_argument("--step", type=int, required=True, help="the checkpoint's step")
    p.add_argument("shards", nargs="+", metavar="SHARD_FILE:RANK")
    a = p.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    for item in a.shards:
        path, _, rank = item.rpartition(":")
        if not path or not rank.isdigit():
            p.error(f"'{item}' is not SHARD_FILE:RANK")
        try:
            state = state_of(path, a.step, int(rank))
        except Error as e:
            print(f"rekindle checkpoint export: {e}", file=sys.stderr)
            return 1
        file = os.path.join(a.out, f"rank-{rank}.pt")
        write(state, file)
        print(f"rank {rank}: {file} ({len(state['model'])} model tensors)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
