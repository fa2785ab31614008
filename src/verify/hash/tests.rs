//! The stored-hash parser and comparison against the vectors of independent tools.

use super::*;

const CEILINGS: Ceilings = Ceilings {
    bcrypt_cost: 14,
    argon2_memory_kib: 131_072,
    argon2_iterations: 16,
    argon2_parallelism: 8,
};
const BCRYPT: &str = "$2b$05$IbTcdjsgUGCtcgd/e8TOs.xs3Rqt9IqOvtdu6ZrtBE/tx1q1TDfm2";
const ARGON2: &str = "$argon2id$v=19$m=19456,t=2,p=1$9UYIR9ZIReF5HPUwKOtfHg$mXlw4iTpYMohjtsi7qzPygANdC7/hd1SbLoNsHPwwfQ";

fn err(text: &str) -> HashError {
    StoredHash::parse(text, &CEILINGS).unwrap_err()
}

#[test]
fn parses_params() {
    assert_eq!(
        StoredHash::parse(BCRYPT, &CEILINGS).unwrap().params(),
        HashParams::Bcrypt { cost: 5 }
    );
    assert_eq!(
        StoredHash::parse(ARGON2, &CEILINGS).unwrap().params(),
        HashParams::Argon2 {
            algorithm: Algorithm::Argon2id,
            memory_kib: 19456,
            iterations: 2,
            parallelism: 1
        }
    );
}

#[test]
fn malformed_hashes_are_named_not_echoed() {
    let cases = [
        (BCRYPT.replacen("$2b$", "$2x$", 1), "$2x$"),
        (BCRYPT.replacen("$2b$", "$2c$", 1), "prefix"),
        (BCRYPT[..59].to_owned(), "60 ASCII"),
        (BCRYPT.replacen("IbTc", "Ibüc", 1), "60 ASCII"),
        (BCRYPT.replacen("$05$", "$31$", 1), "above the ceiling"),
        (BCRYPT.replacen("$05$", "$03$", 1), "4–31"),
        (BCRYPT.replacen("$05$", "$5a$", 1), "two digits"),
        (format!("{}!{}", &BCRYPT[..20], &BCRYPT[21..]), "alphabet"),
        // The 22nd salt character carries 4 unused bits: 'O' is canonical, 'P' is not.
        (format!("{}P{}", &BCRYPT[..28], &BCRYPT[29..]), "salt's final"),
        (format!("{}3", &BCRYPT[..59]), "digest's final"),
        ("$1$abc$def".to_owned(), "unsupported format"),
        ("plaintext".to_owned(), "unsupported format"),
        ("$scrypt$ln=16,r=8,p=1$aM15713r3Xsvxbi31lqr1Q$nFNh2CVHVjNldFVKDHDlm4CbdRSCdEBsjjJxD+iCs5E".to_owned(), "unsupported"),
        (ARGON2.replacen("m=19456", "m=4194304", 1), "above the ceiling"),
        (ARGON2.replacen("p=1", "p=4294967295", 1), "above the ceiling"),
        (ARGON2.replacen("t=2", "t=100", 1), "above the ceiling"),
        (ARGON2.replacen("9UYIR9", "9UYIRü", 1), "malformed argon2"),
        (ARGON2[..ARGON2.len() - 10].to_owned(), "malformed argon2"),
        (ARGON2.replacen("$argon2id$", "$argon2x$", 1), "malformed argon2"),
        (ARGON2.replacen("v=19", "v=18", 1), "version"),
        (ARGON2.replacen("m=19456", "m=4", 1), "malformed argon2"),
        (format!("{}{}", ARGON2, "A".repeat(60)), "outputs longer than 64 bytes"),
        (ARGON2.replacen("9UYIR9ZIReF5HPUwKOtfHg", &"A".repeat(66), 1), "salts longer than 48 bytes"),
        ("x".repeat(2000), "longer than"),
        // A keyed hash (keyid) or one with associated data: this daemon holds neither,
        // so it could never match; named, never silently ignored.
        (ARGON2.replacen("p=1", "p=1,keyid=Zm9v", 1), "parameter keyid"),
        (ARGON2.replacen("p=1", "p=1,data=Zm9v", 1), "parameter data"),
        (ARGON2.replacen("m=19456", "keyid=Zm9v,m=19456", 1), "parameter keyid"),
        (ARGON2.replacen("p=1", "p=1,x-extra=1", 1), "parameter x-extra"),
    ];
    for (text, want) in cases {
        let e = err(&text).to_string();
        assert!(e.contains(want), "{text}: {e}");
        assert!(!e.contains("IbTcdj") && !e.contains("9UYIR9"), "message echoes the hash: {e}");
    }
    let e = err(&ARGON2.replacen("p=1", "p=4294967295", 1)).to_string();
    assert!(e.contains("argon2 p") && e.contains("4294967295"), "{e}");
}

#[test]
fn bcrypt_72_byte_and_nul_rules() {
    let long = [b'a'; 73];
    let hash = StoredHash::generate(&long[..72], &HashParams::Bcrypt { cost: 4 }).unwrap();
    assert!(hash.matches(&long[..72]), "exactly 72 bytes is fine");
    assert!(!hash.matches(&long), "73 bytes would match by truncation; must not");
    let nul = StoredHash::generate(b"abc", &HashParams::Bcrypt { cost: 4 }).unwrap();
    assert!(nul.matches(b"abc"));
    assert!(!nul.matches(b"abc\0"), "NUL byte");
    assert!(!nul.matches(b"abc\0def"), "NUL byte");
}

