#!/usr/bin/python3
"""A sequence-parallel sampler for vidline's `worker` backend: one job sampled across all the
devices of its pool with torch.distributed, Ulysses style.

  worker mode (backend type "worker"; the node starts it once per pool):
      torch_seqpar.py worker
  one sample without the protocol (for checks: same code, same numbers):
      torch_seqpar.py once output=PATH seed=S width=W height=H frames=F [ranks=N] [conditioning=PATH]

The worker process is rank 0: it speaks the protocol (backends/worker/python/vidline_worker.py)
and, when it loads its model (at its first request, or at the node's load request when
the backend has warm_start), starts one more process per further device, each running
`torch_seqpar.py rank R N STORE`; they join a process group (NCCL when CUDA is
available, with NCCL_NVLS_ENABLE=0; gloo on the CPU) and stay loaded between jobs. Rank 0
broadcasts each request to the others; every rank builds the same model from a fixed seed
and the same starting noise from the job's seed.

The model is a small DiT-like block over the latent's tokens (2x2 patches of a 16-channel
latent, 1/8 of the size, 1 + (frames - 1) / 4 latent frames, as torch_line.py): embed,
self-attention, MLP, out, a few Euler steps. Sequence parallelism: each rank holds 1/N of
the tokens (padded to a multiple of N; padded keys are masked), computes its tokens' q, k,
v, and an all-to-all turns "my tokens, all heads" into "all tokens, my heads"; attention
runs over the whole sequence for its heads; a second all-to-all turns it back. Everything
else is per token. So the latent is the same, up to rounding, whatever the rank count
(tests/integration/backend_worker_seqpar_test.cpp checks 1 rank against 2).

Ranks: the devices in CUDA_VISIBLE_DEVICES when torch sees CUDA (rank r uses cuda:r, the
r-th device the node gave the pool); on the CPU, VIDLINE_EXAMPLE_RANKS if set, else as many
as the pool has devices (CUDA_VISIBLE_DEVICES as the node sets it, else VIDLINE_DEVICES),
else 1. The heads (VIDLINE_EXAMPLE_HEADS, 8) must divide by the rank count.

Lifetime: every further rank sets PR_SET_PDEATHSIG=SIGKILL (through ctypes) and checks its
parent is still rank 0, so it dies with the worker; the worker dies with its node (the
library exits at the end of its socket; the node kills the process group at stop). A rank
that exits makes rank 0 exit too (the node restarts the worker, cold).

Knobs (environment): VIDLINE_EXAMPLE_HIDDEN (64), VIDLINE_EXAMPLE_HEADS (8),
VIDLINE_EXAMPLE_STEPS (4), VIDLINE_EXAMPLE_RANKS, VIDLINE_EXAMPLE_TRACE (a file: one JSON
line per sample, with its pid, the ranks' pids, the world size and whether it was cold),
VIDLINE_EXAMPLE_KEEP (a directory: rank 0 also saves each latent there as seed-<seed>.pt,
and its text conditioning as seed-<seed>.cond.pt, for `once ... conditioning=` to redo).
"""

import ctypes
import json
import math
import os
import signal
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import vidline_worker as vw  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

LATENT_CHANNELS = 16
TEXT_DIM = 64
PR_SET_PDEATHSIG = 1


def env_int(name, default):
    return int(os.environ.get(name, str(default)))


def world_size():
    """How many ranks: see the module's docstring."""
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if torch.cuda.is_available():
        return max(1, min(len(visible) or torch.cuda.device_count(), torch.cuda.device_count()))
    if os.environ.get("VIDLINE_EXAMPLE_RANKS"):
        return max(1, int(os.environ["VIDLINE_EXAMPLE_RANKS"]))
    if visible:
        return len(visible)
    devices = [d for d in os.environ.get("VIDLINE_DEVICES", "").split(",") if d.strip()]
    return max(1, len(devices))


