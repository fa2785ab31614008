"""The committed stubs are what scripts/generate_stubs.py makes from proto/ today."""

import importlib.metadata
import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "src" / "portcullis_client" / "_pb"


def test_regenerating_the_stubs_gives_the_committed_files(tmp_path: pathlib.Path) -> None:
    pinned = "1.85.1"  # pyproject.toml's test extra
    installed = importlib.metadata.version("grpcio-tools")
    assert installed == pinned, f"grpcio-tools {installed} installed; the stubs are generated with {pinned}"
    spec = importlib.util.spec_from_file_location("generate_stubs", ROOT / "scripts" / "generate_stubs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not module.PROTO_ROOT.is_dir():
        pytest.fail(f"the repository's proto/ is not at {module.PROTO_ROOT}")
    fresh = {p.name: p.read_bytes() for p in module.generate(tmp_path)}
    committed = {p.name: p.read_bytes() for p in COMMITTED.iterdir() if p.is_file()}
    assert sorted(fresh) == sorted(committed)
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale stubs {stale}: run python scripts/generate_stubs.py"
