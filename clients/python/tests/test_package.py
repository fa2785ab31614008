"""The package works outside this repository: ``python -m build`` makes an sdist and a
wheel (the wheel built from the sdist, as ``build`` does by default); the wheel holds the
generated stubs, their type stubs and ``py.typed``; the wheel and the sdist, each
installed into a fresh virtual environment in a temporary directory, import and call a
real daemon from outside the checkout.

Marked ``packaging``: it needs PyPI (build's isolated environment, grpcio and protobuf
for the new environments). ``-m 'not packaging'`` leaves it out of a quick run.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile

import pytest

from calls import ARGON2, PASSWORD
from daemon import Daemon

pytestmark = pytest.mark.packaging

ROOT = pathlib.Path(__file__).resolve().parents[1]
REPO = ROOT.parents[1]
STUBS = ("__init__.py", "governor_pb2.py", "governor_pb2.pyi", "governor_pb2_grpc.py", "admin_pb2.py", "admin_pb2.pyi", "admin_pb2_grpc.py")

# Run inside each new environment, from a directory outside the checkout: where the
# package was imported from, and one verify with each client.
PROBE = """
import asyncio, json, sys
import portcullis_client
from portcullis_client import AsyncClient, Client, ClientConfig
url, hash_, password = sys.argv[1:4]
login = dict(realm="default", identifier="pkg@example.com", password=password, stored_hash=hash_, client_key="198.51.100.60")
config = ClientConfig(endpoints=(url,), call_timeout=5.0)
with Client(config) as c:
    sync = c.verify(**login)
async def run():
    async with AsyncClient(config) as c:
        return await c.verify(**login)
aio = asyncio.run(run())
print(json.dumps({"file": portcullis_client.__file__, "version": portcullis_client.__version__,
                  "sync": sync.decision.value, "asyncio": aio.decision.value}))
"""


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("pkg-daemon") / "data", 'shutdown_delay = "0s"\n')
    yield d
    d.stop()


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> dict[str, pathlib.Path]:
    """``python -m build``: the sdist, then the wheel built from it. Built from a copy of
    the package without what a local install or build leaves behind (an editable
    install's ``*.egg-info`` would otherwise feed its file list into the sdist)."""
    source = tmp_path_factory.mktemp("source") / "python"
    left_behind = shutil.ignore_patterns("*.egg-info", "build", "dist", "__pycache__", ".*_cache", ".venv", "venv")
    shutil.copytree(ROOT, source, ignore=left_behind)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(source)], check=True, timeout=600)
    sdists, wheels = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return {"sdist": sdists[0], "wheel": wheels[0]}


def fresh_env(where: pathlib.Path) -> pathlib.Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(where)
    return where / "bin" / "python"


def install_and_probe(python: pathlib.Path, what: pathlib.Path, daemon: Daemon, cwd: pathlib.Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(what)], check=True, timeout=600, env=env, cwd=cwd)
    out = subprocess.run(
        [str(python), "-c", PROBE, daemon.url, ARGON2, PASSWORD],
        capture_output=True, text=True, timeout=120, env=env, cwd=cwd,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_wheel_holds_the_stubs_their_types_and_py_typed(dists) -> None:
    with zipfile.ZipFile(dists["wheel"]) as wheel:
        names = set(wheel.namelist())
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = wheel.read(metadata).decode()
    for stub in STUBS:
        assert f"portcullis_client/_pb/{stub}" in names, stub
    assert "portcullis_client/py.typed" in names
    assert "portcullis_client/_sync.py" in names and "portcullis_client/_aio.py" in names
    for page in ("login", "challenge", "captcha", "unavailable", "change_required", "second_factor", "too_many_codes"):
        assert f"portcullis_client/django/templates/portcullis/{page}.html" in names, page
    assert any(n.endswith("licenses/LICENSE-MIT") for n in names)
    assert any(n.endswith("licenses/LICENSE-APACHE") for n in names)
    assert not any(n.startswith(("tests/", "scripts/")) for n in names)
    assert "License-Expression: MIT OR Apache-2.0" in meta
    assert "Provides-Extra: django" in meta


def test_the_sdist_holds_what_a_wheel_is_built_from(dists) -> None:
    with tarfile.open(dists["sdist"]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    for path in (
        "pyproject.toml", "README.md", "DJANGO.md", "LICENSE-MIT", "LICENSE-APACHE", "src/portcullis_client/py.typed"
    ):
        assert path in names, path
    for stub in STUBS:
        assert f"src/portcullis_client/_pb/{stub}" in names, stub


@pytest.mark.parametrize("what", ["wheel", "sdist"])
def test_installed_outside_the_checkout_it_imports_and_calls_the_daemon(dists, daemon, tmp_path, what: str) -> None:
    assert not str(tmp_path).startswith(str(REPO))
    python = fresh_env(tmp_path / "venv")
    probe = install_and_probe(python, dists[what], daemon, tmp_path)
    # Imported from the new environment, not from the checkout.
    assert probe["file"].startswith(str(tmp_path / "venv")), probe["file"]
    assert (probe["sync"], probe["asyncio"]) == ("allow", "allow")
