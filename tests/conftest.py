"""Shared pytest configuration: device parametrisation and the CUDA marker."""

from __future__ import annotations

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

# Every device test runs on CPU everywhere and on CUDA where a GPU is present
# (skipped, and reported as such, where none is).
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU visible")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param
