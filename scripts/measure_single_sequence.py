"""What training on streams buys: each architecture trained today's way and on single sequences only.

    .venv/bin/python scripts/measure_single_sequence.py                  # five archs, seed 0, BasicMotions
    .venv/bin/python scripts/measure_single_sequence.py --archs gru ssm --seeds 0 1
    .venv/bin/python scripts/measure_single_sequence.py --json docs/figures/single_sequence.json

Trains each architecture three times, the model at its defaults:
- `default`: today's defaults (`edgeseq.train.DEFAULTS`: the stream loss, the auxiliary loss after
  every reading past a sequence's first quarter, and the data's automatic augmentation);
- `single`: the same with `stream_weight=0` (single sequences only), `aux_weight=0` (the loss
  after each sequence's last reading only) and `augment=none`, the way models were trained at
  first (`edgeseq train --set stream_weight=0 --set aux_weight=0 --set augment=none`);
- `single-150`: `single` for a fixed 150 epochs (`--epochs 150`), where the default schedule
  (early stopping on a validation split) stops single-sequence training after a few hundred
  updates.
Both are scored on the test split exactly as `scripts/measure_augment.py` scores (its `score`):
per sequence from zero state, and never reset (the test sequences joined in 3 seeded orders,
per reading past the grace), with the median readings taken to follow a change.
The five architectures at seed 0 take a few minutes on one core.
"""

import argparse
import json
from dataclasses import replace

import torch

from edgeseq.data import load_dataset
from edgeseq.data.augment import NONE
from edgeseq.train import DEFAULTS, train
from measure_augment import score

ARCHS = ["rnn", "gru", "lstm", "transformer", "ssm"]
SINGLE = {"stream_weight": 0.0, "aux_weight": 0.0, "augment": NONE}
# Early stopping ends single-sequence training after fewer epochs than stream training (its
# validation score stops rising sooner): the fixed 150 epochs show what it reaches trained out.
TRAININGS = {"default": {}, "single": SINGLE, "single-150": {**SINGLE, "epochs": 150}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archs", nargs="+", default=ARCHS)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--data", default="basicmotions")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ds = load_dataset(args.data)
    print(f"data {ds.name}: {len(ds.train)} training / {len(ds.test)} test sequences")
    print(f"{'arch':12s} {'seed':>4s} {'training':8s} {'per seq':>7s} {'never reset':>11s} {'to follow':>9s} "
          f"{'epochs':>6s} {'updates':>7s} {'seconds':>7s}", flush=True)
    rows = []
    for arch in args.archs:
        for seed in args.seeds:
            for name, changes in TRAININGS.items():
                ckpt = train(arch, ds, replace(DEFAULTS[arch], seed=seed, **changes), progress=False)
                m = ckpt["metrics"]
                r = {"arch": arch, "seed": seed, "training": name, **score(ckpt, ds),
                     "epochs": m["schedule"]["epochs_run"], "updates": m["updates"],
                     "stopped": m["schedule"]["stopped"], "train_seconds": m["train_seconds"]}
                rows.append(r)
                follow = r["to_follow"] if r["to_follow"] is not None else float("nan")
                print(f"{arch:12s} {seed:4d} {name:8s} {r['per_sequence']:7.3f} {r['never_reset']:11.3f} "
                      f"{follow:9.1f} {r['epochs']:6d} {r['updates']:7d} {r['train_seconds']:7.1f}", flush=True)
    if args.json:
        from edgeseq.report.bench import machine_info
        words = ["python", "scripts/measure_single_sequence.py", "--archs", *args.archs,
                 "--seeds", *map(str, args.seeds), "--data", args.data, "--json", args.json]
        with open(args.json, "w") as f:
            json.dump({"data": ds.name, "archs": args.archs, "seeds": args.seeds, "command": " ".join(words),
                       "trainings": {k: {f: "none" if v is NONE else v for f, v in c.items()}
                                     for k, c in TRAININGS.items()},
                       "machine": machine_info(), "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
