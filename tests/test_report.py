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
