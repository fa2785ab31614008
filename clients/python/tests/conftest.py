import json
import pathlib
import sys

import pytest

TESTS = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

CONFORMANCE = TESTS.parent.parent / "conformance.json"


def load_conformance() -> dict:
    with open(CONFORMANCE, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture
def conformance() -> dict:
    return load_conformance()
