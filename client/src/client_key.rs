//! The end client's `client_key` behind proxies (docs/client.md, "The client key"): the
//! daemon throttles by it per client network and bounds the CPU per client, so it must
//! be an address the client cannot choose.
//!
//! `X-Forwarded-For` lists `client, proxy1, proxy2`: each proxy *appends* the address
//! it received the request from. Only the entries your own proxies appended are true;
//! everything to their left is whatever the client sent, and the leftmost entry is the
//! one a client forges (OWASP, Credential Stuffing Prevention Cheat Sheet: naive IP
//! lockouts break on proxies, XFF chains and IPv6). So the key is read from the
//! *right*: with `trusted_hops` proxies in front of the gateway, the peer that connected
//! is the last of them, and the client is the entry `trusted_hops − 1` places from the
//! right end of the header.

use std::net::IpAddr;

/// The `client_key` of a request that reached the gateway from `peer` with the
/// `X-Forwarded-For` header values `forwarded` (each header's value in the order
/// received; several are read as one list, RFC 9110 §5.3), behind `trusted_hops`
/// proxies of your own (0: clients connect to the gateway directly, and the header is
/// ignored).
///
/// The answer is the address your outermost trusted proxy saw, as text. When the
/// header holds fewer entries than `trusted_hops` (a request that did not come through
/// all of them), it is the leftmost entry there is, which one of your proxies still
/// appended, or `peer` itself. An entry that is not an IP address is returned as
/// written (trimmed): the daemon gives such a key a bucket of its own.
///
/// ```
/// use std::net::IpAddr;
/// use portcullis_client::client_key_from_forwarded;
///
/// let lb: IpAddr = "10.0.0.2".parse().unwrap();
/// // One load balancer in front: the entry it appended is the client.
/// let key = client_key_from_forwarded(lb, &["198.51.100.9, 203.0.113.7"], 1);
/// assert_eq!(key, "203.0.113.7");
/// // No proxy: the header is the client's own word, and ignored.
/// assert_eq!(client_key_from_forwarded(lb, &["203.0.113.7"], 0), "10.0.0.2");
/// ```
pub fn client_key_from_forwarded(peer: IpAddr, forwarded: &[&str], trusted_hops: usize) -> String {
    if trusted_hops == 0 {
        return peer.to_canonical().to_string();
    }
    let entries: Vec<&str> = forwarded
        .iter()
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    // The peer is the last trusted proxy; the entries it and the other trusted proxies
    // appended are the last `trusted_hops` ones, the first of them the client.
    let Some(first_trusted) = entries.len().checked_sub(trusted_hops) else {
        return entries.first().map_or_else(|| peer.to_canonical().to_string(), |e| canonical(e));
    };
    canonical(entries[first_trusted])
}

/// An address as the daemon will read it (an IPv4-mapped IPv6 address as IPv4), or the
/// entry as written.
fn canonical(entry: &str) -> String {
    entry.parse::<IpAddr>().map_or_else(|_| entry.to_owned(), |ip| ip.to_canonical().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> IpAddr {
        "10.0.0.2".parse().unwrap()
    }

    #[test]
    fn the_entry_the_trusted_proxies_appended_is_the_client() {
        // Two proxies: the outer one appended the client, the inner one the outer.
        let xff = ["6.6.6.6, 203.0.113.7, 10.0.0.1"];
        assert_eq!(client_key_from_forwarded(peer(), &xff, 2), "203.0.113.7");
        assert_eq!(client_key_from_forwarded(peer(), &xff, 1), "10.0.0.1");
        // Headers split in two are one list.
        let split = ["6.6.6.6", "203.0.113.7, 10.0.0.1"];
        assert_eq!(client_key_from_forwarded(peer(), &split, 2), "203.0.113.7");
    }

    #[test]
    fn a_forged_leftmost_entry_is_never_the_key() {
        // The client sent "1.2.3.4" itself; one trusted proxy appended its real address.
        let key = client_key_from_forwarded(peer(), &["1.2.3.4, 203.0.113.7"], 1);
        assert_eq!(key, "203.0.113.7");
        // Whatever the client adds to its own header, the key stays.
        let key = client_key_from_forwarded(peer(), &["9.9.9.9, 8.8.8.8, 1.2.3.4, 203.0.113.7"], 1);
        assert_eq!(key, "203.0.113.7");
    }

    #[test]
    fn short_or_missing_headers_fall_back_to_what_a_trusted_hop_saw() {
        assert_eq!(client_key_from_forwarded(peer(), &[], 1), "10.0.0.2");
        assert_eq!(client_key_from_forwarded(peer(), &[" , "], 2), "10.0.0.2");
        assert_eq!(client_key_from_forwarded(peer(), &["203.0.113.7"], 3), "203.0.113.7");
    }

    #[test]
    fn addresses_are_canonical_and_other_text_is_kept() {
        assert_eq!(client_key_from_forwarded(peer(), &["::ffff:203.0.113.7"], 1), "203.0.113.7");
        assert_eq!(client_key_from_forwarded(peer(), &["unknown"], 1), "unknown");
        let v6: IpAddr = "::ffff:10.0.0.9".parse().unwrap();
        assert_eq!(client_key_from_forwarded(v6, &[], 0), "10.0.0.9");
    }
}
