"""torch -> ONNX: one step graph per streaming model, one window graph per bidirectional model.

`export_model(ckpt, out)` writes a single file (no external data) that speaks the contract in
`edgeseq.contract`, with IR version 9 and opset 18 so that onnxruntime 1.16 and newer load it.
The file is written next to its destination under a temporary name, validated against torch
and only then renamed over the destination: a failed export leaves nothing behind and never
replaces a good model.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import tempfile
import warnings
from pathlib import Path

import onnx
import torch
from torch import nn

import edgeseq
from edgeseq import contract
from edgeseq.data import trained_on
from edgeseq.errors import UsageError
from edgeseq.runtime.statefile import TEMP_SUFFIX, remove_leftovers, temp_prefix
from edgeseq.train import model_from_checkpoint
from export.validate import validate_stream, validate_window


class FusedRecurrentStep(nn.Module):
    """The recurrent step as exported: per layer ONE MatMul on [input, h] with weights fused at
    export time, then the gate arithmetic. Same math as `model.step` (validation checks it),
    fewer graph nodes: a GRU layer is 11 nodes instead of 18, and per-node dispatch is most of
    what a step this small costs in onnxruntime.

    With `split=True` the cell is x @ W_ih^T + h @ W_hh^T (+ biases) instead: two MatMuls, so
    that int8 quantization gives the reading and the state their own activation scales (one
    scale over [x, h] spends most of its 256 steps on the reading's range and leaves the state
    coarse), and the GRU's weights carry no zero blocks.

    Fused weight layouts, W is (in + H, gates) and the product is [x, h] @ W + b:
      RNN  [W_ih; W_hh]                             -> tanh
      LSTM [W_ih; W_hh], gates i f g o               -> sigmoid(i, f), tanh(g), sigmoid(o)
      GRU  [[W_ir W_iz W_in 0], [W_hr W_hz 0 W_hn]]   -> columns rz | x-part of n | h-part of n
    """

    def __init__(self, model, split: bool = False):
        super().__init__()
        self.model = model
        self.split = split
        self.kind = {nn.RNN: "rnn", nn.GRU: "gru", nn.LSTM: "lstm"}[type(model.rnn)]
        c = model.config
        self.H, self.layers, self.n_state = c.hidden, c.layers, model.n_state
        H = c.hidden
        with torch.no_grad():
            for layer in range(c.layers):
                w_ih = getattr(model.rnn, f"weight_ih_l{layer}")     # (G*H, in)
                w_hh = getattr(model.rnn, f"weight_hh_l{layer}")     # (G*H, H)
                b_ih = getattr(model.rnn, f"bias_ih_l{layer}")
                b_hh = getattr(model.rnn, f"bias_hh_l{layer}")
                n_in = w_ih.shape[1]
                if split:                                            # x @ wx + h @ wh + b
                    self.register_buffer(f"wx{layer}", w_ih.t().contiguous())
                    self.register_buffer(f"wh{layer}", w_hh.t().contiguous())
                    if self.kind == "gru":                           # n needs the h-part on its own
                        b = torch.cat([b_ih[:2 * H] + b_hh[:2 * H], b_ih[2 * H:]])
                        self.register_buffer(f"bh{layer}", torch.cat([torch.zeros(2 * H), b_hh[2 * H:]]))
                    else:
                        b = b_ih + b_hh
                    self.register_buffer(f"b{layer}", b.contiguous())
                    continue
                if self.kind == "gru":
                    W = torch.zeros(n_in + H, 4 * H)
                    W[:n_in, :3 * H] = w_ih.t()
                    W[n_in:, :2 * H] = w_hh[:2 * H].t()
                    W[n_in:, 3 * H:] = w_hh[2 * H:].t()
                    b = torch.cat([b_ih[:2 * H] + b_hh[:2 * H], b_ih[2 * H:], b_hh[2 * H:]])
                else:
                    W = torch.cat([w_ih, w_hh], dim=1).t()
                    b = b_ih + b_hh
                self.register_buffer(f"w{layer}", W.contiguous())
                self.register_buffer(f"b{layer}", b.contiguous())

    def forward(self, reading, *state):
        H = self.H
        (inp, state, gain), new = self.model.norm.step_from(reading, state), []
        for layer in range(self.layers):
            h = state[layer * self.n_state]
            if self.split and self.kind == "gru":
                gx = inp @ getattr(self, f"wx{layer}") + getattr(self, f"b{layer}")     # (B, 3H)
                gh = h @ getattr(self, f"wh{layer}") + getattr(self, f"bh{layer}")      # (B, 3H)
                r, z = torch.sigmoid(gx[:, :2 * H] + gh[:, :2 * H]).split([H, H], dim=-1)
                n = torch.tanh(gx[:, 2 * H:] + r * gh[:, 2 * H:])
                h = n + z * (h - n)
                new.append(h)
                inp = h
                continue
            if self.split:
                g = inp @ getattr(self, f"wx{layer}") + h @ getattr(self, f"wh{layer}") + getattr(self, f"b{layer}")
            else:
                g = torch.cat([inp, h], dim=-1) @ getattr(self, f"w{layer}") + getattr(self, f"b{layer}")  # (B, G*H)
            if self.kind == "rnn":
                h = torch.tanh(g)
                new.append(h)
            elif self.kind == "gru":
                rz, x_n, h_n = g.split([2 * H, H, H], dim=-1)
                r, z = torch.sigmoid(rz).split([H, H], dim=-1)       # (B, H) each
                n = torch.tanh(x_n + r * h_n)
                h = n + z * (h - n)                                   # = (1 - z) n + z h
                new.append(h)
            else:
                c = state[layer * self.n_state + 1]
                if_, g_, o = g.split([2 * H, H, H], dim=-1)
                i, f = torch.sigmoid(if_).split([H, H], dim=-1)
                c = f * c + i * torch.tanh(g_)
                h = torch.sigmoid(o) * torch.tanh(c)
                new += [h, c]
            inp = h
        logits = self.model.head(inp)
        return (logits, torch.softmax(logits, -1), *new, *gain)


class SSMStep(nn.Module):
    """The state-space step as exported (`edgeseq.models.ssm`), per layer, v = LayerNorm(u):

        fixed:      s' = a ⊙ s + v @ W_x' + b_x'       (a and 1 - a are constants; 1 - a is folded
                                                      into W_x' and b_x', computed as the model does)
        selective:  a = exp(-λ ⊙ softplus(v @ W_δ + b_δ)),  s' = a ⊙ s + (1 - a) ⊙ (v @ W_x + b_x)
        u' = u + ((s' @ C + D ⊙ v) ⊙ SiLU(v @ W_g + b_g)) @ W_out + b_out

    Float (`split=False`): one MatMul reads v for [x | g (| δ)]. With `split=True` (int8) each
    of x, g and δ has its own MatMul, named by its weight (`ssm{l}_x`, `ssm{l}_gate`,
    `ssm{l}_delta`, the state readout `ssm{l}_readout`, `ssm{l}_out`), so the quantizer can
    keep chosen parts in float (`export.quantize.SSM_FLOAT_PARTS`). The decay and the state
    update are element-wise and stay float32 either way."""

    def __init__(self, model, split: bool = False):
        super().__init__()
        self.model, self.split = model, split
        c = model.config
        self.selective, self.N, self.d = c.selective, c.d_state, c.d_model
        with torch.no_grad():
            for i, layer in enumerate(model.layers):
                N, d = self.N, self.d
                w, b = layer.in_proj.weight.t(), layer.in_proj.bias.clone()           # (d, N + d [+ N]), (...)
                if not self.selective:
                    a = torch.exp(layer.inputs(torch.zeros(1, d))[0])                  # (N,): as the model's step
                    w = torch.cat([w[:, :N] * (1 - a), w[:, N:]], dim=1)
                    b = torch.cat([b[:N] * (1 - a), b[N:]])
                    self.register_buffer(f"ssm{i}_decay", a.contiguous())
                else:
                    self.register_buffer(f"ssm{i}_rate", torch.exp(layer.log_lambda).contiguous())   # λ
                parts = {"x": (0, N), "gate": (N, N + d), "delta": (N + d, 2 * N + d)}
                for name, (lo, hi) in parts.items():
                    if name == "delta" and not self.selective:
                        continue
                    if split:
                        self.register_buffer(f"ssm{i}_{name}", w[:, lo:hi].contiguous())
                        self.register_buffer(f"ssm{i}_{name}_bias", b[lo:hi].contiguous())
                if not split:
                    self.register_buffer(f"ssm{i}_in", w.contiguous())
                    self.register_buffer(f"ssm{i}_in_bias", b.contiguous())
                self.register_buffer(f"ssm{i}_readout", layer.out_state.weight.t().contiguous())   # C: (N, d)
                self.register_buffer(f"ssm{i}_skip", layer.skip.detach().clone())                 # D: (d,)
                self.register_buffer(f"ssm{i}_out", layer.out_proj.weight.t().contiguous())       # (d, d)
                self.register_buffer(f"ssm{i}_out_bias", layer.out_proj.bias.detach().clone())

    def forward(self, reading, *state):
        N, d = self.N, self.d
        (xn, state, gain), new = self.model.norm.step_from(reading, state), []
        u = self.model.encoder(xn)                                                # (B, d)
        for i, layer in enumerate(self.model.layers):
            p = lambda name: getattr(self, f"ssm{i}_{name}")                      # noqa: E731
            v = layer.ln(u)                                                       # (B, d)
            if self.split:
                x = v @ p("x") + p("x_bias")                                      # (B, N)
                g = v @ p("gate") + p("gate_bias")                                # (B, d)
                delta = v @ p("delta") + p("delta_bias") if self.selective else None
            else:
                parts = (v @ p("in") + p("in_bias")).split([N, d, N] if self.selective else [N, d], dim=-1)
                x, g, delta = parts[0], parts[1], parts[2] if self.selective else None
            if self.selective:
                a = torch.exp(-p("rate") * nn.functional.softplus(delta))          # (B, N)
                s = a * state[i] + (1 - a) * x
            else:
                s = p("decay") * state[i] + x                                     # (B, N)
            y = s @ p("readout") + p("skip") * v                                  # (B, d)
            u = u + (y * nn.functional.silu(g)) @ p("out") + p("out_bias")
            new.append(s)
        logits = self.model.head(self.model.ln_f(u))
        return (logits, torch.softmax(logits, -1), *new, *gain)


class TransformerStep(nn.Module):
    """(reading, position, past.0.key, past.0.value, ...) -> (logits, present.0.key, ...)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, reading, position, *past):
        logits, new = self.model.step(reading, (position, *past))
        return (logits, torch.softmax(logits, -1), *new[1:])        # the runtime advances the position, not the graph


