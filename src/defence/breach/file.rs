//! The breach filter's file (docs/breach.md, "The filter file"): 256 binary fuse filters
//! (xorf's `BinaryFuse16`), one per value of a key's top byte, so the builder needs only
//! one shard's keys in memory at a time. All integers little-endian.
//!
//! ```text
//! offset  size        field
//! 0       8           magic  b"PCBFUSE\0"
//! 8       4           version (1)
//! 12      4           shards (256)
//! 16      8           entries: distinct keys in the filter
//! 24      8           min_count the corpus was filtered with (0: none)
//! 32      32          zero
//! 64      256 × 40    per shard: keys u64, fingerprints u64 (u16s), descriptor 20 bytes
//!                     (seed u64, segment_length u32, segment_length_mask u32,
//!                     segment_count_length u32), 4 zero bytes
//! …       2 × Σ fp    each shard's fingerprints, u16, in shard order
//! end−32  32          SHA-256 of every byte before it
//! ```
//!
//! A key is the first 8 bytes of a password's SHA-1, big-endian ([`key_of`]): the
//! corpus's own hash, so the builder reads the corpus's lines without any password.

use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use sha1::Sha1;
use sha2::{Digest, Sha256};
use xorf::{BinaryFuse16, Descriptor, Filter};

/// The file's first 8 bytes.
pub const MAGIC: [u8; 8] = *b"PCBFUSE\0";
/// The format version this build reads and writes.
pub const VERSION: u32 = 1;
/// Shards per filter: one per value of a key's top byte.
pub const SHARDS: usize = 256;
/// Bytes of the header before the shard table.
const HEADER_LEN: usize = 64;
/// Bytes of one shard's table entry.
const SHARD_ENTRY_LEN: usize = 40;
/// Bytes of the trailing checksum.
const CHECKSUM_LEN: usize = 32;

/// The filter's false-positive rate: a password not in the corpus is reported breached
/// with probability 2^-16 (a 16-bit fingerprint; the 64-bit key adds a negligible
/// 2^-64 per entry). `tests/integration/breach.rs` measures it over 100,000 passwords.
pub const FALSE_POSITIVE_RATE: f64 = 1.0 / 65_536.0;

/// Why a filter file could not be used. Names the setting and the file, never a key,
/// and says how to make a good one.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// The file could not be read (its OS error in the text and as the source).
    #[error("breach.filter_file {path:?} could not be read: {source}; {}", rebuild(path))]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a filter this build reads (a truncated or altered file, another
    /// format or version).
    #[error(
        "breach.filter_file {path:?} is not a usable breach filter ({problem}); {}",
        rebuild(path)
    )]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
}

/// What an operator does about a missing or damaged filter file.
fn rebuild(path: &Path) -> String {
    format!(
        "rebuild it with `portcullis breach-filter build --from CORPUS --out {}` \
         (docs/breach.md), or unset breach.filter_file to serve without screening",
        path.display()
    )
}

/// The filter key of `password`: the first 8 bytes of its SHA-1, big-endian.
pub fn key_of(password: &[u8]) -> u64 {
    let digest = Sha1::digest(password);
    u64::from_be_bytes(digest[..8].try_into().expect("a SHA-1 digest has 20 bytes"))
}

/// A loaded breach filter: answers whether a password is (probably) in the corpus.
/// `Debug` shows its size, not its fingerprints.
#[derive(Clone)]
pub struct BreachFilter {
    /// Each shard's filter; `None` when no key falls in it.
    shards: Vec<Option<BinaryFuse16>>,
    entries: u64,
    min_count: u64,
    bytes: u64,
}

impl std::fmt::Debug for BreachFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BreachFilter")
            .field("entries", &self.entries)
            .field("bytes", &self.bytes)
            .field("min_count", &self.min_count)
            .finish_non_exhaustive()
    }
}

impl BreachFilter {
    /// Whether `password` is in the corpus, up to [`FALSE_POSITIVE_RATE`]; never a false
    /// negative. One SHA-1 and three memory reads.
    pub fn contains(&self, password: &[u8]) -> bool {
        self.contains_key(key_of(password))
    }

    /// Whether the key `key` ([`key_of`]) is in the filter.
    pub fn contains_key(&self, key: u64) -> bool {
        self.shards[(key >> 56) as usize].as_ref().is_some_and(|f| f.contains(&key))
    }

    /// Distinct keys the filter holds.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// The minimum count the corpus was filtered with (0: none).
    pub fn min_count(&self) -> u64 {
        self.min_count
    }

