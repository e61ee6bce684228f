#!/usr/bin/python3
"""An example line in PyTorch for vidline: a text encoder, a sampler and a decoder, runnable
two ways with the same code, so the two backends can be compared side by side:

  worker mode (backend type "worker"): load the models once, serve requests:
      torch_line.py worker
  exec mode (backend type "exec"): one stage per process, loading its model every time:
      torch_line.py exec sample output={output} conditioning={conditioning} seed={seed} \
          width={width} height={height} frames={frames} fps={fps}
      torch_line.py exec decode output={output} latent={latent} width={width} \
          height={height} frames={frames} fps={fps}
      torch_line.py exec encode output={output} prompt_file={prompt_file}

Each result names the model loaded and its identity: the SHA-256 of the random weights'
bytes (vidline_worker.state_dict_identity), which changes with the seed or the shapes.

The models are small random networks with fixed seeds (deterministic): the sampler runs
Euler steps of an MLP over latent patches (16 channels, 1/8 the size, 1 + frames/4 latent
frames), the decoder maps a latent to RGB frames and has ffmpeg mux them into an MP4
(H.264; OpenCV's MPEG-4 where there is no ffmpeg). It uses CUDA when torch sees a GPU, else the CPU.

Knobs (environment): VIDLINE_EXAMPLE_HIDDEN (MLP width, 64), VIDLINE_EXAMPLE_DEPTH (4),
VIDLINE_EXAMPLE_STEPS (6), VIDLINE_EXAMPLE_CHECKPOINT_STEPS (a checkpoint every this many
steps besides the node's checkpoint_interval_s; unset = by time only),
VIDLINE_EXAMPLE_STEP_SLEEP_S (0: seconds to sleep per step,
for tests that need a stage to last), VIDLINE_EXAMPLE_TRACE (a file: one JSON line per
stage with the wall-clock start and end of its GPU work and the SHA-256 of each named input
file it was given, for bench/worker_vs_exec.py and tests, and one per model load, phase
"load"),
FFMPEG (ffmpeg).
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import vidline_worker as vw  # noqa: E402

import torch  # noqa: E402

LATENT_CHANNELS = 16
TEXT_DIM = 64


def env_int(name, default):
    return int(os.environ.get(name, str(default)))


def device():
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


FIXED_INPUTS = ("conditioning", "latent", "prompt_file")


def named_inputs(req):
    """The SHA-256 of each named input file the request carries (a shot's first_frame, a
    frame taken from another shot's video, ...): what the trace says this stage was given."""
    out = {}
    for name, path in req.inputs.items():
        if name in FIXED_INPUTS or not path:
            continue
        with open(path, "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def trace(stage, start, end, cold, seed=None, phase="end", inputs=None):
    """One line per stage (phase "end", with the wall-clock span of its GPU work and the
    digests of its named inputs) and one when a sample's steps begin (phase "begin"), for
    tests and the bench."""
    path = os.environ.get("VIDLINE_EXAMPLE_TRACE")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"stage": stage, "phase": phase, "start": start, "end": end,
                                "cold": cold, "seed": seed, "pid": os.getpid(),
                                "owner": os.environ.get("VIDLINE_OWNER", ""),
                                "inputs": inputs or {}}) + "\n")


