"""Streaming sensor demo for a Raspberry Pi (or any machine): one reading per call, live.

    python examples/pi_sensor_demo.py --model models/gru-int8.onnx --source serial:/dev/ttyUSB0 --rate 50
    python examples/pi_sensor_demo.py --model models/gru-int8.onnx --source replay:basicmotions   # no hardware
    python examples/pi_sensor_demo.py --model models/gru-int8.onnx --source replay:basicmotions \\
        --state-file /var/lib/edgeseq/gru.state --json

Needs only the runtime install (numpy, onnxruntime; pyserial for serial sources). Prints the
prediction with its probability for every reading (or every --print-every), the latency
(median and p99 over the last 1,000 readings), the state bytes held, and late, dropped and bad
reading counts. With --state-file the stream's state is written atomically every
--save-every readings and on Ctrl-C / SIGTERM, and a matching file is resumed on start (a
replay source then continues from the reading after the saved one). Sources: see
`edgeseq.runtime.live` (replay, csv, stdin, serial, sim, or your own driver class).
"""

import argparse
import contextlib
import json
import os
import sys

from edgeseq.errors import UsageError, run_script


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--source", default="replay:basicmotions")
    ap.add_argument("--rate", type=_at_least(0, float), default=50.0,
                    help="readings per second for replay sources (0: unpaced)")
    ap.add_argument("--state-file")
    ap.add_argument("--save-every", type=_at_least(1), default=500)
    ap.add_argument("--on-bad", choices=["skip", "error"], default="skip")
    ap.add_argument("--json", action="store_true", help="JSON lines on stdout")
    ap.add_argument("--print-every", type=_at_least(1), default=1)
    ap.add_argument("--max-readings", type=_at_least(1))
    ap.add_argument("--max-history", type=_at_least(1), help="Transformer: bound the cache (sliding window)")
    args = ap.parse_args(argv)
    from edgeseq.runtime import StreamSession
    from edgeseq.runtime.live import open_source, run_live
    from edgeseq.runtime.statefile import StateFileError, load_state, lock_state_file, model_sha256

    if args.state_file and os.path.isdir(args.state_file):
        raise UsageError(f"--state-file '{args.state_file}' is a directory; give a file name")
    with lock_state_file(args.state_file) if args.state_file else contextlib.nullcontext():
        sess = StreamSession(args.model, max_history=args.max_history, on_full="slide")  # a window never stops
        model_hash = model_sha256(args.model)
        start = 0
        if args.state_file:
            try:
                start = load_state(args.state_file, sess, model_hash)["readings"]
                print(f"resumed from {args.state_file} at reading {start}", file=sys.stderr)
            except FileNotFoundError:
                pass
            except StateFileError as e:
                print(f"{e}; starting fresh", file=sys.stderr)
        source = open_source(args.source, sess.features, skip=start if args.source.startswith(("replay:", "csv:")) else 0)
        summary = run_live(sess, source, rate=args.rate or None, on_bad=args.on_bad, as_json=args.json,
                           echo=lambda s: print(s, flush=True), state_file=args.state_file,
                           save_every=args.save_every, model_hash=model_hash, start_readings=start,
                           print_every=args.print_every, max_readings=args.max_readings)
    if args.json:
        print(json.dumps({"summary": summary}), flush=True)
    print(f"{summary['this_run']} readings in {summary['seconds']} s ({summary['rate_hz']} Hz; target "
          f"{summary['target_rate_hz']}), latency median {summary['median_us']} us p99 {summary['p99_us']} us, "
          f"late {summary['late']}, dropped {summary['dropped']}, bad {summary['bad']}, RSS "
          f"{summary['rss_kb_end']} kB; stopped by {summary['stopped_by']}", file=sys.stderr)
    if summary["continuous_accuracy"] is not None:
        print(f"continuous accuracy (never reset, true labels known for this replay): "
              f"{summary['continuous_accuracy']:.3f} over {summary['scored_readings']} readings past the grace period "
              "after each change", file=sys.stderr)
    return 0


def _at_least(low, kind=int):
    """An argparse type: a number of `kind` >= `low`, else one usage line naming the bound."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a {'whole ' if kind is int else ''}number") from None
        if not value >= low:
            raise argparse.ArgumentTypeError(f"{value} is below {low}")
        return value
    return parse


if __name__ == "__main__":
    run_script(main)