class WindowGraph(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, window, lengths):
        return self.model(window, lengths)


def meta_for(ckpt: dict, model, mode: str, max_history=None, quantization=None) -> contract.ModelMeta:
    """The metadata of a checkpoint's graph; `data` records what it was trained on (float and
    int8 alike: int8 calibration data given with --data is not the training data)."""
    state = model.state_specs() if mode == "stream" else []
    return contract.ModelMeta(
        arch=ckpt["arch"], mode=mode, features=list(ckpt["features"]), labels=list(ckpt["labels"]),
        state=state, max_history=max_history, quantization=quantization,
        version=edgeseq.__version__, normalization=ckpt["normalization"], config=ckpt["config"],
        data=trained_on(ckpt), data_sha256=_sha256_of(ckpt), task=task_meta(ckpt),
        weights_sha256=weights_sha256(ckpt),
    )


def weights_sha256(ckpt: dict) -> str:
    """The trained checkpoint's fingerprint (`edgeseq.weights_sha256`): sha256, 64 hex digits,
    of its architecture and then each state_dict tensor in name order (name, dtype, shape,
    bytes). Its float and int8 exports record the same one (int8 export fingerprints the
    checkpoint as given, before its input equalization); another training, seed or checkpoint
    of the same settings records another."""
    h = hashlib.sha256(f"edgeseq weights 1\n{ckpt['arch']}\n".encode())
    sd = ckpt["state_dict"]
    for name in sorted(sd):
        t = sd[name].detach().cpu().contiguous()
        h.update(f"{name} {t.dtype} {list(t.shape)}\n".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def task_meta(ckpt: dict) -> dict | None:
    """The checkpoint's `edgeseq.task` metadata: None for a classifier; an anomaly model gets
    the default `AnomalySpec` with its data's sampling rate where known (`edgeseq calibrate`
    chooses its threshold and duration later)."""
    task = ckpt.get("task")
    if not task or task.get("kind") == "classify":
        return None
    if task["kind"] == "anomaly":
        from edgeseq.data import RATE_HZ
        from edgeseq.runtime.anomaly import AnomalySpec
        embedded = None if ckpt.get("data_path") else ckpt.get("dataset")   # a user's file: its rate is unknown
        return AnomalySpec(rate_hz=RATE_HZ.get(embedded or "")).to_json()
    return dict(task)


def _sha256_of(ckpt: dict) -> str | None:
    """The checkpoint's data file sha256 (64 hex digits), where it names a file; else None."""
    sha = ckpt.get("data_sha256")
    ok = ckpt.get("data_path") and isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)
    return sha if ok else None


