"""vidline_worker: write a vidline `worker` in Python with the standard library only.

A worker is a long-lived program that vidline starts once per pool, decoder or encoder
(backend type ``worker``). It loads its model once, then answers stage requests while the
model stays in memory, so only the first job pays the load ("cold"); the others are "warm".
The protocol (version 2; version 1 too, with a node that speaks only that) is in
docs/worker.md; this module speaks it for you.

A worker is a class with a ``load`` method and one method per stage it serves::

    import vidline_worker as vw

    class MyWorker(vw.Worker):
        stages = ["sample"]              # what it serves: "encode", "sample", "decode"

        def load(self, stage):
            # Called once per stage, before its first request (that request is cold), or
            # when the node starts if its backend has warm_start (then no request is cold).
            self.model = load_my_model()
            # Optional: which weights these are, reported with every result.
            self.model_identity = vw.file_identity("/opt/line/weights.safetensors")

        def sample(self, req, progress):
            # req.job: run_id, index, seed, width, height, seconds, frames, fps, prompt,
            #          workflow, model, negative_prompt, params (dict: the shot's values)
            # req.inputs: prompt_file, conditioning, reference, and one path per named
            #             input of the shot (first_frame, last_frame, ...; "" when none)
            # req.output: where to write the latent (write it whole before returning)
            steps = 30
            for i in range(steps):
                ...                      # one denoising step
                progress(i + 1, steps)   # raises vw.Cancelled when vidline cancels
            write_latent(req.output)

    if __name__ == "__main__":
        vw.run(MyWorker())

Point a backend at it::

    "backends": {"mine": {"type": "worker", "options": {
        "argv": ["/usr/bin/python3", "/opt/line/my_worker.py"],
        "env": {"PYTHONPATH": "/path/to/vidline/backends/worker/python"}}}}

Which model made each output: the library reports, with every result, the model key it
loaded for (the ``model`` of the load or of the first request's job) and
``self.model_identity`` as ``load`` left it ("" when not set). Make the identity something
that changes when the weights change: ``vw.file_identity(path)`` ("sha256:" and the
SHA-256 of a weights file) or ``vw.state_dict_identity(module.state_dict())`` (of every
tensor's name, dtype, shape and bytes). A ``load(self, stage, model)`` that takes a third
argument is told the model key too, and is called again when a request names another one.

Checkpoints: a sampler that saves its state now and then loses only the steps since the
last save when its node, worker or link fails, or when a job of a higher priority makes it
stop (docs/worker.md, "Checkpoints")::

        def sample(self, req, progress):
            ck = req.checkpoints                           # a vw.Checkpoints
            start, x = ck.resume(torch.load, default=None)  # (0, default) from the start
            if x is None:
                x = initial_noise()
            for i in range(start, steps):
                x = denoise(x, i)
                progress(i + 1, steps)
                ck.step(i + 1, steps, lambda path: torch.save(x, path))
            write_latent(req.output)

``ck.step`` saves when one is due (every ``checkpoint_interval_s`` of the node's knobs, or
every ``ck.every_steps`` steps when set) and always when vidline asks the stage to make
way: it then raises ``vw.Preempted`` after saving (the result says "preempted" and the job
goes on from that step later). The state must be everything the next steps need (for a
flow or Euler sampler the latent; a multistep sampler adds its history): a resumed job's
latent must equal the uninterrupted one's.

Outcomes: return normally -> ``ok`` (vidline checks, hashes and commits ``req.output``);
raise ``vw.Capacity`` (or let torch raise its out-of-memory error) -> ``capacity``;
``vw.Transient`` -> ``transient`` (retried); ``vw.Fatal`` or any other exception ->
``fatal``. A method may also call ``progress(i, n)`` to show "step i of n" in
``vidline status`` / ``vidline wait``.

What the library does for you:
- reads requests from descriptor 3 (``$VIDLINE_WORKER_FD``) on a thread, so a cancel is
  seen while a stage runs: the next ``progress()`` call raises ``Cancelled`` (a stage
  that never calls ``progress`` is killed after the backend's ``cancel_grace_s`` and its
  worker restarted);
- answers the node's health pings, also while a stage runs;
- exits at once when the node goes away (end of file on descriptor 3), so a worker never
  outlives its node and holds no GPU memory for a dead line;
- says whether each request was cold (its stage's ``load`` ran for it) or warm;
- answers the node's load request (sent at start when the backend has ``warm_start``) by
  calling ``load`` then, so the first request is already warm;
- keeps stdout for your own output (vidline writes it to the worker's log).

The environment also holds ``CUDA_VISIBLE_DEVICES`` (or the AMD/Intel equivalent) for
the owner's GPUs, ``VIDLINE_OWNER``, ``VIDLINE_STAGES`` (the stage this owner asks for)
and ``VIDLINE_DEVICES``.
"""

