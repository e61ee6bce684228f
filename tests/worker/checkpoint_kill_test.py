#!/usr/bin/python3
"""torch_line.py's worker killed (SIGKILL) mid-sample, then resumed from its checkpoint: the
resumed latent must equal an uninterrupted sample's bitwise (the same torch, the CPU unless
--device says otherwise), and the sampling time of both attempts together is reported over
the uninterrupted one's (the GPU time a fault costs with checkpoints).

Speaks the worker protocol itself (docs/worker.md), as the node does: a socketpair at
descriptor 3, one request at a time. Exits 77 (skipped) when torch is not installed.

    checkpoint_kill_test.py [--steps 30] [--every 3] [--kill-at 0.8] [--sleep 0.05] [--size 256]
"""

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "backends", "worker", "examples", "torch_line.py")


def last_sample_s(trace):
    """The sampling time of the newest sample the example's trace file records."""
    spans = [json.loads(l) for l in open(trace)]
    end = [s for s in spans if s["stage"] == "sample" and s["phase"] == "end"][-1]
    return end["end"] - end["start"]


class Worker:
    def __init__(self, env):
        ours, theirs = socket.socketpair()
        self.sock = ours
        self.buf = b""
        # Descriptor 3 in the worker, as the node gives it (through the shell's redirection).
        fd = theirs.fileno()
        self.proc = subprocess.Popen(["/bin/sh", "-c", 'exec 3<&%d %d<&-; exec "$0" "$@"' % (fd, fd),
                                      sys.executable, EXAMPLE, "worker"], env=env,
                                     pass_fds=(fd,))
        theirs.close()
        hello = self.next(60)
        assert hello["type"] == "hello", hello

    def wait_ok(self, timeout=600):
        """Reads up to the request's result, which must be ok."""
        while True:
            m = self.next(timeout)
            if m["type"] == "result":
                assert m["outcome"] == "ok", m
                return m

    def send(self, **msg):
        msg["v"] = 2
        self.sock.sendall((json.dumps(msg) + "\n").encode())

    def next(self, timeout):
        end = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError("no message from the worker within %.0f s" % timeout)
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the worker closed its socket")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.send(type="shutdown")
            self.sock.close()
            self.proc.wait(timeout=30)


def request(rid, out, work, size, ck_dir="", resume=None):
    msg = {"type": "request", "id": rid, "stage": "sample",
           "job": {"run_id": "r", "index": 0, "seed": 1234, "width": size, "height": size,
                   "seconds": 5, "frames": 121, "fps": 24, "prompt": "a fox"},
           "inputs": {"prompt_file": "", "conditioning": "", "latent": "",
                      "latent_sha256": "", "reference": ""},
           "output": out, "work_dir": work, "timeout_s": 0}
    if ck_dir:
        msg["checkpoint"] = {"dir": ck_dir, "interval_s": 0}
    if resume:
        msg["resume"] = resume
    return msg


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--every", type=int, default=3)
    ap.add_argument("--kill-at", type=float, default=0.8)
    ap.add_argument("--sleep", type=float, default=0.02)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (the GPUs torch sees)")
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        return 77
    tmp = tempfile.mkdtemp(prefix="vidline-ckkill-")
    env = dict(os.environ, VIDLINE_WORKER_FD="3", VIDLINE_WORKER_PROTOCOL="2",
               VIDLINE_EXAMPLE_STEPS=str(a.steps), VIDLINE_EXAMPLE_STEP_SLEEP_S=str(a.sleep),
               VIDLINE_EXAMPLE_CHECKPOINT_STEPS=str(a.every),
               VIDLINE_EXAMPLE_TRACE=os.path.join(tmp, "trace.jsonl"))
    if a.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    try:
        # Uninterrupted.
        w = Worker(env)
        whole = os.path.join(tmp, "whole.pt")
        w.send(**request("a1", whole, tmp, a.size))
        w.wait_ok()
        w.stop()
        whole_s = last_sample_s(env["VIDLINE_EXAMPLE_TRACE"])

        # Killed at the first checkpoint past kill_at of the steps, one step after it.
        kill_step = max(1, int(a.steps * a.kill_at))
        ck_dir = os.path.join(tmp, "ck")
        os.makedirs(ck_dir)
        w = Worker(env)
        w.send(**request("a2", os.path.join(tmp, "lost.pt"), tmp, a.size, ck_dir))
        kept = None
        begun = None
        while True:
            m = w.next(600)
            if m["type"] == "progress" and begun is None:
                begun = time.time() - a.sleep  # the first step's end: its start is close
            if m["type"] == "checkpoint":
                assert m["file"].startswith(ck_dir + "/"), m
                # As the node does: take it over under its digest.
                digest = sha256(m["file"])
                kept = {"step": m["step"], "file": os.path.join(tmp, digest + ".latent"),
                        "sha256": digest}
                os.rename(m["file"], kept["file"])
            if m["type"] == "progress" and kept and m["step"] >= max(kill_step, kept["step"]) + 1:
                w.kill()
                killed_at = time.time()
                break
            assert m["type"] != "result", "finished before it was killed: %r" % m
        lost_s = killed_at - begun

        # Resumed by a fresh worker (cold: its model loads again, outside the steps' span).
        w = Worker(env)
        resumed = os.path.join(tmp, "resumed.pt")
        w.send(**request("a3", resumed, tmp, a.size, ck_dir, kept))
        w.wait_ok()
        w.stop()
        resumed_s = last_sample_s(env["VIDLINE_EXAMPLE_TRACE"])

        x = torch.load(whole)
        y = torch.load(resumed)
        same = torch.equal(x, y)
        ratio = (lost_s + resumed_s) / whole_s
        print("steps %d, checkpoint every %d, killed after step %d, resumed from step %d"
              % (a.steps, a.every, max(kill_step, kept["step"]) + 1, kept["step"]))
        print("RESULT worker_resume_bitwise_equal %d bool target ==1" % int(same))
        print("RESULT worker_resume_max_abs_diff %.3g value target ==0"
              % float((x - y).abs().max()))
        print("RESULT worker_resume_sampling_s %.2f s (killed %.2f + resumed %.2f) vs "
              "uninterrupted %.2f s" % (lost_s + resumed_s, lost_s, resumed_s, whole_s))
        print("RESULT worker_resume_gpu_time_ratio %.3f ratio target <=1.1" % ratio)
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