def latent_shape(job):
    frames = int(job["frames"])
    return (LATENT_CHANNELS, 1 + (frames - 1) // 4, max(1, int(job["height"]) // 8),
            max(1, int(job["width"]) // 8))


# ---------------------------------------------------------------------------------------
# Collectives. torch 1.13's gloo has no all_to_all (the list form: "ProcessGroup gloo does
# not support alltoall") but does have all_to_all_single with equal splits, which NCCL has
# too, so that is the one used; where it is missing as well, all_gather stands in (each
# rank keeps its own slice of what everyone sent: N times the traffic, same numbers).

def all_to_all(chunks):
    """chunks[j] (all the same shape) goes to rank j; returns what each rank sent here."""
    n = len(chunks)
    if n == 1:
        return [chunks[0]]
    send = torch.stack([c.contiguous() for c in chunks])
    recv = torch.empty_like(send)
    try:
        dist.all_to_all_single(recv, send)
        return list(recv.unbind(0))
    except RuntimeError:
        gathered = [torch.empty_like(send) for _ in range(n)]
        dist.all_gather(gathered, send)
        me = dist.get_rank()
        return [g[me] for g in gathered]


class Block(torch.nn.Module):
    """A DiT-like block: embed tokens, add the text, self-attention (sequence parallel), MLP."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.embed = torch.nn.Linear(LATENT_CHANNELS * 4, hidden)
        self.text = torch.nn.Linear(TEXT_DIM, hidden)
        self.norm1 = torch.nn.LayerNorm(hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.proj = torch.nn.Linear(hidden, hidden)
        self.norm2 = torch.nn.LayerNorm(hidden)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(hidden, 4 * hidden), torch.nn.GELU(),
                                       torch.nn.Linear(4 * hidden, hidden))
        self.out = torch.nn.Linear(hidden, LATENT_CHANNELS * 4)

    def forward(self, tokens, cond, valid, world):
        """tokens: this rank's (S/N, C*4); valid: (S,) bool over the whole padded sequence."""
        s_local = tokens.shape[0]
        h = self.embed(tokens) + self.text(cond)
        hidden = h.shape[1]
        hd = hidden // self.heads
        q, k, v = self.qkv(self.norm1(h)).reshape(s_local, 3, self.heads, hd).unbind(1)
        hl = self.heads // world

        def to_heads(t):  # (S/N, H, hd) -> (S, H/N, hd): all tokens, this rank's heads
            parts = all_to_all(list(t.reshape(s_local, world, hl, hd).unbind(1)))
            return torch.cat(parts, 0)

        q, k, v = to_heads(q), to_heads(k), to_heads(v)
        a = attention(q, k, v, valid)                      # (S, H/N, hd)
        # Back: (S, H/N, hd) -> (S/N, H, hd): this rank's tokens, all heads.
        parts = all_to_all(list(a.reshape(world, s_local, hl, hd).unbind(0)))
        a = torch.stack(parts, 1).reshape(s_local, hidden)
        h = h + self.proj(a)
        h = h + self.mlp(self.norm2(h))
        return self.out(h)


def attention(q, k, v, valid, chunk=4096):
    """Softmax attention over the whole sequence, padded keys masked, queries in chunks so
    the score matrix stays small. q, k, v: (S, heads, hd)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    kt = k.permute(1, 2, 0)                                # heads, hd, S
    vt = v.permute(1, 0, 2)                                # heads, S, hd
    mask = torch.zeros(valid.shape[0], dtype=q.dtype, device=q.device)
    mask[~valid] = float("-inf")
    out = []
    for i in range(0, q.shape[0], chunk):
        qc = q[i:i + chunk].permute(1, 0, 2)               # heads, c, hd
        w = torch.softmax(torch.matmul(qc, kt) * scale + mask, dim=-1)
        out.append(torch.matmul(w, vt).permute(1, 0, 2))   # c, heads, hd
    return torch.cat(out, 0)


class Sampler:
    """What every rank holds: the model, and the sampling loop that runs in lockstep."""

    def __init__(self, rank, world):
        self.rank, self.world = rank, world
        self.dev = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")
        hidden, heads = env_int("VIDLINE_EXAMPLE_HIDDEN", 64), env_int("VIDLINE_EXAMPLE_HEADS", 8)
        if heads % world or hidden % heads:
            raise vw.Fatal("%d heads cannot be split over %d ranks (hidden %d): set "
                           "VIDLINE_EXAMPLE_HEADS to a multiple of the rank count" % (heads, world, hidden))
        torch.manual_seed(1234)  # the same weights on every rank
        self.block = Block(hidden, heads).eval().to(self.dev)

    @torch.no_grad()
    def sample(self, job, cond, progress=None, ck=None, first=0, resume=None):
        """Runs the steps; returns the whole latent on rank 0 (None elsewhere). `progress`
        (rank 0 only) may raise vw.Cancelled: the ranks then stop together. `ck` (rank 0,
        a vw.Checkpoints) decides when the ranks save their tokens together: gathered on
        rank 0, which saves the whole padded token tensor; `resume` (every rank) is such a
        file, from which the steps after `first` go on. A preempt raises vw.Preempted on
        rank 0 after the save; the ranks stop together."""
        c, t, h, w = latent_shape(job)
        gen = torch.Generator(device="cpu").manual_seed(int(job["seed"]) % (2 ** 63))
        x = torch.randn((c, t, h, w), generator=gen).to(self.dev)
        cond = cond.to(self.dev)
        steps = env_int("VIDLINE_EXAMPLE_STEPS", 4)
        hh, ww = h - h % 2, w - w % 2
        if hh == 0 or ww == 0:
            return x.cpu() if self.rank == 0 else None
        # 2x2 patches as tokens, padded to a multiple of the rank count; this rank's share.
        p = x[:, :, :hh, :ww].reshape(c, t, hh // 2, 2, ww // 2, 2).permute(1, 2, 4, 0, 3, 5)
        tokens = p.reshape(-1, c * 4)
        n = tokens.shape[0]
        per = -(-n // self.world)
        padded = torch.zeros(per * self.world, c * 4, device=self.dev)
        padded[:n] = tokens
        valid = torch.zeros(per * self.world, dtype=torch.bool, device=self.dev)
        valid[:n] = True
        if resume:
            # The whole padded token tensor as saved: the same on any rank count.
            padded = torch.load(resume, map_location="cpu").to(self.dev)
            padded = padded[:n]
            grown = torch.zeros(per * self.world, c * 4, device=self.dev)
            grown[:n] = padded
            padded = grown
        else:
            first = 0
        mine = padded[self.rank * per:(self.rank + 1) * per].clone()
        stop = torch.zeros(1, device=self.dev)
        save = torch.zeros(1, device=self.dev)
        cancelled = None
        for i in range(first, steps):
            mine = mine - (1.0 / steps) * self.block(mine, cond, valid, self.world)
            if self.rank == 0 and progress is not None:
                try:
                    progress(i + 1, steps)
                except vw.Cancelled as e:
                    cancelled = e
                    stop.fill_(1)
            save.fill_(1 if self.rank == 0 and ck is not None and ck.can_save and i + 1 < steps
                       and not stop.item() and ck.due(i + 1) else 0)
            if self.world > 1:
                dist.broadcast(save, 0)
            if save.item():
                whole = mine
                if self.world > 1:
                    parts = [torch.empty_like(mine) for _ in range(self.world)]
                    dist.all_gather(parts, mine)
                    whole = torch.cat(parts, 0)
                if self.rank == 0:
                    ck.save(i + 1, steps, lambda path: torch.save(whole[:n].cpu(), path))
                    if ck.preempted():
                        cancelled = vw.Preempted("made way at step %d of %d" % (i + 1, steps))
                        stop.fill_(1)
            if self.world > 1:
                dist.broadcast(stop, 0)
            if stop.item():
                break
        if cancelled is not None:
            raise cancelled
        if stop.item():
            return None
        if self.world > 1:
            parts = [torch.empty_like(mine) for _ in range(self.world)]
            dist.all_gather(parts, mine)
            mine = torch.cat(parts, 0)
        if self.rank != 0:
            return None
        out = mine[:n].reshape(t, hh // 2, ww // 2, c, 2, 2).permute(3, 0, 1, 4, 2, 5)
        x[:, :, :hh, :ww] = out.reshape(c, t, hh, ww)
        return x.cpu()


def init_group(rank, world, store):
    if world == 1:
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=world)


def child_env():
    env = dict(os.environ)
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink SHARP (multicast) off: see docs/worker.md
    env["VIDLINE_SEQPAR_PARENT"] = str(os.getpid())
    env.pop("VIDLINE_WORKER_FD", None)
    return env


class Group:
    """Rank 0's side: starts ranks 1..N-1, joins them, broadcasts each command."""

    def __init__(self, world, store_dir=None):
        self.world = world
        self.procs = []
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        # The rendezvous file store: in the worker's directory (its log directory, one per
        # owner), the previous life's removed first; else a temporary directory.
        if store_dir is not None:
            shutil.rmtree(store_dir, ignore_errors=True)
            os.makedirs(store_dir)
            self.dir = store_dir
        else:
            self.dir = tempfile.mkdtemp(prefix="vidline-seqpar-")
        store = os.path.join(self.dir, "store")
        for r in range(1, world):
            self.procs.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "rank", str(r), str(world), store],
                env=child_env(), stdin=subprocess.DEVNULL, close_fds=True))
        if self.procs:
            threading.Thread(target=self._watch, name="seqpar-watch", daemon=True).start()
        init_group(0, world, store)
        self.sampler = Sampler(0, world)
        self.pids = [os.getpid()] + [p.pid for p in self.procs]
        self.closing = False

    def _watch(self):
        # A rank that dies leaves the others blocked in a collective: end the worker (the
        # node restarts it; the request, if one runs, fails transient).
        while True:
            for p in self.procs:
                if p.poll() is not None and not self.closing:
                    sys.stderr.write("torch_seqpar: rank process %d exited (%s): exiting\n"
                                     % (p.pid, p.returncode))
                    sys.stderr.flush()
                    os._exit(3)
            time.sleep(0.2)

    def command(self, cmd):
        box = [cmd]
        dist.broadcast_object_list(box, 0)
        return box[0]