import hashlib
import inspect
import json
import os
import socket
import sys
import threading
import time
import traceback

PROTOCOL_VERSION = 2
# The node's versions this module speaks (VIDLINE_WORKER_PROTOCOL says which it is).
SUPPORTED_VERSIONS = (1, 2)
__all__ = ["Worker", "Request", "run", "Cancelled", "Capacity", "Transient", "Fatal",
           "Preempted", "Checkpoints", "PROTOCOL_VERSION", "file_identity",
           "state_dict_identity"]


def file_identity(path, chunk=1 << 20):
    """The identity of a weights file: "sha256:" and the SHA-256 of its bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def state_dict_identity(state_dict):
    """The identity of weights in memory (a torch ``state_dict()``, or any mapping of names
    to tensors): "sha256:" and the SHA-256 of each tensor's name, dtype, shape and bytes,
    in name order. It changes when any weight does."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name]
        h.update(name.encode() + b"\0")
        if hasattr(t, "detach"):  # a torch tensor: its raw bytes, whatever its dtype
            t = t.detach().cpu().contiguous()
            h.update(str(t.dtype).encode() + b"\0" + str(tuple(t.shape)).encode() + b"\0")
            h.update(t.reshape(-1).view(__import__("torch").uint8).numpy().tobytes())
        else:
            h.update(repr(t).encode())
        h.update(b"\0")
    return "sha256:" + h.hexdigest()


class Cancelled(Exception):
    """Raised by progress() once vidline has cancelled the request."""


class Preempted(Exception):
    """Raised by Checkpoints.step() after it saved the state vidline asked for: the stage
    ends, its result says "preempted", and the job goes on from that checkpoint later."""


class Capacity(Exception):
    """The GPU ran out of memory: this pool kind cannot take this job."""


class Transient(Exception):
    """Trying again may help (a busy file system, a flaky download)."""


class Fatal(Exception):
    """Trying again cannot help (bad input, a broken install)."""


_CAPACITY_TEXTS = ("out of memory", "OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED",
                   "hipErrorOutOfMemory")


class Request:
    """One stage request: ``id``, ``stage``, ``job`` (dict), ``inputs`` (dict of paths),
    ``output`` (path), ``work_dir``, ``timeout_s``, ``cold`` (its stage's load ran for it)."""

    def __init__(self, msg):
        self.id = msg["id"]
        self.stage = msg["stage"]
        self.job = msg.get("job", {})
        self.inputs = msg.get("inputs", {})
        self.output = msg["output"]
        self.work_dir = msg.get("work_dir", "")
        self.timeout_s = msg.get("timeout_s", 0)
        self.cold = False  # set by run(): its stage's load ran for this request
        # Checkpoints: where to save them, how often, where to go on from (sample only).
        ck = msg.get("checkpoint") or {}
        self.checkpoint_dir = ck.get("dir", "")
        self.checkpoint_interval_s = float(ck.get("interval_s", 0) or 0)
        resume = msg.get("resume") or {}
        self.resume_step = int(resume.get("step", 0) or 0)
        self.resume_file = resume.get("file", "")
        self.resume_sha256 = resume.get("sha256", "")
        self.checkpoints = Checkpoints(self)

    def __repr__(self):
        return "Request(%s %s)" % (self.stage, self.id)


