"""`edgeseq report --quick`: every file, every plot referenced, the figures in report.json, and
the memory data showing a flat recurrent state against a cache that grows per reading."""

import json

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
    res = CliRunner().invoke(cli, ["report", "--quick", "--runs", str(root / "runs"), "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output and "passes the GRU" in res.output
    return out, json.loads((out / "report.json").read_text())


def test_all_files_and_every_plot_is_referenced(report):
    out, r = report
    html, md = (out / "index.html").read_text(), (out / "report.md").read_text()
    plots = [r["files"][k] for k in ("memory", "latency", "throughput", "rss")]
    for name in plots:
        assert (out / name).read_bytes()[:8] == PNG
        assert f"src='{name}'" in html and f"]({name})" in md
    assert "<table>" in html and "| model |" in md


def test_json_carries_the_figures(report):
    _, r = report
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


def test_recurrent_state_is_flat_and_the_cache_grows_per_reading(report):
    _, r = report
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


def test_the_microcontroller_panel_is_in_the_report(report):
    out, r = report
    p = r["mcu"]
    md = (out / "report.md").read_text()
    if not p["available"]:
        assert f"On a microcontroller: not measured ({p['reason']})." in md
        return
    assert [t["history"] for t in p["transformer"]] == [4, 16] and set(p["fixed"]) == {"gru", "ssm"}
    assert "![On a microcontroller](mcu.png)" in md and (out / "mcu.png").read_bytes()[:8] == PNG


def test_mcu_panel_measures_ram_and_cycles_against_history(basicmotions, tmp_path):
    """Tiny models on the emulated M4: a fixed state costs the same at any history, a KV ring
    grows with the readings it keeps, and so do its cycles."""
    from edgeseq.report import mcu
    from edgeseq.report.bench import _random_checkpoint
    from edgeseq.report.edge_pages import _mcu_line, _tables
    from export import export_int8

    if mcu.toolchain_missing():
        pytest.skip(mcu.toolchain_missing())
    gru = tmp_path / "gru-int8.onnx"
    export_int8(_random_checkpoint("gru", hidden=8), gru, "static", data=basicmotions, keep_anyway=True)
    tr = _random_checkpoint("transformer", d_model=8, heads=2, layers=1, d_ff=16, window=4)
    p = mcu.mcu_panel({"gru": {"int8": {"path": str(gru)}}}, {"transformer": tr}, basicmotions, (2, 8), tmp_path)
    assert p["available"] and p["readings"] == mcu.READINGS
    g, (t2, t8) = p["fixed"]["gru"], p["transformer"]
    assert g["state_bytes"] > 0 and g["cycles_per_step"] > 0 and g["bit_exact_readings"] == mcu.READINGS
    assert (t2["history"], t8["history"]) == (2, 8)
    assert t8["cache_bytes"] == 4 * t2["cache_bytes"] > 0 and t8["ram_bytes"] > t2["ram_bytes"]
    assert t8["cycles_per_step"] > t2["cycles_per_step"] > 0 and t8["us_per_reading"] > 0
    r = {"mcu": p}
    title, head, rows = next(t for t in _tables_of(r, _tables) if t[0].startswith("On a microcontroller"))
    assert [row[1] for row in rows] == ["any", "2", "8"]
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
