"""rekindle: a PyTorch training loop as a rank of a rekindle job.

A program that rekindled starts as its job.command joins with `init()`; from then on its state
is snapshotted into the node's shared memory, a failure elsewhere rolls it back from memory in
place (its process stays), and a new world (a rank lost for good) is handed to it as a new rank
and world size. See docs/WORKER_API.md:

    rk = rekindle.init()
    model, optimizer = build()
    while True:
        try:
            ddp = DistributedDataParallel(model, process_group=rk.group)
            step = rk.restore(model, optimizer)
            while step < steps:
                ...one step...
                step += 1
                rk.step_done(step, loss)
                if step % rk.snapshot_every == 0:
                    rk.snapshot(step, model, optimizer)
            break
        except Exception as e:
            rk.reconfigure(e)        # re-raises e unless the world changed
    rk.finish()
"""

import datetime
import gc
import pickle
import random
import socket
import time
import traceback

import torch
import torch.distributed as dist

from . import _core
from ._core import Error, NotUnderRekindle, OrderError, SnapshotTooLarge

__all__ = ["init", "Rank", "Error", "NotUnderRekindle", "OrderError", "SnapshotTooLarge", "Reconfigure",
           "Finished", "GlobalBatch", "exact_allreduce"]

# Bounds on what a snapshot's small record (everything that is not a tensor) may hold.
_MAX_DEPTH = 32


class Reconfigure(Exception):
    """The world changed (a rank failed, a node was lost): call Rank.reconfigure()."""


class Finished(Exception):
    """The job ended elsewhere (stopped, failed, or completed): leave the training loop."""


def init(backend=None):
    """Joins the job as the rank rekindled started this process for, waits for its first epoch,
    and builds its process group ("gloo" on the CPU, "nccl" where CUDA is available).

    Raises NotUnderRekindle when the program was not started by rekindled."""
    return Rank(_core.Rank.join(), backend)