class Checkpoints:
    """A sample request's checkpoints: where it goes on from (``resume``) and when to save
    (``step``). Saves every ``every_s`` seconds (the request's checkpoint_interval_s unless
    set) or every ``every_steps`` steps (when set), and whenever vidline asks the stage to
    make way. Outside vidline (no checkpoint dir) it saves nothing and resumes nothing."""

    def __init__(self, req, send=None, preempted=None, clock=time.monotonic):
        self._req = req
        self._send = send            # the channel's send (set by run())
        self._preempted = preempted  # () -> bool: vidline asked this request to make way
        self._clock = clock
        self.every_s = req.checkpoint_interval_s
        self.every_steps = None
        self._last_at = clock()
        self._last_step = req.resume_step
        self.saved = []              # the steps saved, in order

    def resume(self, load, default=None):
        """(step, state): the checkpoint to go on from, read with ``load(path)`` (e.g.
        torch.load), or (0, default) when the request starts from the beginning. The file
        was verified against its SHA-256 by the node; it is checked again here."""
        req = self._req
        if req.resume_step <= 0 or not req.resume_file:
            return 0, default
        if req.resume_sha256:
            h = hashlib.sha256()
            with open(req.resume_file, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            if h.hexdigest() != req.resume_sha256:
                raise Transient("checkpoint %s does not hash to %s"
                                % (req.resume_file, req.resume_sha256))
        return req.resume_step, load(req.resume_file)

    @property
    def can_save(self):
        """Whether this request takes checkpoints (run by vidline with a checkpoint dir)."""
        return bool(self._req.checkpoint_dir) and self._send is not None

    def preempted(self):
        """Whether vidline asked this request to make way (save now, then stop)."""
        return self._preempted is not None and self._preempted()

    def due(self, step):
        """Whether a checkpoint after `step` is due now (interval, step count or preempt)."""
        if self._preempted is not None and self._preempted():
            return True
        if self.every_steps and step - self._last_step >= self.every_steps:
            return True
        return bool(self.every_s) and self._clock() - self._last_at >= self.every_s

    def step(self, step, steps, save):
        """Call after each step: saves the state after `step` of `steps` with ``save(path)``
        when one is due (never after the last step: the latent follows). Raises Preempted
        after saving when vidline asked the stage to make way."""
        if not self._req.checkpoint_dir or self._send is None or step >= steps:
            return False
        if not self.due(step):
            return False
        self.save(step, steps, save)
        if self._preempted is not None and self._preempted():
            raise Preempted("made way at step %d of %d" % (step, steps))
        return True

    def save(self, step, steps, save):
        """Saves the state after `step` now: written whole to a temporary file, fsynced,
        renamed, and handed to the node (which moves it into its latent store)."""
        d = self._req.checkpoint_dir
        os.makedirs(d, exist_ok=True)
        final = os.path.join(d, "%d.ckpt" % step)
        tmp = final + ".tmp"
        save(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        self._send(type="checkpoint", id=self._req.id, step=int(step), steps=int(steps),
                   file=final)
        self._last_at = self._clock()
        self._last_step = step
        self.saved.append(step)


class Worker:
    """Subclass it: set ``stages``, define ``load(stage)`` and a method per stage
    (``encode``, ``sample``, ``decode``), each ``(req, progress)``."""

    stages = ["sample"]

    # Set by ``load``: an identity of the weights loaded (file_identity, state_dict_identity);
    # a dict {stage: identity} for a worker that loads a model per stage.
    model_identity = ""

    def load(self, stage):
        """Loads what `stage` needs; called once, before its first request (or at the
        node's load request). It may take a third argument, the model key."""


class _Channel:
    def __init__(self, fd, version=PROTOCOL_VERSION):
        self.version = version
        self._sock = socket.socket(fileno=fd)
        self._out = threading.Lock()
        self._buf = b""

    def send(self, **msg):
        msg["v"] = self.version
        data = (json.dumps(msg) + "\n").encode()
        with self._out:
            self._sock.sendall(data)

    def lines(self):
        while True:
            while b"\n" not in self._buf:
                chunk = self._sock.recv(65536)
                if not chunk:
                    return
                self._buf += chunk
            line, self._buf = self._buf.split(b"\n", 1)
            if line.strip():
                yield line


def _outcome_of(exc):
    if isinstance(exc, Capacity):
        return "capacity"
    if isinstance(exc, Transient):
        return "transient"
    if isinstance(exc, Fatal):
        return "fatal"
    text = type(exc).__name__ + ": " + str(exc)
    if any(t in text for t in _CAPACITY_TEXTS):
        return "capacity"
    return "fatal"


def run(worker, fd=None):
    """Serves `worker` until the node closes the channel or says shutdown. Never returns
    normally: exits the process (status 0 on a shutdown or the node's end)."""
    fd = int(os.environ.get("VIDLINE_WORKER_FD", "3")) if fd is None else fd
    version = os.environ.get("VIDLINE_WORKER_PROTOCOL", str(PROTOCOL_VERSION))
    if version not in [str(v) for v in SUPPORTED_VERSIONS]:
        sys.stderr.write("vidline_worker speaks protocol %s, the node %s\n"
                         % (" and ".join(str(v) for v in SUPPORTED_VERSIONS), version))
        sys.exit(2)
    ch = _Channel(fd, int(version))
    for stage in worker.stages:
        if not callable(getattr(worker, stage, None)):
            sys.stderr.write("worker serves %s but has no method %s\n" % (stage, stage))
            sys.exit(2)
    requests = []
    cancelled = set()
    preempted = set()
    cv = threading.Condition()

    def reader():
        try:
            for line in ch.lines():
                try:
                    msg = json.loads(line)
                except ValueError:
                    sys.stderr.write("vidline_worker: not JSON from the node: %r\n" % line[:200])
                    continue
                if msg.get("v") != ch.version:
                    sys.stderr.write("vidline_worker: protocol version %r\n" % msg.get("v"))
                    os._exit(2)
                kind = msg.get("type")
                if kind == "ping":
                    ch.send(type="pong", seq=msg.get("seq", 0))
                elif kind == "cancel":
                    with cv:
                        cancelled.add(msg.get("id"))
                        cv.notify_all()
                elif kind == "preempt":
                    with cv:
                        preempted.add(msg.get("id"))
                elif kind in ("request", "load"):
                    with cv:
                        requests.append(msg)
                        cv.notify_all()
                elif kind == "shutdown":
                    break
        except OSError:
            pass
        # The node is gone or done with us: never outlive it, never hold its GPU.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    threading.Thread(target=reader, name="vidline-reader", daemon=True).start()
    ch.send(type="hello", stages=list(worker.stages), pid=os.getpid(), load=True)
    loaded = {}  # stage -> the model key it was loaded for ("" = not said)
    takes_model = _takes_model(worker.load)

    def needs_load(stage, model):
        return stage not in loaded or bool(takes_model and model and loaded[stage] != model)

    def load(stage, model):
        if takes_model:
            worker.load(stage, model)
        else:
            worker.load(stage)
        loaded[stage] = model or loaded.get(stage, "")

    def model_fields(stage):
        ident = getattr(worker, "model_identity", "") or ""
        if isinstance(ident, dict):  # one per stage
            ident = ident.get(stage, "") or ""
        return {"model": loaded.get(stage, ""), "model_identity": str(ident)}

    while True:
        with cv:
            while not requests:
                cv.wait()
            msg = requests.pop(0)
        req_id = msg.get("id", "")
        if msg.get("type") == "load":
            stage = msg.get("stage") or (worker.stages[0] if worker.stages else "")
            start = time.monotonic()
            try:
                if stage not in worker.stages:
                    raise Fatal("this worker serves %s, not %s" % (", ".join(worker.stages), stage))
                if needs_load(stage, msg.get("model", "")):
                    load(stage, msg.get("model", ""))
                ch.send(type="loaded", id=req_id, outcome="ok",
                        load_s=time.monotonic() - start, **model_fields(stage))
            except BaseException as e:  # noqa: B902 - a failed load is an answer too
                if isinstance(e, (SystemExit, KeyboardInterrupt)):
                    raise
                sys.stderr.write("load %s (%s) failed: %s\n" % (req_id, stage,
                                 traceback.format_exc()))
                ch.send(type="loaded", id=req_id, outcome=_outcome_of(e),
                        error="%s: %s" % (type(e).__name__, e))
            continue
        try:
            req = Request(msg)
        except KeyError as e:
            ch.send(type="result", id=req_id, outcome="fatal", cold=False,
                    error="malformed request: no %s" % e)
            continue
        cold = False
        start = time.monotonic()

        def was_preempted(_id=req_id):
            with cv:
                return _id in preempted

        req.checkpoints = Checkpoints(req, ch.send, was_preempted)

        def progress(step, steps, _id=req_id):
            with cv:
                if _id in cancelled:
                    raise Cancelled()
            ch.send(type="progress", id=_id, step=int(step), steps=int(steps))

        try:
            if req.stage not in worker.stages:
                raise Fatal("this worker serves %s, not %s" % (", ".join(worker.stages), req.stage))
            if needs_load(req.stage, req.job.get("model", "")):
                cold = True
                load(req.stage, req.job.get("model", ""))
            req.cold = cold
            getattr(worker, req.stage)(req, progress)
            ch.send(type="result", id=req_id, outcome="ok", cold=cold,
                    elapsed_s=time.monotonic() - start, **model_fields(req.stage))
        except Cancelled:
            ch.send(type="result", id=req_id, outcome="transient", cold=cold, error="cancelled",
                    **model_fields(req.stage))
        except Preempted as e:
            ch.send(type="result", id=req_id, outcome="preempted", cold=cold, error=str(e),
                    **model_fields(req.stage))
        except BaseException as e:  # noqa: B902 - every failure becomes a result
            if isinstance(e, (SystemExit, KeyboardInterrupt)):
                raise
            outcome = _outcome_of(e)
            sys.stderr.write("request %s (%s) failed: %s\n" % (req_id, req.stage,
                             traceback.format_exc()))
            if outcome == "capacity":
                _free_gpu_memory()
            ch.send(type="result", id=req_id, outcome=outcome, cold=cold,
                    error="%s: %s" % (type(e).__name__, e))
        finally:
            with cv:
                cancelled.discard(req_id)
                preempted.discard(req_id)


def _takes_model(load):
    """Whether a load hook takes the model key: ``load(self, stage, model)``."""
    try:
        params = inspect.signature(load).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in params)


def _free_gpu_memory():
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - best effort after an out-of-memory error
        pass
