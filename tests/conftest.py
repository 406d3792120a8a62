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
