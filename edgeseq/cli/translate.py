"""`edgeseq translate ...`: English -> French translation models, from training to decoding."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from edgeseq.cli._common import Finite, _echo_json, _errors, _json_option, _provider_option, _seed_option, _writing
from edgeseq.errors import DataError, EdgeseqError, UsageError, printable


@click.group()
def translate():
    """English -> French translation: encoder-decoder Transformer or LSTM with attention.

    \b
      edgeseq translate train --arch transformer --out runs/mt
      edgeseq translate export runs/mt --out models/mt
      edgeseq translate run models/mt "Save the notebook" --beam 4
      cat sentences.txt | edgeseq translate run models/mt - --provider cuda
      edgeseq translate eval models/mt --json
      edgeseq translate run models/mt "Open the file" --attention attn.png
      edgeseq translate bench runs/mt
    """


@translate.command(name="train")
@click.option("--arch", default="transformer", show_default=True, help="transformer or lstm-attn.")
@click.option("--corpus", default="jupyterlab-fr", show_default=True,
              help="'jupyterlab-fr' (from the installed language pack) or a TSV of source<TAB>target.")
@click.option("--out", required=True, type=click.Path(), help="Run directory.")
@click.option("--epochs", type=click.IntRange(min=1))
@click.option("--lr", type=Finite(min=0, min_open=True))
@_seed_option
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE", help="Model setting, e.g. --set d_model=64.")
@_json_option
@click.option("--quiet", is_flag=True, help="No progress bar.")
@_errors
def translate_train(arch, corpus, out, epochs, lr, seed, settings, as_json, quiet):
    """Train a translation model (a few minutes on 2 cores) and save its run directory."""
    from edgeseq.train import parse_overrides
    from edgeseq.translate.corpus import load_corpus
    from edgeseq.translate.models import check_arch
    from edgeseq.translate.train import DEFAULTS, save_run, train_mt, with_overrides

    check_arch(arch)
    overrides = parse_overrides(settings)
    c = load_corpus(corpus)
    tc = with_overrides(DEFAULTS[arch], epochs=epochs, lr=lr, seed=seed)
    ckpt = train_mt(arch, c, tc, overrides, progress=not quiet and not as_json)
    with _writing(out):
        path = save_run(ckpt, out)
    m = ckpt["metrics"]
    if as_json:
        _echo_json({"checkpoint": str(path), "arch": arch, "corpus": c.name, "pairs": ckpt["pairs"], **m})
    else:
        click.echo(f"{arch} on {printable(c.name)}: {ckpt['pairs']['train']} training pairs, {m['parameters']:,} parameters, "
                   f"{m['train_seconds']:.0f} s, final loss {m['final_loss']:.3f} -> {printable(path)}")


@translate.command(name="export")
@click.argument("run", type=click.Path())
@click.option("--out", required=True, type=click.Path(), help="Model directory to write.")
@_json_option
@_errors
def translate_export(run, out, as_json):
    """Export encoder.onnx + decoder.onnx + tokenizer.json + model.json, validated against torch
    (greedy token ids identical on dev sentences); an existing directory is replaced only then."""
    from edgeseq.translate.train import load_run
    from export.translate import export_translation

    ckpt = load_run(run)
    with _writing(out):
        r = export_translation(ckpt, out)
    if as_json:
        _echo_json(r)
    else:
        size = sum(r["files"].values())
        click.echo(f"wrote {printable(r['path'])}/ ({', '.join(r['files'])}; {size:,} bytes); ONNX Runtime greedy ids identical "
                   f"to torch on {r['sentences']} sentences, log-prob diff {r['max_logprob_diff_per_token']:.1e}/token")


def _read_sentences(text):
    """(sentences, from_stdin): TEXT itself, or stdin's lines (UTF-8, split at line feeds only)."""
    if text != "-":
        return [text], False
    from edgeseq.runtime.live import stdin_bytes
    raw = stdin_bytes().read()
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    parts = raw.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    lines = []
    for n, part in enumerate(parts, start=1):
        try:
            lines.append(part.decode("utf-8").rstrip("\r"))
        except UnicodeDecodeError:
            raise DataError(f"input line {n} is not UTF-8 text; save the input as UTF-8") from None
    return lines, True


