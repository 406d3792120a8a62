"""BLEU and chrF (sacrebleu) of an exported translation model on a held-out split."""

from __future__ import annotations

import time

from edgeseq.translate.corpus import load_corpus
from edgeseq.translate.runtime import Translator


def evaluate_mt(model, corpus: str = "jupyterlab-fr", split: str = "test", beams=(1, 4), alpha: float = 0.6,
                provider: str = "cpu", batch: int = 64) -> dict:
    import sacrebleu
    c = load_corpus(corpus)
    pairs = c.split(split)
    tr = Translator(model, provider=provider)
    src, ref = [s for s, _ in pairs], [t for _, t in pairs]
    results = {}
    for k in beams:
        t0 = time.perf_counter()
        hyp = []
        for i in range(0, len(src), batch):
            chunk = src[i:i + batch]
            out = tr.greedy(chunk, truncate=True) if k == 1 else tr.beam(chunk, k, alpha, truncate=True)
            hyp += [r.text for r in out]
        seconds = time.perf_counter() - t0
        results["greedy" if k == 1 else f"beam{k}"] = {
            "beam": k, "bleu": round(sacrebleu.corpus_bleu(hyp, [ref]).score, 2),
            "chrf": round(sacrebleu.corpus_chrf(hyp, [ref]).score, 2),
            "seconds": round(seconds, 2), "sentences_per_s": round(len(src) / seconds, 1),
            "examples": [{"source": s, "output": h, "reference": r} for s, h, r in list(zip(src, hyp, ref))[:5]],
        }
    return {"model": str(model), "arch": tr.meta["arch"], "corpus": c.name, "split": split,
            "sentences": len(src), "alpha": alpha, "provider": provider,
            "metric": f"sacrebleu {sacrebleu.__version__} corpus_bleu / corpus_chrf, default settings",
            "results": results}
