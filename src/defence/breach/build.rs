//! `portcullis breach-filter build` (docs/breach.md, "Building the filter"): a
//! Pwned-Passwords-format file (one SHA-1 in hex a line, optionally `:count`, sorted or
//! not) to a filter file, streaming: the lines' keys go to 256 shard files by their top
//! byte (8 bytes a line on disk), then each shard is read, sorted, deduplicated and
//! built into its binary fuse filter, written and dropped before the next. Memory is
//! one shard's keys and filter under construction (roughly 40 bytes a key of the largest
//! shard: about 150 MB for a corpus of 930 M lines, an estimate), never the corpus.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use xorf::BinaryFuse16;

use super::file::{FilterWriter, SHARDS};

/// The longest corpus line read, in bytes (a line is 40 hex digits, `:` and a count).
const MAX_LINE_BYTES: usize = 256;

/// What to build.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Lines whose `:count` is below this are left out (a line without a count counts
    /// as 1). 0 or 1: every line.
    pub min_count: u64,
    /// Draw a progress bar on standard error (only drawn when it is a terminal).
    pub progress: bool,
}

/// What a build did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Built {
    /// Lines read that held a digest.
    pub lines: u64,
    /// Of those, lines left out for their count.
    pub below_min_count: u64,
    /// Distinct keys in the filter.
    pub entries: u64,
    /// The filter file's size, in bytes.
    pub bytes: u64,
    /// Wall time of the build.
    pub took: Duration,
}

/// Why a build failed. Names the file and line, never a line's contents.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The corpus, a shard file or the output could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line that is not `<40 hex digits>[:<count>]`.
    #[error("{path}, line {line}: {problem}")]
    Line {
        /// The corpus.
        path: PathBuf,
        /// The line's number, from 1.
        line: u64,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// xorf could not build a shard's filter (it retries with new seeds; this does not
    /// happen for distinct keys).
    #[error("shard {shard}: {problem}")]
    Filter {
        /// The shard.
        shard: usize,
        /// xorf's reason.
        problem: &'static str,
    },
}

/// A corpus line's filter key and count, or why it is none. Empty lines are `Ok(None)`.
fn parse_line(line: &[u8]) -> Result<Option<(u64, u64)>, &'static str> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return Ok(None);
    }
    let (digest, count) = match line.iter().position(|&b| b == b':') {
        Some(at) => (&line[..at], Some(&line[at + 1..])),
        None => (line, None),
    };
    if count.is_some_and(|c| c.is_empty() || !c.iter().all(u8::is_ascii_digit)) {
        return Err("the count after ':' is not a whole number");
    }
    if digest.len() != 40 || !digest.iter().all(u8::is_ascii_hexdigit) {
        return Err("not a SHA-1 in hex (40 digits)");
    }
    let key = std::str::from_utf8(&digest[..16])
        .ok()
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .ok_or("not a SHA-1 in hex (40 digits)")?;
    let count = match count {
        None => 1,
        Some(c) => std::str::from_utf8(c)
            .ok()
            .and_then(|c| c.parse::<u64>().ok())
            .ok_or("the count after ':' is not a whole number")?,
    };
    Ok(Some((key, count)))
}

fn progress_bar(enabled: bool, len: u64, template: &str) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

/// The error of an I/O operation on `path`.
fn io(path: &Path) -> impl Fn(std::io::Error) -> BuildError + use<> {
    let path = path.to_owned();
    move |source| BuildError::Io { path: path.clone(), source }
}

/// Builds the filter of the corpus at `from` into `out`, written beside it under a
/// temporary name and renamed into place when complete, so a daemon watching `out`
/// never reads a partial file.
///
/// # Errors
/// [`BuildError`]; nothing is left at `out` then (an earlier file there stays).
pub fn build(from: &Path, out: &Path, options: &BuildOptions) -> Result<Built, BuildError> {
    let started = Instant::now();
    // The corpus must survive a mistyped command.
    if let (Ok(a), Ok(b)) = (std::fs::canonicalize(from), std::fs::canonicalize(out))
        && a == b
    {
        let source = std::io::Error::other("--out names the corpus itself");
        return Err(BuildError::Io { path: out.to_owned(), source });
    }
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let scratch = tempfile::Builder::new()
        .prefix(".portcullis-breach-")
        .tempdir_in(&dir)
        .map_err(io(&dir))?;
    let sharded = shard(from, scratch.path(), options)?;
    let temporary = tempfile::Builder::new()
        .prefix(".portcullis-breach-out-")
        .tempfile_in(&dir)
        .map_err(io(&dir))?;
    let file = temporary.reopen().map_err(io(temporary.path()))?;
    let (entries, bytes) = write_filter(&sharded.paths, file, out, options)?;
    if entries == 0 {
        let source = std::io::Error::other("the corpus holds no entry (at this --min-count)");
        return Err(BuildError::Io { path: from.to_owned(), source });
    }
    // A public corpus is no secret: readable by the daemon's user, like a certificate.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let readable = std::fs::Permissions::from_mode(0o644);
        std::fs::set_permissions(temporary.path(), readable).map_err(io(temporary.path()))?;
    }
    temporary.persist(out).map_err(|e| BuildError::Io { path: out.to_owned(), source: e.error })?;
    let (lines, below_min_count) = (sharded.lines, sharded.below_min_count);
    Ok(Built { lines, below_min_count, entries, bytes, took: started.elapsed() })
}

