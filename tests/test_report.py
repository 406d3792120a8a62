"""`edgeseq report --quick`: every file, every plot referenced, the figures in report.json, the
memory data showing a flat recurrent state against a cache that grows per reading, the schedule
beside every accuracy, and progress as plain lines off a terminal."""

import html as html_lib
import io
import json
import re

from pathlib import Path

import pytest
from click.testing import CliRunner

from edgeseq.cli import cli
from edgeseq.report.edge import ARCHS, BATCHES, QUICK
from edgeseq.runtime import native
from edgeseq.train import save_checkpoint

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report(trained, tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    for arch in ARCHS:
        save_checkpoint(trained(arch), root / "runs" / arch)
    out = root / "r"
    res = CliRunner().invoke(cli, ["report", "--quick", "--runs", str(root / "runs"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output and "passes the GRU" in res.output
    return out, json.loads((out / "report.json").read_text()), res.output


def test_all_files_and_every_plot_is_referenced(report):
    out, r, _ = report
    html, md = (out / "index.html").read_text(), (out / "report.md").read_text()
    plots = [r["files"][k] for k in ("memory", "latency", "throughput", "rss")]
    for name in plots:
        assert (out / name).read_bytes()[:8] == PNG
        assert f"src='{name}'" in html and f"]({name})" in md
    assert "<table>" in html and "| model |" in md
    assert "## Events: int8 models with a decision layer calibrated for 2 false alarms per hour" in md
    assert "Events: int8 models with a decision layer" in html and "Events (int8, decision layer" in md


def test_json_carries_the_figures(report):
    _, r, _ = report
    for arch in ARCHS:
        m = r["models"][arch]
        assert m["parameters"] > 0 and m["macs_per_reading"] > 0 and m["source"].startswith("reused")
        assert m["int8"]["bytes"] < m["float"]["bytes"] and 0 <= m["float"]["accuracy"] <= 1
    lat = r["latency"]
    names = {"rnn", "gru", "lstm", "transformer", "ssm", "transformer-window"} | {f"{a}-int8" for a in ARCHS}
    assert set(lat["series"]) == names
    for rows in lat["series"].values():
        assert all(row["p99_us"] >= row["median_us"] > 0 for row in rows) and rows[-1]["to"] == QUICK["history"]
    assert lat["reference"]["ort_floor_session_run"]["median_us"] > 0
    assert lat["reference"]["gru_torch_eager"]["median_us"] > 0
    assert [p["step"] for p in lat["recompute"]] == QUICK["recompute_points"]
    for name, rows in r["throughput"].items():
        assert [x["streams"] for x in rows] == BATCHES and rows[0]["vs_single_stream_calls"] == pytest.approx(1)
    for name, s in r["rss"].items():
        assert s["peak_kb"] > 0 and len(s["points"]) == 20
    c, most = r["memory"]["crossover"]["gru"], r["memory"]["transformer_most_bytes"]
    assert c["passes_state_at"] == 1
    assert (c["passes_footprint_at"] * 512 >= c["footprint_bytes"] if most >= c["footprint_bytes"]
            else c["passes_footprint_at"] is None)
    assert r["meta"]["machine"]["onnxruntime"] and r["meta"]["settings"]["latency_repeats"] == 2
    phases = ["models", "baseline", "events", "memory", "latency", "throughput", "rss", "mcu"]
    assert list(r["meta"]["phase_seconds"]) == list(r["meta"]["phase_cpu_seconds"]) == phases
    b = r["baseline"]                                 # 1-NN DTW on the models' split: DTW_D's published 0.975
    assert b["method"] == "1-NN DTW" and round(b["accuracy"], 3) == 0.975 and b["queries"] == 40
    ev = r["events"]                                  # each int8 model's decision layer, scored on test streams
    assert ev["orders"] == 5 and ev["background"] == ["Standing"] and ev["rate_hz"] == 10.0
    assert set(ev["rows"]) == set(ARCHS)
    for v in ev["rows"].values():
        assert 0 <= v["f1"] <= 1 and v["events"] > 0 and v["hours"] > 0 and "background Standing" in v["decision"]


def test_recurrent_state_is_flat_and_the_cache_grows_per_reading(report):
    _, r, _ = report
    s = r["memory"]["series"]
    for arch, state in (("rnn", 256), ("gru", 256), ("lstm", 512), ("ssm", 256)):
        assert set(s[arch]["bytes"]) == {state}, arch                    # measured after every history point
    cfg = r["models"]["transformer"]["config"]
    per_reading = 2 * cfg["layers"] * cfg["d_model"] * 4                   # key + value rows, float32
    assert r["memory"]["transformer_bytes_per_reading"] == per_reading == 512
    # On the native step the cache is a ring of the window's rows; onnxruntime's keeps every
    # reading up to max_history (and masks those beyond the window).
    ring = cfg["window"] if s["transformer"]["backend"] == "native" and cfg["window"] else None
    cap = lambda bound: min(b for b in (bound, ring) if b) if bound or ring else None       # noqa: E731
    for name, bound in (("transformer", None), ("transformer-window", s["transformer-window"]["max_history"])):
        assert s[name]["bytes"] == [min(h, cap(bound) or h) * per_reading for h in s[name]["history"]], name
    assert {v["backend"] for v in s.values()} == ({"native"} if native.available() else {"onnxruntime"})
    for arch in ("rnn", "gru", "lstm"):                                    # 10,000 readings: RSS does not grow
        assert r["rss"][arch]["growth_kb_after_first_5pct"] < 1024, r["rss"][arch]
    assert r["rss"]["transformer"]["state_bytes"] == (cap(None) or QUICK["rss_growing"]) * per_reading


def test_the_microcontroller_panel_measures_ram_and_cycles_against_history(report):
    """The report's int8 models on the emulated M4: a fixed state costs the same at any history,
    a KV ring grows with the readings it keeps, and so do its cycles."""
    from edgeseq.report import mcu
    from edgeseq.report.edge_pages import _mcu_line, _tables

    out, r, _ = report
    p = r["mcu"]
    md = (out / "report.md").read_text()
    if not p["available"]:
        assert f"On a microcontroller: not measured ({p['reason']})." in md
        pytest.skip(p["reason"])
    assert [t["history"] for t in p["transformer"]] == [4, 16] and set(p["fixed"]) == {"gru", "ssm"}
    assert "![On a microcontroller](mcu.png)" in md and (out / "mcu.png").read_bytes()[:8] == PNG
    assert p["readings"] == mcu.READINGS
    for g in p["fixed"].values():
        assert g["state_bytes"] > 0 and g["cycles_per_step"] > 0 and g["bit_exact_readings"] == mcu.READINGS
    t4, t16 = p["transformer"]
    assert t16["cache_bytes"] == 4 * t4["cache_bytes"] > 0 and t16["ram_bytes"] > t4["ram_bytes"]
    assert t16["cycles_per_step"] > t4["cycles_per_step"] > 0 and t16["us_per_reading"] > 0
    title, head, rows = next(t for t in _tables_of({"mcu": p}, _tables) if t[0].startswith("On a microcontroller"))
    assert [row[1] for row in rows] == ["any", "any", "4", "16"]
    assert _mcu_line(p).startswith("On an emulated cortex-m4")


def _tables_of(r, tables):
    """The report's tables for a report that holds only the microcontroller panel."""
    stub = {"models": {}, "memory": {"crossover": {}}, "latency": {"history": 1, "series": {}, "recompute": [],
                                                                   "reference": {"ort_floor_session_run": {"median_us": 1},
                                                                                 "gru_torch_eager": {"median_us": 1}}},
            "throughput": {}, "rss": {}}
    return tables({**stub, **r})


def test_mcu_panel_says_in_one_line_when_no_toolchain(monkeypatch):
    from edgeseq.report import mcu
    from edgeseq.report.edge_pages import _mcu_line

    monkeypatch.setattr(mcu, "toolchain_missing", lambda: "arm-none-eabi-gcc not found: install it")
    p = mcu.mcu_panel({}, {}, None, (4,), "/nonexistent")
    assert p["available"] is False
    assert _mcu_line(p) == "On a microcontroller: not measured (arm-none-eabi-gcc not found: install it)."


# -- the schedule beside every accuracy ----------------------------------------------------------

def test_every_accuracy_is_shown_with_its_schedule(report):
    out, r, screen = report
    md, page = (out / "report.md").read_text(), (out / "index.html").read_text()
    for arch in ARCHS:
        m = r["models"][arch]
        text = m["schedule"]["text"]
        assert text.startswith("after ") and m["schedule"]["quick"] is False         # reused, not trained here
        assert m["float"]["trained"] == m["int8"]["trained"] == text                  # beside each accuracy in JSON
        shown = f"{arch} {m['float']['accuracy']:.3f} / {m['int8']['accuracy']:.3f} {text}"
        assert shown in screen and shown in md and html_lib.escape(shown) in page
        row = next(line for line in md.splitlines() if line.startswith(f"| {arch} |"))
        assert f"{m['float']['accuracy']:.3f} / {m['float']['continuous_accuracy']:.3f}" in row and text in row
        assert m["classes"] == 4 and m["chance"] == pytest.approx(0.25)          # BasicMotions' four classes
    for text in (screen, md, page):                       # no accuracy figure anywhere without a schedule
        for line in text.splitlines():
            if "accuracy" in line.lower() and re.search(r"\b0\.\d{3}\b|\b1\.000\b", line):
                assert "after " in line or "schedule not recorded" in line, line


def test_progress_off_a_terminal_is_plain_lines(report):
    _, _, screen = report                                  # CliRunner's streams are not terminals
    t = r"(\d+s|\d+m\d\ds|\d+h\d\dm)"                                   # edgeseq.train.plan.clock
    for phase in ("models", "memory", "latency", "throughput", "rss", "mcu"):
        assert re.search(rf"^report: {phase}: \d+ steps?, {t} in all so far$", screen, re.M), phase
        assert re.search(rf"^report: {phase} done in {t}, {t} in all$", screen, re.M), phase
    assert "\r" not in screen and "it/s" not in screen                  # no bars


def test_progress_lines_per_step_and_none_when_quiet_or_on_a_terminal():
    from edgeseq.report.edge import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    log = io.StringIO()
    bar = Progress(True, stream=log, every=0).phase("latency", 2)
    bar.update(1, "gru")
    bar.close()
    lines = log.getvalue().splitlines()
    assert lines[0] == "report: latency: 2 steps, 0s in all so far"
    assert re.fullmatch(r"report: latency 1/2 \(gru\), 0s in this phase, 0s in all", lines[1])
    assert re.fullmatch(r"report: latency done in 0s, 0s in all", lines[2]) and len(lines) == 3
    for p in (Progress(False, stream=io.StringIO(), every=0), Progress(True, stream=Terminal(), every=0)):
        bar = p.phase("rss", 1)
        bar.update(1)
        bar.close()
        assert "report:" not in p.out.getvalue()


def test_schedule_text_for_each_kind_of_schedule():
    from edgeseq.report.edge import schedule_of

    old = {"train_config": {"epochs": 5}, "metrics": {}}                      # before schedules were recorded
    assert schedule_of(old, quick=True)["text"] == "after 5 epochs (fixed, quick: not trained to convergence)"
    assert schedule_of(old)["text"] == "after 5 epochs (fixed)"
    early = {"train_config": {"epochs": None}, "metrics": {"schedule": {
        "mode": "early-stopping", "max_epochs": 300, "epochs_run": 41, "best_epoch": 29, "converged": True,
        "advice": None}}}
    assert schedule_of(early)["text"] == "after 41 of up to 300 epochs (early stopping, best epoch 29)"
    early["metrics"]["schedule"].update(best_epoch=34, kept="last (underfit)", converged=False, final_epochs=7,
                                        epochs_run=41, max_epochs=34)
    assert schedule_of(early)["text"] == ("after 34 epochs and 7 final (early stopping, kept the last epoch: "
                                          "underfit, not converged)")
    stuck = {"metrics": {"schedule": {"mode": "fixed", "max_epochs": 8, "epochs_run": 8, "best_epoch": None,
                                      "converged": False, "advice": "try --epochs 16"}}}
    s = schedule_of(stuck)
    assert s["text"] == "after 8 epochs (fixed, not converged)" and s["advice"] == "try --epochs 16"
    assert schedule_of({"metrics": {}, "train_config": {}})["text"] == "(schedule not recorded)"


def _row(acc, schedule, classes=3):
    return {"classes": classes, "chance": 1 / classes, "schedule": schedule,
            "float": {"accuracy": acc}, "int8": {"accuracy": acc}}


def test_chance_level_and_unconverged_models_are_called_out():
    from edgeseq.report.edge import schedule_of
    from edgeseq.report.edge_pages import _accuracy_lines

    quick = schedule_of({"metrics": {"schedule": {"mode": "fixed", "max_epochs": 5, "epochs_run": 5,
                                                  "converged": False, "advice": "try --epochs 10"}}}, quick=True)
    stuck = schedule_of({"metrics": {"schedule": {"mode": "fixed", "max_epochs": 8, "epochs_run": 8,
                                                  "converged": False, "advice": "try --epochs 16"}}})
    good = schedule_of({"train_config": {"epochs": 30}})
    lines = _accuracy_lines({"models": {"rnn": _row(1 / 3, quick), "gru": _row(0.9, stuck), "lstm": _row(1.0, good)}})
    assert lines[0] == ("Test accuracy per sequence, float / int8 (chance 0.333 with 3 classes): rnn 0.333 / 0.333 "
                        "after 5 epochs (fixed, quick: not trained to convergence); gru 0.900 / 0.900 after 8 epochs "
                        "(fixed, not converged); lstm 1.000 / 1.000 after 30 epochs (fixed).")
    assert lines[1].startswith("Warning: rnn (float and int8) scores 0.333 / 0.333, at or below chance (0.333 with "
                               "3 classes), after 5 epochs (fixed, quick: not trained to convergence)")
    assert lines[2] == "Warning: gru did not converge, after 8 epochs (fixed, not converged): try --epochs 16."
    assert lines[3].startswith("Quick: rnn trained for a few fixed epochs, not to convergence")
    assert len(lines) == 4


def test_models_below_the_nearest_neighbour_baseline_are_called_out():
    from edgeseq.report.edge import schedule_of
    from edgeseq.report.edge_pages import _accuracy_lines

    good = schedule_of({"train_config": {"epochs": 30}})
    quick = schedule_of({"metrics": {"schedule": {"mode": "fixed", "max_epochs": 5, "epochs_run": 5}}}, quick=True)
    base = {"method": "1-NN DTW", "dependent": False, "window": None, "accuracy": 0.9, "queries": 10,
            "test_sequences": 10, "references": 20, "seconds": 0.1}
    low, high = _row(0.8, good), _row(0.95, good)
    low["int8"]["accuracy"] = 0.92
    lines = _accuracy_lines({"models": {"gru": low, "lstm": high, "rnn": _row(0.5, quick)}, "baseline": base})
    assert lines[1] == ("Baseline: 1-NN DTW on the same split: 0.900 per sequence (full window; 10 test sequences "
                        "against 20 training sequences, 0.1 s).")
    assert lines[2] == "Warning: gru (float) scores 0.800 per sequence, below 1-NN DTW's 0.900 on the same test split, " \
                       "after 30 epochs (fixed)."
    assert not any(line.startswith(("Warning: lstm", "Warning: rnn")) for line in lines)   # quick: its own line
    skipped = _accuracy_lines({"models": {"gru": low}, "baseline": {"skipped": "no dtaidistance"}})
    assert skipped[1] == "Baseline: 1-NN DTW not scored: no dtaidistance." and len(skipped) == 2


def test_quick_trains_a_fixed_few_epochs_whatever_the_default_schedule(trained, monkeypatch, tmp_path):
    """The defaults may stop early (epochs None) or run fixed epochs: quick gives each
    architecture its own fixed count, and the report says so beside the accuracy."""
    import edgeseq.report.edge as edge
    import edgeseq.train as train_mod
    import export
    from edgeseq.train import TrainConfig

    seen, gru = {}, trained("gru")

    def fake_train(arch, ds, tc, progress=False):
        seen[arch] = tc.epochs
        ckpt = dict(gru)
        return {**ckpt, "train_config": {**ckpt["train_config"], "epochs": tc.epochs}, "metrics": {}}

    def fake_export(ckpt, path, *a, **k):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(b"x" * (10 if "int8" in str(path) else 20))
        return {"mean_rel": 0.0, "within_bounds": True}

    monkeypatch.setattr(train_mod, "DEFAULTS", {"gru": TrainConfig(epochs=None)})      # stop early
    monkeypatch.setattr(train_mod, "train", fake_train)
    monkeypatch.setattr(train_mod, "save_checkpoint", lambda ckpt, out: None)
    monkeypatch.setattr(export, "export_model", fake_export)
    monkeypatch.setattr(export, "export_int8", fake_export)
    monkeypatch.setattr(edge, "_accuracy", lambda path, ds: {"accuracy": 0.25})
    monkeypatch.setattr(edge, "ARCHS", ["gru"])
    rows, _ = edge._models(tmp_path, {}, None, QUICK, edge.Progress(False))
    assert seen == {"gru": QUICK["epochs"]["gru"]}
    s = rows["gru"]["schedule"]
    assert s["quick"] and s["mode"] == "fixed" and s["epochs_run"] == QUICK["epochs"]["gru"]
    assert rows["gru"]["float"]["trained"] == f"after {QUICK['epochs']['gru']} epochs (fixed, quick: not trained to " \
        "convergence)"


def test_a_model_the_integer_step_refuses_leaves_the_rest_of_the_report(monkeypatch, tmp_path):
    """The microcontroller panel says which model the integer step refused and why, instead of
    ending the report (the models, events and accuracy figures stand)."""
    from edgeseq.report import mcu
    from firmware_sim.intgraph import InputFormatError

    def refuse(path, *a, **k):
        if "ssm" in str(path):
            raise InputFormatError("channel 'current': an int32 reading cannot hold both; train it again")
        return {"arch": "gru"}
    monkeypatch.setattr(mcu, "toolchain_missing", lambda: None)
    monkeypatch.setattr(mcu, "measure_row", refuse)
    models = {a: {"int8": {"path": str(tmp_path / f"{a}.onnx")}} for a in ("gru", "ssm")}
    panel = mcu.mcu_panel(models, {"transformer": None}, None, (8,), tmp_path)
    assert panel["available"] is False
    assert panel["reason"].startswith("the integer step refused the int8 ssm: channel 'current'")
