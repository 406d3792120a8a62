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
