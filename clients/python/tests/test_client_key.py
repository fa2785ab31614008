"""client_key_from_forwarded: the Rust client's rule (client/src/client_key.rs), its
test cases one for one, and a few of Python's own."""

import pytest

from portcullis_client import client_key_from_forwarded as key

PEER = "10.0.0.2"


def test_the_entry_the_trusted_proxies_appended_is_the_client() -> None:
    xff = ["6.6.6.6, 203.0.113.7, 10.0.0.1"]
    assert key(PEER, xff, 2) == "203.0.113.7"
    assert key(PEER, xff, 1) == "10.0.0.1"
    # Headers split in two are one list.
    assert key(PEER, ["6.6.6.6", "203.0.113.7, 10.0.0.1"], 2) == "203.0.113.7"


def test_a_forged_leftmost_entry_is_never_the_key() -> None:
    assert key(PEER, ["1.2.3.4, 203.0.113.7"], 1) == "203.0.113.7"
    assert key(PEER, ["9.9.9.9, 8.8.8.8, 1.2.3.4, 203.0.113.7"], 1) == "203.0.113.7"


def test_short_or_missing_headers_fall_back_to_what_a_trusted_hop_saw() -> None:
    assert key(PEER, [], 1) == "10.0.0.2"
    assert key(PEER, None, 1) == "10.0.0.2"
    assert key(PEER, [" , "], 2) == "10.0.0.2"
    assert key(PEER, ["203.0.113.7"], 3) == "203.0.113.7"


def test_addresses_are_canonical_and_other_text_is_kept() -> None:
    assert key(PEER, ["::ffff:203.0.113.7"], 1) == "203.0.113.7"
    assert key(PEER, ["unknown"], 1) == "unknown"
    assert key("::ffff:10.0.0.9", [], 0) == "10.0.0.9"
    assert key(PEER, ["2001:DB8:0:0:0:0:0:1"], 1) == "2001:db8::1"
    assert key(PEER, ["fe80::1%eth0"], 1) == "fe80::1%eth0"  # a zone: no address, as Rust reads it


def test_zero_hops_ignores_the_header_and_a_single_string_is_one_header() -> None:
    assert key(PEER, "203.0.113.7", 0) == "10.0.0.2"
    assert key(PEER, "198.51.100.9, 203.0.113.7", 1) == "203.0.113.7"


@pytest.mark.parametrize("hops", [-1, 1.0, True, "1"])
def test_hops_must_be_a_count(hops) -> None:
    with pytest.raises(ValueError):
        key(PEER, [], hops)
