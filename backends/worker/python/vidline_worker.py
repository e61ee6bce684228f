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
           "PROTOCOL_VERSION", "file_identity", "state_dict_identity"]


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

    def __repr__(self):
        return "Request(%s %s)" % (self.stage, self.id)


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