    /// The file's size, in bytes (what the filter takes in memory, within a few KiB).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Reads and checks the filter at `path`: the magic and version, every length and
    /// every shard's descriptor against its fingerprints (so no lookup can index out of
    /// bounds), and the checksum. Streams the file once; memory is the filter's size.
    ///
    /// # Errors
    /// [`FilterError`] naming `path`.
    pub fn load(path: &Path) -> Result<Self, FilterError> {
        let read_error = |source| FilterError::Read { path: path.to_owned(), source };
        let invalid = |problem: String| FilterError::Invalid { path: path.to_owned(), problem };
        // Only a regular file: opening a FIFO (or a device) would block or never end.
        if !std::fs::metadata(path).map_err(read_error)?.is_file() {
            return Err(invalid("not a regular file".into()));
        }
        let file = std::fs::File::open(path).map_err(read_error)?;
        let bytes = file.metadata().map_err(read_error)?.len();
        let mut reader =
            Hashing { inner: BufReader::with_capacity(1 << 20, file), sha: Sha256::new() };
        let mut header = [0u8; HEADER_LEN];
        reader.read_exact(&mut header).map_err(|e| short(e, path))?;
        if header[..8] != MAGIC {
            return Err(invalid("not a breach filter (wrong magic)".into()));
        }
        let word32 = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let word64 = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        if word32(&header, 8) != VERSION {
            return Err(invalid(format!(
                "version {} (this build reads {VERSION})",
                word32(&header, 8)
            )));
        }
        if word32(&header, 12) as usize != SHARDS {
            return Err(invalid("wrong shard count".into()));
        }
        let (entries, min_count) = (word64(&header, 16), word64(&header, 24));
        let mut table = vec![0u8; SHARDS * SHARD_ENTRY_LEN];
        reader.read_exact(&mut table).map_err(|e| short(e, path))?;
        let mut layout = Vec::with_capacity(SHARDS);
        let mut total_fingerprints: u64 = 0;
        let mut total_keys: u64 = 0;
        for n in 0..SHARDS {
            let e = &table[n * SHARD_ENTRY_LEN..(n + 1) * SHARD_ENTRY_LEN];
            let (keys, fingerprints) = (word64(e, 0), word64(e, 8));
            let descriptor = Descriptor {
                seed: word64(e, 16),
                segment_length: word32(e, 24),
                segment_length_mask: word32(e, 28),
                segment_count_length: word32(e, 32),
            };
            check_shard(keys, fingerprints, &descriptor)
                .map_err(|p| invalid(format!("shard {n}: {p}")))?;
            total_fingerprints = total_fingerprints.saturating_add(fingerprints);
            total_keys = total_keys.saturating_add(keys);
            layout.push((keys, fingerprints, descriptor));
        }
        let expected = (HEADER_LEN + SHARDS * SHARD_ENTRY_LEN + CHECKSUM_LEN) as u64
            + total_fingerprints.saturating_mul(2);
        if bytes != expected {
            return Err(invalid(format!("{bytes} bytes where its table says {expected}")));
        }
        if total_keys != entries {
            return Err(invalid("the shards' keys do not add up to its entries".into()));
        }
        // An empty filter would call every password acceptable: a mistake, never a list.
        if entries == 0 {
            return Err(invalid("holds no entries".into()));
        }
        let mut shards = Vec::with_capacity(SHARDS);
        let mut buffer = vec![0u8; 1 << 16];
        for (keys, fingerprints, descriptor) in layout {
            if keys == 0 {
                shards.push(None);
                continue;
            }
            let count = usize::try_from(fingerprints).map_err(|_| invalid("too large".into()))?;
            let mut values = Vec::with_capacity(count);
            while values.len() < count {
                let take = ((count - values.len()) * 2).min(buffer.len());
                reader.read_exact(&mut buffer[..take]).map_err(|e| short(e, path))?;
                values.extend(
                    buffer[..take].chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])),
                );
            }
            let filter = BinaryFuse16 { descriptor, fingerprints: values.into_boxed_slice() };
            shards.push(Some(filter));
        }
        let computed = reader.sha.finalize();
        let mut stored = [0u8; CHECKSUM_LEN];
        reader.inner.read_exact(&mut stored).map_err(|e| short(e, path))?;
        if computed[..] != stored {
            return Err(invalid("checksum mismatch (a damaged or partly written file)".into()));
        }
        Ok(Self { shards, entries, min_count, bytes })
    }
}

