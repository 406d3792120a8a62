"""The `edgeseq` command: thin commands over library calls.

Library errors become one-line `Error:` messages: exit 1 when something failed at run time,
exit 2 when the request itself was wrong. torch is imported only inside the commands that
train or export, so `stream` and `eval` work with the runtime-only install.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import math
import os
import re
import sys
from pathlib import Path

import click

from edgeseq import __version__
from edgeseq.errors import DataError, EdgeseqError, UsageError


def _one_line(text) -> str:
    """An error message as one line (a library message may quote a multi-line OS error)."""
    return " ".join(str(text).split())


def _os_error(e: OSError) -> str:
    """One line for an OSError: what failed, on which file, and what to do."""
    what = e.strerror or type(e).__name__
    where = e.filename if e.filename is not None else None
    if isinstance(e, (FileNotFoundError, NotADirectoryError)):
        todo = "check the path"
    elif isinstance(e, PermissionError) or e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        todo = "choose a path you can write to (or fix its permissions)"
    elif e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        todo = "free some space, then run it again"
    elif isinstance(e, IsADirectoryError):
        todo = "give a file, not a directory"
    else:
        todo = "check the path and the device, then run it again"
    return f"{what}: '{where}'; {todo}" if where is not None else f"{what}; {todo}"


def _errors(fn):
    """The CLI's one error boundary: every foreseeable failure becomes one `Error:` line with
    exit 1 (it failed at run time) or 2 (the request was wrong), never a traceback.

    edgeseq errors keep their own message; an OSError names the file and what to do; text
    that is not UTF-8 names the encoding problem; a missing optional dependency names the
    extra to install. Anything else is a bug: one line says so (EDGESEQ_TRACEBACK=1 shows it).
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except UsageError as e:
            raise click.UsageError(_one_line(e)) from None
        except EdgeseqError as e:
            raise click.ClickException(_one_line(e)) from None
        except ModuleNotFoundError as e:
            top = (e.name or "").split(".")[0]
            if top in ("torch", "onnx", "onnxscript", "tqdm"):
                raise click.ClickException(
                    f"this command needs {top}, which the runtime-only install leaves out; "
                    'install the training extra: pip install "edgeseq[train]" torch==2.13.0') from None
            if top in ("tokenizers", "sacrebleu", "matplotlib"):
                raise click.ClickException(
                    f"this command needs {top}; install the translation extra: "
                    'pip install "edgeseq[translate]"') from None
            raise click.ClickException(f"this command needs the module {e.name}; reinstall edgeseq") from None
        except OSError as e:
            if e.errno == errno.EPIPE:       # the reader went away (e.g. `| head`): nothing to report
                raise click.exceptions.Exit(1) from None
            raise click.ClickException(_one_line(_os_error(e))) from None
        except UnicodeError as e:
            raise click.ClickException(_one_line(f"text that is not UTF-8 ({e.reason} at byte {e.start}); "
                                                 "save the file as UTF-8")) from None
        except MemoryError:
            raise click.ClickException("out of memory; ask for less (fewer readings, streams or history)") from None
        except Exception as e:
            if os.environ.get("EDGESEQ_TRACEBACK"):
                raise
            raise click.ClickException(_one_line(
                f"unexpected {type(e).__name__}: {e}; this is a bug in edgeseq, please report it "
                "(EDGESEQ_TRACEBACK=1 shows where)")) from None
    return wrapper


def _temp_of(name, target) -> bool:
    """Whether file `name` is, or lies inside, a temporary file or working directory of `target`
    (`.<target name>.<...>.tmp`, see edgeseq.runtime.statefile.temp_prefix)."""
    head = f".{Path(target).name}."
    return any(part.startswith(head) and part.endswith(".tmp") and len(part) > len(head) + 4
               for part in Path(str(name)).parts)


@contextlib.contextmanager
def _writing(path):
    """An OSError while writing `path` names it: a failed write() carries no file name, and one
    that names a temporary file of `path` (`.<name>.<pid>.<random>.tmp`) names `path` instead,
    the file the user asked for."""
    try:
        yield
    except OSError as e:
        if path is not None and (e.filename is None or _temp_of(e.filename, path)):
            e.filename = str(path)
        raise


MAX_HISTORY = 1 << 20                # edgeseq.runtime.session.MAX_HISTORY (not imported: it loads onnxruntime)
_DATA_HELP = ("'basicmotions' or a .npz / .csv path (default: the data the model was trained on, as its file "
              "records; basicmotions for files exported before it did)")


class Finite(click.ParamType):
    """A float option that must be a finite number (click's FloatRange lets NaN and inf
    through), optionally bounded: Finite(min=0, min_open=True) is "> 0"."""

    name = "number"

    def __init__(self, min=None, max=None, min_open=False, max_open=False):
        self.min, self.max, self.min_open, self.max_open = min, max, min_open, max_open

    def convert(self, value, param, ctx):
        if isinstance(value, float) and math.isfinite(value):
            number = value
        else:
            try:
                number = float(value)
            except (TypeError, ValueError, OverflowError):
                self.fail(f"'{str(value)[:30]}' is not a number", param, ctx)
            if not math.isfinite(number):
                self.fail(f"'{str(value)[:30]}' is not a finite number", param, ctx)
        low = self.min is not None and (number <= self.min if self.min_open else number < self.min)
        high = self.max is not None and (number >= self.max if self.max_open else number > self.max)
        if low or high:
            parts = ([f"{'>' if self.min_open else '>='} {self.min:g}"] if self.min is not None else []) + \
                    ([f"{'<' if self.max_open else '<='} {self.max:g}"] if self.max is not None else [])
            self.fail(f"{number:g} is not {' and '.join(parts)}", param, ctx)
        return number


