#!/usr/bin/python3
"""vidline_worker's checkpoints over the real protocol, without torch: a pure-Python worker
(pure_worker.py) checkpoints every few steps, is killed (SIGKILL) after one, is resumed by
a fresh worker and ends with the uninterrupted latent byte for byte; asked to make way
(preempt) it saves at its next step and answers "preempted"; a checkpoint whose digest is
wrong is refused (transient)."""

import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checkpoint_kill_test as k  # noqa: E402

PURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pure_worker.py")


def until(w, kind, timeout=60):
    while True:
        m = w.next(timeout)
        if m["type"] == kind:
            return m


def main():
    k.EXAMPLE = PURE
    tmp = tempfile.mkdtemp(prefix="vidline-ckproto-")
    env = dict(os.environ, VIDLINE_WORKER_FD="3", VIDLINE_WORKER_PROTOCOL="2",
               PURE_STEPS="12", PURE_EVERY="3", PURE_SLEEP="0.05")
    try:
        w = k.Worker(env)
        whole = os.path.join(tmp, "whole.json")
        w.send(**k.request("a1", whole, tmp, 64))
        assert until(w, "result")["outcome"] == "ok"
        w.stop()

        ck_dir = os.path.join(tmp, "ck")
        os.makedirs(ck_dir)
        w = k.Worker(env)
        w.send(**k.request("a2", os.path.join(tmp, "lost.json"), tmp, 64, ck_dir))
        seen = []
        while True:
            m = w.next(60)
            assert m["type"] != "result", m
            if m["type"] == "checkpoint":
                assert m["steps"] == 12 and os.path.dirname(m["file"]) == ck_dir, m
                seen.append(m)
                if m["step"] >= 6:
                    w.kill()
                    break
        assert [c["step"] for c in seen] == [3, 6], seen
        last = seen[-1]
        digest = k.sha256(last["file"])
        resume = {"step": last["step"], "file": last["file"], "sha256": digest}

        w = k.Worker(env)
        resumed = os.path.join(tmp, "resumed.json")
        w.send(**k.request("a3", resumed, tmp, 64, ck_dir, resume))
        steps = []
        while True:
            m = w.next(60)
            if m["type"] == "progress":
                steps.append(m["step"])
            if m["type"] == "result":
                assert m["outcome"] == "ok", m
                break
        assert steps[0] == 7, steps  # the steps after the checkpoint only
        assert open(resumed).read() == open(whole).read(), "resumed latent differs"

        # A wrong digest: refused before any step.
        w.send(**k.request("a4", os.path.join(tmp, "bad.json"), tmp, 64, ck_dir,
                           dict(resume, sha256="0" * 64)))
        m = until(w, "result")
        assert m["outcome"] == "transient" and "does not hash" in m["error"], m

        # Preempt: a checkpoint at the next step, then "preempted".
        w.send(**k.request("a5", os.path.join(tmp, "p.json"), tmp, 64, ck_dir))
        until(w, "progress")
        w.send(type="preempt", id="a5")
        got = []
        while True:
            m = w.next(60)
            if m["type"] in ("checkpoint", "result"):
                got.append(m)
            if m["type"] == "result":
                break
        assert got[-1]["outcome"] == "preempted", got
        assert got[-2]["type"] == "checkpoint", got
        w.stop()
        print("ok: checkpoints at steps 3, 6; killed; resumed from 6 equal byte for byte; "
              "bad digest refused; preempted after a checkpoint at step %d" % got[-2]["step"])
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
