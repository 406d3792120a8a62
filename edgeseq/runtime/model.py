"""Load an edgeseq ONNX file: one clear error for each way it can be wrong."""

from __future__ import annotations

import os
from pathlib import Path

import onnxruntime as ort

from edgeseq import contract
from edgeseq.errors import ModelFileError
from edgeseq.runtime.providers import check_provider, confirm_provider, session_options


def open_model(path: str | os.PathLike, provider: str = "cpu", threads: int = 1):
    """(InferenceSession, ModelMeta) for an edgeseq model file."""
    p = Path(path)
    if not p.is_file():
        raise ModelFileError(f"model file '{path}' not found; export one with `edgeseq export RUN --out {path}`")
    providers = check_provider(provider)
    try:
        sess = ort.InferenceSession(str(p), session_options(threads), providers=providers)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelFileError(f"'{path}' is not a readable ONNX model ({first[:120]}); export it again") from None
    confirm_provider(sess, provider)
    props = sess.get_modelmeta().custom_metadata_map
    try:
        meta = contract.ModelMeta.from_props(props)
    except KeyError as e:
        what = "no edgeseq metadata" if not any(k.startswith("edgeseq.") for k in props) \
            else f"missing metadata {e.args[0]}"
        raise ModelFileError(f"'{path}' is an ONNX model but not an edgeseq model ({what}); "
                             "export it with `edgeseq export`") from None
    except (ValueError, TypeError):
        raise ModelFileError(f"'{path}' has unreadable edgeseq metadata; export it again") from None
    if meta.format > contract.FORMAT_VERSION:
        raise ModelFileError(f"'{path}' uses edgeseq format {meta.format}, this runtime reads up to "
                             f"{contract.FORMAT_VERSION}; upgrade edgeseq")
    names = {i.name for i in sess.get_inputs()}
    needed = {contract.WINDOW} if meta.mode == "window" else {contract.READING} | {s.name for s in meta.state}
    if not needed <= names:
        raise ModelFileError(f"'{path}' lacks inputs {', '.join(sorted(needed - names))} its metadata promises; export it again")
    return sess, meta