/// A PHC string made by the `argon2` crate itself, with the given shape.
fn crate_hash(alg: &str, version: u32, m: u32, t: u32, p: u32, salt: &[u8], out: usize) -> String {
    use argon2::PasswordHasher;
    let params = argon2::Params::new(m, t, p, Some(out)).unwrap();
    let alg = argon2::Algorithm::try_from(alg).unwrap();
    let version = argon2::Version::try_from(version).unwrap();
    Argon2::new(alg, version, params).hash_password_with_salt(b"pw", salt).unwrap().to_string()
}

/// The crate's own verdict (`PasswordVerifier`), the reference for ours.
fn crate_verdict(text: &str, password: &[u8]) -> bool {
    use argon2::PasswordVerifier;
    Argon2::default().verify_password(password, &PasswordHash::new(text).unwrap()).is_ok()
}

#[test]
fn kept_memory_gives_the_crates_verdict_whatever_it_held_before() {
    let mut texts = vec![
        crate_hash("argon2id", 0x13, 256, 2, 1, b"saltsalt", 32),
        crate_hash("argon2i", 0x10, 64, 1, 2, &[7; 48], 64),
        crate_hash("argon2d", 0x13, 512, 1, 4, &[1; 16], 10),
        crate_hash("argon2id", 0x10, 128, 3, 1, &[9; 12], 16),
        // p = 3 and m not a multiple of 4p (the crate rounds it down), odd salt.
        crate_hash("argon2id", 0x13, 100, 1, 3, &[5; 13], 33),
    ];
    // No `v=`: the crate reads it as 0x13, and so must the kept-memory path.
    texts.push(texts[0].replace("$v=19", ""));
    // Growing, shrinking and growing again, so each comparison finds the blocks of
    // another hash (or a longer buffer) in the kept memory.
    for round in 0..2 {
        for text in texts.iter().chain(texts.iter().rev()) {
            let hash = StoredHash::parse(text, &CEILINGS).unwrap();
            for password in [&b"pw"[..], b"pw2", b"", b"p"] {
                let want = crate_verdict(text, password);
                assert_eq!(want, password == b"pw", "{text}");
                assert_eq!(hash.matches_keeping(password, 1024), want, "{text} {round}");
                assert_eq!(hash.matches(password), want, "{text} {round}");
            }
        }
        if round == 0 {
            release_kept_memory();
        }
    }
    // One byte of the output changed: no match, on either path.
    let text = &texts[0];
    let (head, output) = text.rsplit_once('$').unwrap();
    let flipped = if output.starts_with('A') { "B" } else { "A" };
    let changed = format!("{head}${flipped}{}", &output[1..]);
    let hash = StoredHash::parse(&changed, &CEILINGS).unwrap();
    assert!(!hash.matches_keeping(b"pw", 1024) && !hash.matches(b"pw"));
}

#[test]
fn memory_is_kept_only_up_to_the_limit_and_released_on_request() {
    let kept = kept_memory_kib;
    release_kept_memory();
    let small =
        StoredHash::parse(&crate_hash("argon2id", 0x13, 64, 1, 1, b"saltsalt", 32), &CEILINGS)
            .unwrap();
    let large =
        StoredHash::parse(&crate_hash("argon2id", 0x13, 256, 1, 1, b"saltsalt", 32), &CEILINGS)
            .unwrap();
    assert!(large.matches_keeping(b"pw", 128), "above the limit: compared in memory of its own");
    assert_eq!(kept(), 0, "nothing kept above the limit");
    assert!(small.matches_keeping(b"pw", 128));
    assert_eq!(kept(), 64, "one 1 KiB block per KiB of m");
    assert!(large.matches_keeping(b"pw", 256));
    assert_eq!(kept(), 256, "grown to the larger m");
    assert!(small.matches_keeping(b"pw", 256));
    assert_eq!(kept(), 256, "a smaller m uses the front of what is kept");
    let wiped = KEPT_MEMORY.with_borrow(|k| k.iter().all(|b| b.as_ref().iter().all(|&w| w == 0)));
    assert!(wiped, "nothing of the comparison is left in the kept memory");
    release_kept_memory();
    assert_eq!(kept(), 0);
}

#[test]
fn generated_hashes_carry_the_target() {
    for target in [
        HashParams::Bcrypt { cost: 4 },
        HashParams::Argon2 {
            algorithm: Algorithm::Argon2id,
            memory_kib: 64,
            iterations: 1,
            parallelism: 1,
        },
        HashParams::Argon2 {
            algorithm: Algorithm::Argon2i,
            memory_kib: 64,
            iterations: 2,
            parallelism: 2,
        },
        HashParams::Argon2 {
            algorithm: Algorithm::Argon2d,
            memory_kib: 128,
            iterations: 1,
            parallelism: 1,
        },
    ] {
        let h = StoredHash::generate(b"pw", &target).unwrap();
        assert_eq!(h.params(), target);
        assert!(h.matches(b"pw") && !h.matches(b"pw2"));
    }
}

#[test]
fn rehash_rule() {
    let target = HashParams::Argon2 {
        algorithm: Algorithm::Argon2id,
        memory_kib: 19456,
        iterations: 2,
        parallelism: 1,
    };
    assert!(HashParams::Bcrypt { cost: 12 }.below(&target));
    assert!(!target.below(&target));
    let weaker = HashParams::Argon2 {
        algorithm: Algorithm::Argon2id,
        memory_kib: 8192,
        iterations: 3,
        parallelism: 1,
    };
    assert!(weaker.below(&target));
    let other = HashParams::Argon2 {
        algorithm: Algorithm::Argon2i,
        memory_kib: 19456,
        iterations: 2,
        parallelism: 1,
    };
    assert!(other.below(&target));
    assert!(HashParams::Bcrypt { cost: 9 }.below(&HashParams::Bcrypt { cost: 10 }));
    assert!(!HashParams::Bcrypt { cost: 11 }.below(&HashParams::Bcrypt { cost: 10 }));
}
