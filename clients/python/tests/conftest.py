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


@pytest.fixture(scope="session")
def django_daemon(tmp_path_factory):
    """One daemon for every Django test (realms ``django`` and ``stepup``)."""
    from daemon import Daemon
    from django_support import DAEMON_CONFIG

    d = Daemon(tmp_path_factory.mktemp("django-daemon") / "data", DAEMON_CONFIG)
    yield d
    d.stop()


@pytest.fixture(scope="session")
def django_site(django_daemon):
    """The test Django project, set up in this process against ``django_daemon``."""
    import django_support

    django_support.setup(django_daemon.url)
    return django_daemon
