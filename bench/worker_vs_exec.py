#!/usr/bin/env python3
"""The same line twice, `exec` then `worker`, side by side: GPU idle between consecutive
samples, makespan, cold/warm. Runs two real nodes on loopback (alpha: coordinator, encoder,
one pool on GPU 0; beta: the decoder on GPU 0) with backends/worker/examples/torch_line.py
as the programs of both backends (one process per stage for exec, one long-lived process
per owner for worker). Prints a table and RESULT lines:

  RESULT gpu_idle_between_samples_worker <s> s target <=0.3
  RESULT gpu_idle_between_samples_exec <s> s target info
  RESULT makespan_ratio_worker_over_exec <x> ratio target <=0.6
  RESULT worker_first_cold_others_warm <0|1> bool target ==1

"GPU idle between two samples" is, on the pool, the time from the end of one sample's GPU
work to the start of the next one's (the example program traces both, after a CUDA
synchronize), the median over the batch.

Usage: bench/worker_vs_exec.py --vidline BUILD/vidline [--python PYTHON] [--jobs 6]
         [--width 736 --height 416 --seconds 5] [--cpu] [--keep]
  --cpu: tiny sizes and a tiny model (64x48, 1 s, hidden 32), to test this script on a
         machine without a GPU; its figures mean nothing for the targets.
Environment passed to the example: VIDLINE_EXAMPLE_HIDDEN / _DEPTH / _STEPS (model size).
launch/bench gpu runs it.
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "backends", "worker", "examples", "torch_line.py")


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def example_env(args, trace):
    env = {"VIDLINE_EXAMPLE_TRACE": trace,
           "VIDLINE_EXAMPLE_HIDDEN": os.environ.get("VIDLINE_EXAMPLE_HIDDEN", "32" if args.cpu else "4096"),
           "VIDLINE_EXAMPLE_DEPTH": os.environ.get("VIDLINE_EXAMPLE_DEPTH", "2" if args.cpu else "8"),
           "VIDLINE_EXAMPLE_STEPS": os.environ.get("VIDLINE_EXAMPLE_STEPS", "6")}
    return env


def backend(kind, args, trace):
    env = example_env(args, trace)
    if kind == "worker":
        return {"type": "worker", "options": {"argv": [args.python, EXAMPLE, "worker"], "env": env,
                                              "stop_grace_s": 5}}
    common = ["width={width}", "height={height}", "frames={frames}", "fps={fps}"]
    return {"type": "exec", "options": {
        "encode": {"argv": [args.python, EXAMPLE, "exec", "encode", "output={output}",
                            "prompt_file={prompt_file}"]},
        "sample": {"argv": [args.python, EXAMPLE, "exec", "sample", "output={output}",
                            "conditioning={conditioning}", "seed={seed}"] + common},
        "decode": {"argv": [args.python, EXAMPLE, "exec", "decode", "output={output}",
                            "latent={latent}", "seed={seed}"] + common},
        "env": env}}


def write_config(dirname, kind, args, trace):
    p = free_ports(2)
    gpu = {"id": "g0", "model": "bench GPU", "vendor": "nvidia", "memory_gib": 80, "index": 0}
    cfg = {
        "cluster": "bench_" + kind, "coordinator": "alpha", "plaintext": True,
        "hosts": [{"name": "alpha", "address": "127.0.0.1", "port": p[0],
                   "data_dir": dirname + "/alpha", "gpus": [gpu]},
                  {"name": "beta", "address": "127.0.0.1", "port": p[1],
                   "data_dir": dirname + "/beta", "gpus": [dict(gpu, id="d0")]}],
        "backends": {"line": backend(kind, args, trace)},
        "pools": [{"name": "pool", "host": "alpha", "gpus": ["g0"], "backend": "line"}],
        "decoders": [{"name": "dec", "host": "beta", "gpu": "d0", "backend": "line"}],
        "encoders": [{"name": "enc", "host": "alpha", "gpus": ["g0"], "backend": "line"}],
        "modes": {"line": {"pools": ["pool"], "decoders": ["dec"]}},
        "knobs": {"sample_timeout_s": 3600, "decode_timeout_s": 3600}}
    path = dirname + "/cluster.json"
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
    return path


def run_line(kind, args, base):
    d = os.path.join(base, kind)
    os.makedirs(d)
    trace = d + "/trace.jsonl"
    config = write_config(d, kind, args, trace)
    prompt = d + "/prompt.txt"
    with open(prompt, "w") as f:
        f.write("a red fox runs through fresh snow, cinematic\n")
    nodes = [subprocess.Popen([args.vidline, "node", "--config", config, "--host", h],
                              stdout=open(d + "/%s.out" % h, "w"), stderr=subprocess.STDOUT)
             for h in ("alpha", "beta")]
    try:
        time.sleep(1)
        out = subprocess.run([args.vidline, "run", "--config", config, "--mode", "line",
                              "--prompt-file", prompt, "--width", str(args.width), "--height",
                              str(args.height), "--seconds", str(args.seconds), "--count",
                              str(args.jobs), "--seed", "1000", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=args.timeout)
        if out.returncode not in (0, 1):
            sys.stderr.write(out.stderr.decode(errors="replace"))
            raise SystemExit("%s line: vidline run exited %d" % (kind, out.returncode))
        status = json.loads(out.stdout)
    finally:
        for n in nodes:
            n.terminate()
        for n in nodes:
            try:
                n.wait(30)
            except subprocess.TimeoutExpired:
                n.kill()
    samples = []
    with open(trace) as f:
        for line in f:
            t = json.loads(line)
            if t["stage"] == "sample" and t.get("phase") == "end":
                samples.append(t)
    samples.sort(key=lambda t: t["start"])
    idle = [b["start"] - a["end"] for a, b in zip(samples, samples[1:])]
    jobs = sorted(status["jobs"], key=lambda j: (j["times"]["sample_start_s"] or 0))
    return {"kind": kind, "status": status, "ok": status["summary"]["succeeded"],
            "makespan": status["summary"]["makespan_s"],
            "idle_median": statistics.median(idle) if idle else float("nan"),
            "idle": idle, "gpu_s": [s["end"] - s["start"] for s in samples],
            "cold": [bool(j["cold"]) for j in jobs], "dir": d}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vidline", required=True)
    ap.add_argument("--python", default=os.environ.get("PYTHON", "/usr/bin/python3"))
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--width", type=int, default=736)
    ap.add_argument("--height", type=int, default=416)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if args.cpu:
        args.width, args.height, args.seconds = 64, 48, 1
    probe = subprocess.run([args.python, "-c", "import torch; print(torch.__version__, torch.cuda.is_available())"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if probe.returncode != 0:
        raise SystemExit("%s cannot import torch" % args.python)
    print("torch %s (cuda: %s), %d jobs of %dx%dx%d s" % (*probe.stdout.decode().split(), args.jobs,
                                                          args.width, args.height, args.seconds))
    base = tempfile.mkdtemp(prefix="vidline-bench-gpu-")
    try:
        results = [run_line(k, args, base) for k in ("exec", "worker")]
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print("kept", base)
    print("\n%-8s %5s %10s %16s %14s  %s" % ("backend", "ok", "makespan", "idle median (s)",
                                            "GPU s/sample", "cold by job"))
    for r in results:
        gpu = statistics.median(r["gpu_s"]) if r["gpu_s"] else float("nan")
        print("%-8s %2d/%-2d %10.2f %16.3f %14.3f  %s" % (r["kind"], r["ok"], args.jobs, r["makespan"],
                                                        r["idle_median"], gpu,
                                                        "".join("C" if c else "w" for c in r["cold"])))
    ex, wk = results
    for r in results:
        if r["ok"] != args.jobs:
            print("warning: %s line: %d of %d jobs succeeded" % (r["kind"], r["ok"], args.jobs))
    ratio = wk["makespan"] / ex["makespan"] if ex["makespan"] > 0 else float("nan")
    first_cold = int(bool(wk["cold"]) and wk["cold"][0] and not any(wk["cold"][1:]))
    print()
    print("RESULT gpu_idle_between_samples_worker %.3f s target <=0.3" % wk["idle_median"])
    print("RESULT gpu_idle_between_samples_exec %.3f s target info" % ex["idle_median"])
    print("RESULT makespan_ratio_worker_over_exec %.3f ratio target <=0.6" % ratio)
    print("RESULT worker_first_cold_others_warm %d bool target ==1" % first_cold)
    if args.cpu:
        print("(--cpu: tiny sizes to test the bench itself; the targets are for a GPU)")


if __name__ == "__main__":
    main()
