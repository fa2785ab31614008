"""Writes framework_hashes.json: stored hashes made by the frameworks' own code.

Run with Django, passlib and Werkzeug installed (the versions below are the ones the
committed file was made with):

    python -m venv /tmp/hashes && /tmp/hashes/bin/pip install django==5.2.8 \
        passlib==1.7.4 werkzeug==3.1.9 argon2-cffi==25.1.0 bcrypt==5.0.0
    /tmp/hashes/bin/python tests/data/framework_hashes.py > tests/data/framework_hashes.json

Each row: the tool, the password, the stored hash and whether they must match. The
costs are the frameworks' defaults where a comparison takes well under a second, and
lowered where the default would slow the test suite (the row's note says so). Test data
only; no real user's secret.
"""

import json
import sys

import django
from django.conf import settings

settings.configure(
    PASSWORD_HASHERS=[
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
        "django.contrib.auth.hashers.PBKDF2SHA1PasswordHasher",
        "django.contrib.auth.hashers.Argon2PasswordHasher",
        "django.contrib.auth.hashers.BCryptSHA256PasswordHasher",
        "django.contrib.auth.hashers.BCryptPasswordHasher",
        "django.contrib.auth.hashers.ScryptPasswordHasher",
    ]
)
django.setup()

import passlib  # noqa: E402
from importlib.metadata import version  # noqa: E402
from django.contrib.auth import hashers  # noqa: E402
from passlib import hash as passlib_hash  # noqa: E402
from werkzeug.security import generate_password_hash  # noqa: E402

PASSWORD = "correct horse battery staple"
WRONG = "correct horse battery stapler"
LONG = "Tr0ub4dor&3 " * 8  # 96 bytes: above bcrypt's 72, fine for bcrypt_sha256
UNICODE = "pässwörd ☃ 密码"

rows = []


def add(tool, password, stored, note=""):
    rows.append({"tool": tool, "password": password, "hash": stored, "match": True, "note": note})
    rows.append({"tool": tool, "password": WRONG if password != WRONG else PASSWORD,
                 "hash": stored, "match": False, "note": note})


DJ = f"Django {django.get_version()}"


class FastPBKDF2(hashers.PBKDF2PasswordHasher):
    iterations = 10_000


class FastPBKDF2SHA1(hashers.PBKDF2SHA1PasswordHasher):
    iterations = 10_000


add(f"{DJ} PBKDF2PasswordHasher (the default)", PASSWORD,
    hashers.PBKDF2PasswordHasher().encode(PASSWORD, hashers.PBKDF2PasswordHasher().salt()),
    "Django's default iterations")
add(f"{DJ} PBKDF2PasswordHasher", UNICODE,
    FastPBKDF2().encode(UNICODE, FastPBKDF2().salt()), "iterations lowered to 10000")
add(f"{DJ} PBKDF2SHA1PasswordHasher", PASSWORD,
    FastPBKDF2SHA1().encode(PASSWORD, FastPBKDF2SHA1().salt()), "iterations lowered to 10000")
add(f"{DJ} Argon2PasswordHasher", PASSWORD, hashers.make_password(PASSWORD, hasher="argon2"),
    "Django's default parameters")
add(f"{DJ} BCryptSHA256PasswordHasher", LONG,
    hashers.make_password(LONG, hasher="bcrypt_sha256"),
    "96 bytes: the SHA-256 prehash keeps it whole")
add(f"{DJ} BCryptSHA256PasswordHasher", PASSWORD,
    hashers.make_password(PASSWORD, hasher="bcrypt_sha256"))
add(f"{DJ} BCryptPasswordHasher", PASSWORD, hashers.make_password(PASSWORD, hasher="bcrypt"))
add(f"{DJ} ScryptPasswordHasher", PASSWORD, hashers.make_password(PASSWORD, hasher="scrypt"),
    "Django's default parameters")
# bcrypt_sha256 over a long password: a prefix of it is another password.
rows.append({"tool": f"{DJ} BCryptSHA256PasswordHasher", "password": LONG[:72],
             "hash": rows[8]["hash"], "match": False, "note": "the first 72 bytes only"})

PL = f"passlib {passlib.__version__}"
add(f"{PL} pbkdf2_sha256", PASSWORD, passlib_hash.pbkdf2_sha256.hash(PASSWORD),
    "passlib's default rounds")
add(f"{PL} pbkdf2_sha512", PASSWORD,
    passlib_hash.pbkdf2_sha512.using(rounds=10_000).hash(PASSWORD), "rounds lowered to 10000")
add(f"{PL} pbkdf2_sha1", PASSWORD,
    passlib_hash.pbkdf2_sha1.using(rounds=10_000).hash(PASSWORD), "rounds lowered to 10000")
add(f"{PL} scrypt", PASSWORD, passlib_hash.scrypt.using(rounds=14).hash(PASSWORD),
    "ln lowered to 14")
add(f"{PL} scrypt", UNICODE, passlib_hash.scrypt.using(rounds=12, block_size=4,
                                                       parallelism=2).hash(UNICODE))

WZ = f"Werkzeug {version('werkzeug')}"
add(f"{WZ} generate_password_hash pbkdf2:sha256", PASSWORD,
    generate_password_hash(PASSWORD, "pbkdf2:sha256:10000"), "iterations lowered to 10000")
add(f"{WZ} generate_password_hash pbkdf2:sha512", UNICODE,
    generate_password_hash(UNICODE, "pbkdf2:sha512:10000"), "iterations lowered to 10000")
add(f"{WZ} generate_password_hash (the default, scrypt)", PASSWORD,
    generate_password_hash(PASSWORD), "Werkzeug's default parameters")

json.dump({
    "about": "Stored password hashes made by the frameworks' own code (Django's hashers, "
             "passlib, Werkzeug); written by framework_hashes.py beside this file. Each row: "
             "the candidate password, the stored hash, and whether they must match. Test data "
             "only; no real user's secret.",
    "vectors": rows,
}, sys.stdout, indent=1, ensure_ascii=False)
print()
