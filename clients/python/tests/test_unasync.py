"""The blocking client (_sync.py) is what scripts/unasync.py writes from the asyncio
client (_aio.py) today, and the two clients offer the same methods."""

import importlib.util
import inspect
import pathlib

import pytest

from portcullis_client import AsyncClient, Client

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location("unasync", ROOT / "scripts" / "unasync.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_sync_client_is_generated_from_the_asyncio_client() -> None:
    diff = load_script().stale_diff()
    assert not diff, f"_sync.py is stale: run python scripts/unasync.py\n{diff}"


def test_a_rule_that_matches_nothing_is_an_error() -> None:
    script = load_script()
    with pytest.raises(ValueError, match="matched nothing"):
        script.render('"""The asyncio client."""\nclass AsyncClient:\n    pass\n')


def test_both_clients_have_the_same_public_methods_and_signatures() -> None:
    def public(cls: type) -> dict[str, inspect.Signature]:
        return {n: inspect.signature(f) for n, f in vars(cls).items() if callable(f) and not n.startswith("_")}

    sync, aio = public(Client), public(AsyncClient)
    assert sorted(sync) == sorted(aio)
    assert len(sync) >= 15
    for name in sync:
        assert str(sync[name]) == str(aio[name]), name
        if name not in ("route", "stats"):
            assert inspect.iscoroutinefunction(getattr(AsyncClient, name)), name
            assert not inspect.iscoroutinefunction(getattr(Client, name)), name