def rank_main(rank, world, store):
    """Ranks 1..N-1: die with rank 0, join the group, follow its commands."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(os.environ.get("VIDLINE_SEQPAR_PARENT", "0")):
        os._exit(0)  # rank 0 died before the prctl took hold
    init_group(rank, world, store)
    sampler = Sampler(rank, world)
    while True:
        box = [None]
        dist.broadcast_object_list(box, 0)
        cmd = box[0]
        if cmd["op"] == "sample":
            try:
                sampler.sample(cmd["job"], cmd["cond"], first=cmd.get("first", 0),
                               resume=cmd.get("resume"))
            except (vw.Cancelled, vw.Preempted):
                pass
        elif cmd["op"] == "exit":
            os._exit(0)


def load_cond(path):
    cond = torch.zeros(TEXT_DIM)
    if path and _is_torch_file(path):
        c = torch.load(path, map_location="cpu").float().flatten()[:TEXT_DIM]
        cond[:c.shape[0]] = c
    return cond


def _is_torch_file(path):
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"PK"  # torch.save's zip format
    except OSError:
        return False


def trace(**fields):
    path = os.environ.get("VIDLINE_EXAMPLE_TRACE")
    if path:
        fields.update(pid=os.getpid(), owner=os.environ.get("VIDLINE_OWNER", ""))
        with open(path, "a") as f:
            f.write(json.dumps(fields) + "\n")


class SeqPar(vw.Worker):
    stages = ["sample"]

    def __init__(self):
        self.group = None

    def load(self, stage):
        self.group = Group(world_size(), os.path.join(os.getcwd(), "seqpar-store"))
        # Every rank builds the same weights from a fixed seed: rank 0's digest names them.
        self.model_identity = vw.state_dict_identity(self.group.sampler.block.state_dict())

    def sample(self, req, progress):
        cold = req.cold
        start = time.time()
        job = {k: req.job[k] for k in ("seed", "width", "height", "frames")}
        cond = load_cond(req.inputs.get("conditioning", ""))
        g = self.group
        ck = req.checkpoints
        first = req.resume_step if req.resume_file else 0
        if first:
            ck.resume(lambda path: None)  # checks the file's digest before the ranks read it
        resume = req.resume_file if first else None
        if g.world > 1:
            g.command({"op": "sample", "job": job, "cond": cond, "first": first,
                       "resume": resume})
        x = g.sampler.sample(job, cond, progress, ck, first, resume)
        torch.save(x, req.output)
        keep = os.environ.get("VIDLINE_EXAMPLE_KEEP")
        if keep:
            torch.save(x, os.path.join(keep, "seed-%d.pt" % int(job["seed"])))
            torch.save(cond, os.path.join(keep, "seed-%d.cond.pt" % int(job["seed"])))
        trace(stage="sample", seed=job["seed"], world=g.world, ranks=g.pids, cold=cold,
              start=start, end=time.time())


def main(argv):
    if len(argv) >= 2 and argv[1] == "worker":
        vw.run(SeqPar())
    if len(argv) == 5 and argv[1] == "rank":
        rank_main(int(argv[2]), int(argv[3]), argv[4])
        return 0
    if len(argv) >= 2 and argv[1] == "once":
        fields = dict(a.split("=", 1) for a in argv[2:])
        if "ranks" in fields:
            os.environ["VIDLINE_EXAMPLE_RANKS"] = fields["ranks"]
        job = {k: int(fields[k]) for k in ("seed", "width", "height", "frames")}
        g = Group(world_size())
        cond = load_cond(fields.get("conditioning", ""))
        if g.world > 1:
            g.command({"op": "sample", "job": job, "cond": cond})
        torch.save(g.sampler.sample(job, cond), fields["output"])
        if g.world > 1:
            g.closing = True
            g.command({"op": "exit"})
            for p in g.procs:
                p.wait()
        shutil.rmtree(g.dir, ignore_errors=True)
        os._exit(0)
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
