#!/usr/bin/env python3
"""Regenerates the committed gRPC stubs in src/portcullis_client/_pb from the
repository's proto/ (portcullis/v1/governor.proto and admin.proto).

    python scripts/generate_stubs.py            # rewrite the committed stubs
    python scripts/generate_stubs.py --out DIR  # write them elsewhere (the test does)

Needs grpcio-tools at exactly the version pinned in pyproject.toml's `test` extra, so
the output is byte for byte what is committed (tests/test_stubs.py checks it). The
generated modules import each other as `portcullis.v1.*`; that is rewritten to relative
imports so the stubs live inside this package and need no top-level `portcullis` name.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
PACKAGE_DIR = HERE.parent / "src" / "portcullis_client" / "_pb"
PROTO_ROOT = HERE.parent.parent.parent / "proto"
PROTOS = ["portcullis/v1/governor.proto", "portcullis/v1/admin.proto"]

HEADER = '"""Generated gRPC stubs of proto/portcullis/v1 (scripts/generate_stubs.py). Do not edit."""\n'


def generate(out: pathlib.Path, proto_root: pathlib.Path = PROTO_ROOT) -> list[pathlib.Path]:
    from grpc_tools import protoc  # the test extra installs it

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "protoc",
            f"-I{proto_root}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *(str(proto_root / p) for p in PROTOS),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed (see its message above)")
        written = []
        for src in sorted((pathlib.Path(tmp) / "portcullis" / "v1").iterdir()):
            text = src.read_text(encoding="utf-8")
            text = re.sub(r"^from portcullis\.v1 import ", "from . import ", text, flags=re.M)
            dest = out / src.name
            dest.write_text(text, encoding="utf-8")
            written.append(dest)
    init = out / "__init__.py"
    init.write_text(HEADER, encoding="utf-8")
    written.append(init)
    return sorted(written)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=PACKAGE_DIR)
    parser.add_argument("--proto-root", type=pathlib.Path, default=PROTO_ROOT)
    args = parser.parse_args()
    for path in generate(args.out, args.proto_root):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
