"""Write decision settings (`edgeseq.decision`, or an anomaly model's `edgeseq.task`) into a
model file, atomically.

The graph and every other metadata entry are kept byte for byte in meaning; only the
`edgeseq.decision` entry (the `edgeseq.task` entry for an `AnomalySpec`) is set. The new file is written beside the target, opened by a
`StreamSession` (which parses and checks the settings against the model's labels), and only
then renamed over the target: a failure leaves the target as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

import onnx

from edgeseq import contract
from edgeseq.errors import ModelFileError, UsageError
from edgeseq.runtime.anomaly import AnomalySpec
from edgeseq.runtime.decision import DecisionSpec
from edgeseq.runtime.statefile import TEMP_SUFFIX, remove_leftovers, temp_prefix


def write_decision(model, spec: DecisionSpec | AnomalySpec | None, out) -> Path:
    """Copy the model file `model` to `out` with `spec` as its decision settings (None: none).
    `out` may be `model` itself; a symbolic link is followed (its target is replaced, the link
    kept). Returns the file written. Raises ModelFileError when `model` is not an
    edgeseq model file, UsageError when `out` is a directory or the settings do not fit the
    model (nothing is written then)."""
    model, out = Path(model), Path(out)
    if out.is_symlink():                       # a link is followed: its target gets the new file, the link stays
        out = Path(os.path.realpath(out))
    if out.is_dir():
        raise UsageError(f"output '{out}' is a directory; give a file name ending in .onnx")
    try:
        proto = onnx.load_model(str(model), load_external_data=False)
    except Exception as e:                       # protobuf parse errors of any kind; no code runs
        first = str(e).strip().splitlines()[0][:100] if str(e).strip() else type(e).__name__
        raise ModelFileError(f"'{model}' is not an ONNX model file ({first}); give an exported edgeseq model") from None
    anomaly = isinstance(spec, AnomalySpec)
    key = contract.META_TASK if anomaly else contract.META_DECISION
    keep = [p for p in proto.metadata_props if p.key != key]
    labels = next((json.loads(p.value) for p in keep if p.key == contract.META_LABELS), None)
    if labels is None:
        raise ModelFileError(f"'{model}' has no edgeseq labels; give a model exported by `edgeseq export`")
    task = next((json.loads(p.value) for p in proto.metadata_props if p.key == contract.META_TASK), None)
    if anomaly != ((task or {}).get("kind") == "anomaly"):
        raise UsageError("anomaly settings fit an anomaly model only" if anomaly else
                         "decision settings fit a classifier; an anomaly model takes anomaly settings")
    del proto.metadata_props[:]
    proto.metadata_props.extend(keep)
    if anomaly:
        proto.metadata_props.add(key=key, value=json.dumps(spec.to_json(), separators=(",", ":"), allow_nan=False))
    elif spec is not None:
        if list(spec.labels) != [str(x) for x in labels]:
            raise UsageError("the decision settings were made for other labels than the model's")
        proto.metadata_props.add(key=contract.META_DECISION,
                                 value=json.dumps(spec.to_json(), separators=(",", ":"), allow_nan=False))
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(out), suffix=TEMP_SUFFIX, dir=out.parent)
    os.close(fd)
    try:
        onnx.save_model(proto, tmp)
        from edgeseq.runtime import StreamSession
        sess = StreamSession(tmp, streams=1, backend="onnxruntime")      # the settings parse and fit the model
        if (sess.decision is None) != (spec is None):
            raise ModelFileError(f"the decision settings written to '{out}' did not read back")
        mode = os.stat(model).st_mode & 0o777 if model.exists() else 0o644
        os.chmod(tmp, mode)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return out
