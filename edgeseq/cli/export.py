"""`edgeseq export`: a trained run to one validated ONNX step graph, float or int8."""

from __future__ import annotations

import click

from edgeseq.cli._common import MAX_HISTORY, Finite, History, _echo_json, _errors, _json_option, _note_window, _writing
from edgeseq.errors import UsageError, printable, safe_text


@click.command()
@click.argument("run", type=click.Path())
@click.option("--out", required=True, type=click.Path(), help="Model file to write (.onnx).")
@click.option("--max-history", type=History(),
              help=f"Transformer: default bound on cached readings (1 to {MAX_HISTORY:,}).")
@click.option("--int8", is_flag=True, help="Quantize weights to int8 (MatMul/Gemm, per channel).")
@click.option("--int8-scheme", type=click.Choice(["static", "dynamic"]), default="static", show_default=True,
              help="static: int8 activations with scales calibrated on training streams; "
                   "dynamic: uint8 activations scaled per call.")
@click.option("--data", help="int8: data for calibration and checks (default: the run's training data).")
@click.option("--max-error", type=Finite(min=0, max=1), default=0.02, show_default=True,
              help="int8: bound on the mean output error, as a fraction (0 to 1) of the float output range.")
@click.option("--max-accuracy-drop", type=Finite(min=0, max=1), default=0.01, show_default=True,
              help="int8: bound on per-reading test accuracy lost to quantization, a fraction from 0 to 1 "
                   "(0.01 = one point).")
@click.option("--keep-anyway", is_flag=True, help="int8: write the model even if it breaks a bound.")
@click.option("--backend", type=click.Choice(["auto", "onnxruntime", "native"]), default=None,
              help="int8: the step backend whose figures decide the bound; auto (default, or $EDGESEQ_BACKEND) "
                   "judges the one StreamSession runs here: native where it can run, else onnxruntime.")
@_json_option
@_errors
def export(run, out, max_history, int8, int8_scheme, data, max_error, max_accuracy_drop, keep_anyway, backend,
           as_json):
    """Export a trained run to one ONNX step graph, validated before it is written.

    Float: written only if ONNX Runtime matches torch over a 200-reading stream: logits and
    probabilities within 1e-6 + 2e-5 x the largest |logit|, and the same top class wherever
    it is clear. int8 (--int8): also written only if, against its float twin, the mean logit
    error stays within --max-error of the output range over 4 streams of 500 real readings
    and per-reading test accuracy drops by at most --max-accuracy-drop, on both protocols
    (per sequence; never reset). The int8 model is judged on the step backend StreamSession
    (and `edgeseq eval`) runs it on here: the native C step where it can run (static int8
    RNN/GRU/LSTM: the firmware's integer arithmetic), else onnxruntime; the other backend is
    scored too and printed where its figures differ. A failed export leaves an existing file
    at --out alone.

    \b
      edgeseq export runs/gru --out models/gru.onnx
      edgeseq export runs/gru --int8 --out models/gru-int8.onnx
      edgeseq export runs/lstm --int8 --int8-scheme dynamic --out models/lstm-int8.onnx
      edgeseq export runs/gru --int8 --backend onnxruntime --out models/gru-int8-ort.onnx
      edgeseq export runs/transformer --out models/tr.onnx --max-history 256
    """
    from edgeseq.train import load_checkpoint
    from export import export_int8, export_model

    int8_only = [name for name, given in (("--int8-scheme", int8_scheme != "static"), ("--data", data),
                                           ("--max-error", max_error != 0.02),
                                           ("--max-accuracy-drop", max_accuracy_drop != 0.01),
                                           ("--keep-anyway", keep_anyway), ("--backend", backend)) if given]
    if int8_only and not int8:
        raise UsageError(f"{', '.join(int8_only)} applies to int8 export only; add --int8")
    ckpt = load_checkpoint(run)
    _note_window(max_history, (ckpt.get("config") or {}).get("window"))
    with _writing(out):
        if int8:
            report = export_int8(ckpt, out, int8_scheme, data=data, max_history=max_history, max_error=max_error,
                                 max_accuracy_drop=max_accuracy_drop, keep_anyway=keep_anyway, backend=backend)
        else:
            report = export_model(ckpt, out, max_history=max_history)
    if as_json:
        _echo_json(report)
    elif int8:
        r = report
        judged = _int8_figures(r)
        click.echo(f"wrote {printable(r['path'])} ({r['bytes']:,} bytes; float export {r['float_bytes']:,}); "
                   f"int8 {int8_scheme} vs float over {r['streams']}x{r['readings']} readings, "
                   f"judged on {r['backend']}: {judged}")
        if r.get("backend_note"):
            click.echo(f"note: judged on onnxruntime, not native: {safe_text(r['backend_note'])}", err=True)
        for name, other in r["backends"].items():
            shown = _int8_figures({**r, **other})
            if name != r["backend"] and (shown != judged or other["within_bounds"] != r["within_bounds"]):
                click.echo(f"  on {name} (not judged): {shown}" + ("" if other["within_bounds"] else
                                                                 " (outside its bound)"))
        if not r["within_bounds"]:
            click.echo(f"warning: this model breaks its bound on {r['backend']} (kept because of --keep-anyway)",
                       err=True)
    else:
        click.echo(f"wrote {printable(report['path'])} ({report['bytes']:,} bytes); ONNX Runtime vs torch max abs diff "
                   f"{report['max_abs_diff']:.2e} (tolerance {report['tolerance']:g})")


def _int8_figures(r: dict) -> str:
    """One backend's int8 figures against the float twin, as the export line prints them."""
    if "float_anomaly" in r:                   # an anomaly model: forecast error and the anomaly figures
        q, f = r.get("anomaly") or r["int8_anomaly"], r["float_anomaly"]
        return (f"mean forecast error {r['mean_rel']:.2%} of range (max {r['max_rel']:.1%}), detected "
                f"{q['detected']}/{q['anomalies']} anomalies vs {f['detected']}, false alarms {q['false_alarms']} "
                f"vs {f['false_alarms']}, top score inside on {q['top_inside'] or 0:.0%} vs {f['top_inside'] or 0:.0%}")
    if "float_regress" in r:                   # a regression model: output error and each target's MAE
        q, f = r.get("regress") or r["int8_regress"], r["float_regress"]
        maes = ", ".join(f"{printable(t)} MAE {q['targets'][t]['mae']:.4g} vs {f['targets'][t]['mae']:.4g} (persistence "
                         f"{f['targets'][t]['persistence_mae']:.4g})" for t in f["targets"])
        return f"mean error {r['mean_rel']:.2%} of range (max {r['max_rel']:.1%}), {maes}"
    return (f"mean error {r['mean_rel']:.2%} of range (max {r['max_rel']:.1%}), per-reading accuracy "
            f"{r['int8_reading_accuracy']:.3f} vs {r['float_reading_accuracy']:.3f}, never reset "
            f"{r['int8_continuous_accuracy']:.3f} vs {r['float_continuous_accuracy']:.3f}, "
            f"test accuracy {r['int8_accuracy']:.3f} vs {r['float_accuracy']:.3f}")