_REGISTRIES: dict = {}


@contextlib.contextmanager
def _registry_built_once():
    """While it is held, torch.onnx.export takes its table of ONNX functions (torch's
    `ONNXRegistry.from_torchlib`) from a per-process cache instead of building it again: building
    parses the source of about 500 onnxscript functions, about 0.8 s of a small model's 2.5 s
    export (measured with cProfile, torch 2.13). The exporter only reads the table when no
    `custom_translation_table` is given, as here. Where torch lacks that method, nothing changes."""
    try:
        from torch.onnx._internal.exporter import _registration
        cls = _registration.ONNXRegistry
        build = cls.__dict__["from_torchlib"]
    except (ImportError, AttributeError, KeyError):
        yield
        return

    def cached(klass, *args, **kwargs):
        key = (klass, args, tuple(sorted(kwargs.items())))
        if key not in _REGISTRIES:
            _REGISTRIES[key] = build.__func__(klass, *args, **kwargs)
        return _REGISTRIES[key]

    cls.from_torchlib = classmethod(cached)
    try:
        yield
    finally:
        cls.from_torchlib = build


def _trace(module, args, input_names, output_names, dynamic_shapes):
    """Run the torch.export-based exporter quietly; return the ONNX ModelProto."""
    buf = io.StringIO()
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(buf), _registry_built_once():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(module, args, None, dynamo=True, external_data=False,
                                 input_names=input_names, output_names=output_names,
                                 dynamic_shapes=dynamic_shapes, opset_version=contract.OPSET,
                                 verbose=False)
    return prog.model_proto