class History(click.ParamType):
    """A --max-history: a whole number of readings from 1 to MAX_HISTORY (the longest history
    the export's dynamic axis takes)."""

    name = "readings"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        else:
            text = str(value).strip()
            if len(text) > 40 or not re.fullmatch(r"[+-]?[0-9]+", text):
                self.fail(f"'{text[:30]}' is not a whole number of readings", param, ctx)
            n = int(text)
        if n < 1:
            self.fail(f"{n} readings: it must be at least 1", param, ctx)
        if n > MAX_HISTORY:
            self.fail(f"{str(n)[:30]} readings is beyond {MAX_HISTORY:,}, the longest history an exported model "
                      "takes", param, ctx)
        return n


class _Cli(click.Group):
    """The top-level group: click's own usage errors also end in one `Error:` line (the
    command's --help is named in it) instead of click's three-line usage block."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as e:
            path = e.ctx.command_path if e.ctx is not None else (prog_name or "edgeseq")
            click.echo(f"Error: {_one_line(e.format_message())} (see '{path} --help')", err=True)
            sys.exit(e.exit_code)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("stopped", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


def _note_window(max_history, window):
    """A note on stderr when a cache bound differs from the window a Transformer attends to."""
    if max_history and isinstance(window, int) and 0 < window < max_history:
        click.echo(f"note: the model attends to its last {window} readings (its training window); a cache of "
                   f"{max_history} holds {max_history - window} readings it never reads: --max-history {window} "
                   "gives the same answers with less memory", err=True)
    elif max_history and isinstance(window, int) and (max_history < window or window == 0):
        trained = f"its last {window} readings" if window else "its whole history"
        fix = f"--max-history {window} or more gives" if window else "no --max-history gives"
        click.echo(f"note: the model was trained to attend to {trained}; a cache of {max_history} shows it only "
                   f"{max_history}, so its answers differ from the trained model's (usually less accurate): "
                   f"{fix} the trained answers", err=True)


def _echo_json(obj):
    click.echo(json.dumps(obj, indent=2))


@click.group(cls=_Cli)
@click.version_option(__version__, prog_name="edgeseq")
def cli():
    """edgeseq: train, export and stream tiny sequence models on edge devices.

    \b
      edgeseq train --arch gru --data basicmotions --out runs/gru
      edgeseq export runs/gru --out models/gru.onnx
      edgeseq export runs/gru --int8 --out models/gru-int8.onnx
      edgeseq eval models/gru.onnx --data basicmotions --json
      edgeseq compare models/gru.onnx models/gru-int8.onnx
      edgeseq stream models/gru.onnx --input readings.csv
      edgeseq bench --json
      edgeseq report --out reports/edge
      edgeseq firmware check models/gru-int8.onnx --target nrf52840
      edgeseq translate run models/mt "Save the notebook" --beam 4
    """


@cli.command()
@click.option("--arch", default="gru", show_default=True, help="rnn, gru, lstm, transformer, ssm, bigru or bilstm.")
@click.option("--data", default="basicmotions", show_default=True, help="'basicmotions' or a .npz / .csv path.")
@click.option("--out", required=True, type=click.Path(), help="Run directory for checkpoint.pt and metrics.json.")
@click.option("--epochs", type=click.IntRange(min=1), help="Override the architecture's default schedule.")
@click.option("--lr", type=Finite(min=0, min_open=True), help="Peak learning rate.")
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True)
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="Model setting, e.g. --set hidden=32 --set layers=2.")
@click.option("--json", "as_json", is_flag=True, help="Print metrics as JSON.")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@_errors
def train(arch, data, out, epochs, lr, seed, settings, as_json, quiet):
    """Train a model and save a checkpoint that carries its config, normalisation and labels.

    \b
    User data: .npz with X [N,T,F], y [N], optional lengths [N]; or .csv with one reading
    per row and columns sequence,label,<features...> (optional split=train|test column).
      edgeseq train --arch lstm --data basicmotions --out runs/lstm
      edgeseq train --arch gru --data mydata.npz --out runs/mine --set hidden=32
      edgeseq train --arch ssm --out runs/ssm --set selective=true
    """
    from dataclasses import replace

    from edgeseq.data import load_dataset
    from edgeseq.models import check_arch
    from edgeseq.train import DEFAULTS, TrainConfig, parse_overrides, save_checkpoint
    from edgeseq.train import train as train_fn

    check_arch(arch)
    overrides = parse_overrides(settings)
    dataset = load_dataset(data)
    tc = DEFAULTS.get(arch, TrainConfig())
    tc = replace(tc, seed=seed, **({"epochs": epochs} if epochs else {}), **({"lr": lr} if lr else {}))
    if Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"--out '{out}' is a file; give a directory for checkpoint.pt and metrics.json")
    ckpt = train_fn(arch, dataset, tc, overrides, progress=not quiet)      # progress goes to stderr
    with _writing(out):
        path = save_checkpoint(ckpt, out)
    m = ckpt["metrics"]
    if as_json:
        _echo_json({"checkpoint": str(path), "arch": arch, **m})
    else:
        click.echo(f"{arch} on {dataset.name}: test accuracy {m['test_accuracy']:.3f} "
                   f"(train {m['train_accuracy']:.3f}) in {m['train_seconds']:.1f} s -> {path}")


@cli.command()
@click.argument("run", type=click.Path())
@click.option("--out", required=True, type=click.Path(), help="Model file to write (.onnx).")
@click.option("--max-history", type=History(),
              help=f"Transformer: default bound on cached readings (1 to {MAX_HISTORY:,}).")
@click.option("--int8", is_flag=True, help="Quantize weights to int8 (MatMul/Gemm, per channel).")
@click.option("--int8-scheme", type=click.Choice(["static", "dynamic"]), default="static", show_default=True,
              help="static: int8 activations with scales calibrated on training streams; "
                   "dynamic: uint8 activations scaled per call.")
@click.option("--data", help="int8: data for calibration and checks (default: the run's training data).")
@click.option("--max-error", type=Finite(min=0), default=0.02, show_default=True,
              help="int8: bound on the mean output error, as a fraction of the float output range.")
@click.option("--max-accuracy-drop", type=Finite(min=0), default=0.01, show_default=True,
              help="int8: bound on per-reading test accuracy lost to quantization (0.01 = one point).")
@click.option("--keep-anyway", is_flag=True, help="int8: write the model even if it breaks a bound.")
@click.option("--json", "as_json", is_flag=True)
@_errors
def export(run, out, max_history, int8, int8_scheme, data, max_error, max_accuracy_drop, keep_anyway, as_json):
    """Export a trained run to one ONNX step graph, validated before it is written.

    Float: written only if ONNX Runtime matches torch over a 200-reading stream: logits and
    probabilities within 1e-6 + 2e-5 x the largest |logit|, and the same top class wherever
    it is clear. int8 (--int8): also written only if, against its float twin, the mean logit
    error stays within --max-error of the output range over 4 streams of 500 real readings
    and per-reading test accuracy drops by at most --max-accuracy-drop. A failed export
    leaves an existing file at --out alone.

    \b
      edgeseq export runs/gru --out models/gru.onnx
      edgeseq export runs/gru --int8 --out models/gru-int8.onnx
      edgeseq export runs/lstm --int8 --int8-scheme dynamic --out models/lstm-int8.onnx
      edgeseq export runs/transformer --out models/tr.onnx --max-history 256
    """
    from edgeseq.train import load_checkpoint
    from export import export_int8, export_model

    int8_only = [name for name, given in (("--int8-scheme", int8_scheme != "static"), ("--data", data),
                                           ("--max-error", max_error != 0.02),
                                           ("--max-accuracy-drop", max_accuracy_drop != 0.01),
                                           ("--keep-anyway", keep_anyway)) if given]
    if int8_only and not int8:
        raise UsageError(f"{', '.join(int8_only)} applies to int8 export only; add --int8")
    ckpt = load_checkpoint(run)
    _note_window(max_history, (ckpt.get("config") or {}).get("window"))
    with _writing(out):
        if int8:
            report = export_int8(ckpt, out, int8_scheme, data=data, max_history=max_history, max_error=max_error,
                                 max_accuracy_drop=max_accuracy_drop, keep_anyway=keep_anyway)
        else:
            report = export_model(ckpt, out, max_history=max_history)
    if as_json:
        _echo_json(report)
    elif int8:
        r = report
        click.echo(f"wrote {r['path']} ({r['bytes']:,} bytes; float export {r['float_bytes']:,}); "
                   f"int8 {int8_scheme} vs float over {r['streams']}x{r['readings']} readings: "
                   f"mean error {r['mean_rel']:.2%} of range "
                   f"(max {r['max_rel']:.1%}), test accuracy {r['int8_accuracy']:.3f} vs {r['float_accuracy']:.3f}")
        if not r["within_bounds"]:
            click.echo("warning: this model breaks its bound (kept because of --keep-anyway)", err=True)
    else:
        click.echo(f"wrote {report['path']} ({report['bytes']:,} bytes); ONNX Runtime vs torch max abs diff "
                   f"{report['max_abs_diff']:.2e} (tolerance {report['tolerance']:g})")


@cli.command()
@click.argument("models", nargs=-1, required=True, type=click.Path())
@click.option("--data", help="'basicmotions' or a .npz / .csv path (default: the data the first model was trained "
              "on, as its file records; basicmotions for files exported before it did)")
@click.option("--readings", type=click.IntRange(min=1), default=500, show_default=True,
              help="Readings per stream for the output difference.")
@click.option("--rounds", type=click.IntRange(min=1), default=20, show_default=True,
              help="Latency: interleaved rounds of 100 readings per model.")
@click.option("--json", "as_json", is_flag=True)
@click.option("--backend", type=click.Choice(["auto", "onnxruntime", "native"]), default=None,
              help="Step backend: native (compiled C step: RNN/GRU/LSTM/SSM, float and static int8) or onnxruntime; "
                   "auto (default, or $EDGESEQ_BACKEND) picks native where it can run.")
@_errors
def compare(models, data, readings, rounds, backend, as_json):
    """Compare models side by side: size, test accuracy, output difference over long streams
    from each model's twin (the first earlier model in the list with the same architecture,
    settings, labels, features and normalisation: a float model and its int8 export; n/a
    where there is none), and per-reading latency, on the first model's training data
    unless --data says otherwise.

    \b
      edgeseq compare models/gru.onnx models/gru-int8.onnx
      edgeseq compare models/lstm.onnx models/lstm-int8.onnx models/lstm-dyn.onnx --json
    """
    from edgeseq.report.compare import compare_models, format_compare

    r = compare_models(list(models), data=data, readings=readings, rounds=rounds, backend=backend)
    click.echo(json.dumps(r, indent=2) if as_json else format_compare(r))


@cli.command(name="eval")
@click.argument("model", type=click.Path())
@click.option("--data", help=_DATA_HELP)
@click.option("--split", type=click.Choice(["test", "train"]), default="test", show_default=True)
@click.option("--provider", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.option("--backend", type=click.Choice(["auto", "onnxruntime", "native"]), default=None,
              help="Step backend: native (compiled C step: RNN/GRU/LSTM/SSM, float and static int8) or onnxruntime; "
                   "auto (default, or $EDGESEQ_BACKEND) picks native where it can run.")
@_errors
def eval_cmd(model, data, split, provider, backend, as_json):
    """Accuracy of an exported model, streamed one reading at a time as deployed, on two
    protocols: per sequence (each test sequence its own stream, from zero state) and
    continuous (the test sequences joined end to end in 3 seeded orders, never reset, as a
    device sees them; scored per reading after a 20-reading grace period after each change
    of label, at each sequence's last reading, and by the readings taken to follow a change).

    The data defaults to the model's own training data (recorded in the file at export).

    \b
      edgeseq eval models/gru.onnx --json
      edgeseq eval models/mine.onnx --data new-recordings.csv
    """
    from edgeseq.runtime import evaluate
    from edgeseq.runtime.model import model_data

    ds = model_data(model, data)
    r = evaluate(model, getattr(ds, split), labels=ds.labels, provider=provider, features=ds.features, backend=backend)
    r["data"], r["split"] = ds.name, split
    if as_json:
        _echo_json(r)
        return
    click.echo(f"{r['arch']} ({r.get('backend', 'onnxruntime')} backend) on {ds.name} {split}, per sequence (reset at "
               f"each start): accuracy {r['accuracy']:.3f} "
               f"({r['n']} sequences)")
    if r["accuracy_at_fraction"]:
        parts = ", ".join(f"{float(k):.0%}: {v:.3f}" for k, v in r["accuracy_at_fraction"].items())
        click.echo(f"  running prediction after {parts} of each sequence")
    c = r["continuous"]
    if c:
        follow = "never" if c["median_readings_to_follow"] is None else f"{c['median_readings_to_follow']:.0f}"
        per = (f"{c['reading_accuracy']:.3f} (past {c['grace']} readings after each change)" if c["scored_readings"]
               else f"n/a (no reading lies {c['grace']} readings past a change: the sequences are too short)")
        click.echo(f"continuous (never reset, {c['orders']} orders x {c['readings_per_stream']:,} readings): "
                   f"per reading {per}, "
                   f"at each sequence's last reading {c['last_reading_accuracy']:.3f}; median readings to follow "
                   f"a change {follow} ({c['followed']:.0%} of {c['changes']} changes followed)")


@cli.command()
@click.argument("model", type=click.Path())
@click.option("--input", "input_", default="-", show_default=True,
              type=click.Path(allow_dash=True, exists=True, dir_okay=False),
              help="CSV of readings, one per line ('-' for stdin).")
@click.option("--provider", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--max-history", type=History(),
              help=f"Transformer: bound on cached readings (1 to {MAX_HISTORY:,}); a usage error for a recurrent "
                   "model, whose state is fixed.")
@click.option("--on-full", type=click.Choice(["error", "slide"]), default="slide", show_default=True,
              help="When --max-history is reached: stop, or drop the oldest reading.")
@click.option("--on-bad", type=click.Choice(["error", "skip"]), default="error", show_default=True,
              help="A bad reading stops the stream, or is reported and skipped.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines: one object per reading.")
@click.option("--state-file", type=click.Path(), help="Resume from this file if it matches the model (else it is "
              "moved aside to FILE.rejected); save to it atomically every --save-every readings and on exit, Ctrl-C "
              "or SIGTERM.")
@click.option("--save-every", type=click.IntRange(min=1), default=500, show_default=True)
@click.option("--backend", type=click.Choice(["auto", "onnxruntime", "native"]), default=None,
              help="Step backend: native (compiled C step: RNN/GRU/LSTM/SSM, float and static int8) or onnxruntime; "
                   "auto (default, or $EDGESEQ_BACKEND) picks native where it can run.")
@_errors
def stream(model, input_, provider, max_history, on_full, on_bad, as_json, state_file, save_every, backend):
    """Stream readings through a model, one per line, printing the prediction after each.

    Input: one reading per line, comma-separated, features in the model's order. A first line
    of feature names is read as a header and may reorder the columns; with a header, every
    other column (a timestamp, `sequence`, notes) is ignored whatever it holds, so a training
    CSV streams as it is. Output: the CSV line `reading,label,probability` (a label holding a
    comma or a line break is quoted), or JSON; a header column `label` adds the true label to
    each line (`true` in JSON) and its accuracy to the summary on stderr. With --on-bad skip, a
    skipped line is reported on stderr, so stdout holds one line per reading.

    --state-file: a file that cannot be used (written for another model, corrupt, values that
    do not fit) is never overwritten: it is moved aside to FILE.rejected (FILE.rejected.1, ...
    if that is taken), a note on stderr says where, and the stream starts fresh. A symbolic
    link is followed: the lock, the reads and the writes act on the file it points to. A save
    keeps the file's permissions.

    \b
      edgeseq stream models/gru.onnx --input readings.csv
      tail -f sensor.csv | edgeseq stream models/gru.onnx --input - --json
    """
    from edgeseq.runtime import StreamSession
    from edgeseq.runtime.live import stdin_bytes
    from edgeseq.runtime.statefile import check_state_path, lock_state_file

    if state_file is not None:
        check_state_path(state_file, protect=(model, input_))
    sess = StreamSession(model, provider=provider, max_history=max_history, on_full=on_full, backend=backend)
    _note_window(max_history, (sess.meta.config or {}).get("window"))
    fh = stdin_bytes() if input_ == "-" else open(input_, "rb")
    with fh, (lock_state_file(state_file) if state_file else contextlib.nullcontext()) as held, _writing(state_file):
        _stream(sess, model, fh, on_bad, as_json, state_file, held, save_every)


def _stream(sess, model, fh, on_bad, as_json, state_file, held, save_every):
    """`edgeseq stream` once the input is open and the state file (if any) is held; `held` is
    its resolved path (symbolic links followed), where the saves go."""
    import signal

    from edgeseq.runtime.statefile import model_sha256, resume_state, save_state
    from edgeseq.runtime.stream import LabelScore, read_lines, stream_lines

    start, model_hash = 0, None
    if state_file:
        model_hash = model_sha256(model)
        start = resume_state(state_file, sess, model_hash, note=lambda line: click.echo(line, err=True))
    count = {"n": start}

    def on_reading(n):
        count["n"] = n
        if state_file and n % save_every == 0:
            save_state(held, sess, n, model_hash)

    def on_term(signum, frame):
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGTERM, on_term)
    stats = {"readings": start, "skipped": 0}
    score = LabelScore(sess.labels)
    try:
        stats = stream_lines(sess, read_lines(fh), on_bad=on_bad, as_json=as_json, echo=click.echo,
                             on_reading=on_reading, start=start, note=lambda line: click.echo(line, err=True),
                             score=score)
    except KeyboardInterrupt:
        stats["readings"] = count["n"]
        click.echo("stopped", err=True)
    finally:
        signal.signal(signal.SIGTERM, old)
        if state_file:
            save_state(held, sess, count["n"], model_hash)
    click.echo(f"{stats['readings'] - start} readings, {stats['skipped']} skipped; state {sess.state_nbytes()} bytes"
               + (f"; saved to {state_file}" if state_file else "") + f" ({sess.backend} backend)", err=True)
    if score.readings:
        for line in score.lines():
            click.echo(line, err=True)


@cli.command()
@click.option("--repeats", type=click.IntRange(min=10), default=2000, show_default=True)
@click.option("--train", "with_train", is_flag=True,
              help="Also time each streaming architecture's default training, and one epoch at sequence "
                   "lengths 100 and 1,000 (needs torch).")
@click.option("--backend", type=click.Choice(["both", "onnxruntime", "native"]), default="both", show_default=True,
              help="Which step backends the backend table times.")
@click.option("--json", "as_json", is_flag=True)
@_errors
def bench(repeats, with_train, backend, as_json):
    """Per-reading latency: GRU in torch eager, ONNX Runtime and edgeseq against the ORT floor;
    the Transformer with its KV cache against recomputing the history; the step backends
    (onnxruntime, native) on float and int8 GRUs at 1 to 1024 streams against this core's
    single-thread GEMM bound; with --train, training
    time per architecture against its target.

    \b
      edgeseq bench
      edgeseq bench --train
      edgeseq bench --json > bench.json
    """
    one = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    if _PROGRAM["main"] and any(os.environ.get(k) != "1" for k in one) and not os.environ.get("EDGESEQ_BENCH_CHILD"):
        # numpy's BLAS picks its threads when it loads: run again with one, as the other figures run
        os.execve(sys.executable, [sys.executable, "-m", "edgeseq", *sys.argv[1:]],
                  {**os.environ, **{k: "1" for k in one}, "EDGESEQ_BENCH_CHILD": "1"})
    from edgeseq.report.bench import format_bench, run_bench, run_train_bench, run_train_throughput

    if backend == "native":
        from edgeseq.runtime import native
        if not native.available():
            raise UsageError(f"--backend native: {native.why_unavailable()}")
    r = run_bench(repeats=repeats, backends=("onnxruntime", "native") if backend == "both" else (backend,))
    if with_train:
        r["train"] = run_train_bench()
        r["throughput"] = run_train_throughput(threads=1)
    if as_json:
        _echo_json(r)
    else:
        click.echo(format_bench(r))


@cli.command()
@click.option("--out", required=True, type=click.Path(), help="Directory for index.html, report.md, report.json, PNGs.")
@click.option("--quick", is_flag=True, help="Fewer readings and repeats, shorter training: under a minute.")
@click.option("--runs", type=click.Path(), help="Reuse trained runs from this directory (runs/<arch>/checkpoint.pt).")
@click.option("--data", help="'basicmotions' or a .npz / .csv path to train on and stream (default: the data the "
              "--runs were trained on, else basicmotions).")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@_errors
def report(out, quick, runs, data, quiet):
    """Memory/latency report: fixed recurrent state against a growing KV cache, float and int8.

    Trains (or reuses with --runs) RNN, GRU, LSTM, Transformer and SSM on one data set (--data;
    by default the data the reused runs were trained on, else the embedded BasicMotions),
    exports float and int8, and measures memory per stream against history, latency per reading
    against the step index, throughput with many streams and process memory over a long stream,
    streaming that data's test readings. The report is built beside --out and moved into it only
    once complete: a failed report leaves --out as it was.

    \b
      edgeseq report --out reports/edge             # a few minutes
      edgeseq report --quick --out /tmp/r           # under a minute
      edgeseq report --runs runs --out reports/edge # reuse `make demo`'s trained runs
      edgeseq report --quick --data mine.csv --out reports/mine
    """
    from edgeseq.report.edge import _summary, build_report

    with _writing(out):
        r = build_report(out, quick=quick, runs=runs, progress=not quiet, data=data)
    for line in _summary(r):
        click.echo(line)
    click.echo(f"wrote {out}/index.html, report.md, report.json and {len(r['files']) - 3} plots "
               f"in {r['meta']['seconds']:.0f} s")


@cli.group()
def firmware():
    """Microcontroller targets: will a model fit, what a reading costs, integer-only execution, C code.

    \b
      edgeseq firmware targets
      edgeseq firmware check models/gru-int8.onnx --target nrf52840
      edgeseq firmware check models/transformer-int8.onnx --target rp2040 --history 512
      edgeseq firmware simulate models/gru-int8.onnx --json
      edgeseq firmware emit models/gru-int8.onnx --out firmware/gru --prefix gesture
      edgeseq firmware measure models/gru-int8.onnx --target nrf52840
    """


@firmware.command(name="targets")
@click.option("--targets-file", type=click.Path(), help="JSON file with more target profiles.")
@click.option("--json", "as_json", is_flag=True)
@_errors
def firmware_targets(targets_file, as_json):
    """List the built-in (and file) target profiles with their datasheet figures."""
    from firmware_sim.targets import load_targets

    ts = load_targets(targets_file)
    if as_json:
        _echo_json([t.to_json() for t in ts.values()])
        return
    click.echo(f"{'name':10s} {'core':16s} {'MHz':>5s} {'flash KB':>9s} {'SRAM KB':>8s} {'cyc/MAC':>8s}  part")
    for t in ts.values():
        click.echo(f"{t.name:10s} {t.core:16s} {t.clock_mhz:5.0f} {t.flash_kb:9,d} {t.sram_kb:8,d} {t.cycles_per_mac:8.2f}  "
                   f"{t.part}")
    click.echo("sources: `edgeseq firmware targets --json` (field 'source'); cycles/MAC are estimates, see --help of check")


def _fmt_check(r):
    f, m, c = r["flash"], r["ram"], r["cost"]
    t = r["target"]
    lines = [f"{r['model']} ({r['arch']}, {r['quantization']}) on {t['name']} ({t['part']}, {t['core']} "
             f"{t['clock_mhz']:.0f} MHz)" + ('' if r['history'] is None else f", history {r['history']:,}"),
             f"  plan of: {r['plan_of']}",
             "  flash            bytes",
             *[f"    {k:16s} {v:>9,d}" for k, v in f.items() if k not in ("total", "available", "margin")],
             f"    {'total':16s} {f['total']:>9,d} of {f['available']:,}  (margin {f['margin']:,})",
             "  RAM              bytes",
             f"    {'arena':16s} {m['arena']['used']:>9,d}  ({m['arena']['count']} buffers, {m['arena']['requested']:,} B "
             "requested before reuse)",
             f"    {'state/cache':16s} {m['state']:>9,d}",
             f"    {'inputs/outputs':16s} {m['io']:>9,d}",
             *([f"    {'stack (step)':16s} {m['stack']:>9,d}"] if m.get("stack") else []),
             f"    {'total':16s} {m['total']:>9,d} of {m['available']:,}  (margin {m['margin']:,})",
             (f"  cost per reading: {c['macs']:,} MACs, {c['cycles']:,} cycles ({c['cycles_per_mac']:.2f} per MAC)"
              if not c['cycles_per_op'] else
              f"  cost per reading: {c['macs']:,} MACs x {c['cycles_per_mac']:g} + {c['other_ops']:,} other ops x "
              f"{c['cycles_per_op']:g} = {c['cycles']:,} cycles")
             + f" = {c['us_per_reading']:.0f} us; highest sample rate about {c['max_rate_hz']:,.0f} Hz ({c['source']})",
             f"  fits: {'yes' if r['fits'] else 'NO'}"]
    if r.get("note"):
        lines.append(f"  note: {r['note']}")
    if "longest_history" in r:
        lines.append(f"  longest history that fits in RAM: {r['longest_history']:,} readings")
    return "\n".join(lines)


@firmware.command(name="check")
@click.argument("model", type=click.Path())
@click.option("--target", required=True, help="A profile name (see `edgeseq firmware targets`).")
@click.option("--history", type=int, help="Transformer: readings held in the cache.")
@click.option("--cycles-per-mac", type=Finite(min=0, min_open=True), help="Override the target's estimate.")
@click.option("--targets-file", type=click.Path(), help="JSON file with more target profiles.")
@click.option("--json", "as_json", is_flag=True)
@_errors
def firmware_check(model, target, history, cycles_per_mac, targets_file, as_json):
    """Flash and RAM plan against a part, and cycles and time per reading.

    int8 RNN/GRU/LSTM are planned as the integer-only C step runs them (`firmware emit`): on
    Cortex-M0+, M4 and M7 parts with code size, stack and cycles per MAC measured on emulated
    cores (`edgeseq firmware measure`; firmware_sim/targets.py MEASURED). Other models are
    planned as their ONNX graph runs (float intermediates), with per-core estimates from
    published instruction timings; pass --cycles-per-mac to refine. Exit 1 if it does not fit.
    """
    from firmware_sim.plan import check_model, verdict
    from firmware_sim.targets import get_target

    r = check_model(model, get_target(target, targets_file), history, cycles_per_mac)
    click.echo(json.dumps(r, indent=2) if as_json else _fmt_check(r))
    why = verdict(r)
    if why:
        raise EdgeseqError(why)


@firmware.command(name="measure")
@click.argument("model", type=click.Path())
@click.option("--target", help="A profile name: its core is emulated and its clock gives the time per reading.")
@click.option("--core", type=click.Choice(["cortex-m0plus", "cortex-m4", "cortex-m7", "cortex-m33"]),
              help="The core to emulate (instead of --target's).")
@click.option("--opt", type=click.Choice(["-Os", "-O2", "-O3"]), default="-O2", show_default=True,
              help="Optimisation level of the cross compiler.")
@click.option("--readings", type=click.IntRange(min=10, max=20000), default=1000, show_default=True,
              help="Readings streamed through the compiled step and compared with the simulator.")
@click.option("--data", help="Readings to stream: the test split of this data (default: the data the model was "
              "trained on, as its file records; for files exported before it did, the embedded data when its "
              "channels are the model's, else synthetic readings over each channel's int8 range).")
@click.option("--targets-file", type=click.Path(), help="JSON file with more target profiles.")
@click.option("--json", "as_json", is_flag=True)
@_errors
def firmware_measure(model, target, core, opt, readings, data, targets_file, as_json):
    """Cross-compile the emitted int8 step for a Cortex-M core, run it on an emulated core, and
    report measured sizes (.text, .rodata), stack, instructions per reading and the instruction
    mix, with cycles modelled from that mix (Arm TRM timings). Needs arm-none-eabi-gcc (Debian:
    gcc-arm-none-eabi) or `pip install ziglang`, and `pip install "edgeseq[firmware]"`.

    \b
      edgeseq firmware measure models/gru-int8.onnx --target nrf52840
      edgeseq firmware measure models/lstm-int8.onnx --core cortex-m0plus --opt -Os --json
    """
    from firmware_sim.measure import core_of, measure
    from firmware_sim.targets import get_target

    if not target and not core:
        raise UsageError("give --target (a profile) or --core (cortex-m0plus, cortex-m4, cortex-m7, cortex-m33)")
    t = get_target(target, targets_file) if target else None
    r = measure(model, core or core_of(t), opt, readings=readings, target=t, data=data)
    if as_json:
        _echo_json(r)
        return
    sec = r["sections"]
    lines = [f"{r['model']} ({r['arch']}, hidden {r['hidden']}) on an emulated {r['core']} ({r['cpu_model']}), "
             f"{r['compiler']} {r['opt']}{', SMLAD path' if r['dsp_path'] else ', portable path'}",
             f"  bit-exact with `firmware simulate` over {r['bit_exact_readings']:,} readings ({r['readings_from']})",
             f"  measured: .text {sec['text']:,} B, .rodata {sec['rodata']:,} B, .data {sec['data']:,} B, "
             f".bss {sec['bss']:,} B; stack {r['stack_bytes']:,} B per step (plus {r['scratch_bytes']:,} B of "
             f"caller scratch and {r['state_bytes']:,} B of state)",
             f"  measured: {r['instructions_per_step']:,.0f} instructions per reading = "
             f"{r['instructions_per_mac']:.2f} per MAC ({r['macs']:,} MACs); 64-bit helpers: "
             + (", ".join(f"{k} {v:.0f}" for k, v in r["helper_instructions_per_step"].items()) or "none")]
    if "cycles_per_step" in r:
        lines.append(f"  modelled: {r['cycles_per_step']:,.0f} cycles per reading ({r['cycles_per_mac']:.2f} per MAC)"
                     + (f" = {r['us_per_reading']:,.0f} us at {t.clock_mhz:g} MHz, about {r['max_rate_hz']:,.0f} "
                        "readings/s" if t is not None else ""))
    lines.append("  most executed: " + ", ".join(f"{k} {v:,.0f}" for k, v in r["mix_top"][:8]))
    click.echo("\n".join(lines))


@firmware.command(name="simulate")
@click.argument("model", type=click.Path())
@click.option("--data", help=_DATA_HELP)
@click.option("--float", "float_model", type=click.Path(), help="The float twin, for accuracy and output difference.")
@click.option("--json", "as_json", is_flag=True)
@_errors
def firmware_simulate(model, data, float_model, as_json):
    """Run the int8 step integer-only (no float on the path) over the test split and a long stream,
    of the model's training data unless --data says otherwise."""
    from firmware_sim.simulate import simulate

    r = simulate(model, data, float_model)
    if as_json:
        _echo_json(r)
        return
    a = r["accuracy"]
    click.echo(f"{r['arch']} integer-only on {r['data']} test ({r['test_sequences']} sequences): accuracy "
               f"{a['integer_only']:.3f}; onnxruntime int8 {a['onnxruntime_int8']:.3f}"
               + (f"; float {a['float']:.3f}" if "float" in a else ""))
    for key, name in (("vs_onnxruntime_int8", "onnxruntime int8"), ("vs_float", "float")):
        if key in r:
            d = r[key]
            click.echo(f"  logits vs {name} over {r['stream_readings']} readings: mean {d['mean_rel']:.2%} of range, "
                       f"max {d['max_rel']:.1%}, same top class {d['argmax_agreement']:.1%}")


@firmware.command(name="emit")
@click.argument("model", type=click.Path())
@click.option("--out", required=True, type=click.Path(), help="Directory for the C files.")
@click.option("--prefix", default="es", show_default=True,
              help="Name prefix of every symbol, so several models link into one firmware.")
@click.option("--json", "as_json", is_flag=True)
@_errors
def firmware_emit(model, out, prefix, as_json):
    """Write C99 for the integer-only step: PREFIX_model.h (the API), PREFIX_model.c (weights
    and step), es_kernels.h (shared kernels, with an SMLAD path on Cortex-M4/M7/M33) and a host
    example (PREFIX_example.c), and es_tables.c (the sigmoid/tanh tables, compiled once per
    firmware). The caller passes PREFIX_SCRATCH_WORDS int32 words of working memory to each step.

    \b
      edgeseq firmware emit models/gru-int8.onnx --out firmware/gru --prefix gesture
    """
    from firmware_sim.cemit import check_prefix, emit
    from firmware_sim.intsim import from_onnx

    check_prefix(prefix)
    m = from_onnx(model)
    with _writing(out):
        r = emit(m, out, prefix=prefix, protect=(model,))
    if as_json:
        _echo_json(r)
    else:
        click.echo(f"wrote {out}/{prefix}_model.h, {prefix}_model.c ({r['int8_weights']:,} int8 weights, "
                   f"{r['tables_bytes']:,} B of tables), es_kernels.h, es_tables.c and {prefix}_example.c; the step needs "
                   f"{r['scratch_bytes']:,} B of scratch and {r['state_bytes']:,} B of state; readings are int32 "
                   f"with {', '.join(map(str, r['in_frac']))} fractional bits per channel; "
                   f"build: gcc -std=c99 -O2 -o stream {out}/{prefix}_example.c {out}/{prefix}_model.c {out}/es_tables.c")


@cli.group()
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
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True)
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE", help="Model setting, e.g. --set d_model=64.")
@click.option("--json", "as_json", is_flag=True)
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
        click.echo(f"{arch} on {c.name}: {ckpt['pairs']['train']} training pairs, {m['parameters']:,} parameters, "
                   f"{m['train_seconds']:.0f} s, final loss {m['final_loss']:.3f} -> {path}")


