import numpy as np


def assert_close(a, b, name, atol, rtol=0.0):
    """Shape, dtype kind, then values; the message carries the max difference."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f"{name}: shape {a.shape} != {b.shape}"
    assert a.dtype.kind == b.dtype.kind, f"{name}: dtype {a.dtype} != {b.dtype}"
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    bound = atol + rtol * np.abs(b.astype(np.float64))
    assert (diff <= bound).all(), f"{name}: max abs diff {diff.max():.3g} > atol {atol:g} (rtol {rtol:g})"
    return float(diff.max())


BLOCK_TORCH = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "onnx", "onnxscript", "export"):
            raise ModuleNotFoundError("No module named " + repr(name), name=name)
sys.meta_path.insert(0, Block())
"""


def run_without_torch(body: str, cwd) -> str:
    """Run `body` in a fresh interpreter where importing torch, onnx or export fails; it must
    print a line starting with OK. Returns stdout."""
    import subprocess
    import sys
    import textwrap
    script = BLOCK_TORCH + textwrap.dedent(body) + \
        "\nassert not any(m.split('.')[0] in ('torch', 'onnx') for m in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=cwd)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("OK"), out.stdout[-2000:]
    return out.stdout


def one_error_line(result, code=1) -> str:
    """The single `Error:` line of a CliRunner result that exited with `code`, with no traceback."""
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code == code and len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def export_step(ckpt, path, scheme: str = "float", calibration=None, isolate=None):
    """Write `ckpt`'s step graph to `path`: as exported (scheme "float"), or its split graph
    quantized by onnxruntime ("static"/"dynamic") as export_int8 does, calibrated on readings
    [T, B, F] (`calibration`); `isolate`: None to quantize the split graph as it is, or the
    keyword arguments of `export.quantize.isolate_matmul_inputs`. Returns `path`."""
    from pathlib import Path

    import onnx

    from edgeseq import contract
    from edgeseq.runtime.evaluate import run_streams
    from edgeseq.runtime.model import open_model
    from export.quantize import isolate_matmul_inputs, quantize
    from export.step import build_graph, stamp, strip
    path = Path(path)
    if scheme == "float":
        proto, _, _ = build_graph(ckpt)
        onnx.save(proto, str(path))
        return path
    proto, meta, _ = build_graph(ckpt, split=True)
    if isolate is not None:
        isolate_matmul_inputs(proto, **isolate)
    split = path.with_name(path.stem + "-split.onnx")
    onnx.save(proto, str(split))
    sess, _ = open_model(split)
    record = []
    run_streams(sess, meta, np.asarray(calibration).transpose(1, 0, 2), record=record)
    meta.quantization = quantize(split, path, scheme, record)
    q = onnx.load(str(path))
    q.ir_version = contract.IR_VERSION
    strip(q)
    stamp(q, meta)
    onnx.save(q, str(path))
    return path


# -- tiny seeded models and their readings ----------------------------------------------------

