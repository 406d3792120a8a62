"""Translate with an exported model directory: numpy, onnxruntime and tokenizers only.

    >>> tr = Translator("models/mt", provider="cpu")
    >>> tr.greedy(["Open the file"])[0].text
    >>> tr.beam(["Save the notebook"], beam=4)[0].text

Both decoders are batched. The decoder's state (the Transformer's self-attention cache, the
LSTM's h and c) stays in onnxruntime values bound with IO binding: each step binds the
previous step's outputs as its inputs, and the graph itself gathers the rows each hypothesis
continues (`beam_index`), so with `provider="cuda"` the cache never leaves the GPU; only the
next tokens go in and the log-probabilities come out.

Beam search: `beam` hypotheses per sentence, scored by the sum of log-probabilities divided by
the GNMT length penalty ((5 + length) / 6) ** alpha (alpha 0 ranks by log-probability alone).
A hypothesis ends at `</s>`; a sentence is done when it has `beam` finished hypotheses and no
live one can still beat the worst of them, or at `max_len`. The greedy translation is scored
with the same penalty and kept if it ranks higher (pruning can drop the greedy path: it did
for 2 of 288 test sentences), so a wider beam never returns a lower-scoring translation.

Input: an empty sentence is refused; a sentence over the model's source limit is refused
(or cut to fit with `truncate=True`); characters the tokenizer never saw become `<unk>` and
are listed in the result's `unknown` field.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort

from edgeseq.errors import DataError, ModelFileError, UsageError
from edgeseq.runtime.providers import DEVICE, check_provider, confirm_provider, session_options
from edgeseq.translate.tokenizer import Tokenizer, check_text

NEG = -1e30
FORMAT = 1                                   # the newest model.json format this runtime reads (export writes it)
ARCHS = ("transformer", "lstm-attn")         # edgeseq.translate.models.ARCHS, without importing torch
MAX_LENGTH = 4096                            # most tokens max_source / max_target may allow

MAX_BEAM = 64   # hypotheses per sentence; translation papers use 4-10, and each holds a decoder cache


@dataclass
class Translation:
    source: str
    text: str
    ids: list                      # output token ids, </s> included when the model emitted it
    score: float                   # sum of log-probabilities of `ids`
    normalized: float              # score / length penalty (what beam search ranks by)
    source_pieces: list = field(default_factory=list)
    target_pieces: list = field(default_factory=list)
    attention: np.ndarray | None = None     # [target tokens, source tokens]
    unknown: list = field(default_factory=list)


def _fail(d, what):
    raise ModelFileError(f"'{d / 'model.json'}' {what}; export the model again with `edgeseq translate export`")


def read_model_json(d: Path) -> dict:
    """A translation model directory's model.json, checked: every key the runtime reads is
    there with the right type and range (format at most FORMAT, arch one of ARCHS,
    max_source/max_target 2..MAX_LENGTH, special ids below the config's vocab), and every file
    it names lies inside the directory. ModelFileError names the key otherwise."""
    path = d / "model.json"
    try:
        meta = json.loads(path.read_bytes().decode("utf-8-sig"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        _fail(d, "is not valid UTF-8 JSON")
    if not isinstance(meta, dict) or meta.get("kind") != "translation":
        raise ModelFileError(f"'{d}' is not a translation model directory (model.json kind is not 'translation')")
    root = d.resolve()
    for key in ("encoder", "decoder", "tokenizer"):
        v = meta.get(key)
        if not isinstance(v, str) or not v:
            _fail(d, f"lacks the file name '{key}'")
        f = (d / v).resolve()
        if root not in f.parents:
            _fail(d, f"names {key} '{v}', outside the model directory; files must lie inside it")
        if not f.is_file():
            raise ModelFileError(f"'{d}' lacks {v}; export the model again with `edgeseq translate export`")

    def is_int(x, lo, hi=None):
        return isinstance(x, int) and not isinstance(x, bool) and x >= lo and (hi is None or x <= hi)
    fmt = meta.get("format", 1)
    if not is_int(fmt, 1):
        _fail(d, f"has format {_short(fmt)}, not a format number >= 1")
    if fmt > FORMAT:
        raise ModelFileError(f"'{path}' is format {fmt}; this runtime reads up to {FORMAT}: upgrade edgeseq")
    if meta.get("arch") not in ARCHS:
        _fail(d, f"has arch {_short(meta.get('arch'))}; a translation model is {' or '.join(ARCHS)}")

    for key in ("max_source", "max_target"):
        if not is_int(meta.get(key), 2, MAX_LENGTH):
            _fail(d, f"has {key} {_short(meta.get(key))}, not a whole number from 2 to {MAX_LENGTH}")
    config = meta.get("config")
    if not isinstance(config, dict):
        _fail(d, "lacks the model config")
    vocab = config.get("vocab")
    if vocab is not None and not is_int(vocab, 4):
        _fail(d, f"has config vocab {_short(vocab)}, not a whole number of tokens >= 4")
    sp = meta.get("special")
    if not isinstance(sp, dict) or not all(is_int(sp.get(k), 0) for k in ("bos", "eos")):
        _fail(d, "lacks whole-number special token ids bos and eos")
    for k, v in sp.items():
        if not is_int(v, 0) or vocab is not None and v >= vocab:
            _fail(d, f"has special token id {k} {_short(v)}, not a token id below the vocabulary's {vocab or 'size'}")
    outs = meta.get("encoder_outputs")
    if not isinstance(outs, list) or not all(isinstance(x, str) for x in outs):
        _fail(d, "has no list of encoder_outputs")
    static = meta.get("static")
    if not isinstance(static, dict) or not all(isinstance(v, str) and v in outs for v in static.values()):
        _fail(d, "has a 'static' map that does not name encoder outputs")
    state = meta.get("state")
    if not isinstance(state, list):
        _fail(d, "has no 'state' list")
    for i, st in enumerate(state):
        ok = isinstance(st, dict) and all(isinstance(st.get(k), str) for k in ("input", "output", "init"))
        if ok and st["init"] == "empty":
            ok = isinstance(st.get("shape"), list) and len(st["shape"]) == 2 and all(is_int(x, 1) for x in st["shape"])
        elif ok:
            ok = st["init"].startswith("encoder:") and st["init"].split(":", 1)[1] in outs
        if not ok:
            _fail(d, f"has state entry {i + 1} that cannot be used (input, output, init, shape)")
    return meta


def _short(v) -> str:
    """A bad value for a one-line message, cut short."""
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def length_penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


class Translator:
    def __init__(self, model_dir, provider: str = "cpu", threads: int = 0):
        d = Path(model_dir)
        if not d.is_dir():
            raise ModelFileError(f"model directory '{model_dir}' not found; export one with "
                                 f"`edgeseq translate export RUN --out {model_dir}`")
        if not (d / "model.json").is_file():
            raise ModelFileError(f"'{model_dir}' lacks model.json; it is not a translation model directory "
                                 "(export it again with `edgeseq translate export`)")
        self.meta = read_model_json(d)
        self.tok = Tokenizer.load(d / self.meta["tokenizer"])
        if self.tok.vocab_size > self.meta["config"].get("vocab", self.tok.vocab_size):
            raise ModelFileError(f"'{model_dir}': the tokenizer has {self.tok.vocab_size} tokens, the model reads "
                                 f"{self.meta['config']['vocab']}; export the model again")
        for k, v in self.meta["special"].items():
            if v >= self.tok.vocab_size:
                _fail(d, f"has special token id {k} {v}, beyond the tokenizer's {self.tok.vocab_size} tokens")
        providers = check_provider(provider)
        self.provider, self.device = provider, DEVICE[provider]
        so = session_options(threads)
        try:
            self.enc = ort.InferenceSession(str(d / self.meta["encoder"]), so, providers=providers)
            self.dec = ort.InferenceSession(str(d / self.meta["decoder"]), so, providers=providers)
        except Exception as e:
            first = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
            raise ModelFileError(f"'{model_dir}' holds an unreadable ONNX graph ({first}); export it again") from None
        confirm_provider(self.enc, provider)
        confirm_provider(self.dec, provider)
        self.dec_inputs = {i.name for i in self.dec.get_inputs()}
        enc_out = {o.name for o in self.enc.get_outputs()}
        dec_out = {o.name for o in self.dec.get_outputs()}
        want_in = {"token", "beam_index", "source_lengths"} | set(self.meta["static"]) | {x["input"] for x in self.meta["state"]}
        want_out = {"logprobs", "attention"} | {x["output"] for x in self.meta["state"]}
        for what, want, have in (("encoder outputs", set(self.meta["encoder_outputs"]), enc_out),
                                 ("decoder inputs", want_in, self.dec_inputs), ("decoder outputs", want_out, dec_out)):
            if not want <= have:
                raise ModelFileError(f"'{model_dir}': model.json names {what} {sorted(want - have)} the graphs lack; "
                                     "export the model again")
        self.bos, self.eos = self.meta["special"]["bos"], self.meta["special"]["eos"]
        self.max_source, self.max_target = self.meta["max_source"], self.meta["max_target"]

    # --- input -----------------------------------------------------------------------------

    def prepare(self, sentences: list, truncate: bool = False):
        """(ids [N, S] int64, lengths [N], per-sentence token lists, unknown chars per sentence)."""
        if isinstance(sentences, str):
            raise UsageError("pass a list of sentences")
        if not sentences:
            raise DataError("nothing to translate: no sentences given")
        rows, unknown = [], []
        for n, s in enumerate(sentences):
            try:
                s = check_text(s)
            except DataError:
                raise DataError(f"sentence {n + 1} is empty; nothing to translate") from None
            ids = self.tok.encode(s)
            if len(ids) + 1 > self.max_source:
                if not truncate:
                    raise DataError(f"sentence {n + 1} is {len(ids)} subword tokens; this model reads at most "
                                    f"{self.max_source - 1}: split it, or pass --truncate to cut it")
                ids = ids[:self.max_source - 1]
            rows.append(ids + [self.eos])
            unknown.append(self.tok.unknown_chars(s))
        S = max(len(r) for r in rows)
        src = np.zeros((len(rows), S), np.int64)
        for i, r in enumerate(rows):
            src[i, :len(r)] = r
        return src, np.array([len(r) for r in rows], np.int64), rows, unknown

    # --- one decoder, bound once per batch -------------------------------------------------

    def _start(self, src, lengths, repeat: int):
        """Run the encoder on every source row repeated `repeat` times; bind the decoder's
        static inputs and initial state. Returns the IO binding."""
        src, lengths = np.repeat(src, repeat, 0), np.repeat(lengths, repeat, 0)
        eb = self.enc.io_binding()
        eb.bind_cpu_input("source", src)
        eb.bind_cpu_input("source_lengths", lengths)
        names = self.meta["encoder_outputs"]
        for name in names:
            eb.bind_output(name, self.device)
        self.enc.run_with_iobinding(eb)
        enc = dict(zip(names, eb.get_outputs()))
        b = self.dec.io_binding()
        b.bind_cpu_input("source_lengths", lengths)
        for dec_name, enc_name in self.meta["static"].items():
            b.bind_ortvalue_input(dec_name, enc[enc_name])
        B = len(src)
        for s in self.meta["state"]:
            if s["init"] == "empty":
                v = ort.OrtValue.ortvalue_from_numpy(np.zeros((B, s["shape"][0], 0, s["shape"][1]), np.float32),
                                                     self.device, 0)
            else:
                v = enc[s["init"].split(":", 1)[1]]
            b.bind_ortvalue_input(s["input"], v)
        for name in ["logprobs", "attention"] + [s["output"] for s in self.meta["state"]]:
            b.bind_output(name, self.device)
        self._keep = enc                               # the bound encoder outputs must outlive the binding
        return b, B

    def _step(self, b, token, position, beam_index):
        b.bind_cpu_input("token", token)
        b.bind_cpu_input("beam_index", beam_index)
        if "position" in self.dec_inputs:
            b.bind_cpu_input("position", position)
        self.dec.run_with_iobinding(b)
        out = b.get_outputs()
        logp, att = out[0].numpy(), out[1]
        for s, v in zip(self.meta["state"], out[2:]):
            b.bind_ortvalue_input(s["input"], v)
        for s in self.meta["state"]:
            b.bind_output(s["output"], self.device)
        return logp, att

    def _limits(self, lengths, max_len) -> np.ndarray:
        """Most output tokens per sentence, int [N]: `max_len`, or 2 x its own source length + 10,
        never past the model's target limit. A sentence's limit never depends on its batch."""
        limit = np.minimum(2 * lengths + 10, self.max_target) if max_len is None \
            else np.full(len(lengths), min(max_len, self.max_target))
        return limit.astype(np.int64)

    # --- greedy ----------------------------------------------------------------------------

    def greedy(self, sentences: list, max_len: int | None = None, attention: bool = False,
               truncate: bool = False) -> list:
        src, lengths, rows, unknown = self.prepare(sentences, truncate)
        N = len(src)
        limits = self._limits(lengths, max_len)
        T = int(limits.max())
        b, _ = self._start(src, lengths, 1)
        token = np.full(N, self.bos, np.int64)
        keep = np.arange(N, dtype=np.int64)
        out = np.zeros((N, 0), np.int64)
        score = np.zeros(N)
        done = np.zeros(N, bool)
        stop = np.full(N, T)                              # tokens each sentence keeps
        atts = []
        for t in range(T):
            logp, att = self._step(b, token, np.full(N, t, np.int64), keep)
            nxt = logp.argmax(-1)
            score += np.where(done, 0.0, logp[np.arange(N), nxt])
            nxt = np.where(done, self.eos, nxt)
            out = np.concatenate([out, nxt[:, None]], 1)
            if attention:
                atts.append(att.numpy().copy())     # the bound output buffer is reused next step
            ends = ~done & ((nxt == self.eos) | (t + 1 >= limits))
            stop[ends] = t + 1
            done |= ends
            token = nxt
            if done.all():
                break
        res = []
        for n in range(N):
            ids = out[n, :stop[n]].tolist()
            A = np.stack([a[n, :lengths[n]] for a in atts[:len(ids)]]) if attention else None
            res.append(self._result(sentences[n], rows[n], ids, float(score[n]), float(score[n]), A, unknown[n]))
        return res

    # --- beam search -----------------------------------------------------------------------

    def beam(self, sentences: list, beam: int = 4, alpha: float = 0.6, max_len: int | None = None,
             attention: bool = False, truncate: bool = False) -> list:
        if not 1 <= beam <= MAX_BEAM:
            raise UsageError(f"beam size must be 1..{MAX_BEAM}, got {beam}: each hypothesis holds a decoder cache, "
                             "and past a few dozen a wider beam finds nothing better")
        if alpha < 0:
            raise UsageError("length penalty alpha must be >= 0")
        src, lengths, rows, unknown = self.prepare(sentences, truncate)
        N, k = len(src), beam
        limits = self._limits(lengths, max_len)
        T = int(limits.max())
        b, B = self._start(src, lengths, k)
        scores = np.full((N, k), NEG)
        scores[:, 0] = 0.0                               # one live hypothesis per sentence at the start
        token = np.full(B, self.bos, np.int64)
        index = np.arange(B, dtype=np.int64)
        hist = np.zeros((B, 0), np.int64)
        att_hist = np.zeros((B, 0, src.shape[1]), np.float32)
        finished = [[] for _ in range(N)]                # (normalized, score, ids, attention)
        done = np.zeros(N, bool)
        for t in range(T):
            logp, att = self._step(b, token, np.full(B, t, np.int64), index)
            if attention:
                att_hist = np.concatenate([att_hist, att.numpy()[:, None]], 1)      # concatenate copies
            V = logp.shape[1]
            cand = (scores.reshape(B, 1) + logp).reshape(N, k * V)
            top = np.argpartition(-cand, 2 * k, axis=1)[:, :2 * k]
            new_scores = np.full((N, k), NEG)
            new_index = np.tile(np.arange(B, dtype=np.int64).reshape(N, k)[:, :1], (1, k)).ravel()
            new_token = np.full(B, self.eos, np.int64)
            lp = length_penalty(t + 1, alpha)
            for n in range(N):
                if done[n]:
                    continue
                order = top[n][np.argsort(-cand[n, top[n]], kind="stable")]
                j = 0
                for c in order:
                    s = float(cand[n, c])
                    if s <= NEG / 2:
                        break
                    beam_id, w = divmod(int(c), V)
                    row = n * k + beam_id
                    if w == self.eos:
                        A = att_hist[row, :, :lengths[n]] if attention else None
                        finished[n].append((s / lp, s, hist[row].tolist() + [self.eos], A))
                        continue
                    new_scores[n, j] = s
                    new_index[n * k + j] = row
                    new_token[n * k + j] = w
                    j += 1
                    if j == k:
                        break
                finished[n].sort(key=lambda f: -f[0])
                del finished[n][k:]
                if len(finished[n]) == k and new_scores[n, 0] / lp <= finished[n][-1][0]:
                    done[n] = True                       # no live hypothesis can pass the worst finished one
                elif t + 1 >= limits[n]:                 # its own length limit: the best live one ends here
                    if not finished[n] and new_scores[n, 0] > NEG / 2:
                        row0 = int(new_index[n * k])
                        A = att_hist[row0, :, :lengths[n]] if attention else None
                        finished[n].append((new_scores[n, 0] / lp, float(new_scores[n, 0]),
                                            hist[row0].tolist() + [int(new_token[n * k])], A))
                    done[n] = True
            if done.all():
                break
            scores, index, token = new_scores, new_index, new_token
            hist = np.concatenate([hist[index], token[:, None]], 1)
            if attention:
                att_hist = att_hist[index]
        greedy = self.greedy(sentences, max_len, attention, truncate) if k > 1 else [None] * N
        res = []
        for n in range(N):
            g = greedy[n]
            if g is not None:                            # beam search can prune the greedy path: keep it
                finished[n].append((g.score / length_penalty(len(g.ids), alpha), g.score, g.ids, g.attention))
            if not finished[n]:                          # max_len reached before any </s>
                lp = length_penalty(hist.shape[1], alpha)
                row = n * k + int(np.argmax(scores[n]))
                A = att_hist[row, :, :lengths[n]] if attention else None
                finished[n].append((scores[n].max() / lp, float(scores[n].max()), hist[row].tolist(), A))
            best = max(finished[n], key=lambda f: f[0])
            res.append(self._result(sentences[n], rows[n], best[2], best[1], best[0], best[3], unknown[n]))
        return res

    def _result(self, source, src_ids, ids, score, normalized, A, unknown) -> Translation:
        return Translation(source=source, text=self.tok.decode(ids), ids=list(map(int, ids)), score=score,
                           normalized=normalized,
                           source_pieces=self.tok.pieces(src_ids), target_pieces=self.tok.pieces(ids),
                           attention=A, unknown=unknown)


def attention_png(t: Translation, path) -> str:
    """Cross-attention heatmap (target tokens down, source tokens across) as a PNG, written to
    `.<name>.<pid>.<random>.tmp` beside `path` and renamed into place: a failed write (a full
    disk) raises an OSError naming `path` and leaves an old file as it was."""
    if t.attention is None:
        raise UsageError("this translation carries no attention weights; decode with attention=True")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    A = t.attention
    fig, ax = plt.subplots(figsize=(max(4, 0.5 * A.shape[1] + 2), max(3, 0.4 * A.shape[0] + 1.5)))
    im = ax.imshow(A, cmap="viridis", aspect="auto", vmin=0, vmax=1)
    ax.set_xticks(range(A.shape[1]), [p.replace("\u2581", "_") for p in t.source_pieces[:A.shape[1]]],
                  rotation=60, ha="right")
    ax.set_yticks(range(A.shape[0]), [p.replace("\u2581", "_") for p in t.target_pieces[:A.shape[0]]])
    ax.set_xlabel("source (English)")
    ax.set_ylabel("output (French)")
    ax.set_title(f"cross-attention: {t.source!r} -> {t.text!r}"[:90], fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.04)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    _write_atomically(Path(path), buf.getvalue())
    return str(path)


def _write_atomically(path: Path, data: bytes) -> None:
    """`data` to `path` through a temporary file beside it (`edgeseq.runtime.statefile.write_files`)."""
    from edgeseq.runtime.statefile import write_files
    write_files({path: data})