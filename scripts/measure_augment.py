"""Does augmentation help? Test accuracy on both protocols with and without it, per architecture and seed.

    .venv/bin/python scripts/measure_augment.py                         # five archs, seeds 0 1 2: none vs default
    .venv/bin/python scripts/measure_augment.py --archs gru ssm --seeds 0
    .venv/bin/python scripts/measure_augment.py --configs none default jitter=0.05 twist:rotate=30,join=0.5
    .venv/bin/python scripts/measure_augment.py --data people.npz --json runs/augment.json

Trains each architecture with its default schedule and seed, once per augmentation setting
(`none`, `default` = `edgeseq.data.augment.DEFAULT`, or comma-separated NAME=VALUE on top of
none), and scores the float model on the test split, read once per model:
- per sequence: each test sequence from zero state, the prediction after its last reading
  (where the data names groups: the worst group's accuracy too);
- never reset: the test sequences joined in 3 seeded orders (`joined_streams`, as `edgeseq
  eval`), scored per reading past the grace period (`score_continuous`), and the median
  readings taken to follow a change.
The model runs in torch (`forward_stream`, state carried): the exported graph matches it
within export's validation tolerance, so `edgeseq eval` of the export gives the same figures.
Then the mean per architecture and setting over the seeds, and the change against `none`.
The five architectures, 3 seeds, none vs default take about 5 minutes on 2 cores.
"""

import argparse
import json
from dataclasses import asdict, replace

import numpy as np
import torch

from edgeseq.data import load_dataset
from edgeseq.data.augment import NONE, check_augment, describe
from edgeseq.runtime.evaluate import group_accuracy, joined_streams, score_continuous
from edgeseq.train import DEFAULTS, accuracy, model_from_checkpoint, sequence_logits, train

ARCHS = ["rnn", "gru", "lstm", "transformer", "ssm"]


def setting(text: str):
    """'none', 'default' or 'jitter=0.05,rotate=15' (on top of none), optionally after a label
    and a colon ('strong:jitter=0.1,...') -> (label, Augment)."""
    label, _, text = text.rpartition(":")
    if text in ("none", "default"):
        return label or text, check_augment(text)
    fields = {}
    for item in text.split(","):
        k, _, v = item.partition("=")
        fields[k.strip()] = float(v)
    return label or text, check_augment({**asdict(NONE), **fields})


@torch.no_grad()
def never_reset(model, split) -> dict:
    """`score_continuous` of the model's predictions on the split's joined streams."""
    X, Y, ends = joined_streams(split)
    logits, carry, out = None, None, []
    x = torch.from_numpy(X)
    for t0 in range(0, x.shape[1], 256):
        logits, carry = model.forward_stream(x[:, t0:t0 + 256], carry)       # (orders, c, C)
        out.append(logits.argmax(-1))
    return score_continuous(torch.cat(out, 1).numpy(), Y, ends)


def score(ckpt, ds) -> dict:
    model = model_from_checkpoint(ckpt)
    test = ds.test
    row = {"per_sequence": accuracy(model, test)}
    if test.groups is not None:
        pred = sequence_logits(model, torch.from_numpy(test.X), torch.from_numpy(test.lengths)).argmax(-1).numpy()
        g = group_accuracy(pred == test.y, test.groups)
        row["worst_group"] = g["worst"]["accuracy"]
        row["worst_group_name"] = g["worst"]["group"]
    c = never_reset(model, test)
    row["never_reset"] = c["reading_accuracy"]
    row["to_follow"] = c["median_readings_to_follow"]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--archs", nargs="+", default=ARCHS)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--configs", nargs="+", default=["none", "default"])
    ap.add_argument("--data", default="basicmotions")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ds = load_dataset(args.data)
    configs = dict(setting(c) for c in args.configs)
    grouped = ds.test.groups is not None
    print(f"data {ds.name}: {len(ds.train)} training / {len(ds.test)} test sequences; "
          + ("; ".join(f"{c} = {describe(a)}" for c, a in configs.items())))
    head = f"{'arch':12s} {'seed':>4s} {'augment':22s} {'per seq':>7s} {'never reset':>11s} {'to follow':>9s}"
    print(head + (f" {'worst group':>11s}" if grouped else ""), flush=True)
    rows = []
    for arch in args.archs:
        for seed in args.seeds:
            for name, aug in configs.items():
                tc = replace(DEFAULTS[arch], seed=seed, augment=aug)
                ckpt = train(arch, ds, tc, progress=False)
                r = {"arch": arch, "seed": seed, "augment": name, **score(ckpt, ds),
                     "train_seconds": ckpt["metrics"]["train_seconds"]}
                rows.append(r)
                line = (f"{arch:12s} {seed:4d} {name:22s} {r['per_sequence']:7.3f} {r['never_reset']:11.3f} "
                        f"{r['to_follow'] if r['to_follow'] is not None else float('nan'):9.1f}")
                print(line + (f" {r['worst_group']:11.3f}" if grouped else ""), flush=True)
    print(f"\nmean over seeds {' '.join(map(str, args.seeds))} (change against none: accuracy in points, "
          "readings to follow a change)")
    print(f"{'arch':12s} {'augment':22s} {'per seq':>15s} {'never reset':>15s} {'to follow':>15s}"
          + (f" {'worst group':>15s}" if grouped else ""))
    keys = ["per_sequence", "never_reset", "to_follow"] + (["worst_group"] if grouped else [])
    for arch in args.archs:
        def mean(name, k):
            return np.mean([r[k] for r in rows if r["arch"] == arch and r["augment"] == name and r[k] is not None]
                           or [np.nan])
        base = {k: mean("none", k) for k in keys}
        for name in configs:
            m = {k: mean(name, k) for k in keys}
            cells = " ".join(f"{m[k]:7.1f} ({m[k] - base[k]:+5.1f})" if k == "to_follow" else
                             f"{m[k]:7.3f} ({100 * (m[k] - base[k]):+5.1f})" for k in keys)
            print(f"{arch:12s} {name:22s} {cells}")
    if args.json:
        with open(args.json, "w") as f:
            from edgeseq.report.bench import machine_info
            words = ["python", "scripts/measure_augment.py", "--archs", *args.archs, "--seeds", *map(str, args.seeds),
                     "--configs", *args.configs, "--data", args.data, "--json", args.json]
            json.dump({"data": ds.name, "configs": {c: describe(a) for c, a in configs.items()},
                       "archs": args.archs, "seeds": args.seeds, "command": " ".join(words),
                       "machine": machine_info(), "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
