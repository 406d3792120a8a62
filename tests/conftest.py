"""Shared, session-scoped fixtures: each architecture is trained once per run (once for all
pytest-xdist workers, whichever needs it first) and exported once."""

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from edgeseq.data import load_dataset  # noqa: E402

# Under pytest-xdist (`make test` runs `-n auto`) each worker takes one core.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
torch.set_num_threads(1 if WORKER else 2)


def run_root(tmp_path_factory) -> Path:
    """The folder of this run that every xdist worker sees (a worker's own base temp is below it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if WORKER else base


def made_once(tmp_path_factory, name: str, make, load):
    """load(folder) of a folder that make(folder) filled, made by the first worker to ask and read
    by the others; a lock keeps the rest waiting while it is made."""
    from filelock import FileLock
    root = run_root(tmp_path_factory) / "made-once"
    root.mkdir(exist_ok=True)
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            make(folder)
            done.touch()
    return load(folder)


@pytest.fixture(scope="session")
def basicmotions():
    return load_dataset("basicmotions")


BRIEF = 20    # epochs of the bidirectional models of `trained`


@pytest.fixture(scope="session")
def trained(basicmotions, tmp_path_factory):
    """arch -> checkpoint trained with that architecture's default schedule and seed 0 (every
    worker reads the one saved checkpoint back, so all see the same dict). The bidirectional
    models, whose tests need a window model and never its accuracy, train a fixed BRIEF epochs
    (seconds, against about 25 s to early stopping)."""
    from dataclasses import replace

    from edgeseq.contract import WINDOW_ARCHS
    from edgeseq.train import DEFAULTS, load_checkpoint, save_checkpoint, train
    cache = {}

    def fit(arch):
        tc = replace(DEFAULTS[arch], epochs=BRIEF) if arch in WINDOW_ARCHS else None
        return train(arch, basicmotions, tc, progress=False)

    def get(arch):
        if arch not in cache:
            cache[arch] = made_once(tmp_path_factory, f"trained-{arch}", lambda d: save_checkpoint(fit(arch), d),
                                    load_checkpoint)
        return cache[arch]
    return get


def exported_once(tmp_path_factory, name: str, export):
    """(path, report) of export(path) -> report, made once for all workers: the model file alone in
    its folder, the report kept beside that folder as JSON."""
    import json

    def make(folder):
        import shutil
        shutil.rmtree(folder, ignore_errors=True)          # what an earlier, failed export left
        model = folder / "model" / f"{name}.onnx"
        model.parent.mkdir(parents=True)
        (folder / "report.json").write_text(json.dumps(export(model)))

    return made_once(tmp_path_factory, f"exported-{name}", make,
                     lambda folder: (folder / "model" / f"{name}.onnx",
                                     json.loads((folder / "report.json").read_text())))


@pytest.fixture(scope="session")
def exported(trained, tmp_path_factory):
    """arch -> (path of the exported model, export report)."""
    from export import export_model
    cache = {}

    def get(arch):
        if arch not in cache:
            cache[arch] = exported_once(tmp_path_factory, arch, lambda path: export_model(trained(arch), path))
        return cache[arch]
    return get


@pytest.fixture(scope="session")
def int8(trained, tmp_path_factory):
    """(arch, scheme) -> (path, export report), exported once per run."""
    from export import export_int8
    cache = {}

    def get(arch, scheme):
        if (arch, scheme) not in cache:
            cache[arch, scheme] = exported_once(tmp_path_factory, f"{arch}-{scheme}",
                                                lambda path: export_int8(trained(arch), path, scheme))
        return cache[arch, scheme]
    return get


# -- the runtime suites run on both step backends ---------------------------------------------
# Modules listing `backend_suite` in pytestmark run every test twice: with the default backend
# (auto: native for RNN, GRU, LSTM, SSM and Transformer where the extension is built) and with
# onnxruntime throughout, set through $EDGESEQ_BACKEND as a user would. A test of a model that
# runs on onnxruntime either way (bidirectional) runs once.
ONNXRUNTIME_ONLY_IDS = ("bigru", "bilstm")
# Long torch-side runs whose onnxruntime half the export's three-way parity tests already hold:
# on the onnxruntime backend they would repeat torch's work to check nothing new.
ONCE = ("test_session_matches_torch_step_loop", "test_targets_on_both_protocols",
        "test_training_on_per_reading_labels_follows_the_changes")


@pytest.fixture(params=["auto", "onnxruntime"])
def backend_suite(request, monkeypatch):
    monkeypatch.setenv("EDGESEQ_BACKEND", request.param)
    return request.param


# Files by their time on one worker, longest first (a --durations=0 run, 2 workers): the default
# translation Transformer trains for about 3.5 minutes; report --quick, tune and the gateway's
# brokers take one to two.
LONGEST_FIRST = ("test_translate.py", "test_report.py", "test_tune.py", "test_tune_postgres.py", "test_gateway.py",
                 "test_cluster.py", "test_firmware_xf.py", "test_backends.py", "test_bad_inputs.py",
                 "test_quantize.py", "test_native_attn.py", "test_runtime.py")


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        same = params.get("backend_suite") == "onnxruntime" and (any(k in item.name for k in ONNXRUNTIME_ONLY_IDS)
                                                                   or item.originalname in ONCE)
        (drop if same else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    # Longest files first (`make test` runs with --dist loadfile --no-loadscope-reorder): a worker
    # that starts the default translation Transformer's training last would run it alone at the end.
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # stable: the rest keep their order


@pytest.fixture
def runner(tmp_path, monkeypatch):
    """A CliRunner whose working directory is this test's temp dir."""
    from click.testing import CliRunner
    monkeypatch.chdir(tmp_path)
    return CliRunner()



class _NameFailures:
    """Names a failure on its own line the moment it happens: the quiet progress dots name none
    until the summary, which a long or interrupted run may never reach."""

    def __init__(self, config):
        self.config = config

    def pytest_runtest_logreport(self, report):
        if report.failed:
            tr = self.config.pluginmanager.get_plugin("terminalreporter")
            if tr is not None:
                tr.write("\n")                  # off the progress dots' line
                tr.write_line(f"FAILED {report.nodeid} (in {report.when})")


def pytest_configure(config):
    config.pluginmanager.register(_NameFailures(config), "edgeseq-name-failures")
