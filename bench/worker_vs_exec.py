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

With --energy, an independent `nvidia-smi --query-gpu=timestamp,power.draw -lms 100` sampler
runs beside each line, and every stage's energy in the run's status (the coordinator's
integral of the nodes' NVML readings, docs/metrics.md "Energy per clip") is set against the
integral of that sampler's power over the same stage (trapezoids, the stage's unix stamps):

  RESULT energy_run_vs_nvidia_smi_<backend> <ratio> ratio target 0.95..1.05
  RESULT energy_stage_worst_error_<backend> <%> % target info

"GPU idle between two samples" is, on the pool, the time from the end of one sample's GPU
work to the start of the next one's (the example program traces both, after a CUDA
synchronize), the median over the batch.

With --warm-start the worker backend's pool, encoder and decoder load their models when
the nodes start, side by side, and the run is submitted once all three are loaded: the
first job's conditioning, sampling and decode are warm, and

  RESULT worker_first_sample_after_submit <s> s target info

says how soon after submission the first sample started (also printed without it).

Usage: bench/worker_vs_exec.py --vidline BUILD/vidline [--python PYTHON] [--jobs 6]
         [--width 736 --height 416 --seconds 5] [--cpu] [--keep]
         [--backends exec,worker] [--energy] [--gpu-sample-ms MS] [--warm-start]
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
        # Without --warm-start the first job pays the load, as exec's every job does.
        return {"type": "worker", "warm_start": bool(args.warm_start),
                "options": {"argv": [args.python, EXAMPLE, "worker"], "env": env,
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
        "knobs": {"sample_timeout_s": 3600, "decode_timeout_s": 3600,
                  "gpu_sample_interval_ms": args.gpu_sample_ms}}
    path = dirname + "/cluster.json"
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
    return path


def start_power_sampler(path):
    """nvidia-smi's own power readings of card 0 every 100 ms, into `path` (CSV)."""
    return subprocess.Popen(["nvidia-smi", "-i", "0", "--query-gpu=timestamp,power.draw",
                             "--format=csv,noheader,nounits", "-lms", "100"],
                            stdout=open(path, "w"), stderr=subprocess.DEVNULL)


def read_power(path):
    """[(unix seconds, watts)] from the sampler's CSV (its timestamps are local time)."""
    out = []
    with open(path) as f:
        for line in f:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 2:
                continue
            try:
                stamp, frac = parts[0].rsplit(".", 1)
                t = time.mktime(time.strptime(stamp, "%Y/%m/%d %H:%M:%S")) + float("0." + frac)
                out.append((t, float(parts[1])))
            except ValueError:
                continue
    return out


def integral(samples, a, b):
    """Joules between unix times a and b: the readings joined by straight lines."""
    if b <= a or len(samples) < 2:
        return float("nan")
    if a < samples[0][0] or b > samples[-1][0]:
        return float("nan")
    total = 0.0
    for (t0, w0), (t1, w1) in zip(samples, samples[1:]):
        lo, hi = max(a, t0), min(b, t1)
        if hi <= lo:
            continue
        wl = w0 + (w1 - w0) * (lo - t0) / (t1 - t0)
        wh = w0 + (w1 - w0) * (hi - t0) / (t1 - t0)
        total += (wl + wh) / 2 * (hi - lo)
    return total


def energy_compare(status, samples):
    """Per stage (the pool's conditioning + sampling, the decode): (ours, nvidia-smi's) J."""
    rows = []
    for j in status["jobs"]:
        st, e = j.get("stages") or {}, j.get("energy_j") or {}
        pool_from = (st.get("conditioning") or st.get("sampling") or {}).get("start_unix")
        spans = [("sampling", pool_from, (st.get("sampling") or {}).get("end_unix")),
                 ("decode", (st.get("decode") or {}).get("start_unix"),
                  (st.get("decode") or {}).get("end_unix"))]
        for stage, a, b in spans:
            ours = e.get(stage)
            if ours is None or a is None or b is None:
                continue
            rows.append((j["index"], stage, b - a, ours, integral(samples, a, b)))
    return rows


def loaded_owners(trace):
    """The owners whose model load the example's trace shows ("pool", "enc", "dec")."""
    owners = set()
    try:
        with open(trace) as f:
            for line in f:
                try:
                    t = json.loads(line)
                except ValueError:
                    continue  # a line being written
                if t.get("phase") == "load":
                    owners.add(t.get("owner", ""))
    except OSError:
        pass
    return owners


def wait_model_loaded(args, config, trace, limit=600):
    """Seconds until the warm start is over: the pool says its model is loaded (status
    @cluster) and the encoder's and decoder's workers have traced their loads."""
    t0 = time.time()
    while time.time() - t0 < limit:
        st = subprocess.run([args.vidline, "status", "@cluster", "--config", config, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        if st.returncode == 0:
            try:
                pool = json.loads(st.stdout)["pools"]["pool"]
                if pool.get("model_identity") and {"enc", "dec"} <= loaded_owners(trace):
                    return time.time() - t0
            except (ValueError, KeyError, TypeError):
                pass
        time.sleep(0.2)
    raise SystemExit("the worker line did not report its models loaded within %d s" % limit)


def run_line(kind, args, base):
    d = os.path.join(base, kind)
    os.makedirs(d)
    trace = d + "/trace.jsonl"
    config = write_config(d, kind, args, trace)
    prompt = d + "/prompt.txt"
    with open(prompt, "w") as f:
        f.write("a red fox runs through fresh snow, cinematic\n")
    sampler = start_power_sampler(d + "/power.csv") if args.energy else None
    nodes = [subprocess.Popen([args.vidline, "node", "--config", config, "--host", h],
                              stdout=open(d + "/%s.out" % h, "w"), stderr=subprocess.STDOUT)
             for h in ("alpha", "beta")]
    try:
        time.sleep(1)
        loaded_after = None
        if kind == "worker" and args.warm_start:
            loaded_after = wait_model_loaded(args, config, trace)
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
        if sampler:
            sampler.terminate()
            sampler.wait(10)
    samples = []
    with open(trace) as f:
        for line in f:
            t = json.loads(line)
            if t["stage"] == "sample" and t.get("phase") == "end":
                samples.append(t)
    samples.sort(key=lambda t: t["start"])
    idle = [b["start"] - a["end"] for a, b in zip(samples, samples[1:])]
    jobs = sorted(status["jobs"], key=lambda j: (j["times"]["sample_start_s"] or 0))
    starts = [j["stages"]["sampling"]["start_s"] for j in status["jobs"]
              if j.get("stages") and j["stages"].get("sampling")]
    return {"kind": kind, "status": status, "ok": status["summary"]["succeeded"],
            "makespan": status["summary"]["makespan_s"],
            "idle_median": statistics.median(idle) if idle else float("nan"),
            "idle": idle, "gpu_s": [s["end"] - s["start"] for s in samples],
            "cold": [bool(j["cold"]) for j in jobs], "dir": d,
            "first_sample_s": min(starts) if starts else float("nan"),
            "loaded_after": loaded_after,
            "energy": energy_compare(status, read_power(d + "/power.csv")) if args.energy else []}


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
    ap.add_argument("--backends", default="exec,worker",
                    help="which lines to run, in order (exec, worker)")
    ap.add_argument("--energy", action="store_true",
                    help="set each stage's energy against an nvidia-smi sampler's integral")
    ap.add_argument("--warm-start", action="store_true",
                    help="the worker backend's pool, encoder and decoder load their models when "
                         "the nodes start (warm_start); the run is submitted once all are loaded")
    ap.add_argument("--gpu-sample-ms", type=int, default=1000,
                    help="the nodes' gpu_sample_interval_ms (default 1000, the knob's default)")
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
        kinds = [k for k in args.backends.split(",") if k]
        if any(k not in ("exec", "worker") for k in kinds) or not kinds:
            raise SystemExit("--backends: a list of exec and worker, got %r" % args.backends)
        results = [run_line(k, args, base) for k in kinds]
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print("kept", base)
    print("\n%-8s %5s %10s %16s %14s %13s  %s" % ("backend", "ok", "makespan", "idle median (s)",
                                                  "GPU s/sample", "1st sample s", "cold by job"))
    for r in results:
        gpu = statistics.median(r["gpu_s"]) if r["gpu_s"] else float("nan")
        print("%-8s %2d/%-2d %10.2f %16.3f %14.3f %13.2f  %s" % (
            r["kind"], r["ok"], args.jobs, r["makespan"], r["idle_median"], gpu, r["first_sample_s"],
            "".join("C" if c else "w" for c in r["cold"])))
    for r in results:
        if r["kind"] == "worker":
            print("RESULT worker_first_sample_after_submit %.2f s target info (warm start %s%s)" % (
                r["first_sample_s"], "on" if args.warm_start else "off",
                ", model loaded %.1f s after the nodes started" % r["loaded_after"]
                if r["loaded_after"] is not None else ""))
    for r in results:
        if r["ok"] != args.jobs:
            print("warning: %s line: %d of %d jobs succeeded" % (r["kind"], r["ok"], args.jobs))
    for r in results:
        if not args.energy:
            break
        rows = [x for x in r["energy"] if x[4] == x[4]]  # nvidia-smi covered the stage
        print("\n%s line, energy per stage (gpu_sample_interval_ms %d): ours against the "
              "integral of nvidia-smi's 100 ms readings" % (r["kind"], args.gpu_sample_ms))
        print("%4s %-9s %8s %10s %10s %8s" % ("job", "stage", "s", "ours J", "smi J", "error"))
        for idx, stage, secs, ours, smi in r["energy"]:
            err = 100 * (ours / smi - 1) if smi == smi and smi > 0 else float("nan")
            print("%4d %-9s %8.2f %10.1f %10.1f %+7.1f%%" % (idx, stage, secs, ours, smi, err))
        ours_sum = sum(x[3] for x in rows)
        smi_sum = sum(x[4] for x in rows)
        worst = max((abs(100 * (x[3] / x[4] - 1)) for x in rows if x[4] > 0), default=float("nan"))
        print("RESULT energy_run_vs_nvidia_smi_%s %.4f ratio target 0.95..1.05 (%d stages, "
              "%.1f J against %.1f J)" % (r["kind"], ours_sum / smi_sum if smi_sum > 0 else float("nan"),
                                         len(rows), ours_sum, smi_sum))
        print("RESULT energy_stage_worst_error_%s %.1f %% target info" % (r["kind"], worst))
    if len(results) != 2:
        return
    ex, wk = results
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