def build_graph(ckpt: dict, max_history: int | None = None, split: bool = False):
    """(onnx.ModelProto, ModelMeta, torch model) for a checkpoint, not yet validated.

    `split` exports recurrent cells with separate input and state MatMuls, and state-space
    layers with one MatMul per projection (the forms int8 quantization wants); the contract
    is the same either way."""
    model = model_from_checkpoint(ckpt)
    arch = ckpt["arch"]
    F = model.config.n_features
    batch = torch.export.Dim("batch", min=1, max=65536)
    if arch in contract.WINDOW_ARCHS:
        time = torch.export.Dim("time", min=1, max=1 << 20)
        args = (torch.randn(2, 7, F), torch.tensor([7, 4]))
        names_in, names_out = [contract.WINDOW, contract.LENGTHS], [contract.LOGITS]
        dyn = ({0: batch, 1: time}, {0: batch})
        proto = _trace(WindowGraph(model), args, names_in, names_out, dyn)
        meta = meta_for(ckpt, model, "window")
    else:
        specs = model.state_specs()
        if arch == "transformer":
            if max_history is None and model.config.window:
                max_history = model.config.window           # the window it was trained with
            history = torch.export.Dim("history", min=0, max=1 << 20)
            state = model.init_state(2, history=3)
            args = (torch.randn(2, F), torch.tensor([3, 1]), *state[1:])
            names_in = [contract.READING, contract.POSITION] + [s.name for s in specs]
            dyn = ({0: batch}, {0: batch}, tuple({0: batch, 2: history} for _ in specs))
            wrapper = TransformerStep(model)
        else:
            if max_history is not None:
                raise UsageError("--max-history applies to the transformer only; recurrent state is fixed")
            args = (torch.randn(2, F), *model.init_state(2))
            names_in = [contract.READING] + [s.name for s in specs]
            dyn = ({0: batch}, tuple({0: batch} for _ in specs))
            wrapper = SSMStep(model, split=split) if arch == "ssm" else FusedRecurrentStep(model, split=split)
        names_out = [contract.LOGITS, contract.PROBS] + [s.output for s in specs]
        proto = _trace(wrapper, args, names_in, names_out, dyn)
        meta = meta_for(ckpt, model, "stream", max_history=max_history)
    proto.ir_version = contract.IR_VERSION
    strip(proto)
    stamp(proto, meta)
    onnx.checker.check_model(proto)
    return proto, meta, model


