#!/usr/bin/python3
"""A worker (backend type "worker") that behaves as told, for the tests: MODE is its first
argument; a request's seed can override it per job (see `per_seed`).

  ok            writes "<stage> <seed> <pid>\n" to the output; progress 1..3 of 3
  slow          like ok, 0.2 s per step, checking for cancel (progress raises Cancelled)
  deaf          like slow but never calls progress: ignores cancels
  die           exits 3 in the middle of each request, after one progress line
  die_once      dies on the first request of its life only if <work_dir>/../died does not exist
  oom           raises an out-of-memory RuntimeError (torch's text)
  transient     raises vw.Transient
  no_output     returns ok without writing anything
  no_hello      never says hello (sleeps)
  garbage       says hello, then answers a request with a line that is not JSON
  flaky_start   exits 1 before its hello
  old_hello     like ok, but its hello does not say it takes load requests (an older library)
  odd_load      like ok, but answers a load with a message type the node does not know

Its load sets model_identity "sha256:fake-<stage>".

Every start appends its pid to $FAKE_WORKER_STARTS when set; every load to $FAKE_WORKER_LOADS.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "backends", "worker", "python"))
import vidline_worker as vw  # noqa: E402

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"


def note(var, text):
    path = os.environ.get(var)
    if path:
        with open(path, "a") as f:
            f.write(text + "\n")


note("FAKE_WORKER_STARTS", str(os.getpid()))
if MODE == "flaky_start":
    sys.exit(1)
if MODE == "no_hello":
    time.sleep(3600)


class Fake(vw.Worker):
    stages = os.environ.get("FAKE_WORKER_STAGES", "encode,sample,decode").split(",")

    def load(self, stage):
        note("FAKE_WORKER_LOADS", "%s %d" % (stage, os.getpid()))
        self.model_identity = "sha256:fake-" + stage

    def _run(self, req, progress):
        if MODE == "die":
            progress(1, 3)
            os._exit(3)
        if MODE == "die_once":
            marker = os.path.join(os.environ.get("FAKE_WORKER_MARKERS", req.work_dir), "died")
            if not os.path.exists(marker):
                open(marker, "w").close()
                os._exit(3)
        if MODE == "oom":
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
        if MODE == "transient":
            raise vw.Transient("the disk was busy")
        if MODE == "garbage":
            sys.stdout.flush()
            os.write(int(os.environ["VIDLINE_WORKER_FD"]), b"this is not json\n")
            time.sleep(30)
        for i in range(3):
            if MODE in ("slow", "deaf"):
                time.sleep(0.2)
            if MODE == "deaf":
                time.sleep(30)
            progress(i + 1, 3)
        if MODE != "no_output":
            with open(req.output, "w") as f:
                f.write("%s %s %d\n" % (req.stage, req.job.get("seed", ""), os.getpid()))

    encode = sample = decode = _run


if MODE in ("old_hello", "odd_load"):
    _send = vw._Channel.send

    def send(self, **msg):
        if MODE == "old_hello" and msg.get("type") == "hello":
            msg.pop("load", None)
        if MODE == "odd_load" and msg.get("type") == "loaded":
            msg["type"] = "surprise"
        return _send(self, **msg)
    vw._Channel.send = send

vw.run(Fake())