/// A shard's descriptor must index only its own fingerprints: a power-of-two segment
/// length with its mask, a segment count length that is a whole number of segments,
/// and exactly two segments more fingerprints than that (xorf's layout), so
/// `hash_of_hash`'s three positions stay below the fingerprint count.
fn check_shard(keys: u64, fingerprints: u64, d: &Descriptor) -> Result<(), String> {
    if keys == 0 {
        return if fingerprints == 0 { Ok(()) } else { Err("fingerprints without keys".into()) };
    }
    let length = u64::from(d.segment_length);
    if !d.segment_length.is_power_of_two() || d.segment_length_mask != d.segment_length - 1 {
        return Err("segment length is not a power of two with its mask".into());
    }
    let count_length = u64::from(d.segment_count_length);
    if count_length == 0 || count_length % length != 0 {
        return Err("segment count length is not a whole number of segments".into());
    }
    if fingerprints != count_length + 2 * length {
        return Err("fingerprint count does not match the descriptor".into());
    }
    // xorf computes positions in u32: every one must fit.
    if fingerprints > u64::from(u32::MAX) {
        return Err("more fingerprints than a shard can address".into());
    }
    if keys > fingerprints {
        return Err("more keys than fingerprints".into());
    }
    Ok(())
}

fn short(e: std::io::Error, path: &Path) -> FilterError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        FilterError::Invalid { path: path.to_owned(), problem: "truncated".into() }
    } else {
        FilterError::Read { path: path.to_owned(), source: e }
    }
}

/// A reader that hashes what it reads.
struct Hashing<R> {
    inner: R,
    sha: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sha.update(&buf[..n]);
        Ok(n)
    }
}

/// Writes a filter file shard by shard, so only one shard's filter is in memory: the
/// header and table are written last (the file is seekable), then the checksum over a
/// second read of the file.
pub(super) struct FilterWriter {
    file: std::fs::File,
    table: Vec<u8>,
    shards_written: usize,
    entries: u64,
    min_count: u64,
}

impl FilterWriter {
    /// Starts a filter file at `file` (created empty, writable and readable).
    pub(super) fn new(mut file: std::fs::File, min_count: u64) -> std::io::Result<Self> {
        file.write_all(&[0u8; HEADER_LEN + SHARDS * SHARD_ENTRY_LEN])?;
        let table = vec![0u8; SHARDS * SHARD_ENTRY_LEN];
        Ok(Self { file, table, shards_written: 0, entries: 0, min_count })
    }

    /// Appends the next shard: its distinct key count and its filter (`None`: no key).
    pub(super) fn push(&mut self, keys: u64, filter: Option<&BinaryFuse16>) -> std::io::Result<()> {
        let n = self.shards_written;
        assert!(n < SHARDS, "a filter has {SHARDS} shards");
        if let Some(f) = filter {
            let e = &mut self.table[n * SHARD_ENTRY_LEN..(n + 1) * SHARD_ENTRY_LEN];
            e[0..8].copy_from_slice(&keys.to_le_bytes());
            e[8..16].copy_from_slice(&(f.fingerprints.len() as u64).to_le_bytes());
            e[16..24].copy_from_slice(&f.descriptor.seed.to_le_bytes());
            e[24..28].copy_from_slice(&f.descriptor.segment_length.to_le_bytes());
            e[28..32].copy_from_slice(&f.descriptor.segment_length_mask.to_le_bytes());
            e[32..36].copy_from_slice(&f.descriptor.segment_count_length.to_le_bytes());
            let mut out = std::io::BufWriter::with_capacity(1 << 20, &mut self.file);
            for v in f.fingerprints.iter() {
                out.write_all(&v.to_le_bytes())?;
            }
            out.flush()?;
            self.entries += keys;
        }
        self.shards_written += 1;
        Ok(())
    }

    /// Writes the header and table, appends the checksum and syncs. Answers the file's
    /// size in bytes.
    pub(super) fn finish(mut self) -> std::io::Result<u64> {
        use std::io::{Seek, SeekFrom};
        assert_eq!(self.shards_written, SHARDS, "every shard is written");
        let mut header = [0u8; HEADER_LEN];
        header[..8].copy_from_slice(&MAGIC);
        header[8..12].copy_from_slice(&VERSION.to_le_bytes());
        header[12..16].copy_from_slice(&(SHARDS as u32).to_le_bytes());
        header[16..24].copy_from_slice(&self.entries.to_le_bytes());
        header[24..32].copy_from_slice(&self.min_count.to_le_bytes());
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&header)?;
        self.file.write_all(&self.table)?;
        self.file.seek(SeekFrom::Start(0))?;
        let mut reader = Hashing {
            inner: BufReader::with_capacity(1 << 20, &mut self.file),
            sha: Sha256::new(),
        };
        std::io::copy(&mut reader, &mut std::io::sink())?;
        let checksum = reader.sha.finalize();
        self.file.seek(SeekFrom::End(0))?;
        self.file.write_all(&checksum)?;
        self.file.sync_all()?;
        Ok(self.file.metadata()?.len())
    }
}