def _writable_file(path, option, suffix=None):
    """UsageError unless `path` can be created: its folder exists and is writable. A part of
    the path that is a file, not a folder, is named as such."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    shown, shown_parent = printable(path), printable(parent)       # for the messages
    if p.is_dir():
        raise UsageError(f"{option} '{shown}' is a directory; give a file name")
    if suffix and p.suffix.lower() != suffix:
        raise UsageError(f"{option} '{shown}' must end in {suffix}")
    if not parent.is_dir():
        for above in (parent, *parent.parents):
            if above.exists() or above.is_symlink():
                if not above.is_dir():
                    raise UsageError(f"{option} '{shown}': '{printable(above)}' is a file, not a folder; choose a path in a "
                                     "folder")
                break
        raise UsageError(f"{option} '{shown}': folder '{shown_parent}' does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{option} '{shown}': folder '{shown_parent}' is not writable; choose another path")


@translate.command(name="run")
@click.argument("model", type=click.Path())
@click.argument("text")
@click.option("--beam", type=click.IntRange(min=1), default=1, show_default=True, help="Beam size (1: greedy).")
@click.option("--alpha", type=Finite(min=0), default=0.6, show_default=True, help="Length penalty (beam).")
@click.option("--max-len", type=click.IntRange(min=1), help="Most output tokens (default 2 x source + 10).")
@_provider_option
@click.option("--truncate", is_flag=True, help="Cut over-long sentences to the model's limit instead of refusing.")
@click.option("--attention", type=click.Path(), help="Write the cross-attention heatmap of the (first) sentence as PNG.")
@click.option("--batch", type=click.IntRange(min=1), default=32, show_default=True, help="Sentences per call (stdin).")
@click.option("--json", "as_json", is_flag=True, help="JSON lines: source, text, score, tokens.")
@_errors
def translate_run(model, text, beam, alpha, max_len, provider, truncate, attention, batch, as_json):
    """Translate TEXT, or one sentence per line from stdin with TEXT '-'.

    From stdin, an empty line gives an empty output line, so output lines match input lines.
    A sentence over the model's source limit (95 subword tokens) is refused unless --truncate.
    Characters never seen in training become <unk>; a note on stderr names them.
    """
    from edgeseq.translate.runtime import Translator, attention_png

    if attention is not None:
        _writable_file(attention, "--attention", ".png")
    sentences, from_stdin = _read_sentences(text)
    tr = Translator(model, provider=provider)
    want_att = attention is not None
    first = True
    for i in range(0, len(sentences), batch):
        chunk = sentences[i:i + batch]
        real = [(j, s) for j, s in enumerate(chunk) if s.strip()] if from_stdin else list(enumerate(chunk))
        results = {}
        if real:
            try:
                texts = [s for _, s in real]
                out = tr.greedy(texts, max_len, want_att and first, truncate) if beam == 1 else \
                    tr.beam(texts, beam, alpha, max_len, want_att and first, truncate)
            except EdgeseqError as e:
                if from_stdin and "sentence " in str(e):       # name the input line, not the batch index
                    n = int(str(e).split("sentence ", 1)[1].split()[0])
                    raise type(e)(str(e).replace(f"sentence {n}", f"input line {i + real[n - 1][0] + 1}", 1)) from None
                raise
            results = {j: r for (j, _), r in zip(real, out)}
        for j, s in enumerate(chunk):
            r = results.get(j)
            if r is not None and r.unknown:
                click.echo(f"note: line {i + j + 1}: characters not seen in training became <unk>: "
                           f"{' '.join(map(printable, r.unknown))}", err=True)
            if as_json:
                click.echo(json.dumps({"source": s, "text": r.text if r else "", "score": round(r.score, 4) if r else None,
                                       "tokens": len(r.ids) if r else 0}, ensure_ascii=False))
            else:
                click.echo(r.text if r else "")
            if r is not None and want_att and first:
                click.echo(f"attention heatmap: {printable(attention_png(r, attention))}", err=True)
                first = False


@translate.command(name="eval")
@click.argument("model", type=click.Path())
@click.option("--corpus", default="jupyterlab-fr", show_default=True)
@click.option("--split", type=click.Choice(["test", "dev"]), default="test", show_default=True)
@click.option("--beam", "beams", type=click.IntRange(min=1), multiple=True, default=(1, 4), show_default=True,
              help="Beam sizes to score (1: greedy); repeat the option for several.")
@_provider_option
@_json_option
@_errors
def translate_eval(model, corpus, split, beams, provider, as_json):
    """BLEU and chrF (sacrebleu) on a held-out split, greedy and beam search."""
    from edgeseq.translate.evaluate import evaluate_mt

    r = evaluate_mt(model, corpus, split, beams=list(beams), provider=provider)
    if as_json:
        _echo_json(r)
        return
    click.echo(f"{r['arch']} on {printable(r['corpus'])} {split} ({r['sentences']} sentences):")
    for k, v in r["results"].items():
        click.echo(f"  {k:8s} BLEU {v['bleu']:5.1f}  chrF {v['chrf']:5.1f}  {v['sentences_per_s']:.0f} sentences/s")


@translate.command(name="bench")
@click.argument("run", type=click.Path())
@click.option("--sentences", type=click.IntRange(min=1), default=50, show_default=True)
@_json_option
@_errors
def translate_bench(run, sentences, as_json):
    """Greedy decoding speed: ONNX Runtime with the KV cache against torch eager recomputing the
    prefix at every step (and torch with its cache, for reference), same model, same sentences."""
    from edgeseq.translate.bench import format_bench, run_bench
    from edgeseq.translate.train import load_run

    r = run_bench(load_run(run), n=sentences)
    click.echo(json.dumps(r, indent=2) if as_json else format_bench(r))
