"""Train a translation model (torch): seeded, teacher forcing, label smoothing, progress bar.

`train_mt(arch, corpus)` returns a checkpoint dict; `save_run` writes `checkpoint.pt`,
`tokenizer.json` and `metrics.json` into a run directory, which `edgeseq translate export`
reads. Also here: torch greedy decoding, with the cache (`step`) or recomputing the whole
prefix at every step (`decode`), which export validation and the benchmark compare with.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

from edgeseq.errors import ModelFileError
from edgeseq.translate.corpus import Corpus, load_corpus
from edgeseq.translate.models import build, config_of
from edgeseq.translate.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB, Tokenizer

MAX_SOURCE = 96     # subword tokens, EOS included; longer inputs are refused at run time
MAX_TARGET = 96


@dataclass(frozen=True)
class MTTrainConfig:
    epochs: int = 30
    batch_size: int = 32
    lr: float = 1e-3
    warmup: int = 200          # steps of linear warm-up, then cosine decay
    weight_decay: float = 0.01
    label_smoothing: float = 0.1
    clip: float = 1.0
    seed: int = 0
    vocab: int = VOCAB


DEFAULTS = {
    "transformer": MTTrainConfig(epochs=30, lr=1e-3),
    "lstm-attn": MTTrainConfig(epochs=20, lr=2e-3, warmup=100),
}


def encode_pairs(tok: Tokenizer, pairs: list) -> list:
    """[(source ids + EOS, target ids)] for pairs that fit the length limits."""
    out = []
    for src, tgt in pairs:
        s, t = tok.encode(src) + [EOS_ID], tok.encode(tgt)
        if len(s) <= MAX_SOURCE and len(t) + 1 <= MAX_TARGET:
            out.append((s, t))
    return out


def pad(rows: list, value: int = PAD_ID) -> torch.Tensor:
    T = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (T - len(r)) for r in rows], dtype=torch.int64)


def batches(data: list, size: int, rng: random.Random) -> list:
    """Length-bucketed batches in a shuffled order (less padding, same randomness per seed)."""
    order = sorted(range(len(data)), key=lambda i: (len(data[i][0]) + rng.random() * 4))
    chunks = [order[i:i + size] for i in range(0, len(order), size)]
    rng.shuffle(chunks)
    return chunks


def train_mt(arch: str, corpus: Corpus | str = "jupyterlab-fr", tc: MTTrainConfig | None = None,
             overrides: dict | None = None, progress: bool = True) -> dict:
    if isinstance(corpus, str):
        corpus = load_corpus(corpus)
    tc = tc or DEFAULTS.get(arch, MTTrainConfig())
    random.seed(tc.seed)
    np.random.seed(tc.seed)
    torch.manual_seed(tc.seed)
    tok = Tokenizer.train([s for pair in corpus.train for s in pair], tc.vocab)
    model = build(arch, overrides, vocab=tok.vocab_size)
    data = encode_pairs(tok, corpus.train)
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
    rng = random.Random(tc.seed)
    steps = tc.epochs * math.ceil(len(data) / tc.batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / tc.warmup) * 0.5 *
                                              (1 + math.cos(math.pi * min(s, steps) / steps)))
    from tqdm import tqdm
    bar = tqdm(total=steps, desc=f"train {arch}", disable=None if progress else True, leave=False)
    t0 = time.perf_counter()
    model.train()
    for epoch in range(tc.epochs):
        total = n = 0
        for idx in batches(data, tc.batch_size, rng):
            src = pad([data[i][0] for i in idx])
            lengths = torch.tensor([len(data[i][0]) for i in idx])
            tgt_in = pad([[BOS_ID] + data[i][1] for i in idx])
            tgt_out = pad([data[i][1] + [EOS_ID] for i in idx])
            logits = model.decode(tgt_in, model.encode(src, lengths), lengths)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1),
                                   ignore_index=PAD_ID, label_smoothing=tc.label_smoothing)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), tc.clip)
            opt.step()
            sched.step()
            total, n = total + loss.item() * len(idx), n + len(idx)
            bar.update(1)
        bar.set_postfix(epoch=epoch + 1, loss=f"{total / n:.3f}")
    bar.close()
    seconds = time.perf_counter() - t0
    model.eval()
    return {
        "arch": arch, "config": config_of(model), "train_config": asdict(tc),
        "state_dict": model.state_dict(), "tokenizer": tok.to_str(), "corpus": corpus.name,
        "pairs": {"train": len(data), "dev": len(corpus.dev), "test": len(corpus.test)},
        "max_source": MAX_SOURCE, "max_target": MAX_TARGET,
        "metrics": {"train_seconds": round(seconds, 1), "final_loss": round(total / n, 4),
                    "parameters": sum(p.numel() for p in model.parameters())},
    }


def model_from(ckpt: dict):
    model = build(ckpt["arch"], ckpt["config"])
    model.load_state_dict(ckpt["state_dict"])
    return model.eval()


def save_run(ckpt: dict, out) -> Path:
    """Write checkpoint.pt, tokenizer.json and metrics.json into the run directory `out`, all or
    nothing (`edgeseq.train.write_files`): a failed write (a full disk) raises an OSError naming
    the file and leaves the old run as it was, with no temporary file behind."""
    from edgeseq.train import torch_bytes, write_files
    out = Path(out)
    summary = {k: ckpt[k] for k in ("arch", "config", "train_config", "corpus", "pairs", "metrics")}
    files = {out / "checkpoint.pt": torch_bytes(ckpt),
             out / "tokenizer.json": Tokenizer.from_str(ckpt["tokenizer"]).to_str(pretty=True).encode(),
             out / "metrics.json": (json.dumps(summary, indent=2) + "\n").encode()}
    out.mkdir(parents=True, exist_ok=True)
    write_files(files)
    return out / "checkpoint.pt"


def load_run(run) -> dict:
    path = Path(run)
    path = path / "checkpoint.pt" if path.is_dir() else path
    if not path.is_file():
        raise ModelFileError(f"no translation checkpoint at '{run}'; train one with "
                             f"`edgeseq translate train --out {run}`")
    from edgeseq.train import quiet_torch_load
    try:
        ckpt = quiet_torch_load(path)                  # tensors and plain data only, no warnings printed
    except Exception as e:
        raise ModelFileError(f"'{path}' is not a readable checkpoint ({type(e).__name__}); train it again") from None
    if not isinstance(ckpt, dict) or "tokenizer" not in ckpt or "arch" not in ckpt:
        raise ModelFileError(f"'{path}' is not a translation checkpoint (a sensor model's run?); "
                             "train one with `edgeseq translate train`")
    return ckpt


def source_batch(tok: Tokenizer, sentences: list):
    ids = [tok.encode(s)[:MAX_SOURCE - 1] + [EOS_ID] for s in sentences]
    return pad(ids), torch.tensor([len(i) for i in ids])


@torch.no_grad()
def greedy_torch(model, source, lengths, max_len: int, cache: bool = True):
    """Batched greedy decoding in torch. cache=True: `step` with the model's state;
    cache=False: the whole prefix through `decode` at every step (no cache).
    Returns (token ids (B, <=max_len) ending at EOS, sum of log-probs (B,))."""
    B = source.shape[0]
    enc = model.encode(source, lengths)
    token = torch.full((B,), BOS_ID)
    state = model.init_state(B)
    out, score = [], torch.zeros(B)
    done = torch.zeros(B, dtype=torch.bool)
    prefix = token.unsqueeze(1)
    for t in range(max_len):
        if cache:
            logp, state, _ = model.step(token, torch.full((B,), t), state, enc, lengths)
        else:
            logp = F.log_softmax(model.decode(prefix, enc, lengths)[:, -1], dim=-1)
        nxt = logp.argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, PAD_ID), nxt)
        score += torch.where(done, 0.0, logp.gather(1, nxt.clamp(min=0).unsqueeze(1)).squeeze(1))
        out.append(nxt)
        done |= nxt == EOS_ID
        token = torch.where(nxt == PAD_ID, torch.full_like(nxt, EOS_ID), nxt)
        prefix = torch.cat([prefix, token.unsqueeze(1)], 1)
        if done.all():
            break
    return torch.stack(out, 1), score


def with_overrides(tc: MTTrainConfig, **kw) -> MTTrainConfig:
    return replace(tc, **{k: v for k, v in kw.items() if v is not None})

