"""Shared, session-scoped fixtures: each architecture is trained and exported once per run."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from edgeseq.data import load_dataset  # noqa: E402

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def basicmotions():
    return load_dataset("basicmotions")


@pytest.fixture(scope="session")
def trained(basicmotions):
    """arch -> checkpoint trained with that architecture's default schedule and seed 0."""
    from edgeseq.train import train
    cache = {}

    def get(arch):
        if arch not in cache:
            cache[arch] = train(arch, basicmotions, progress=False)
        return cache[arch]
    return get


@pytest.fixture(scope="session")
def exported(trained, tmp_path_factory):
    """arch -> (path of the exported model, export report)."""
    from export import export_model
    root = tmp_path_factory.mktemp("models")
    cache = {}

    def get(arch):
        if arch not in cache:
            path = root / f"{arch}.onnx"
            cache[arch] = (path, export_model(trained(arch), path))
        return cache[arch]
    return get


@pytest.fixture(scope="session")
def int8(trained, tmp_path_factory):
    """(arch, scheme) -> (path, export report), exported once per run."""
    root = tmp_path_factory.mktemp("int8")
    cache = {}

    def get(arch, scheme):
        if (arch, scheme) not in cache:
            path = root / f"{arch}-{scheme}.onnx"
            from export import export_int8
            cache[arch, scheme] = (path, export_int8(trained(arch), path, scheme))
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
