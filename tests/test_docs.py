"""The documentation: the site builds with no warning (a broken link or anchor fails), the
figure tables are what their JSON says, the README stays a front door that links into it, and
the home page links every page of the nav."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def render_docs():
    spec = importlib.util.spec_from_file_location("render_docs", ROOT / "scripts" / "render_docs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs not installed: pip install '.[docs]' (Python 3.11+)")
    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout}\n{r.stderr}"
    for page in ("index.html", "api/runtime/index.html", "measured/index.html", "report/report/index.html",
                 "report/index.html", "report/memory.png", "attention-transformer.png"):
        assert (site / page).is_file(), f"{page} missing from the built site"
    api = (site / "api" / "runtime" / "index.html").read_text(encoding="utf-8")
    assert 'id="edgeseq.runtime.session.StreamSession.push"' in api


def test_figures_are_rendered_from_their_json():
    rd = render_docs()
    stale = rd.stale()
    assert not stale, ("figures differ from their JSON (edited by hand, or the JSON changed): "
                       + ", ".join(str(p.relative_to(ROOT)) for p in stale)
                       + "; run python scripts/render_docs.py")


def test_clang_scaling_is_the_measured_table():
    """firmware_sim.targets.CLANG (which `check --compiler clang` scales by) is the compiler table's
    figures: clang's .text and cycles as multiples of gcc's, and clang's stack, per core and kind."""
    import json

    from firmware_sim.targets import CLANG
    rows = json.loads((ROOT / "docs" / "figures" / "compilers.json").read_text())["rows"]
    measured = {}
    for r in rows:
        g, c = r["gcc"], r["clang"]
        measured.setdefault(r["core"], {})[g["arch"]] = (
            round(c["text_bytes"] / g["text_bytes"], 2), c["stack_bytes"],
            round(c["cycles_per_step"] / g["cycles_per_step"], 2))
    assert CLANG == measured, "firmware_sim/targets.py CLANG differs from docs/figures/compilers.json"


def test_the_demo_json_renders_the_readme_table(tmp_path):
    """`examples/demo.py --json` writes what the README's table renders from: one row per model,
    named from its config, with the machine and the date."""
    import json
    spec = importlib.util.spec_from_file_location("demo", ROOT / "examples" / "demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    row = {"arch": "gru", "config": {"hidden": 64, "layers": 1}, "per_sequence": 1.0, "continuous": 0.99375,
           "int8_continuous": 0.9925, "train_seconds": 8.93, "bytes": 77812, "int8_bytes": 26173,
           "state_bytes_100": 256, "state_bytes_4096": 256, "median_push_us": 1.58, "backend": "native"}
    demo.write_json(tmp_path / "demo.json", [row, {**row, "arch": "transformer", "state_bytes_100": 25600,
                                                    "state_bytes_4096": 25600, "config": {
                                                        "d_model": 32, "layers": 2, "heads": 4, "window": 50,
                                                        "positions": "alibi"}}])
    d = json.loads((tmp_path / "demo.json").read_text())
    text = render_docs().render_demo(d, "demo.json")
    assert "| GRU (hidden 64) | 1.000 / 0.994 | 0.993 | 8.9 s | 78 KB (26 KB) | 256 B | 1.6 us (native) |" in text
    assert "| Transformer (d 32, 2 layers, 4 heads, window 50, ALiBi) |" in text
    assert "512 B per reading, up to 50 (25,600 B)" in text and f"measured {d['date']}" in text


def test_translation_tables_name_each_models_own_sentence_count():
    """scripts/measure_translation.py's JSON renders one quality row per model and one speed table
    per model, each with the sentences that model was scored or timed on."""
    def ev(n, greedy, beam):
        return {"sentences": n, "split": "test", "corpus": "jupyterlab-fr", "alpha": 0.6, "metric": "sacrebleu x",
                "results": {"greedy": {"beam": 1, "bleu": greedy[0], "chrf": greedy[1]},
                            "beam4": {"beam": 4, "bleu": beam[0], "chrf": beam[1]}}}

    def bench(n, ort, recompute):
        row = {"sentences_per_s": 100.0, "tokens_per_s": 1234.4}
        return {"sentences": n, "max_len": 48, "machine": {"torch_threads": 2}, "results": {
            "one sentence per call": {"onnxruntime, cached": {**row, "speedup_vs_recompute": ort},
                                      "torch eager, recompute prefix": {**row, "speedup_vs_recompute": recompute}}}}

    def model(arch, e, b):
        return {"train": {}, "eval": e, "bench": b,
                "commands": [f"edgeseq translate eval models/mt-{arch} --json", f"edgeseq translate bench runs/mt-{arch} --json"]}
    d = {"models": {"transformer": model("transformer", ev(288, (24.94, 47.9), (25.5, 48.61)), bench(50, 6.04, 1.0)),
                    "lstm-attn": model("lstm-attn", ev(280, (16.0, 38.9), (18.5, 40.2)), bench(30, 19.5, 1.0))},
         "meta": {"machine": {"machine": "x86_64"}, "date": "2026-01-01 00:00 UTC", "command": "python m.py"}}
    rd = render_docs()
    q = rd.render_translation_quality(d, "t.json")
    assert "| model | test sentences | greedy BLEU | greedy chrF | beam 4 BLEU | beam 4 chrF |" in q
    assert "| Transformer | 288 | 24.9 | 47.9 | 25.5 | 48.6 |" in q and "| LSTM + attention | 280 | 16.0 |" in q
    assert "`edgeseq translate eval models/mt-lstm-attn --json`" in q and "measured 2026-01-01 00:00 UTC" in q
    s = rd.render_translation_speed(d, "t.json")
    assert "| Transformer, 50 test sentences |" in s and "| LSTM + attention, 30 test sentences |" in s
    assert "| onnxruntime, cached, one sentence per call | 100 | 1,234 | 19.5x |" in s
    assert "LSTM + attention, 19.5x at one sentence per call" in s


