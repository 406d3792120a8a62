"""Translation models -> a model directory: encoder.onnx, decoder.onnx, tokenizer.json, model.json.

Transformer
  encoder  source [B, S] int64, source_lengths [B] -> cross.{l}.key / cross.{l}.value [B, h, S, dh]
           (the decoder's cross-attention K/V, computed once per sentence)
  decoder  token [B], position [B], beam_index [B], source_lengths [B],
           past.{l}.key / past.{l}.value [B, h, T, dh] (T from 0), cross.{l}.* ->
           logprobs [B, V], present.{l}.* [B, h, T+1, dh], attention [B, S]
LSTM with attention
  encoder  source, source_lengths -> memory [B, S, 2H], keys [B, S, A], h0, c0 [B, 2H]
  decoder  token, beam_index, source_lengths, state.h, state.c, memory, keys ->
           logprobs, state_out.h, state_out.c, attention

`beam_index` picks, for each row, the row of the previous step's state it continues (beam
search reorders its hypotheses every step); the graph gathers the state itself, so on a GPU
the cache never leaves the device. Greedy decoding passes 0..B-1. `attention` is the
cross-attention over the source (Transformer: mean over layers and heads).

Batch, source length and cache length are dynamic. model.json says which decoder input is
fed from which output or encoder output, so the runtime needs no per-architecture code.
Written to a temporary directory beside the destination (`.<name>.<pid>.<random>.tmp`; one a
killed export left is removed by the next export to the same place), validated against torch
(greedy token ids identical, log-probs within tolerance), then renamed into place. A failed
write (a full disk) raises an OSError naming the destination and leaves the old directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import onnx
import torch
from torch import nn

import edgeseq
from edgeseq import contract
from edgeseq.errors import ExportValidationError, UsageError
from edgeseq.runtime.statefile import TEMP_SUFFIX, remove_leftovers, replace_dir, temp_prefix
from edgeseq.translate.runtime import FORMAT           # model.json format: the one the runtime reads
from edgeseq.translate.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer
from edgeseq.translate.train import greedy_torch, model_from, source_batch
from export.step import _trace, shareable_mode, strip

TOLERANCE = 1e-4          # max |log-prob| difference, ONNX Runtime vs torch, along the greedy path
VALIDATION_SENTENCES = 24


class _Encoder(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, source, source_lengths):
        return tuple(self.m.encode(source, source_lengths))


class _TransformerDecoder(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m, self.n = m, 2 * m.config.dec_layers

    def forward(self, token, position, beam_index, source_lengths, *tensors):
        past = [p.index_select(0, beam_index) for p in tensors[:self.n]]
        logp, new, w = self.m.step(token, position, past, list(tensors[self.n:]), source_lengths)
        return (logp, *new, w)


class _LSTMDecoder(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, token, beam_index, source_lengths, h, c, memory, keys):
        state = [h.index_select(0, beam_index), c.index_select(0, beam_index)]
        logp, (h, c), w = self.m.step(token, None, state, [memory, keys, h, c], source_lengths)
        return logp, h, c, w


def _graphs(model):
    """(encoder proto, decoder proto, description for model.json)."""
    B, S = torch.export.Dim("batch", min=1, max=4096), torch.export.Dim("source", min=1, max=4096)
    src = torch.randint(4, model.config.vocab, (3, 7))
    lengths = torch.tensor([7, 5, 2])
    enc_out = model.encode(src, lengths)
    if model.arch == "transformer":
        L = model.config.dec_layers
        cross = [f"cross.{l}.{kv}" for l in range(L) for kv in ("key", "value")]
        enc = _trace(_Encoder(model), (src, lengths), ["source", "source_lengths"], cross,
                     ({0: B, 1: S}, {0: B}))
        T = torch.export.Dim("history", min=0, max=4096)
        past = [f"past.{l}.{kv}" for l in range(L) for kv in ("key", "value")]
        present = [f"present.{l}.{kv}" for l in range(L) for kv in ("key", "value")]
        hh, dh = model.config.heads, model.config.d_model // model.config.heads
        state = [torch.randn(3, hh, 4, dh) for _ in past]
        args = (torch.tensor([5, 6, 7]), torch.tensor([4, 4, 4]), torch.tensor([2, 0, 1]), lengths, *state, *enc_out)
        names = ["token", "position", "beam_index", "source_lengths"] + past + cross
        dyn = ({0: B}, {0: B}, {0: B}, {0: B}, tuple([{0: B, 2: T}] * len(past) + [{0: B, 2: S}] * len(cross)))
        dec = _trace(_TransformerDecoder(model), args, names, ["logprobs"] + present + ["attention"], dyn)
        desc = {
            "encoder_outputs": cross,
            "static": {c: c for c in cross},
            "state": [{"input": p, "output": q, "init": "empty", "shape": [hh, dh]} for p, q in zip(past, present)],
        }
    else:
        enc_names = ["memory", "keys", "h0", "c0"]
        enc = _trace(_Encoder(model), (src, lengths), ["source", "source_lengths"], enc_names,
                     ({0: B, 1: S}, {0: B}))
        memory, keys, h0, c0 = enc_out
        args = (torch.tensor([5, 6, 7]), torch.tensor([2, 0, 1]), lengths, h0, c0, memory, keys)
        names = ["token", "beam_index", "source_lengths", "state.h", "state.c", "memory", "keys"]
        dyn = ({0: B}, {0: B}, {0: B}, {0: B}, {0: B}, {0: B, 1: S}, {0: B, 1: S})
        dec = _trace(_LSTMDecoder(model), args, names, ["logprobs", "state_out.h", "state_out.c", "attention"], dyn)
        desc = {
            "encoder_outputs": enc_names,
            "static": {"memory": "memory", "keys": "keys"},
            "state": [{"input": "state.h", "output": "state_out.h", "init": "encoder:h0"},
                      {"input": "state.c", "output": "state_out.c", "init": "encoder:c0"}],
        }
    for proto in (enc, dec):
        proto.ir_version = contract.IR_VERSION
        strip(proto)
        proto.producer_name, proto.producer_version = "edgeseq", edgeseq.__version__
        onnx.checker.check_model(proto)
    return enc, dec, desc


def describe(ckpt: dict, desc: dict) -> dict:
    return {
        "format": FORMAT, "kind": "translation", "arch": ckpt["arch"], "config": ckpt["config"],
        "encoder": "encoder.onnx", "decoder": "decoder.onnx", "tokenizer": "tokenizer.json",
        "max_source": ckpt["max_source"], "max_target": ckpt["max_target"],
        "special": {"pad": PAD_ID, "bos": BOS_ID, "eos": EOS_ID, "unk": UNK_ID},
        "corpus": ckpt["corpus"], "source_lang": "en", "target_lang": "fr",
        "version": edgeseq.__version__, **desc,
    }


@torch.no_grad()
def validate(model_dir: Path, model, tok: Tokenizer, sentences: list, tol: float = TOLERANCE) -> dict:
    """ONNX Runtime against torch: greedy ids identical, log-probs along the path within `tol`."""
    from edgeseq.translate.runtime import Translator
    tr = Translator(model_dir)
    src, lengths = source_batch(tok, sentences)
    ids_t, score_t = greedy_torch(model, src, lengths, max_len=48)
    res = tr.greedy(sentences, max_len=48)
    mismatched, worst = 0, 0.0
    for row, st, r in zip(ids_t.tolist(), score_t.tolist(), res):
        want = row[:row.index(EOS_ID) + 1] if EOS_ID in row else row
        if want != r.ids:
            mismatched += 1
        else:
            worst = max(worst, abs(st - r.score) / len(r.ids))
    if mismatched or not worst <= tol:
        raise ExportValidationError(
            f"ONNX Runtime greedy decoding differs from torch: {mismatched} of {len(sentences)} sentences give other "
            f"tokens, log-prob diff per token {worst:.3g} (tolerance {tol:g}); the model was not written",
            max_diff=worst, tolerance=tol)
    return {"sentences": len(sentences), "greedy_ids_identical": True, "max_logprob_diff_per_token": worst,
            "tolerance": tol}


def export_translation(ckpt: dict, out, sentences: list | None = None) -> dict:
    """Write the model directory `out` (validated) and return a report."""
    out = Path(out)
    if out.suffix == ".onnx" or (out.exists() and not out.is_dir()):
        raise UsageError(f"'{out}' must be a directory (it holds encoder.onnx, decoder.onnx, tokenizer.json, "
                         "model.json)")
    model = model_from(ckpt)
    tok = Tokenizer.from_str(ckpt["tokenizer"])
    enc, dec, desc = _graphs(model)
    meta = describe(ckpt, desc)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(out), suffix=TEMP_SUFFIX, dir=out.parent))
    try:
        onnx.save_model(enc, tmp / "encoder.onnx")
        onnx.save_model(dec, tmp / "decoder.onnx")
        tok.save(tmp / "tokenizer.json")
        (tmp / "model.json").write_text(json.dumps(meta, indent=2) + "\n")
        if sentences is None:
            from edgeseq.translate.corpus import load_corpus
            with contextlib.suppress(Exception):
                sentences = [s for s, _ in load_corpus().dev[:VALIDATION_SENTENCES]]
        sentences = sentences or ["Open the file", "Save all notebooks", "Close the terminal",
                                  "Restart the kernel and clear all outputs"]
        report = validate(tmp, model, tok, sentences)
        meta["validation"] = report
        (tmp / "model.json").write_text(json.dumps(meta, indent=2) + "\n")
        os.chmod(tmp, shareable_mode(0o777))         # mkdtemp makes 0700
        for f in tmp.iterdir():
            os.chmod(f, shareable_mode(0o666))
        replace_dir(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if e.filename is None or str(e.filename).startswith(str(tmp)):     # a failed write() names no file
            raise OSError(e.errno, e.strerror or str(e), str(out)) from None
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    files = {f.name: f.stat().st_size for f in sorted(out.iterdir())}
    return {"path": str(out), "arch": ckpt["arch"], "files": files, **report}

