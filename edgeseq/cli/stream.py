"""`edgeseq stream`: readings through a model, one prediction per reading."""

from __future__ import annotations

import contextlib

import click

from edgeseq.cli._common import MAX_HISTORY, History, _backend_option, _errors, _note_window, _provider_option, _writing
from edgeseq.errors import printable, safe_text


@click.command()
@click.argument("model", type=click.Path())
@click.option("--input", "input_", default="-", show_default=True,
              type=click.Path(allow_dash=True, exists=True, dir_okay=False),
              help="CSV of readings, one per line ('-' for stdin).")
@_provider_option
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
@click.option("--events", "events_only", is_flag=True,
              help="One line per event of the model's decision layer (`edgeseq calibrate`) instead of one per "
                   "reading: reading,event,label,onset (start or end; onset: the reading the class took over).")
@_backend_option
@_errors
def stream(model, input_, provider, max_history, on_full, on_bad, as_json, state_file, save_every, events_only,
           backend):
    """Stream readings through a model, one per line, printing the prediction after each.

    Input: one reading per line, comma-separated, features in the model's order. A first line
    of feature names is read as a header and may reorder the columns; with a header, every
    other column (a timestamp, `sequence`, notes) is ignored whatever it holds, so a training
    CSV streams as it is. Output: the CSV line `reading,label,probability` (a label holding a
    comma or a quote is quoted; a control or format character in it, such as a terminal escape
    sequence, a line break or a right-to-left override, is written as its Python escape: \\x1b,
    \\n, \\u202e), or JSON with the exact labels; a header column `label` adds the true label to
    each line (`true` in JSON) and its accuracy to the summary on stderr. With --on-bad skip, a
    skipped line is reported on stderr, so stdout holds one line per reading.

    A model with decision settings (`edgeseq calibrate`) adds each reading's events to its JSON
    line; --events prints one line per event instead (the decision state is saved in
    --state-file with the model's).

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
    if events_only and sess.meta.kind == "regress":
        from edgeseq.errors import UsageError
        raise UsageError(f"'{printable(model)}' is a regression model: it answers values, not events; stream it "
                         "without --events")
    if events_only and sess.decision is None:
        from edgeseq.errors import UsageError
        raise UsageError(f"--events needs decision settings and '{printable(model)}' has none; run `edgeseq calibrate "
                         f"{printable(model)}` first")
    _note_window(max_history, (sess.meta.config or {}).get("window"))
    if sess.backend_note:
        click.echo(safe_text(f"note: onnxruntime backend, not native: {sess.backend_note}"), err=True)
    fh = stdin_bytes() if input_ == "-" else open(input_, "rb")
    with fh, (lock_state_file(state_file) if state_file else contextlib.nullcontext()) as held, _writing(state_file):
        _stream(sess, model, fh, on_bad, as_json, state_file, held, save_every, events_only)


def _stream(sess, model, fh, on_bad, as_json, state_file, held, save_every, events_only=False):
    """`edgeseq stream` once the input is open and the state file (if any) is held; `held` is
    its resolved path (symbolic links followed), where the saves go."""
    import signal

    from edgeseq.runtime.statefile import resume_state, save_state
    from edgeseq.runtime.stream import LabelScore, read_lines, stream_lines

    start, model_hash = 0, None
    if state_file:
        model_hash = sess.model_sha256          # the bytes the session runs, read once
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
                             score=score, events_only=events_only)
    except KeyboardInterrupt:
        stats["readings"] = count["n"]
        click.echo("stopped", err=True)
    finally:
        signal.signal(signal.SIGTERM, old)
        if state_file:
            save_state(held, sess, count["n"], model_hash)
    click.echo(f"{stats['readings'] - start} readings, {stats['skipped']} skipped"
               + (f", {stats.get('events', 0)} events" if sess.decision is not None else "")
               + f"; state {sess.state_nbytes()} bytes"
               + (f"; saved to {printable(state_file)}" if state_file else "") + f" ({sess.backend} backend)", err=True)
    if score.readings:
        for line in score.lines():
            click.echo(line, err=True)