def latent_shape(job):
    frames = int(job["frames"])
    return (LATENT_CHANNELS, 1 + (frames - 1) // 4, max(1, int(job["height"]) // 8),
            max(1, int(job["width"]) // 8))


class Line(vw.Worker):
    stages = ["encode", "sample", "decode"]

    def __init__(self):
        self.model_identity = {}  # per stage: what its results report
        self.cold = False

    def load(self, stage):
        start = time.time()
        torch.manual_seed(1234)
        dev = device()
        if stage == "encode":
            self.text = torch.nn.Embedding(256, TEXT_DIM).to(dev).eval()
            module = self.text
        elif stage == "sample":
            hidden, depth = env_int("VIDLINE_EXAMPLE_HIDDEN", 64), env_int("VIDLINE_EXAMPLE_DEPTH", 4)
            layers = [torch.nn.Linear(LATENT_CHANNELS * 4 + TEXT_DIM, hidden), torch.nn.GELU()]
            for _ in range(depth - 1):
                layers += [torch.nn.Linear(hidden, hidden), torch.nn.GELU()]
            layers.append(torch.nn.Linear(hidden, LATENT_CHANNELS * 4))
            self.dit = torch.nn.Sequential(*layers).to(dev).eval()
            module = self.dit
        elif stage == "decode":
            self.vae = torch.nn.Conv3d(LATENT_CHANNELS, 3, kernel_size=1).to(dev).eval()
            module = self.vae
        sync()
        # Random weights from a fixed seed: their identity is the digest of their bytes, so
        # it changes with the seed or the shapes (VIDLINE_EXAMPLE_HIDDEN, _DEPTH).
        self.model_identity[stage] = vw.state_dict_identity(module.state_dict())
        trace(stage, start, time.time(), True, phase="load")

    @torch.no_grad()
    def encode(self, req, progress):
        start = time.time()
        with open(req.inputs["prompt_file"], "rb") as f:
            ids = torch.tensor(list(f.read()[:512]) or [0], device=device())
        cond = self.text(ids).mean(0)
        sync()
        trace("encode", start, time.time(), self.cold)
        torch.save(cond.cpu(), req.output)

    @torch.no_grad()
    def sample(self, req, progress):
        dev = device()
        c, t, h, w = latent_shape(req.job)
        cond_path = req.inputs.get("conditioning", "")
        cond = torch.load(cond_path).to(dev) if cond_path.endswith(".pt") or _is_torch_file(cond_path) \
            else torch.zeros(TEXT_DIM, device=dev)
        steps = env_int("VIDLINE_EXAMPLE_STEPS", 6)
        pause = float(os.environ.get("VIDLINE_EXAMPLE_STEP_SLEEP_S", "0"))
        # Euler steps need only the latent to go on: that is the checkpoint (bitwise the
        # same tensor, so a resumed sample ends as the uninterrupted one does).
        ck = req.checkpoints
        if os.environ.get("VIDLINE_EXAMPLE_CHECKPOINT_STEPS"):
            ck.every_steps = env_int("VIDLINE_EXAMPLE_CHECKPOINT_STEPS", 0) or None
        first, x = ck.resume(lambda path: torch.load(path).to(dev))
        if x is None:
            gen = torch.Generator(device="cpu").manual_seed(int(req.job["seed"]) % (2 ** 63))
            x = torch.randn((c, t, h, w), generator=gen).to(dev)
        sync()
        start = time.time()
        trace("sample", start, start, self.cold, req.job.get("seed"), phase="begin")
        for i in range(first, steps):
            x = x - (1.0 / steps) * self._velocity(x, cond)
            if pause > 0:
                time.sleep(pause)
            progress(i + 1, steps)
            ck.step(i + 1, steps, lambda path: torch.save(x.cpu(), path))
        sync()
        trace("sample", start, time.time(), self.cold, req.job.get("seed"),
              inputs=named_inputs(req) if os.environ.get("VIDLINE_EXAMPLE_TRACE") else None)
        torch.save(x.cpu(), req.output)

    def _velocity(self, x, cond):
        c, t, h, w = x.shape
        hh, ww = h - h % 2, w - w % 2
        v = torch.zeros_like(x)
        if hh == 0 or ww == 0:
            return v
        # 2x2 patches as tokens, each with the text conditioning appended.
        p = x[:, :, :hh, :ww].reshape(c, t, hh // 2, 2, ww // 2, 2).permute(1, 2, 4, 0, 3, 5)
        tokens = p.reshape(-1, c * 4)
        tokens = torch.cat([tokens, cond.expand(tokens.shape[0], -1)], dim=1)
        out = self.dit(tokens).reshape(t, hh // 2, ww // 2, c, 2, 2).permute(3, 0, 1, 4, 2, 5)
        v[:, :, :hh, :ww] = out.reshape(c, t, hh, ww)
        return v

    @torch.no_grad()
    def decode(self, req, progress):
        dev = device()
        job = req.job
        width, height, frames, fps = int(job["width"]), int(job["height"]), int(job["frames"]), int(job["fps"])
        latent = torch.load(req.inputs["latent"]).to(dev)
        start = time.time()
        rgb = torch.sigmoid(self.vae(latent.unsqueeze(0)))[0]          # 3, t, h, w
        rgb = torch.nn.functional.interpolate(rgb.unsqueeze(0), size=(frames, height, width),
                                              mode="trilinear", align_corners=False)[0]
        pixels = (rgb.clamp(0, 1) * 255).to(torch.uint8).permute(1, 2, 3, 0).contiguous().cpu()
        sync()
        trace("decode", start, time.time(), self.cold, req.job.get("seed"))
        ffmpeg = os.environ.get("FFMPEG", "ffmpeg")
        if shutil.which(ffmpeg) is None:
            return _write_with_opencv(pixels, fps, req.output)
        cmd = [ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-f", "rawvideo",
               "-pix_fmt", "rgb24", "-s", "%dx%d" % (width, height), "-r", str(fps), "-i", "-",
               "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", "-f", "mp4",
               req.output]
        proc = subprocess.run(cmd, input=pixels.numpy().tobytes(), stderr=subprocess.PIPE)
        if proc.returncode != 0:
            raise vw.Fatal("ffmpeg exit %d: %s" % (proc.returncode, proc.stderr.decode(errors="replace")[-400:]))


def _write_with_opencv(pixels, fps, path):
    """Where there is no ffmpeg: an MP4 (MPEG-4 part 2) through OpenCV, if it is installed."""
    try:
        import cv2
    except ImportError:
        raise vw.Fatal("neither ffmpeg nor OpenCV (cv2) is installed: cannot write an MP4")
    frames, height, width, _ = pixels.shape
    tmp = path + ".mp4"  # OpenCV picks the container from the extension
    out = cv2.VideoWriter(tmp, cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
    if not out.isOpened():
        raise vw.Fatal("OpenCV cannot write %s" % tmp)
    arr = pixels.numpy()
    for i in range(frames):
        out.write(cv2.cvtColor(arr[i], cv2.COLOR_RGB2BGR))
    out.release()
    os.replace(tmp, path)


def _is_torch_file(path):
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"PK"  # torch.save's zip format
    except OSError:
        return False


def main(argv):
    if len(argv) >= 2 and argv[1] == "worker":
        line = Line()
        # For the trace: whether the library loaded the stage's model for this request.
        for stage in Line.stages:
            method = getattr(line, stage)

            def wrapped(req, progress, _m=method):
                line.cold = req.cold
                return _m(req, progress)
            setattr(line, stage, wrapped)
        vw.run(line)
    if len(argv) >= 3 and argv[1] == "exec":
        stage = argv[2]
        fields = dict(a.split("=", 1) for a in argv[3:])
        job = {k: int(fields[k]) for k in ("width", "height", "frames", "fps", "seed") if k in fields}
        req = vw.Request({"id": "exec", "stage": stage, "job": job, "output": fields["output"],
                          "inputs": {k: fields[k] for k in ("conditioning", "latent", "prompt_file")
                                     if k in fields}})
        line = Line()
        line.cold = True
        line.load(stage)
        getattr(line, stage)(req, lambda i, n: None)
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