@translate.command(name="export")
@click.argument("run", type=click.Path())
@click.option("--out", required=True, type=click.Path(), help="Model directory to write.")
@click.option("--json", "as_json", is_flag=True)
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
        click.echo(f"wrote {r['path']}/ ({', '.join(r['files'])}; {size:,} bytes); ONNX Runtime greedy ids identical "
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
    if p.is_dir():
        raise UsageError(f"{option} '{path}' is a directory; give a file name")
    if suffix and p.suffix.lower() != suffix:
        raise UsageError(f"{option} '{path}' must end in {suffix}")
    if not parent.is_dir():
        for above in (parent, *parent.parents):
            if above.exists() or above.is_symlink():
                if not above.is_dir():
                    raise UsageError(f"{option} '{path}': '{above}' is a file, not a folder; choose a path in a "
                                     "folder")
                break
        raise UsageError(f"{option} '{path}': folder '{parent}' does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{option} '{path}': folder '{parent}' is not writable; choose another path")


@translate.command(name="run")
@click.argument("model", type=click.Path())
@click.argument("text")
@click.option("--beam", type=click.IntRange(min=1), default=1, show_default=True, help="Beam size (1: greedy).")
@click.option("--alpha", type=Finite(min=0), default=0.6, show_default=True, help="Length penalty (beam).")
@click.option("--max-len", type=click.IntRange(min=1), help="Most output tokens (default 2 x source + 10).")
@click.option("--provider", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
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
                           f"{' '.join(r.unknown)}", err=True)
            if as_json:
                click.echo(json.dumps({"source": s, "text": r.text if r else "", "score": round(r.score, 4) if r else None,
                                       "tokens": len(r.ids) if r else 0}, ensure_ascii=False))
            else:
                click.echo(r.text if r else "")
            if r is not None and want_att and first:
                click.echo(f"attention heatmap: {attention_png(r, attention)}", err=True)
                first = False


@translate.command(name="eval")
@click.argument("model", type=click.Path())
@click.option("--corpus", default="jupyterlab-fr", show_default=True)
@click.option("--split", type=click.Choice(["test", "dev"]), default="test", show_default=True)
@click.option("--beam", "beams", type=click.IntRange(min=1), multiple=True, default=(1, 4), show_default=True,
              help="Beam sizes to score (1: greedy); repeat the option for several.")
@click.option("--provider", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--json", "as_json", is_flag=True)
@_errors
def translate_eval(model, corpus, split, beams, provider, as_json):
    """BLEU and chrF (sacrebleu) on a held-out split, greedy and beam search."""
    from edgeseq.translate.evaluate import evaluate_mt

    r = evaluate_mt(model, corpus, split, beams=list(beams), provider=provider)
    if as_json:
        _echo_json(r)
        return
    click.echo(f"{r['arch']} on {r['corpus']} {split} ({r['sentences']} sentences):")
    for k, v in r["results"].items():
        click.echo(f"  {k:8s} BLEU {v['bleu']:5.1f}  chrF {v['chrf']:5.1f}  {v['sentences_per_s']:.0f} sentences/s")


@translate.command(name="bench")
@click.argument("run", type=click.Path())
@click.option("--sentences", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@_errors
def translate_bench(run, sentences, as_json):
    """Greedy decoding speed: ONNX Runtime with the KV cache against torch eager recomputing the
    prefix at every step (and torch with its cache, for reference), same model, same sentences."""
    from edgeseq.translate.bench import format_bench, run_bench
    from edgeseq.translate.train import load_run

    r = run_bench(load_run(run), n=sentences)
    click.echo(json.dumps(r, indent=2) if as_json else format_bench(r))


_PROGRAM = {"main": False}     # True when running as the `edgeseq` program (not inside another process)


def main():
    _PROGRAM["main"] = True
    cli(prog_name="edgeseq")


if __name__ == "__main__":
    main()