def strip(proto: onnx.ModelProto):
    """Drop what the exporter records for debugging (per-node source lines and stack traces,
    intermediate shapes): it is most of a small model's file and names paths on the build machine."""
    for node in proto.graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    del proto.graph.value_info[:]
    proto.doc_string = ""


def stamp(proto: onnx.ModelProto, meta: contract.ModelMeta):
    """Replace edgeseq metadata on `proto` with `meta`."""
    keep = [p for p in proto.metadata_props if not p.key.startswith("edgeseq.")]
    del proto.metadata_props[:]
    proto.metadata_props.extend(keep)
    for k, v in meta.to_props().items():
        proto.metadata_props.add(key=k, value=v)
    proto.producer_name = "edgeseq"
    proto.producer_version = edgeseq.__version__


def export_model(ckpt: dict, out: str | os.PathLike, max_history: int | None = None,
                 validate_readings: int = contract.VALIDATION_READINGS, rtol: float | None = None,
                 seed: int = 0) -> dict:
    """Export, validate, then move into place. Returns a report dict (path, bytes, and the
    validation figures of `export.validate.check_parity`: max_abs_diff, tolerance, ...).

    rtol: the relative part of the validation bound (default `contract.VALIDATION_RTOL`).
    Raises UsageError for a bad request, ExportValidationError when ONNX Runtime and torch
    disagree (nothing is written then, and an existing file at `out` is left as it was)."""
    out = Path(out)
    if out.suffix != ".onnx":
        raise UsageError(f"output '{out}' must end in .onnx")
    if out.is_dir():
        raise UsageError(f"output '{out}' is a directory; give a file name ending in .onnx")
    if max_history is not None and max_history < 1:
        raise UsageError("--max-history must be at least 1")
    if validate_readings < contract.VALIDATION_READINGS and ckpt["arch"] in contract.STREAM_ARCHS:
        raise UsageError(f"validation needs at least {contract.VALIDATION_READINGS} readings")
    proto, meta, model = build_graph(ckpt, max_history)
    return write_validated(proto, out, lambda path: validate_graph(path, model, meta, validate_readings, rtol, seed))


def validate_graph(path, model, meta, readings=contract.VALIDATION_READINGS, rtol=None, seed=0) -> dict:
    """Validate the graph at `path` against the torch `model` (stream or window, by `meta.mode`)."""
    if meta.mode == "window":
        return validate_window(path, model, meta, rtol, seed)
    return validate_stream(path, model, meta, readings, rtol, seed)


def write_validated(proto: onnx.ModelProto, out: Path, validate) -> dict:
    """Write `proto` to a temporary file beside `out`, run `validate(tmp)`, rename on success.

    The temporary file is `.<out name>.<pid>.<random>.tmp`; those an earlier, killed export to
    the same `out` left behind (their process is gone) are removed first, nothing else."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(out), suffix=TEMP_SUFFIX, dir=out.parent)
    os.close(fd)
    for node in proto.graph.node:                # names served the export (int8 picks nodes by name);
        node.name = ""                           # no reader of the written file uses them
    try:
        onnx.save_model(proto, tmp)
        report = dict(validate(tmp))
        record_validation(tmp, report)
        os.chmod(tmp, shareable_mode(0o666))         # mkstemp makes 0600; a model is meant to be shared
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    report["path"] = str(out)
    report["bytes"] = out.stat().st_size
    return report


def shareable_mode(mode: int) -> int:
    """`mode` less the process umask: what a plainly created file or directory would get."""
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def record_validation(path, report: dict):
    """Store the validation figures in the file's metadata (numerics untouched)."""
    proto = onnx.load_model(str(path))
    keep = [p for p in proto.metadata_props if p.key != contract.META_VALIDATION]
    del proto.metadata_props[:]
    proto.metadata_props.extend(keep)
    proto.metadata_props.add(key=contract.META_VALIDATION, value=json.dumps(report, separators=(",", ":")))
    onnx.save_model(proto, str(path))


def initializer_bytes(proto: onnx.ModelProto) -> int:
    return sum(onnx.numpy_helper.to_array(t).nbytes for t in proto.graph.initializer)


