//! The stored-hash parser and comparison against the vectors of independent tools.

use super::*;
use argon2::{Argon2, PasswordHash};
use argon2_phc::KEPT_MEMORY;

const CEILINGS: Ceilings = Ceilings {
    bcrypt_cost: 14,
    argon2_memory_kib: 131_072,
    argon2_iterations: 16,
    argon2_parallelism: 8,
    pbkdf2_iterations: 2_000_000,
    scrypt_memory_kib: 132_096,
    scrypt_parallelism: 16,
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
        ("$5$rounds=5000$saltsalt$hash".to_owned(), "unsupported format"),
        (
            "$7$C6..../....SodiumChloride$kBGj9fHznVYFQMEn/qDCfrDevf9YDtcDdKvEqHJLV8D".to_owned(),
            "unsupported format",
        ),
        (ARGON2.replacen("m=19456", "m=4194304", 1), "above the ceiling"),
        (ARGON2.replacen("p=1", "p=4294967295", 1), "above the ceiling"),
        (ARGON2.replacen("t=2", "t=100", 1), "above the ceiling"),
        (ARGON2.replacen("9UYIR9", "9UYIRü", 1), "malformed argon2"),
        (ARGON2[..ARGON2.len() - 10].to_owned(), "malformed argon2"),
        (ARGON2.replacen("$argon2id$", "$argon2x$", 1), "malformed argon2"),
        (ARGON2.replacen("v=19", "v=18", 1), "version"),
        (ARGON2.replacen("m=19456", "m=4", 1), "malformed argon2"),
        (format!("{}{}", ARGON2, "A".repeat(60)), "outputs longer than 64 bytes"),
        (
            ARGON2.replacen("9UYIR9ZIReF5HPUwKOtfHg", &"A".repeat(66), 1),
            "salts longer than 48 bytes",
        ),
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

/// `tests/data/framework_hashes.json`: hashes made by Django's hashers, passlib and
/// Werkzeug (the script beside it wrote them).
#[test]
fn every_framework_vector_compares_as_its_framework_says() {
    #[derive(serde::Deserialize)]
    struct Row {
        tool: String,
        password: String,
        hash: String,
        #[serde(rename = "match")]
        matches: bool,
    }
    #[derive(serde::Deserialize)]
    struct File {
        vectors: Vec<Row>,
    }
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/framework_hashes.json");
    let file: File = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(file.vectors.len() >= 30, "the vector file lost rows");
    for row in &file.vectors {
        let hash =
            StoredHash::parse(&row.hash, &CEILINGS).unwrap_or_else(|e| panic!("{}: {e}", row.tool));
        assert_eq!(hash.matches(row.password.as_bytes()), row.matches, "{}", row.tool);
    }
}

const DJANGO_PBKDF2: &str =
    "pbkdf2_sha256$10000$H7thAgjRwfZGd4RLeMo4Bl$zqMvO6FqzLEQOmj031Ed+M6SYBsXcYzXytczcTURFo8=";
const DJANGO_SCRYPT: &str = "scrypt$16384$4W0pjBFzy9Q33z84Uwenzt$8$5$VUCU+D9feVap74PdWUMwYUQontT66e2mFUSym0HIdG/70iILmSYoH/A34DALjQBYnJhrhZ2wGgA0AQrPAzKMpQ==";
const PASSLIB_PBKDF2: &str =
    "$pbkdf2-sha256$29000$D6F0DkGo1ZpTaq2VMsYY4w$q3LxYfmAj/rR.U98s7yhIVAzrFQbbkXaSLYU9IkIsrk";
const PASSLIB_SCRYPT: &str =
    "$scrypt$ln=14,r=8,p=1$5LyXslbKWcv5H+Occ45xjg$M/EuUZqGxnOTgnrwf0I9pD59+HAyJ2zqkhsX1Y5GBsE";
const WERKZEUG_PBKDF2: &str = "pbkdf2:sha256:10000$F69Ug8KmfKWnbrzf$ea16f6123d106a55351dceb1232e6833689a7bb075e97ce3994b1cbea0c9ace0";

#[test]
fn framework_forms_carry_their_parameters() {
    let params = |text: &str| StoredHash::parse(text, &CEILINGS).unwrap().params();
    assert_eq!(params(DJANGO_PBKDF2), HashParams::Pbkdf2 { prf: Prf::Sha256, iterations: 10_000 });
    assert_eq!(params(DJANGO_SCRYPT), HashParams::Scrypt { log_n: 14, r: 8, p: 5 });
    assert_eq!(params(PASSLIB_PBKDF2), HashParams::Pbkdf2 { prf: Prf::Sha256, iterations: 29_000 });
    assert_eq!(params(PASSLIB_SCRYPT), HashParams::Scrypt { log_n: 14, r: 8, p: 1 });
    assert_eq!(
        params(WERKZEUG_PBKDF2),
        HashParams::Pbkdf2 { prf: Prf::Sha256, iterations: 10_000 }
    );
    // Django's wrappers of bcrypt and argon2 carry the inner hash's parameters.
    assert_eq!(params(&format!("bcrypt${BCRYPT}")), HashParams::Bcrypt { cost: 5 });
    assert_eq!(params(&format!("bcrypt_sha256${BCRYPT}")), HashParams::Bcrypt { cost: 5 });
    assert_eq!(params(&format!("argon2{ARGON2}")), params(ARGON2));
    // The same bcrypt string in Django's bcrypt_sha256 wrapper is another hash: the
    // password it matches is the hex SHA-256 of the user's, not the user's.
    let wrapped = StoredHash::parse(&format!("bcrypt_sha256${BCRYPT}"), &CEILINGS).unwrap();
    assert!(!wrapped.matches(b"correct horse battery staple"));
    assert!(StoredHash::parse(BCRYPT, &CEILINGS).unwrap().matches(b"correct horse battery staple"));
}

#[test]
fn malformed_kdf_hashes_are_named_not_echoed() {
    let cases = [
        (DJANGO_PBKDF2.replacen("10000", "1e4", 1), "iterations must be decimal"),
        (DJANGO_PBKDF2.replacen("10000", "0", 1), "at least 1"),
        (
            DJANGO_PBKDF2.replacen("10000", "2000001", 1),
            "PBKDF2 iterations = 2000001 is above the ceiling",
        ),
        (DJANGO_PBKDF2.replacen("10000", "99999999999999999999", 1), "decimal"),
        (format!("{DJANGO_PBKDF2}$extra"), "Django's form"),
        (DJANGO_PBKDF2.replacen("H7thAgjRwfZGd4RLeMo4Bl", "", 1), "salt must be 1–64 bytes"),
        (DJANGO_PBKDF2.replacen("Fo8=", "F!8=", 1), "not in the form's encoding"),
        // 16 bytes is the shortest key: 12 would match one password in 2^96, not 2^256.
        ("pbkdf2_sha256$10000$salt$AAAAAAAAAAAAAAAA".to_owned(), "shorter than 16 bytes"),
        // A key longer than its PRF's output costs more blocks than its iterations say.
        (format!("pbkdf2_sha1$10000$salt${}", "A".repeat(44)), "longer than its function"),
        (DJANGO_SCRYPT.replacen("16384", "16383", 1), "power of two"),
        (DJANGO_SCRYPT.replacen("16384", "1", 1), "power of two"),
        (DJANGO_SCRYPT.replacen("$8$5$", "$0$5$", 1), "at least 1"),
        (
            DJANGO_SCRYPT.replacen("16384", "2097152", 1),
            "scrypt memory (128 · r · (N + p + 1) bytes, in KiB) = 2097158 is above the ceiling 132096",
        ),
        // N = 2 with a large r: the memory is in B (p blocks of 128 · r bytes), and counted.
        (
            DJANGO_SCRYPT.replacen("$16384$", "$2$", 1).replacen("$8$5$", "$524288$16$", 1),
            "scrypt memory (128 · r · (N + p + 1) bytes, in KiB) = 1245184 is above the ceiling",
        ),
        (DJANGO_SCRYPT.replacen("$8$5$", "$8$17$", 1), "scrypt p = 17 is above the ceiling"),
        (DJANGO_SCRYPT.replacen("16384", "9223372036854775808", 1), "above the ceiling"),
        ("scrypt$16384$salt$8$1".to_owned(), "Django's form"),
        (WERKZEUG_PBKDF2.replacen("pbkdf2:sha256:10000", "pbkdf2:sha256", 1), "every part written"),
        (WERKZEUG_PBKDF2.replacen("sha256", "md5", 1), "sha1, sha256 or sha512"),
        ("scrypt:32768:8$salt$00".to_owned(), "every part written"),
        (WERKZEUG_PBKDF2.replacen("ace0", "acez", 1), "not in the form's encoding"),
        (PASSLIB_PBKDF2.replacen("29000", "i=29000,l=31", 1), "l is not the length"),
        (PASSLIB_PBKDF2.replacen("29000", "i=29000,x=1", 1), "parameters are i and l"),
        (PASSLIB_PBKDF2.replacen("29000", "l=32", 1), "iterations (i) are required"),
        (PASSLIB_SCRYPT.replacen("ln=14,", "", 1), "ln, r and p are required"),
        (PASSLIB_SCRYPT.replacen("ln=14", "ln=99", 1), "ln must be 1–63"),
        (PASSLIB_SCRYPT.replacen("ln=14", "ln=0", 1), "ln must be 1–63"),
        (PASSLIB_SCRYPT.replacen("p=1", "p=1,q=2", 1), "parameters are ln, r and p"),
        (format!("{PASSLIB_SCRYPT}$x"), "the PHC form"),
    ];
    for (text, want) in cases {
        let e = err(&text).to_string();
        assert!(e.contains(want), "{text}: {e}");
        for secret in
            ["H7thAgjRwfZGd4RLeMo4Bl", "4W0pjBFzy9Q", "D6F0DkGo1", "5LyXslbKW", "F69Ug8Km"]
        {
            assert!(!e.contains(secret), "message echoes the hash: {e}");
        }
    }
}

#[test]
fn kdf_targets_generate_and_set_the_rehash_rule() {
    let pbkdf2 = HashParams::Pbkdf2 { prf: Prf::Sha256, iterations: 1000 };
    let sha512 = HashParams::Pbkdf2 { prf: Prf::Sha512, iterations: 1000 };
    let scrypt = HashParams::Scrypt { log_n: 10, r: 8, p: 1 };
    for target in [pbkdf2, sha512, scrypt] {
        let h = StoredHash::generate(b"pw", &target).unwrap();
        assert_eq!(h.params(), target);
        assert!(h.matches(b"pw") && !h.matches(b"pw2") && !h.matches(b""));
        assert!(!target.below(&target));
    }
    assert_eq!(scrypt.memory_kib(), 1026, "128 · 8 · (2^10 + 1 + 1) bytes");
    assert!(HashParams::Pbkdf2 { prf: Prf::Sha256, iterations: 999 }.below(&pbkdf2));
    assert!(!HashParams::Pbkdf2 { prf: Prf::Sha256, iterations: 1001 }.below(&pbkdf2));
    assert!(HashParams::Pbkdf2 { prf: Prf::Sha1, iterations: 5000 }.below(&pbkdf2));
    assert!(sha512.below(&pbkdf2) && pbkdf2.below(&sha512), "another PRF");
    assert!(HashParams::Scrypt { log_n: 9, r: 8, p: 1 }.below(&scrypt));
    assert!(HashParams::Scrypt { log_n: 10, r: 8, p: 0 }.below(&scrypt));
    assert!(!HashParams::Scrypt { log_n: 11, r: 8, p: 2 }.below(&scrypt));
    assert!(
        scrypt.below(&pbkdf2)
            && pbkdf2.below(&scrypt)
            && pbkdf2.below(&HashParams::Bcrypt { cost: 4 })
    );
}
