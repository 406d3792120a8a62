"""Greedy decoding speed, one sentence at a time and batched: ONNX Runtime decoding
incrementally (the Transformer's KV cache, the LSTM's state) against torch eager recomputing
the whole target prefix at every step, same model, same sentences. torch decoding
incrementally (`step`) is measured too, to tell the cache's share from the runtime's."""

from __future__ import annotations

import platform
import tempfile
import time

import onnxruntime as ort
import torch

from edgeseq.translate.corpus import load_corpus
from edgeseq.translate.runtime import Translator
from edgeseq.translate.train import greedy_torch, model_from, source_batch


def run_bench(ckpt: dict, n: int = 50, batch: int = 16, max_len: int = 48) -> dict:
    from edgeseq.translate.tokenizer import Tokenizer
    from export.translate import export_translation

    model = model_from(ckpt)
    tok = Tokenizer.from_str(ckpt["tokenizer"])
    sentences = [s for s, _ in load_corpus().test[:n]]
    with tempfile.TemporaryDirectory() as d:
        export_translation(ckpt, f"{d}/mt", sentences=sentences[:8])
        tr = Translator(f"{d}/mt", threads=0)
        torch_threads = torch.get_num_threads()

        def ort_run(chunk):
            return sum(len(r.ids) for r in tr.greedy(chunk, max_len=max_len))

        def torch_run(chunk, cache):
            src, lengths = source_batch(tok, chunk)
            ids, _ = greedy_torch(model, src, lengths, max_len, cache=cache)
            return int((ids != 0).sum())

        runners = {"onnxruntime, cached": ort_run,
                   "torch eager, recompute prefix": lambda c: torch_run(c, False),
                   "torch eager, cached": lambda c: torch_run(c, True)}
        rows = {}
        for mode, size in (("one sentence per call", 1), (f"{batch} sentences per call", batch)):
            chunks = [sentences[i:i + size] for i in range(0, len(sentences), size)]
            for fn in runners.values():                                 # warm-up
                fn(chunks[0])
            for name, fn in runners.items():
                t0 = time.perf_counter()
                tokens = sum(fn(c) for c in chunks)
                s = time.perf_counter() - t0
                rows.setdefault(mode, {})[name] = {"seconds": round(s, 3), "sentences_per_s": round(len(sentences) / s, 1),
                                                   "tokens_per_s": round(tokens / s, 1), "tokens": tokens}
    for mode, r in rows.items():
        base = r["torch eager, recompute prefix"]["seconds"]
        for v in r.values():
            v["speedup_vs_recompute"] = round(base / v["seconds"], 2)
    return {"arch": ckpt["arch"], "sentences": len(sentences), "max_len": max_len, "results": rows,
            "machine": {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
                        "torch_threads": torch_threads, "onnxruntime": ort.__version__}}


def format_bench(r: dict) -> str:
    out = [f"{r['arch']}: greedy decoding of {r['sentences']} test sentences (torch {r['machine']['torch']}, "
           f"{r['machine']['torch_threads']} threads; onnxruntime {r['machine']['onnxruntime']})"]
    for mode, rows in r["results"].items():
        out.append(f"\n{mode}:")
        for name, v in rows.items():
            out.append(f"  {name:32s} {v['sentences_per_s']:8.1f} sentences/s {v['tokens_per_s']:9.1f} tokens/s "
                       f"{v['speedup_vs_recompute']:6.2f}x")
    return "\n".join(out)
