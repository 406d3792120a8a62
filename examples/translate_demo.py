"""Translation demo: train (or reuse) an English -> French model, export it, translate.

    .venv/bin/python examples/translate_demo.py [--arch transformer|lstm-attn] [--out DIR]

Trains on the JupyterLab French language pack's UI strings (about 2 minutes for the
Transformer on 2 cores), exports encoder + decoder ONNX graphs, translates a few sentences
with greedy and beam search on ONNX Runtime, writes a cross-attention heatmap and scores
the held-out test split with BLEU and chrF.
"""

import argparse
import os
import sys
from pathlib import Path

try:
    from edgeseq.translate.evaluate import evaluate_mt
    from edgeseq.translate.runtime import Translator, attention_png
    from edgeseq.translate.train import load_run, save_run, train_mt
    from export.translate import export_translation
except ModuleNotFoundError as e:    # a Python without edgeseq (a bare `python`): one line naming the one to use
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # `python -I` leaves the script's folder out
    from _bootstrap import exit_naming_the_python
    exit_naming_the_python(e, __file__, "(`make demo` sets up .venv), or activate .venv first")

SENTENCES = ["Open the file", "Save all notebooks", "Restart the kernel and clear all outputs",
             "Close the terminal", "Rename the file"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="transformer", choices=["transformer", "lstm-attn"])
    ap.add_argument("--out", default=".", help="where runs/ and models/ go")
    args = ap.parse_args()
    out = Path(args.out)
    run, model = out / "runs" / f"mt-{args.arch}", out / "models" / f"mt-{args.arch}"
    if (run / "checkpoint.pt").exists():
        ckpt = load_run(run)
        print(f"reusing {run}")
    else:
        ckpt = train_mt(args.arch)
        save_run(ckpt, run)
        print(f"trained {args.arch} in {ckpt['metrics']['train_seconds']:.0f} s -> {run}")
    rep = export_translation(ckpt, model)
    print(f"exported {model}/ (ONNX Runtime greedy ids identical to torch on {rep['sentences']} dev sentences)\n")
    tr = Translator(model)
    greedy, beam = tr.greedy(SENTENCES, attention=True), tr.beam(SENTENCES, beam=4)
    for s, g, b in zip(SENTENCES, greedy, beam):
        print(f"{s!r:45s} greedy: {g.text!r:45s} beam 4: {b.text!r}")
    png = attention_png(greedy[2], out / f"attention-{args.arch}.png")
    print(f"\ncross-attention heatmap: {png}")
    r = evaluate_mt(model, beams=[1, 4])
    for k, v in r["results"].items():
        print(f"test split ({r['sentences']} sentences), {k}: BLEU {v['bleu']:.1f}, chrF {v['chrf']:.1f}")


if __name__ == "__main__":
    from edgeseq.errors import run_script
    run_script(main)