/// What pass 1 left: one file of keys a shard, and the corpus's counts.
struct Sharded {
    paths: Vec<PathBuf>,
    lines: u64,
    below_min_count: u64,
}

/// Pass 1: every line's key of the corpus at `from` to its shard file in `scratch`.
fn shard(from: &Path, scratch: &Path, options: &BuildOptions) -> Result<Sharded, BuildError> {
    let corpus = std::fs::File::open(from).map_err(io(from))?;
    let size = corpus.metadata().map_err(io(from))?.len();
    let bar = progress_bar(
        options.progress,
        size,
        "reading  {bar:40} {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
    );
    let mut shard_files = Vec::with_capacity(SHARDS);
    for n in 0..SHARDS {
        let path = scratch.join(format!("{n:02x}"));
        let file = std::fs::File::create(&path).map_err(io(&path))?;
        shard_files.push((path, BufWriter::with_capacity(1 << 16, file)));
    }
    let mut reader = BufReader::with_capacity(1 << 20, corpus);
    let (mut line, mut number, mut read_bytes) = (Vec::new(), 0u64, 0u64);
    let (mut lines, mut below) = (0u64, 0u64);
    loop {
        line.clear();
        // At most one line's worth: a file without newlines must not fill the memory.
        let mut bounded = (&mut reader).take(MAX_LINE_BYTES as u64 + 1);
        let n = bounded.read_until(b'\n', &mut line).map_err(io(from))?;
        if n == 0 {
            break;
        }
        number += 1;
        if n > MAX_LINE_BYTES {
            let problem = "longer than 256 bytes (not a corpus line)";
            return Err(BuildError::Line { path: from.to_owned(), line: number, problem });
        }
        read_bytes += n as u64;
        if number % 65_536 == 0 {
            bar.set_position(read_bytes);
        }
        let parsed = parse_line(&line).map_err(|problem| BuildError::Line {
            path: from.to_owned(),
            line: number,
            problem,
        })?;
        let Some((key, count)) = parsed else { continue };
        lines += 1;
        if count < options.min_count {
            below += 1;
            continue;
        }
        let (path, shard) = &mut shard_files[(key >> 56) as usize];
        shard.write_all(&key.to_le_bytes()).map_err(io(path))?;
    }
    bar.finish_and_clear();
    let mut paths = Vec::with_capacity(SHARDS);
    for (path, mut shard) in shard_files {
        shard.flush().map_err(io(&path))?;
        paths.push(path);
    }
    Ok(Sharded { paths, lines, below_min_count: below })
}

/// Pass 2: shard by shard, sorted, deduplicated, built and written to `file` (what
/// becomes `out`). Answers the entries and the bytes written.
fn write_filter(
    shard_paths: &[PathBuf],
    file: std::fs::File,
    out: &Path,
    options: &BuildOptions,
) -> Result<(u64, u64), BuildError> {
    let mut writer = FilterWriter::new(file, options.min_count).map_err(io(out))?;
    let bar = progress_bar(options.progress, SHARDS as u64, "building {bar:40} shard {pos}/{len}");
    let mut entries = 0u64;
    for (shard, path) in shard_paths.iter().enumerate() {
        let mut bytes = Vec::new();
        std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)).map_err(io(path))?;
        std::fs::remove_file(path).map_err(io(path))?;
        let mut keys: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        drop(bytes);
        keys.sort_unstable();
        keys.dedup();
        let filter = if keys.is_empty() {
            None
        } else {
            let built = BinaryFuse16::try_from(keys.as_slice())
                .map_err(|problem| BuildError::Filter { shard, problem })?;
            Some(built)
        };
        let count = keys.len() as u64;
        drop(keys);
        writer.push(count, filter.as_ref()).map_err(io(out))?;
        entries += count;
        bar.inc(1);
    }
    bar.finish_and_clear();
    if entries == 0 {
        return Ok((0, 0));
    }
    let bytes = writer.finish().map_err(io(out))?;
    Ok((entries, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_as_pwned_passwords_writes_them() {
        let sha = "5BAA61E4C9B93F3F0682250B6CF8331B7EE68FD8";
        assert_eq!(parse_line(sha.as_bytes()), Ok(Some((0x5baa61e4c9b93f3f, 1))));
        let lower = format!("{}:42\r\n", sha.to_lowercase());
        assert_eq!(parse_line(lower.as_bytes()), Ok(Some((0x5baa61e4c9b93f3f, 42))));
        assert_eq!(parse_line(b"  \r\n"), Ok(None));
        for bad in [&b"5BAA61E4"[..], b"zzzz61E4C9B93F3F0682250B6CF8331B7EE68FD8", b"x:1"] {
            assert!(parse_line(bad).is_err());
        }
        assert!(parse_line(format!("{sha}:lots").as_bytes()).is_err());
        assert!(parse_line(format!("{sha}:-1").as_bytes()).is_err());
        assert!(parse_line(format!("{sha}:+5").as_bytes()).is_err());
        assert!(parse_line(format!("{sha}:").as_bytes()).is_err());
    }
}
