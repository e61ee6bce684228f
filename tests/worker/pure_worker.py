#!/usr/bin/python3
"""A worker in pure Python for the checkpoint protocol's tests: `steps` Euler-like steps
over a list of floats from the job's seed, a checkpoint when vidline_worker says one is
due (JSON of the list), resumed from one when the request says so. With
PURE_FOREIGN_CHECKPOINT set it first names that file (outside its checkpoint folder) as a
checkpoint, which the node must refuse."""

import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "backends", "worker", "python"))
import vidline_worker as vw  # noqa: E402


class Pure(vw.Worker):
    stages = ["sample"]

    def load(self, stage):
        pass

    def sample(self, req, progress):
        steps = int(os.environ.get("PURE_STEPS", "12"))
        ck = req.checkpoints
        if os.environ.get("PURE_EVERY"):
            ck.every_steps = int(os.environ["PURE_EVERY"])
        start, x = ck.resume(lambda p: json.load(open(p)))
        foreign = os.environ.get("PURE_FOREIGN_CHECKPOINT")
        if foreign and ck.can_save:
            ck._send(type="checkpoint", id=req.id, step=1, steps=steps, file=foreign)
        if x is None:
            rng = random.Random(int(req.job["seed"]))
            x = [rng.gauss(0, 1) for _ in range(64)]
        for i in range(start, steps):
            x = [v - (1.0 / steps) * (v * 0.5 + 0.1 * (i + 1)) for v in x]
            time.sleep(float(os.environ.get("PURE_SLEEP", "0.05")))
            progress(i + 1, steps)
            ck.step(i + 1, steps, lambda p: json.dump(x, open(p, "w")))
        with open(req.output, "w") as f:
            json.dump(x, f)


if __name__ == "__main__":
    vw.run(Pure())