def _plain(value, where, depth=0):
    """`value` when it is made of numbers, strings, bytes, lists, tuples and dicts only."""
    if depth > _MAX_DEPTH:
        raise TypeError(f"{where} nests deeper than {_MAX_DEPTH} levels")
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, (list, tuple)):
        items = [_plain(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {k: _plain(v, f"{where}[{k!r}]", depth + 1) for k, v in value.items()}
    raise TypeError(f"{where} is a {type(value).__name__}: a snapshot holds tensors and plain values "
                    "(numbers, strings, bytes, and lists, tuples and dicts of them)")


def _dtype(name):
    return getattr(torch, name.split(".", 1)[1])


class Rank:
    """This process's rank in the job's current epoch."""

    def __init__(self, handle, backend):
        self._h = handle
        self._backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        self.group = None
        self._info()
        self._build_group()

    def _info(self):
        i = self._h.info()
        self.rank = i["rank"]
        self.world_size = i["world_size"]
        self.local_rank = i["local_rank"]
        self.local_world_size = i["local_world_size"]
        self.epoch = i["epoch"]
        self.restore_step = i["restore_step"]
        self.restore_world = i["restore_world"]
        self.master_addr = i["master_addr"]
        self.master_port = i["master_port"]
        self.snapshot_every = i["snapshot_every"]
        self.state_bytes = i["state_bytes"]
        self._timeout = datetime.timedelta(milliseconds=i["collective_timeout_ms"])
        # The group meets once per epoch, while a restarted rank's interpreter may still start:
        # its rendezvous gets the epoch's, and its operations no less than a collective's.
        self._group_timeout = datetime.timedelta(
            milliseconds=max(i["collective_timeout_ms"], i["rendezvous_timeout_ms"]))

    def _release_group(self):
        self.group = None
        if dist.is_initialized():
            dist.destroy_process_group()
        gc.collect()  # the group's last references (a DDP module's reducer) go now

    def _wait_for_rank0(self):
        """Until rank 0's store listens at the bootstrap address (at most the group's timeout).
        torch's store client that finds nobody there waits a second before it tries again; a rank
        that meets the store as soon as it listens starts the epoch that much sooner (a standby
        taking a failed rank's place is often ready before the survivors' rank 0)."""
        deadline = time.monotonic() + self._group_timeout.total_seconds()
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((self.master_addr, self.master_port), timeout=1.0):
                    return
            except OSError:
                time.sleep(0.005)

    def _build_group(self):
        self._release_group()
        if self.rank != 0:
            self._wait_for_rank0()
        if self._backend == "nccl":
            torch.cuda.set_device(self.local_rank)
        dist.init_process_group(self._backend, init_method=f"tcp://{self.master_addr}:{self.master_port}",
                                rank=self.rank, world_size=self.world_size, timeout=self._group_timeout)
        self.group = dist.group.WORLD

    # ---- state ---------------------------------------------------------------------------------

    def snapshot(self, step, model, optimizer=None, extra=None):
        """Writes the state after `step` into this rank's slot: the model's and optimizer's tensors
        copied straight in (no pickling; a GPU tensor is staged through host memory), the RNG
        states, and `extra` (a dict of tensors and plain values: the data position, a scheduler's
        state). The node replicates it to its buddy and persists it as checkpoints are due."""
        tensors = []
        meta = {"version": 1, "step": step, "tensors": {}, "optimizer": None, "extra": {}}
        for k, t in model.state_dict().items():
            if not torch.is_tensor(t):
                raise TypeError(f"model.state_dict()[{k!r}] is a {type(t).__name__}, not a tensor")
            tensors.append(("model/" + k, t))
        if optimizer is not None:
            sd = optimizer.state_dict()
            state = {}
            for pid, entry in sd["state"].items():
                state[pid] = {}
                for k, v in entry.items():
                    if torch.is_tensor(v):
                        tensors.append((f"optim/{pid}/{k}", v))
                        state[pid][k] = ("t",)
                    else:
                        state[pid][k] = ("v", _plain(v, f"optimizer state[{pid}][{k!r}]"))
            meta["optimizer"] = {"state": state, "param_groups": _plain(sd["param_groups"], "optimizer param_groups")}
        for k, v in (extra or {}).items():
            if not isinstance(k, str):
                raise TypeError(f"extra's key {k!r} is a {type(k).__name__}, not a string")
            if torch.is_tensor(v):
                tensors.append(("extra/" + k, v))
                meta["extra"][k] = ("t",)
            else:
                meta["extra"][k] = ("v", _plain(v, f"extra[{k!r}]"))
        meta["python_rng"] = random.getstate()
        tensors.append(("rng/torch", torch.get_rng_state()))
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            for d, s in enumerate(torch.cuda.get_rng_state_all()):
                tensors.append((f"rng/cuda{d}", s))
        keep, buffers = [], []
        for name, t in tensors:
            t = t.detach()
            if t.device.type != "cpu" or not t.is_contiguous():
                t = t.contiguous().cpu()
            meta["tensors"][name] = (str(t.dtype), list(t.shape))
            keep.append(t)
            buffers.append((name, t.data_ptr(), t.numel() * t.element_size()))
        record = torch.frombuffer(bytearray(pickle.dumps(meta)), dtype=torch.uint8)
        buffers.insert(0, ("__meta__", record.data_ptr(), record.numel()))
        self._h.snapshot(step, buffers)

    def restore(self, model, optimizer=None, extra=None):
        """Loads the state this epoch resumes from into `model`, `optimizer` and `extra` (updated
        in place) and sets the RNG states; returns its step, or 0 (nothing loaded) when the epoch
        trains from the start. Once per epoch. When the world size changed, the state of the old
        rank with this rank's number (or the last old rank) is taken: data-parallel replicas are
        equal, and a GlobalBatch keyed by step keeps the samples."""
        if self.restore_step == 0:
            return 0
        step, parts = self._h.restore_begin()
        part = 0 if parts == 1 else min(self.rank, parts - 1)
        state = _State(_RestorePart(self._h, part))
        with torch.no_grad():
            current = model.state_dict()
            missing = [k for k in current if "model/" + k not in state.specs]
            if missing:
                raise Error(f"the state of step {step} has no {', '.join(missing[:3])}: was the model changed?")
            for k, t in current.items():
                state.copy_into("model/" + k, t, step)
        if optimizer is not None:
            optimizer.load_state_dict(state.optimizer(step))
        if extra is not None:
            extra.update(state.extra())
        random.setstate(state.meta["python_rng"])
        torch.set_rng_state(state.load("rng/torch"))
        cuda = state.cuda_rng()
        if cuda and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(cuda)
        self._h.restore_end()
        return step

    # ---- progress and epochs -------------------------------------------------------------------

    def step_done(self, step, loss, tokens=0, compute=None, communication=None, data=None):
        """Reports a finished step (what status, the shell and the metrics show). Raises
        Reconfigure when the world changed meanwhile, Finished when the job ended. compute,
        communication and data: how the step's time divides, in seconds, where the program
        measures it (forward and backward passes, collectives, loading the batch); compute not
        given is the step's time less the parts given. Stragglers are scored on compute."""
        if compute is not None or communication is not None or data is not None:
            self._h.step_times(compute, communication, data)
        code = self._h.step_done(int(step), float(loss), int(tokens))
        if code == _core.RECONFIGURE:
            raise Reconfigure(f"epoch {self.epoch} ended")
        if code == _core.FINISHED:
            raise Finished("the job ended")

    def reconfigure(self, error=None, timeout=None):
        """After Reconfigure, or when a collective failed (a peer died): leaves the process group
        at once (drop your DDP module first: `model = None`), so that ranks still inside a
        collective with this one fail out of it too; waits for the next epoch (up to `timeout`
        seconds; default the collective timeout, at least 60 s), takes its rank, world size and
        bootstrap address and builds the process group again. Re-raises `error` at once when it
        cannot be another rank's failure (not a RuntimeError), and when no new epoch comes.
        Finished when the job ended."""
        if error is not None and not isinstance(error, (Reconfigure, RuntimeError)):
            raise error  # a bug of the program's, or Finished
        # This rank leaves the old group at once: its connections close, so that ranks still
        # waiting inside a collective with it fail out of it too, rather than after the timeout.
        if error is not None and error.__traceback__ is not None:
            traceback.clear_frames(error.__traceback__)
        self._release_group()
        seconds = timeout if timeout is not None else max(self._timeout.total_seconds(), 60.0)
        code = self._h.reconfigure(int(seconds * 1000))
        if code == _core.FINISHED:
            raise Finished("the job ended")
        if code == _core.TIMEOUT:
            if error is not None:
                raise error
            raise Error(f"no new epoch began within {seconds:.0f} s")
        self._info()
        self._build_group()
        return self

    def finish(self):
        """Leaves the job: the process group and the connection to rekindled go."""
        if dist.is_initialized():
            dist.destroy_process_group()
        self._h.finish()


def exact_allreduce(group, bucket):
    """A DDP communication hook (`ddp.register_comm_hook(rk.group, rekindle.exact_allreduce)`)
    whose result does not depend on how DDP grouped the gradients into buckets: each gradient is
    summed on its own, then averaged. DDP regroups its buckets after its first step, and a
    restored rank's new DDP starts from the first grouping again; with more than two ranks the
    order of a sum then differs, and so do the last bits. With this hook a run with failures ends
    with the same loss, bit for bit, as one without (for the same world size)."""
    for g in bucket.gradients():
        dist.all_reduce(g, group=group)
    future = torch.futures.Future()
    future.set_result(bucket.buffer().div_(dist.get_world_size(group)))
    return future


class _RestorePart:
    """Part `part` of the restore that is open on `handle`."""

    def __init__(self, handle, part):
        self._h, self._part = handle, part

    def bytes(self, name):
        return self._h.restore_bytes(self._part, name)

    def copy(self, name, address, size):
        self._h.restore_copy(self._part, name, address, size)


class _State:
    """A snapshot's state as Rank.snapshot wrote it, read from `reader` (a restore's part, or a
    checkpoint shard on disk): its record and its tensors by name."""

    def __init__(self, reader):
        self._reader = reader
        self.meta = pickle.loads(reader.bytes("__meta__"))
        self.specs = self.meta["tensors"]

    def load(self, name):
        dtype, shape = self.specs[name]
        t = torch.empty(shape, dtype=_dtype(dtype))
        self._reader.copy(name, t.data_ptr(), t.numel() * t.element_size())
        return t

    def copy_into(self, name, t, step):
        dtype, shape = self.specs[name]
        if list(t.shape) != shape or str(t.dtype) != dtype:
            raise Error(f"the state of step {step} holds {name} as {dtype}{shape}; "
                        f"this program's is {t.dtype}{list(t.shape)}: was the model changed?")
        if t.device.type == "cpu" and t.is_contiguous():
            self._reader.copy(name, t.data_ptr(), t.numel() * t.element_size())
        else:
            t.copy_(self.load(name))

    def model(self):
        return {k[len("model/"):]: self.load(k) for k in self.specs if k.startswith("model/")}

    def optimizer(self, step):
        om = self.meta["optimizer"]
        if om is None:
            raise Error(f"the state of step {step} holds no optimizer: snapshot(step, model, optimizer)")
        state = {pid: {k: self.load(f"optim/{pid}/{k}") if v[0] == "t" else v[1] for k, v in entry.items()}
                 for pid, entry in om["state"].items()}
        return {"state": state, "param_groups": om["param_groups"]}

    def extra(self):
        return {k: self.load("extra/" + k) if v[0] == "t" else v[1] for k, v in self.meta["extra"].items()}

    def cuda_rng(self):
        names = sorted((n for n in self.specs if n.startswith("rng/cuda")), key=lambda n: int(n[len("rng/cuda"):]))
        return [self.load(n) for n in names]


class GlobalBatch:
    """The samples of a step, keyed by the step and a seed only, shared among the ranks of any
    world: a world that shrinks trains the same global batch (the first `batch % world` ranks take
    one more sample). Scale a rank's mean loss by `weight(rank, world)` so that data-parallel
    averaging gives the global batch's mean."""

    def __init__(self, dataset_len, batch, seed=0):
        if dataset_len <= 0 or batch <= 0:
            raise ValueError("GlobalBatch needs a non-empty dataset and batch")
        self.dataset_len, self.batch, self.seed = dataset_len, batch, seed

    def _share(self, rank, world):
        base, extra = divmod(self.batch, world)
        start = rank * base + min(rank, extra)
        return start, start + base + (1 if rank < extra else 0)

    def indices(self, step, rank, world):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        everything = torch.randint(0, self.dataset_len, (self.batch,), generator=g)
        start, end = self._share(rank, world)
        return everything[start:end]

    def weight(self, rank, world):
        start, end = self._share(rank, world)
        return (end - start) * world / self.batch
