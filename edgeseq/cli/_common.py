"""What every `edgeseq` command shares: the one error boundary, option types, shared options
and output helpers.
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

from edgeseq.errors import EdgeseqError, UsageError, printable
from edgeseq.errors import one_line as _one_line    # one line, control characters escaped


def _not_a_folder(e: OSError):
    """(the file, the option to change) where `e` failed because a path that had to be a folder
    is a file: ENOTDIR (a file on the way to e.filename), or EEXIST for a file that is, or lies
    above, the command's --out (making that folder failed); None otherwise."""
    if e.filename is None or e.errno not in (errno.ENOTDIR, errno.EEXIST):
        return None
    try:
        path = Path(os.fsdecode(e.filename))
        ctx = click.get_current_context(silent=True)
        out = ctx.params.get("out") if ctx is not None else None
        out = Path(os.path.abspath(os.fsdecode(out))) if isinstance(out, (str, bytes, os.PathLike)) else None

        def under_out(q):
            q = Path(os.path.abspath(q))
            return out is not None and (q == out or q in out.parents)
        if e.errno == errno.EEXIST:
            if not under_out(path):
                return None
            chain = [path]
        else:
            chain = [*reversed(path.parents), path]
        for q in chain:
            if q.exists() and not q.is_dir():
                return q, ("--out" if under_out(q) else "path")
    except (OSError, ValueError, TypeError):
        pass
    return None


def _os_error(e: OSError) -> str:
    """One line for an OSError: what failed, on which file, and what to do."""
    what = e.strerror or type(e).__name__
    where = e.filename if e.filename is not None else None
    blocked = _not_a_folder(e)
    if blocked is not None:
        return f"'{printable(str(blocked[0]))}' is a file, not a folder: choose another {blocked[1]}"
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
    return f"{what}: '{printable(where)}'; {todo}" if where is not None else f"{what}; {todo}"


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
                    "install the training extra: pip install torch==2.13.0 '.[train]' in edgeseq's clone") from None
            if top in ("tokenizers", "sacrebleu", "matplotlib"):
                raise click.ClickException(
                    f"this command needs {top}; install the translation extra: "
                    "pip install '.[translate]' in edgeseq's clone") from None
            raise click.ClickException(f"this command needs the module {e.name}; reinstall edgeseq") from None
        except OSError as e:
            if e.errno == errno.EPIPE:       # the reader went away (e.g. `| head`): nothing to report
                raise click.exceptions.Exit(1) from None
            blocked = _not_a_folder(e)
            if blocked is not None and blocked[1] == "--out":     # the option's value is wrong: exit 2
                raise click.UsageError(_one_line(_os_error(e))) from None
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
_DATA_HELP = ("An embedded set (basicmotions, japanesevowels, vibration, internalbleeding16, motor) or a .npz / .csv "
              "path (default: the data the model was trained on, as its file records; basicmotions for files "
              "exported before it did)")


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
                self.fail(f"'{printable(str(value)[:30])}' is not a number", param, ctx)
            if not math.isfinite(number):
                self.fail(f"'{printable(str(value)[:30])}' is not a finite number", param, ctx)
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
                self.fail(f"'{printable(text[:30])}' is not a whole number of readings", param, ctx)
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
        except click.ClickException as e:            # click's own (FileError) too: escaped, one line
            click.echo(f"Error: {_one_line(e.format_message())}", err=True)
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


_PROGRAM = {"main": False}     # True when running as the `edgeseq` program (not inside another process)

# Options that several commands take with the same meaning and help.
_json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON document instead of the text summary.")
_seed_option = click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True)
_provider_option = click.option("--provider", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
_backend_option = click.option(
    "--backend", type=click.Choice(["auto", "onnxruntime", "native"]), default=None,
    help="Step backend: native (compiled C step: RNN/GRU/LSTM/SSM, float and static int8) or onnxruntime; "
         "auto (default, or $EDGESEQ_BACKEND) picks native where it can run.")
