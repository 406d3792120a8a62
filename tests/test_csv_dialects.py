"""CSV files as spreadsheets and old tools write them: CR-only (old Mac), LF and CR LF line
endings read alike by `train`, `stream` (file or a pipe) and the Pi demo's csv: source; a file
separated by ';' or tabs refused in one line that says so; a training CSV's reserved columns
(sequence, label, split, group) named in any case, as `stream` reads `label`."""

import io
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import one_error_line

from edgeseq.cli import cli
from edgeseq.data import load_dataset
from edgeseq.errors import DataError
from edgeseq.runtime.stream import HeaderError, LineReader, read_lines

F = ["acc_x", "acc_y", "acc_z", "gyr_x", "gyr_y", "gyr_z"]      # basicmotions' channels
ENDINGS = {"lf": "\n", "crlf": "\r\n", "cr": "\r"}


def _rows(n=12, seed=0):
    return [[f"{v:.4f}" for v in r] for r in np.random.default_rng(seed).standard_normal((n, len(F)))]


def _write(path, lines, end="\n"):
    Path(path).write_bytes(end.join(lines).encode() + end.encode())
    return str(path)


def _training_lines(header=("sequence", "label"), sep=","):
    rows = _rows(32)                    # 8 sequences of 4 readings, two classes
    return [sep.join([*header, *F])] + [sep.join([f"s{i // 4}", ("rest", "walk")[i // 4 % 2], *r])
                                        for i, r in enumerate(rows)]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny float GRU on basicmotions' six channels."""
    from edgeseq.train import TrainConfig, train
    from export import export_model
    path = tmp_path_factory.mktemp("dialects") / "gru.onnx"
    export_model(train("gru", "basicmotions", TrainConfig(epochs=1), {"hidden": 8}, progress=False), path)
    return str(path)


# -- line endings ----------------------------------------------------------------------------

@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_read_lines_splits_at_every_line_ending(end):
    data = end.join(["a,b", "", "1,2", "3,4"]).encode() + end.encode()
    assert list(read_lines(io.BytesIO(data))) == [b"a,b\n", b"\n", b"1,2\n", b"3,4\n"]
    assert list(read_lines(io.BytesIO(data[: -len(end)]))) == [b"a,b\n", b"\n", b"1,2\n", b"3,4"]


class Trickle:
    """A pipe: read1 hands over the pieces one at a time, and records how many were asked for."""

    def __init__(self, pieces):
        self.pieces, self.reads = list(pieces), 0

    def read1(self, size=-1):
        self.reads += 1
        return self.pieces.pop(0) if self.pieces else b""


def test_a_piped_cr_line_is_yielded_before_more_arrives_and_its_lf_is_dropped():
    pipe = Trickle([b"1,2\r", b"\n3,", b"4\r", b"5,6\n"])
    lines = read_lines(pipe)
    assert next(lines) == b"1,2\n" and pipe.reads == 1        # not waiting for a LF that may never come
    assert next(lines) == b"3,4\n" and pipe.reads == 3
    assert list(lines) == [b"5,6\n"]


def test_a_readline_only_source_with_cr_endings_is_split_too():
    class Serial:                       # pyserial has readline, no read1
        def __init__(self):
            self.chunks = [b"1,2\r3,4\r5,", b"6\n"]

        def readline(self, size=-1):
            return self.chunks.pop(0) if self.chunks else b""
    assert list(read_lines(Serial())) == [b"1,2\n", b"3,4\n", b"5,6\n"]


def test_an_over_long_cr_line_is_reported_once_and_the_next_line_read():
    from edgeseq.runtime.stream import MAX_LINE
    lines = list(read_lines(io.BytesIO(b"9" * (MAX_LINE + 10) + b"\r1,2\r")))
    assert len(lines) == 2 and len(lines[0]) == MAX_LINE and lines[1] == b"1,2\n"


@pytest.mark.parametrize("ending", ["crlf", "cr"])
def test_stream_reads_cr_and_crlf_files_and_pipes_as_lf(model, tmp_path, ending):
    lines = [",".join(F)] + [",".join(r) for r in _rows()]
    want = CliRunner().invoke(cli, ["stream", model, "--input", _write(tmp_path / "lf.csv", lines)])
    assert want.exit_code == 0, want.output
    path = _write(tmp_path / f"{ending}.csv", lines, ENDINGS[ending])
    got = CliRunner().invoke(cli, ["stream", model, "--input", path])
    assert got.exit_code == 0, got.output
    assert got.stdout == want.stdout and len(got.stdout.splitlines()) == 12
    piped = CliRunner().invoke(cli, ["stream", model, "--input", "-"], input=Path(path).read_bytes())
    assert piped.exit_code == 0 and piped.stdout == want.stdout, piped.output


def test_pi_demo_csv_source_reads_cr_only_files(model, tmp_path):
    from edgeseq.runtime import StreamSession
    from edgeseq.runtime.live import open_source, run_live
    lines = [",".join(F)] + [",".join(r) for r in _rows()]
    for ending in ENDINGS:
        path = _write(tmp_path / f"{ending}.csv", lines, ENDINGS[ending])
        sess = StreamSession(model)
        out = []
        summary = run_live(sess, open_source(f"csv:{path}", sess.features), as_json=True, echo=out.append)
        assert summary["readings"] == 12 and sum(summary["bad"].values()) == 0, (ending, summary)
        assert [json.loads(o)["reading"] for o in out] == list(range(1, 13))


@pytest.mark.parametrize("ending", ["lf", "crlf", "cr"])
def test_train_data_reads_every_line_ending_alike(tmp_path, ending):
    ds = load_dataset(_write(tmp_path / f"{ending}.csv", _training_lines(), ENDINGS[ending]))
    assert ds.features == F and len(ds.train) + len(ds.test) == 8


# -- separators ------------------------------------------------------------------------------

@pytest.mark.parametrize("sep, said", [(";", "';'"), ("\t", "tabs")])
def test_train_refuses_a_semicolon_or_tab_separated_file_saying_so(tmp_path, sep, said):
    path = _write(tmp_path / "semi.csv", _training_lines(sep=sep))
    with pytest.raises(DataError) as e:
        load_dataset(path)
    assert str(e.value) == f"'{path}' looks separated by {said}, not commas: save it comma-separated"
    r = CliRunner().invoke(cli, ["train", "--data", path, "--epochs", "1", "--out", str(tmp_path / "run")])
    assert "looks separated by" in one_error_line(r)


@pytest.mark.parametrize("sep, said", [(";", "';'"), ("\t", "tabs")])
def test_stream_refuses_a_semicolon_or_tab_separated_input_saying_so(model, tmp_path, sep, said):
    path = _write(tmp_path / "r.csv", [sep.join(F)] + [sep.join(r) for r in _rows()])
    r = CliRunner().invoke(cli, ["stream", model, "--input", path])
    assert one_error_line(r) == (f"Error: input line 1: the input looks separated by {said}, not commas: save it "
                                 "comma-separated")
    r = CliRunner().invoke(cli, ["stream", model, "--input", path, "--on-bad", "skip"])      # no option skips it
    assert "looks separated by" in one_error_line(r)


def test_pi_demo_refuses_a_semicolon_separated_csv_source(model, tmp_path):
    from edgeseq.runtime.live import open_source
    path = _write(tmp_path / "r.csv", [";".join(F)] + [";".join(r) for r in _rows()])
    with pytest.raises(HeaderError, match="looks separated by ';', not commas"):
        open_source(f"csv:{path}", F)


def test_a_semicolon_inside_a_name_of_a_comma_separated_header_is_no_separator():
    with pytest.raises(HeaderError, match=r"lacks \['acc_y'\]"):
        LineReader(["acc_x", "acc_y"]).parse(b"acc_x,a;b,c\n")


def test_semicolon_readings_without_header_say_how_they_look():
    reader = LineReader(["acc_x", "acc_y", "acc_z"])
    assert reader.parse(b"1,2,3\n") is not None
    from edgeseq.errors import ReadingError
    with pytest.raises(ReadingError, match=r"4 values, the model expects 3 \(the line looks separated by ';'"):
        reader.parse(b"1,5;2,5;3,5\n")


# -- reserved columns in any case ------------------------------------------------------------

def test_train_reads_reserved_columns_in_any_case(tmp_path):
    lines = _training_lines(header=("Sequence", "LABEL"))
    ds = load_dataset(_write(tmp_path / "cap.csv", lines))
    assert ds.features == F and sorted(ds.labels) == ["rest", "walk"]
    split = ["SPLIT"] + ["test" if line.startswith(("s6,", "s7,")) else "train" for line in lines[1:]]
    ds = load_dataset(_write(tmp_path / "split.csv", [f"{line},{s}" for line, s in zip(lines, split)]))
    assert ds.features == F and (len(ds.train), len(ds.test)) == (6, 2)


def test_train_refuses_a_reserved_column_named_twice_in_two_cases(tmp_path):
    lines = [line + ",x" for line in _training_lines()]
    lines[0] = lines[0][:-1] + "Label"
    with pytest.raises(DataError, match="columns 'label' and 'Label' are both the label column"):
        load_dataset(_write(tmp_path / "two.csv", lines))


def test_a_missing_sequence_column_names_the_columns_the_file_has(tmp_path):
    lines = _training_lines(header=("seq", "Label"))
    with pytest.raises(DataError) as e:
        load_dataset(_write(tmp_path / "noseq.csv", lines))
    assert "header needs a 'sequence' column (any case); its columns are 'seq', 'Label', 'acc_x'" in str(e.value)


def test_features_naming_a_reserved_column_in_another_case_are_refused(tmp_path):
    with pytest.raises(DataError, match="'Label' is the label column, not a feature"):
        load_dataset(_write(tmp_path / "d.csv", _training_lines()), features=["acc_x", "Label"])