def test_every_renderer_has_a_region():
    rd = render_docs()
    used = set()
    for page in rd.pages():
        used.update(rd.check_markers(page.read_text(encoding="utf-8"), page.name))
    assert used == set(rd.RENDERERS), f"renderers without a region: {sorted(set(rd.RENDERERS) - used)}"


def test_a_hand_edit_between_markers_is_caught():
    rd = render_docs()
    page = ROOT / "docs" / "measured.md"
    text = page.read_text(encoding="utf-8")
    assert rd.render_page(text) == text
    body = re.search(r"<!-- figures:bench-gru -->(.*?)<!-- /figures:bench-gru -->", text, re.S).group(1)
    edited = text.replace(body, re.sub(r"\d+\.\d us", "1.0 us", body, count=1))
    assert edited != text
    assert rd.render_page(edited) == text


def test_machine_line_names_the_date_only_when_the_json_has_one():
    rd = render_docs()
    m = {"machine": "x86_64", "cpus": 2, "onnxruntime": "1.32.0", "processor": ""}
    dated = rd.machine_line({"machine": m, "date": "2026-11-29 12:11 UTC"}, "docs/figures/x.json", "`run`")
    assert dated == "*`run`, on x86_64 (2 CPUs), onnxruntime 1.32.0; measured 2026-11-29 12:11 UTC.*"
    undated = rd.machine_line({"machine": m}, "docs/figures/x.json", "`run`")
    assert undated.endswith("the date is not recorded in `docs/figures/x.json`.*")


@pytest.mark.parametrize("text, message", [
    ("<!-- figures:bench-gru -->\nx\n", "never closed"),
    ("<!-- /figures:bench-gru -->\n", "closes nothing"),
    ("<!-- figures:nope -->\n<!-- /figures:nope -->\n", "unknown figures region 'nope'"),
    ("<!-- figures:report -->\n<!-- figures:bench-gru -->\n", "opens inside"),
])
def test_bad_markers_are_refused(text, message):
    rd = render_docs()
    with pytest.raises(rd.RenderError, match=message):
        rd.render_page(text)


def test_readme_is_a_front_door_with_working_links():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    links = re.findall(r"\]\(((?:docs|CONTRIBUTING|CHANGELOG)[^)#\s]*)(?:#[^)]*)?\)", text)
    assert links, "the README links into docs/"
    for link in links:
        assert (ROOT / link).exists(), f"README links to {link}, which does not exist"


def test_home_page_links_every_page_of_the_nav_and_no_other():
    nav = mkdocs_nav()
    assert "gateway.md" in nav and "api/runtime.md" in nav, nav          # the parse found the nav
    text = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#\s:]+\.md)(?:#[^)]*)?\)", text))
    unlinked, astray = sorted(nav - {"index.md"} - linked), sorted(linked - nav)
    assert not unlinked, f"pages in mkdocs.yml's nav that the home page does not link: {unlinked}"
    assert not astray, f"pages the home page links that mkdocs.yml's nav leaves out: {astray}"


def mkdocs_nav() -> set:
    """The pages of mkdocs.yml's nav (`  - Title: page.md`, nested or not), read without PyYAML."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    block = re.search(r"^nav:\n((?:[ \t]+.*\n?)+)", text, re.M).group(1)
    return set(re.findall(r"^\s+-\s[^:\n]*:\s*(\S+\.md)\s*$", block, re.M))


REFERENCE = "<!-- table: reference -->"
TABLE_ROW = re.compile(r"^ *\|.*\| *$")


def hand_tables(text: str) -> list:
    """(line number, header) of every Markdown table outside a figures region whose header is not
    right after a `<!-- table: reference -->` line (settings, files, message formats)."""
    out, inside, prev, in_table = [], False, "", False
    for n, line in enumerate(text.splitlines(), 1):
        if re.match(r"<!-- figures:[a-z0-9-]+ -->", line.strip()):
            inside = True
        elif re.match(r"<!-- /figures:[a-z0-9-]+ -->", line.strip()):
            inside = False
        row = bool(TABLE_ROW.match(line))
        if row and not in_table and not inside and prev.strip() != REFERENCE:
            out.append((n, line.strip()))
        in_table = row
        if line.strip():
            prev = line
    return out


def test_every_figure_table_is_rendered_from_json():
    """A table of figures typed by hand goes stale: every table in the docs and the README is a
    rendered region (scripts/render_docs.py) or marked as reference (no measured figure in it)."""
    pages = [p for p in sorted((ROOT / "docs").rglob("*.md")) if "report" not in p.relative_to(ROOT / "docs").parts[:1]]
    pages.append(ROOT / "README.md")             # docs/report/ is `edgeseq report`'s own output, written whole
    found = [f"{p.relative_to(ROOT)}:{n}: {head[:60]}" for p in pages for n, head in hand_tables(p.read_text())]
    assert not found, ("tables outside a figures region (render them from their benchmark's JSON, or mark a table "
                       f"of settings with {REFERENCE} on the line before it):\n" + "\n".join(found))


def test_a_hand_table_is_found_and_a_reference_one_is_not():
    text = ("intro\n\n| a | b |\n|---|---|\n| 1.0 | 2 |\n\n" + REFERENCE + "\n| setting | default |\n|---|---|\n"
            "| x | 0.1 |\n\n<!-- figures:demo -->\n| f | g |\n|---|---|\n<!-- /figures:demo -->\n"
            "  - item\n\n    | indented | table |\n    |---|---|\n")
    assert [n for n, _ in hand_tables(text)] == [3, 18]