def readings(n, streams, seed=0, far=40, features=3):
    """Raw readings [n, streams, features] around the tiny models' means (0, 1, 2, ...), now and
    then `far` times further out (the int8 input saturates)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, streams, features)) * 3 + np.arange(features)
    x[rng.random((n, streams)) < 0.02] *= far
    return x.astype(np.float32)


def checkpoint_of(arch: str, cfg, model) -> dict:
    """The checkpoint of the untrained `model` built from `cfg`, normalising raw readings around
    means 0, 1, 2, ... with std 2 (as `readings` gives them)."""
    import edgeseq
    from edgeseq.models import config_dict
    F, C = cfg.n_features, cfg.n_classes
    mean, std = np.arange(F, dtype=np.float32), np.full(F, 2.0, np.float32)
    model.norm.set(mean, std)
    return {"edgeseq_version": edgeseq.__version__, "arch": arch, "config": config_dict(cfg),
            "state_dict": model.state_dict(), "normalization": {"mean": mean.tolist(), "std": std.tolist()},
            "labels": [f"c{i}" for i in range(C)], "features": [f"f{i}" for i in range(F)]}


def tiny_ssm_checkpoint(selective: bool, d_model: int, d_state: int, n_classes: int = 4, n_features: int = 3) -> dict:
    """An untrained, seeded two-layer SSM (the layer-to-layer path), weights livelier than the
    default init."""
    import torch

    from edgeseq.models import build_model, make_config
    cfg = make_config("ssm", n_features=n_features, n_classes=n_classes, d_model=d_model, d_state=d_state, layers=2,
                      selective=selective)
    torch.manual_seed(0)
    model = build_model("ssm", cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "log_" not in name:                    # decay rates as initialised: fast and slow states
                p.mul_(2.0)
    return checkpoint_of("ssm", cfg, model)


def tiny_models(root, checkpoint, calibration, isolate: dict):
    """`get(name, scheme="float", *args)`: the path of `checkpoint(name, *args)` written by
    `export_step` under `scheme`, calibrated on `calibration` with `isolate` for "static", into
    the folder `root` once for each set of arguments."""
    from pathlib import Path
    cache = {}

    def get(name, scheme="float", *args):
        key = (name, scheme, *args)
        if key not in cache:
            path = Path(root) / ("-".join(map(str, key)) + ".onnx")
            cache[key] = export_step(checkpoint(name, *args), path, scheme, calibration, isolate)
        return cache[key]
    return get


# -- the native step ------------------------------------------------------------------------------

def ort_loop(path, X, reset_at=None):
    """(logits [T, B, C], probs [T, B, C], final state) of a plain onnxruntime loop over X [T, B, F],
    state fed back; the last stream starts again at reading `reset_at`."""
    from edgeseq import contract
    from edgeseq.runtime.model import open_model
    sess, meta = open_model(path)
    state = [np.zeros((X.shape[1], s.shape[1]), np.float32) for s in meta.state]
    logits, probs = [], []
    for t, x in enumerate(X):
        if t == reset_at:
            for a in state:
                a[-1] = 0
        res = sess.run(None, {contract.READING: x, **{s.name: v for s, v in zip(meta.state, state)}})
        logits.append(res[0])
        probs.append(res[1])
        state = res[2:]
    return np.stack(logits), np.stack(probs), state


def step_and_ort_loop(path, X, reset_at=None):
    """A fresh native step of `path` (which the native backend must take) for as many streams as
    X [T, B, F] has, and `ort_loop(path, X, reset_at)`."""
    from edgeseq.runtime import native
    from edgeseq.runtime.model import open_model
    _, meta = open_model(path)
    assert native.supports(meta, path) is None
    return native.NativeStep(path, meta, X.shape[1]), ort_loop(path, X, reset_at)


def native_stream(step, X, field="logits", reset_at=None):
    """The native step's `field` after each reading of X [T, B, F], stacked [T, B, ...]; the last
    stream starts again at reading `reset_at`."""
    out = []
    for t, x in enumerate(X):
        if t == reset_at:
            step.reset(stream=step.streams - 1)
        step.x[:] = x
        assert step.run() == -1
        out.append(getattr(step, field).copy())
    return np.stack(out)


def assert_stream_computes_what_it_computes_alone(path, X, i=3):
    """Stream `i` of the native step of `path` over X [T, B, F] computes what it computes alone,
    to the bit."""
    from edgeseq.runtime import native
    from edgeseq.runtime.model import open_model
    _, meta = open_model(path)
    many = native_stream(native.NativeStep(path, meta, X.shape[1]), X)
    one = native_stream(native.NativeStep(path, meta, 1), X[:, i:i + 1])
    assert np.array_equal(many[:, i:i + 1], one)


def edited(src, dst, edit):
    """`dst`: the model `src` after `edit(proto)`."""
    import onnx
    m = onnx.load(str(src))
    edit(m)
    onnx.save(m, str(dst))
    return dst


def swap_op(op_from, op_to):
    """An edit for `edited`: the first `op_from` node computes `op_to` instead."""
    def edit(m):
        next(n for n in m.graph.node if n.op_type == op_from).op_type = op_to
    return edit


def assert_runs_on_onnxruntime_only(path, case):
    """The backend "auto" runs the model at `path` on onnxruntime; "native" refuses it by name."""
    import pytest

    from edgeseq.errors import UsageError
    from edgeseq.runtime import StreamSession
    s = StreamSession(path, streams=2)
    assert s.backend == "onnxruntime", case
    with pytest.raises(UsageError, match=f"backend 'native' cannot run '{path}'"):
        StreamSession(path, backend="native")
    return s


def in_threads(fn, n: int):
    """Run `fn` in `n` threads at once; return when every one has finished."""
    import threading
    threads = [threading.Thread(target=fn) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


# -- the emitted C step ---------------------------------------------------------------------------

def simulated(m, xq, reset_at=None):
    """Q12 logits and argmax [T, C + 1] of the integer simulator `m` over one stream of fixed-point
    readings `xq`, reset before reading `reset_at`."""
    state, want = m.init_state(1), []
    for i, x in enumerate(xq):
        if i == reset_at:
            state = m.init_state(1)
        logits, state = m.step(x[None], state)
        want.append(list(logits[0]) + [int(np.argmax(logits[0]))])
    return np.array(want)


def gcc_strict(exe, sources, *flags):
    """Compile C99 `sources` into `exe` on the host with every warning an error."""
    import subprocess
    cc = subprocess.run(["gcc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Wconversion", "-Werror", "-pedantic", *flags,
                         "-o", str(exe), *map(str, sources)], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr[-3000:]


def assert_c_never_says(folder, files, banned):
    """None of `banned` appears in the code of `files` in `folder`, comments aside."""
    import re
    from pathlib import Path
    code = "".join((Path(folder) / f).read_text() for f in files)
    code = re.sub(r"/\*.*?\*/", "", code, flags=re.S)                       # the code, not its comments
    for word in banned:
        assert word not in code, word


def host_stream(exe, xq) -> np.ndarray:
    """What a host program that reads one reading a line (its integers) and prints a line of
    integers for each gives for the fixed-point readings `xq`."""
    import subprocess
    run = subprocess.run([str(exe)], input="\n".join(" ".join(map(str, r)) for r in xq) + "\n",
                         capture_output=True, text=True, timeout=60)
    return np.array([[int(v) for v in line.split()] for line in run.stdout.splitlines()])


def skip_without_emulator():
    """Skip the test where Cortex-M emulation is missing: unicorn, pyelftools or arm-none-eabi-gcc."""
    import shutil

    import pytest
    pytest.importorskip("unicorn", reason="pip install unicorn (edgeseq[firmware])")
    pytest.importorskip("elftools", reason="pip install pyelftools (edgeseq[firmware])")
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc not found: apt-get install gcc-arm-none-eabi")


def measure_once(readings: int, counted: int):
    """`measure(path, core, opt, portable=False)`: `firmware_sim.measure.measure` over `readings`
    readings, counting `counted`, run once for each set of arguments (it raises if any logit
    differs from the simulator); skips the test where the emulator or the cross compiler is missing."""
    cache = {}

    def measure(path, core, opt, portable=False):
        skip_without_emulator()
        from firmware_sim.measure import measure
        key = str(path), core, opt, portable
        if key not in cache:
            cache[key] = measure(path, core, opt, readings=readings, counted=counted, portable=portable)
        return cache[key]
    return measure


def assert_lean_step(r, core, portable, mac_under=None, mac_at_most=None):
    """A measured step (`measure_once`) took the SMLAD path exactly on the M4 unless `portable`,
    called no 64-bit helper, used a small stack and no .data or .bss, and ran fewer instructions
    per MAC than `mac_under` (or at most `mac_at_most`): (SMLAD path, portable path)."""
    assert r["dsp_path"] == (core == "cortex-m4" and not portable)
    assert r["helper_instructions_per_step"] == {}, r["helper_instructions_per_step"]     # no 64-bit helpers
    assert 0 < r["stack_bytes"] <= 512 and r["sections"]["data"] == 0 and r["sections"]["bss"] == 0
    path = 0 if r["dsp_path"] else 1
    assert ("smlad" in dict(r["mix_top"])) == r["dsp_path"], r["mix_top"]
    if mac_under is not None:
        assert r["instructions_per_mac"] < mac_under[path], r["instructions_per_mac"]
    else:
        assert r["instructions_per_mac"] <= mac_at_most[path], r["instructions_per_mac"]


def _nats_server_present() -> tuple:
    from edgeseq.gateway.broker import find_server
    try:
        import nats  # noqa: F401
        have_py = True
    except ModuleNotFoundError:
        have_py = False
    return find_server() is not None, have_py


HAVE_NATS_SERVER, HAVE_NATS_PY = _nats_server_present()
# Tests against a real nats-server (JetStream, MQTT) started per test on loopback ports.
needs_server = __import__("pytest").mark.skipif(
    not (HAVE_NATS_SERVER and HAVE_NATS_PY),
    reason="nats-server not installed (apt-get install nats-server; `make test` installs it as root)"
    if not HAVE_NATS_SERVER else "nats-py not installed (pip install nats-py)")


def private(path) -> bool:
    """Whether the file at `path` is readable and writable by its owner only."""
    import os
    import stat
    return stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0


def task_models(data, task: str, root, epochs: int):
    """arch -> (checkpoint, float .onnx path) of `task` ('anomaly' or 'regress') models trained
    `epochs` epochs on `data` (small recurrent nets: hidden 16), each made once and exported
    into `root`."""
    import torch

    from edgeseq.train.forecast import train_task
    from export.step import export_model
    cache = {}

    def get(arch):
        if arch not in cache:
            torch.manual_seed(0)
            settings = {"hidden": 16} if arch in ("rnn", "gru", "lstm") else {}
            ck = train_task(arch, data, task, epochs=epochs, seed=0, settings=settings, progress=False)
            path = root / f"{arch}.onnx"
            export_model(ck, path)
            cache[arch] = (ck, path)
        return cache[arch]
    return get


def module_from_file(name: str, path):
    """The Python file at `path` (a script or an example, not a package module) imported as `name`."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
