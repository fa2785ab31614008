//! Grace logins of a breached password (docs/breach.md, "Grace logins"): each accept of
//! a password in the breach filter counts on the account, bound to the credential (a
//! keyed digest of the stored hash), so a new stored hash starts afresh. Twin:
//! `breached_count.lua`; the embedded store calls [`note`].

use crate::setting::{Problems, check};

/// The count after one more breached accept of `credential`, from the stored
/// `(credential, count)` (`None`: none kept).
pub fn note(held: Option<(u64, u64)>, credential: u64) -> u64 {
    match held {
        Some((kept, count)) if kept == credential => count.saturating_add(1),
        _ => 1,
    }
}

/// Whether an accept whose count is `count` needs a password change first: past the
/// realm's `breached_grace_logins`.
pub fn change_required(count: u64, grace_logins: u32) -> bool {
    count > u64::from(grace_logins)
}

/// Most grace logins a realm may give a breached password (`breached_grace_logins`).
pub const MAX_GRACE_LOGINS: u32 = 20;

/// `realms.REALM.breached_grace_logins`, checked where it is used: 0–
/// [`MAX_GRACE_LOGINS`] accepts before a change is required. A problem is noted in
/// `problems`, naming the setting.
pub fn checked_grace_logins(realm: &str, grace_logins: u32, problems: &mut Problems) -> u32 {
    let setting = format!("realms.{realm}.breached_grace_logins");
    problems.note(check(&setting, grace_logins, 0..=MAX_GRACE_LOGINS));
    grace_logins
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fourth_accept_of_three_grace_logins_requires_a_change() {
        let mut held = None;
        let answers: Vec<bool> = (0..5)
            .map(|_| {
                let count = note(held, 7);
                held = Some((7, count));
                change_required(count, 3)
            })
            .collect();
        assert_eq!(answers, [false, false, false, true, true]);
        assert_eq!(note(held, 8), 1, "a new stored hash starts afresh");
        assert!(change_required(1, 0), "no grace: the first accept");
    }
}
