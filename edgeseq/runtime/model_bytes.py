"""A model file's bytes, read once (`read_model`): what `edgeseq.runtime.model.load_model` and
`edgeseq.runtime.native.onnxfile.read_graph` both read, so this sits below them both."""

from __future__ import annotations

import os
from pathlib import Path

from edgeseq.errors import ModelFileError, printable

MAX_MODEL_BYTES = (1 << 31) - 1     # protobuf's limit for one message: a larger .onnx keeps external data


def read_model(path: str | os.PathLike) -> bytes:
    """The bytes of the model file at `path`, read once (at most MAX_MODEL_BYTES). Raises
    ModelFileError when it is missing, not a regular file, unreadable or too large."""
    p, shown = Path(path), printable(path)
    if p.is_dir():
        hint = (f"export its model first: `edgeseq export {shown} --out model.onnx`" if (p / "checkpoint.pt").is_file()
                else "give the path of an .onnx model file")
        raise ModelFileError(f"'{shown}' is a folder, not a model file; {hint}")
    if not p.is_file():
        int8 = " --int8" if "int8" in Path(path).name else ""
        raise ModelFileError(f"model file '{shown}' not found; export one with `edgeseq export RUN --out {shown}{int8}`")
    try:
        with open(p, "rb") as f:
            data = f.read(MAX_MODEL_BYTES + 1)
    except OSError as e:
        raise ModelFileError(f"cannot read model file '{shown}': {e.strerror or e}") from None
    if len(data) > MAX_MODEL_BYTES:
        raise ModelFileError(f"model file '{shown}' is larger than {MAX_MODEL_BYTES:,} bytes, more than one ONNX "
                             "file holds; export it again")
    return data
