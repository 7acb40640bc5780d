//! Checks an uploaded ZIP archive before anything trusts it (API-5).
//!
//! [`check_zip`] never extracts anything to disk; it reads the archive from memory and decides
//! whether every entry is something a later extraction could write safely:
//!
//! - every entry name passes [`validate_relative_path`] (directory entries without their one
//!   trailing `/`), so no `../evil`, `/abs`, `a\..\b`, NUL or percent-encoded traversal;
//! - only regular files and directories: a symbolic link (unix mode `S_IFLNK` in the external
//!   attributes) or any other special file type is refused;
//! - no two entries with the same name, compared case-insensitively (the archive may be
//!   extracted on a case-insensitive filesystem), no name that is both a file and a directory,
//!   and no duplicated central-directory record (the `zip` crate would silently keep only one
//!   of two identical names, so the central directory is walked here as well);
//! - the local header of each entry names the same file as its central record (streaming
//!   extractors read the local one);
//! - no encrypted entries, only stored or DEFLATE entries;
//! - bounded work: an entry-count limit checked on what the end records *claim* before the
//!   archive is parsed, a total uncompressed-size limit and a per-entry compression-ratio limit.
//!   Sizes in headers are only used to refuse early; acceptance always comes from actually
//!   decompressing each entry through a reader that stops one byte past its budget, so a header
//!   that lies about its size cannot smuggle a bomb through, and a mismatch between the declared
//!   and the real size is itself a refusal;
//! - no two entries sharing compressed bytes (overlapping-entry bombs).

use std::collections::BTreeSet;
use std::io::{Cursor, Read};

use zip::CompressionMethod;
use zip::ZipArchive;

use crate::name::display;
use crate::names::{NameError, validate_relative_path};

const LOCAL_SIG: &[u8; 4] = b"PK\x03\x04";
const CENTRAL_SIG: &[u8; 4] = b"PK\x01\x02";
const EOCD_SIG: &[u8; 4] = b"PK\x05\x06";
const EOCD64_SIG: &[u8; 4] = b"PK\x06\x06";
const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFLNK: u32 = 0o120_000;

/// The budget of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZipLimits {
    /// Most entries (files and directories) an archive may hold.
    pub max_entries: usize,
    /// Most bytes all entries may expand to together.
    pub max_total_uncompressed: u64,
    /// Most an entry may expand relative to its compressed size, once it is larger than
    /// `ratio_grace_bytes` (small, very compressible files such as an empty JSON array are fine).
    pub max_ratio: u64,
    /// Entries up to this size are not held to `max_ratio`.
    pub ratio_grace_bytes: u64,
}

impl Default for ZipLimits {
    fn default() -> Self {
        Self {
            max_entries: 1000,
            max_total_uncompressed: 100 * 1024 * 1024,
            max_ratio: 100,
            ratio_grace_bytes: 1024 * 1024,
        }
    }
}

/// One accepted entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ZipEntry {
    /// The validated name (for a directory, without its trailing `/`).
    pub name: String,
    pub is_dir: bool,
    /// The real uncompressed size, as counted while decompressing.
    pub size: u64,
    pub compressed_size: u64,
}

/// Why an archive was refused. Entry names in messages are escaped; [`ZipError::code`] is stable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZipError {
    #[error("not a readable zip archive: {0}")]
    Malformed(String),
    #[error("more than {limit} entries")]
    TooManyEntries { limit: usize },
    #[error("entry \"{name}\": invalid name: {reason}")]
    BadName { name: String, reason: NameError },
    #[error("entry \"{name}\": symbolic links are not allowed")]
    Symlink { name: String },
    #[error("entry \"{name}\": not a regular file or directory")]
    SpecialFile { name: String },
    #[error("entry \"{name}\": duplicate name")]
    Duplicate { name: String },
    #[error("entry \"{name}\": encrypted entries are not allowed")]
    Encrypted { name: String },
    #[error("entry \"{name}\": unsupported compression method")]
    UnsupportedCompression { name: String },
    #[error("entry \"{name}\": expands more than {limit} times its compressed size")]
    RatioExceeded { name: String, limit: u64 },
    #[error("archive expands to more than {limit} bytes")]
    TotalTooLarge { limit: u64 },
    #[error("entry \"{name}\": declared size does not match its content")]
    SizeMismatch { name: String },
    #[error("entry \"{name}\": local and central headers disagree")]
    HeaderMismatch { name: String },
    #[error("entries share compressed data")]
    Overlapping,
}

impl ZipError {
    /// A stable, machine-readable reason.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "zip_malformed",
            Self::TooManyEntries { .. } => "zip_too_many_entries",
            Self::BadName { .. } => "zip_bad_name",
            Self::Symlink { .. } => "zip_symlink",
            Self::SpecialFile { .. } => "zip_special_file",
            Self::Duplicate { .. } => "zip_duplicate",
            Self::Encrypted { .. } => "zip_encrypted",
            Self::UnsupportedCompression { .. } => "zip_unsupported_compression",
            Self::RatioExceeded { .. } => "zip_ratio",
            Self::TotalTooLarge { .. } => "zip_too_large",
            Self::SizeMismatch { .. } => "zip_size_mismatch",
            Self::HeaderMismatch { .. } => "zip_header_mismatch",
            Self::Overlapping => "zip_overlapping",
        }
    }
}

fn malformed(e: impl std::fmt::Display) -> ZipError {
    ZipError::Malformed(e.to_string())
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Checks `bytes` as a ZIP archive under `limits` and lists its entries.
pub fn check_zip(bytes: &[u8], limits: ZipLimits) -> Result<Vec<ZipEntry>, ZipError> {
    claimed_counts(bytes, limits.max_entries)?;
    let mut archive = ZipArchive::new(Cursor::new(bytes)).map_err(malformed)?;
    if archive.len() > limits.max_entries {
        return Err(ZipError::TooManyEntries {
            limit: limits.max_entries,
        });
    }
    central_records(
        bytes,
        archive.central_directory_start(),
        archive.len(),
        limits,
    )?;

    let mut entries = Vec::with_capacity(archive.len());
    let mut seen = BTreeSet::new();
    let mut ranges = Vec::with_capacity(archive.len());
    let mut remaining = limits.max_total_uncompressed;
    for i in 0..archive.len() {
        let meta = entry_meta(&mut archive, i)?;
        local_header_matches(bytes, &meta)?;
        let shown = display(&meta.name_raw);
        let name = meta.name.clone();
        if !seen.insert(name.to_lowercase()) {
            return Err(ZipError::Duplicate { name: shown });
        }
        if meta.compressed_size > 0 {
            ranges.push((meta.data_start, meta.data_start + meta.compressed_size));
        }
        // Early refusals from what the headers claim (never an acceptance).
        if meta.declared_size > remaining {
            return Err(ZipError::TotalTooLarge {
                limit: limits.max_total_uncompressed,
            });
        }
        let ratio_cap = limits
            .max_ratio
            .saturating_mul(meta.compressed_size)
            .max(limits.ratio_grace_bytes);
        if meta.declared_size > ratio_cap {
            return Err(ZipError::RatioExceeded {
                name: shown,
                limit: limits.max_ratio,
            });
        }
        // The real size, read with a budget one byte past what is allowed.
        let cap = ratio_cap.min(remaining);
        let file = archive.by_index(i).map_err(malformed)?;
        let mut limited = file.take(cap.saturating_add(1));
        let size = std::io::copy(&mut limited, &mut std::io::sink())
            .map_err(|e| ZipError::Malformed(format!("entry \"{shown}\": {e}")))?;
        if size > cap {
            return Err(if cap < ratio_cap {
                ZipError::TotalTooLarge {
                    limit: limits.max_total_uncompressed,
                }
            } else {
                ZipError::RatioExceeded {
                    name: shown,
                    limit: limits.max_ratio,
                }
            });
        }
        if size != meta.declared_size {
            return Err(ZipError::SizeMismatch { name: shown });
        }
        remaining -= size;
        entries.push(ZipEntry {
            name,
            is_dir: meta.is_dir,
            size,
            compressed_size: meta.compressed_size,
        });
    }
    file_dir_conflicts(&entries)?;
    ranges.sort_unstable();
    if ranges.windows(2).any(|w| w[1].0 < w[0].1) {
        return Err(ZipError::Overlapping);
    }
    Ok(entries)
}

/// Refuses an archive whose end records claim more entries than allowed, before the `zip` crate
/// sizes anything by those claims. Every end-record signature anywhere in the buffer is looked at
/// (which one a reader picks is its business); a count of 0xFFFF in the classic record defers
/// to the ZIP64 record, which is checked on its own.
fn claimed_counts(bytes: &[u8], max_entries: usize) -> Result<(), ZipError> {
    let too_many = || ZipError::TooManyEntries { limit: max_entries };
    let max = u64::try_from(max_entries).unwrap_or(u64::MAX);
    for (at, w) in bytes.windows(4).enumerate() {
        if w == EOCD_SIG {
            for field in [8, 10] {
                if let Some(n) = u16_at(bytes, at + field)
                    && n != u16::MAX
                    && u64::from(n) > max
                {
                    return Err(too_many());
                }
            }
        } else if w == EOCD64_SIG {
            for field in [24, 32] {
                if u64_at(bytes, at + field).is_some_and(|n| n > max) {
                    return Err(too_many());
                }
            }
        }
    }
    Ok(())
}

/// Walks the central directory record by record: its count must equal what the reader
/// parsed, and no raw name may appear twice.
fn central_records(
    bytes: &[u8],
    start: u64,
    parsed: usize,
    limits: ZipLimits,
) -> Result<(), ZipError> {
    let mut at = usize::try_from(start).map_err(malformed)?;
    let mut names = BTreeSet::new();
    let mut count = 0usize;
    while bytes.get(at..at + 4) == Some(CENTRAL_SIG.as_slice()) {
        let field = |off| u16_at(bytes, at + off).map(usize::from);
        let (Some(n), Some(m), Some(k)) = (field(28), field(30), field(32)) else {
            return Err(malformed("truncated central directory"));
        };
        let name = bytes
            .get(at + 46..at + 46 + n)
            .ok_or_else(|| malformed("truncated central directory"))?;
        if !names.insert(name) {
            return Err(ZipError::Duplicate {
                name: display(name),
            });
        }
        count += 1;
        if count > limits.max_entries {
            return Err(ZipError::TooManyEntries {
                limit: limits.max_entries,
            });
        }
        at += 46 + n + m + k;
    }
    if count != parsed {
        return Err(malformed(
            "the central directory does not match its end record",
        ));
    }
    Ok(())
}

/// What one entry's headers say, read without decompressing.
struct EntryMeta {
    name_raw: Vec<u8>,
    name: String,
    is_dir: bool,
    declared_size: u64,
    compressed_size: u64,
    header_start: u64,
    data_start: u64,
    method: CompressionMethod,
}

fn entry_meta(archive: &mut ZipArchive<Cursor<&[u8]>>, i: usize) -> Result<EntryMeta, ZipError> {
    let raw = archive.by_index_raw(i).map_err(malformed)?;
    let name_raw = raw.name_raw().to_vec();
    let shown = display(&name_raw);
    let text = std::str::from_utf8(&name_raw).map_err(|_| ZipError::BadName {
        name: shown.clone(),
        reason: NameError::InvalidUtf8,
    })?;
    let kind = raw.unix_mode().map_or(0, |m| m & S_IFMT);
    let is_dir = match kind {
        0 | S_IFREG => text.ends_with('/'),
        S_IFDIR => true,
        S_IFLNK => return Err(ZipError::Symlink { name: shown }),
        _ => return Err(ZipError::SpecialFile { name: shown }),
    };
    let bare = if is_dir {
        text.strip_suffix('/').unwrap_or(text)
    } else {
        text
    };
    let name = validate_relative_path(bare).map_err(|reason| ZipError::BadName {
        name: shown.clone(),
        reason,
    })?;
    if raw.encrypted() {
        return Err(ZipError::Encrypted { name: shown });
    }
    let method = raw.compression();
    if !matches!(
        method,
        CompressionMethod::Stored | CompressionMethod::Deflated
    ) {
        return Err(ZipError::UnsupportedCompression { name: shown });
    }
    let data_start = raw
        .data_start()
        .ok_or_else(|| ZipError::Malformed(format!("entry \"{shown}\": no data offset")))?;
    Ok(EntryMeta {
        name,
        is_dir,
        declared_size: raw.size(),
        compressed_size: raw.compressed_size(),
        header_start: raw.header_start(),
        data_start,
        method,
        name_raw,
    })
}

/// The local header must carry the same name and method as the central record, and must not
/// be flagged encrypted.
fn local_header_matches(bytes: &[u8], meta: &EntryMeta) -> Result<(), ZipError> {
    let shown = || display(&meta.name_raw);
    let at = usize::try_from(meta.header_start).map_err(malformed)?;
    if bytes.get(at..at + 4) != Some(LOCAL_SIG.as_slice()) {
        return Err(ZipError::HeaderMismatch { name: shown() });
    }
    let (Some(flags), Some(method), Some(n)) = (
        u16_at(bytes, at + 6),
        u16_at(bytes, at + 8),
        u16_at(bytes, at + 26),
    ) else {
        return Err(ZipError::HeaderMismatch { name: shown() });
    };
    if flags & 1 != 0 {
        return Err(ZipError::Encrypted { name: shown() });
    }
    let want_method = match meta.method {
        CompressionMethod::Stored => 0,
        _ => 8,
    };
    let name = bytes.get(at + 30..at + 30 + usize::from(n));
    if method != want_method || name != Some(meta.name_raw.as_slice()) {
        return Err(ZipError::HeaderMismatch { name: shown() });
    }
    Ok(())
}

/// A name may not be a file in one entry and a directory (declared, or implied by a deeper
/// entry) in another; compared case-insensitively like duplicates.
fn file_dir_conflicts(entries: &[ZipEntry]) -> Result<(), ZipError> {
    let mut dirs = BTreeSet::new();
    for e in entries {
        let folded = e.name.to_lowercase();
        if e.is_dir {
            dirs.insert(folded.clone());
        }
        let mut prefix = folded.as_str();
        while let Some((parent, _)) = prefix.rsplit_once('/') {
            dirs.insert(parent.to_owned());
            prefix = parent;
        }
    }
    match entries
        .iter()
        .find(|e| !e.is_dir && dirs.contains(&e.name.to_lowercase()))
    {
        Some(e) => Err(ZipError::Duplicate {
            name: display(e.name.as_bytes()),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use zip::ZipWriter;
    use zip::write::SimpleFileOptions;

    use super::*;

    const GIB: u64 = 1 << 30;

    fn opts() -> SimpleFileOptions {
        SimpleFileOptions::default().compression_method(CompressionMethod::Deflated)
    }

    fn build(f: impl FnOnce(&mut ZipWriter<Cursor<Vec<u8>>>)) -> Vec<u8> {
        let mut w = ZipWriter::new(Cursor::new(Vec::new()));
        f(&mut w);
        w.finish().unwrap().into_inner()
    }

    fn with_files(files: &[(&str, &[u8])]) -> Vec<u8> {
        build(|w| {
            for (name, data) in files {
                w.start_file(*name, opts()).unwrap();
                w.write_all(data).unwrap();
            }
        })
    }

    fn small() -> ZipLimits {
        ZipLimits {
            max_entries: 10,
            max_total_uncompressed: 64 * 1024 * 1024,
            max_ratio: 10,
            ratio_grace_bytes: 64 * 1024,
        }
    }

    /// LSB-first bit writer for hand-made DEFLATE streams.
    struct Bits {
        out: Vec<u8>,
        acc: u64,
        n: u32,
    }

    impl Bits {
        fn new() -> Self {
            Self {
                out: Vec::new(),
                acc: 0,
                n: 0,
            }
        }
        /// `count` bits of `value`, least significant first (header fields, extra bits).
        fn put(&mut self, value: u64, count: u32) {
            self.acc |= value << self.n;
            self.n += count;
            while self.n >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.n -= 8;
            }
        }
        /// A Huffman code, most significant bit first.
        fn code(&mut self, code: u64, len: u32) {
            for i in (0..len).rev() {
                self.put((code >> i) & 1, 1);
            }
        }
        fn finish(mut self) -> Vec<u8> {
            if self.n > 0 {
                self.out.push(self.acc as u8);
            }
            self.out
        }
    }

    /// A raw DEFLATE stream that inflates to `total` zero bytes, about 2 bits per 258 output
    /// bytes: one dynamic-Huffman block whose literal/length code gives length 258 a 1-bit code
    /// and whose distance code gives distance 1 a 1-bit code. 1 GiB costs about 1 MiB.
    fn zeros_deflate(total: u64) -> Vec<u8> {
        let mut b = Bits::new();
        b.put(1, 1); // BFINAL
        b.put(2, 2); // BTYPE = dynamic
        b.put(29, 5); // HLIT: 286 literal/length codes
        b.put(1, 5); // HDIST: 2 distance codes
        b.put(14, 4); // HCLEN: 18 code-length codes
        // Code-length code lengths, in the format's order 16,17,18,0,8,7,9,6,10,5,11,4,12,3,
        // 13,2,14,1: symbol 18 gets 1 bit, symbols 1 and 2 get 2 bits.
        let order = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1];
        for sym in order {
            let len = match sym {
                18 => 1,
                1 | 2 => 2,
                _ => 0,
            };
            b.put(len, 3);
        }
        // Canonical codes: 18 -> 0, 1 -> 10, 2 -> 11.
        let len2 = |b: &mut Bits| b.code(0b11, 2);
        let len1 = |b: &mut Bits| b.code(0b10, 2);
        let zeros = |b: &mut Bits, n: u64| {
            b.code(0, 1);
            b.put(n - 11, 7);
        };
        // Literal/length lengths: 0 -> 2, 1..=255 -> 0, 256 -> 2, 257..=284 -> 0, 285 -> 1.
        len2(&mut b);
        zeros(&mut b, 138);
        zeros(&mut b, 117);
        len2(&mut b);
        zeros(&mut b, 28);
        len1(&mut b);
        // Distance lengths: 0 -> 1, 1 -> 1.
        len1(&mut b);
        len1(&mut b);
        // Canonical literal/length codes: 285 -> 0, literal 0 -> 10, end-of-block 256 -> 11.
        // Distance codes: 0 (distance 1) -> 0.
        b.code(0b10, 2);
        let matches = (total - 1) / 258;
        for _ in 0..matches {
            b.code(0, 1); // length 258
            b.code(0, 1); // distance 1
        }
        for _ in 0..(total - 1 - matches * 258) {
            b.code(0b10, 2);
        }
        b.code(0b11, 2);
        b.finish()
    }

    /// One hand-assembled entry, for what `ZipWriter` refuses to write (duplicates, lying
    /// headers, pre-compressed data, overlapping entries).
    struct Raw<'a> {
        central_name: &'a [u8],
        local_name: &'a [u8],
        method: u16,
        flags: u16,
        crc: u32,
        data: &'a [u8],
        size: u32,
        /// `Some(offset)`: write no local header and point the central record at `offset`.
        shared_at: Option<u32>,
        /// Unix mode in the external attributes.
        mode: u32,
    }

    fn local_bytes(e: &Raw<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(LOCAL_SIG);
        out.extend_from_slice(&20u16.to_le_bytes());
        out.extend_from_slice(&e.flags.to_le_bytes());
        out.extend_from_slice(&e.method.to_le_bytes());
        out.extend_from_slice(&[0; 4]); // time, date
        out.extend_from_slice(&e.crc.to_le_bytes());
        out.extend_from_slice(&(e.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&e.size.to_le_bytes());
        out.extend_from_slice(&(e.local_name.len() as u16).to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(e.local_name);
        out.extend_from_slice(e.data);
        out
    }

    fn raw_zip(entries: &[Raw<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut central = Vec::new();
        for e in entries {
            let offset = match e.shared_at {
                Some(at) => at,
                None => {
                    let at = out.len() as u32;
                    out.extend_from_slice(&local_bytes(e));
                    at
                }
            };
            central.extend_from_slice(CENTRAL_SIG);
            central.extend_from_slice(&(3u16 << 8 | 20).to_le_bytes()); // made by: unix
            central.extend_from_slice(&20u16.to_le_bytes());
            central.extend_from_slice(&e.flags.to_le_bytes());
            central.extend_from_slice(&e.method.to_le_bytes());
            central.extend_from_slice(&[0; 4]);
            central.extend_from_slice(&e.crc.to_le_bytes());
            central.extend_from_slice(&(e.data.len() as u32).to_le_bytes());
            central.extend_from_slice(&e.size.to_le_bytes());
            central.extend_from_slice(&(e.central_name.len() as u16).to_le_bytes());
            central.extend_from_slice(&[0; 8]); // extra, comment, disk, internal attrs
            central.extend_from_slice(&(e.mode << 16).to_le_bytes());
            central.extend_from_slice(&offset.to_le_bytes());
            central.extend_from_slice(e.central_name);
        }
        let cd_start = out.len() as u32;
        out.extend_from_slice(&central);
        out.extend_from_slice(EOCD_SIG);
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        out.extend_from_slice(&(central.len() as u32).to_le_bytes());
        out.extend_from_slice(&cd_start.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out
    }

    fn stored<'a>(name: &'a [u8], data: &'a [u8]) -> Raw<'a> {
        Raw {
            central_name: name,
            local_name: name,
            method: 0,
            flags: 0,
            crc: crc32(data),
            data,
            size: data.len() as u32,
            shared_at: None,
            mode: S_IFREG | 0o644,
        }
    }

    fn crc32(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
            }
        }
        !crc
    }

    #[test]
    fn api_5_a_good_zip_lists_its_entries() {
        let bytes = build(|w| {
            w.add_directory("docs/", opts()).unwrap();
            w.start_file("docs/report.txt", opts()).unwrap();
            w.write_all(b"hello world").unwrap();
            w.start_file("data/ünïcode.json", opts()).unwrap();
            w.write_all(b"[1, 2, 3]").unwrap();
            w.start_file(
                "stored.bin",
                SimpleFileOptions::default().compression_method(CompressionMethod::Stored),
            )
            .unwrap();
            w.write_all(&[0xff; 100]).unwrap();
        });
        let entries = check_zip(&bytes, ZipLimits::default()).unwrap();
        let names: Vec<_> = entries
            .iter()
            .map(|e| (e.name.as_str(), e.is_dir, e.size))
            .collect();
        assert_eq!(
            names,
            [
                ("docs", true, 0),
                ("docs/report.txt", false, 11),
                ("data/ünïcode.json", false, 9),
                ("stored.bin", false, 100),
            ]
        );
        // An empty archive is fine too.
        assert_eq!(check_zip(&build(|_| {}), small()).unwrap(), []);
        // A raw-built good archive passes (so the refusals below are about what they change).
        let ok = raw_zip(&[stored(b"a.txt", b"aaa"), stored(b"b.txt", b"bbb")]);
        assert_eq!(check_zip(&ok, small()).unwrap().len(), 2);
    }

    #[test]
    fn api_5_entry_names_are_validated() {
        let cases: &[(&str, NameError)] = &[
            ("../evil", NameError::DotSegment),
            ("a/../../evil", NameError::DotSegment),
            ("..%2fevil", NameError::DotSegment),
            ("/abs", NameError::Absolute),
            ("C:/abs", NameError::Absolute),
            ("a\\..\\b", NameError::Backslash),
            ("x\0y", NameError::ControlChar),
            ("a//b", NameError::EmptySegment),
            ("NUL.txt", NameError::Reserved),
        ];
        for (name, reason) in cases {
            let bytes = with_files(&[("ok.txt", b"fine"), (name, b"x")]);
            let err = check_zip(&bytes, small()).unwrap_err();
            assert_eq!(
                err,
                ZipError::BadName {
                    name: display(name.as_bytes()),
                    reason: *reason
                },
                "{name:?}"
            );
            assert_eq!(err.code(), "zip_bad_name");
        }
        // Invalid UTF-8 in a raw name.
        let bytes = raw_zip(&[stored(b"bad\xff.txt", b"x")]);
        assert!(matches!(
            check_zip(&bytes, small()),
            Err(ZipError::BadName {
                reason: NameError::InvalidUtf8,
                ..
            })
        ));
    }

    #[test]
    fn api_5_symlink_entries_are_refused() {
        let bytes = build(|w| {
            w.start_file("ok.txt", opts()).unwrap();
            w.write_all(b"fine").unwrap();
            w.add_symlink("link", "/etc/passwd", opts()).unwrap();
        });
        assert_eq!(
            check_zip(&bytes, small()),
            Err(ZipError::Symlink {
                name: "link".into()
            })
        );
        // A FIFO (or any other special type) is refused as well.
        for mode in [0o010_644, 0o020_644, 0o060_644, 0o140_755] {
            let fifo = Raw {
                mode,
                ..stored(b"special", b"")
            };
            assert_eq!(
                check_zip(&raw_zip(&[fifo]), small()),
                Err(ZipError::SpecialFile {
                    name: "special".into()
                }),
                "{mode:o}"
            );
        }
        // A symlink written by hand (mode in the external attributes) as well.
        let link = Raw {
            mode: S_IFLNK | 0o777,
            ..stored(b"link", b"../../etc/passwd")
        };
        assert_eq!(
            check_zip(&raw_zip(&[link]), small()),
            Err(ZipError::Symlink {
                name: "link".into()
            })
        );
    }

    #[test]
    fn api_5_duplicates_are_refused() {
        // Exact duplicates (the zip crate would keep only one; we walk the directory).
        let bytes = raw_zip(&[stored(b"a.txt", b"one"), stored(b"a.txt", b"two")]);
        assert_eq!(
            check_zip(&bytes, small()),
            Err(ZipError::Duplicate {
                name: "a.txt".into()
            })
        );
        // Different raw names, the same name once decoded.
        let bytes = with_files(&[("a.txt", b"1"), ("a%2etxt", b"2")]);
        assert!(matches!(
            check_zip(&bytes, small()),
            Err(ZipError::Duplicate { .. })
        ));
        // Case-insensitive collision.
        let bytes = with_files(&[("Report.txt", b"1"), ("report.TXT", b"2")]);
        assert!(matches!(
            check_zip(&bytes, small()),
            Err(ZipError::Duplicate { .. })
        ));
        // A name that is both a file and a directory.
        let bytes = with_files(&[("a", b"1"), ("a/b", b"2")]);
        assert!(matches!(
            check_zip(&bytes, small()),
            Err(ZipError::Duplicate { .. })
        ));
    }

    #[test]
    fn api_5_entry_count_is_limited() {
        let names: Vec<String> = (0..11).map(|i| format!("f{i}.txt")).collect();
        let files: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"x"[..])).collect();
        assert_eq!(
            check_zip(&with_files(&files), small()),
            Err(ZipError::TooManyEntries { limit: 10 })
        );
        // An end record that claims a huge count is refused before parsing.
        let mut bytes = with_files(&[("a.txt", b"1")]);
        let eocd = bytes.len() - 22;
        bytes[eocd + 8..eocd + 12].copy_from_slice(&[0xfe, 0xff, 0xfe, 0xff]);
        assert_eq!(
            check_zip(&bytes, small()),
            Err(ZipError::TooManyEntries { limit: 10 })
        );
    }

    #[test]
    fn api_5_a_gigabyte_of_zeros_is_refused_as_a_bomb() {
        let stream = zeros_deflate(GIB);
        assert!(stream.len() < 2 * 1024 * 1024, "{}", stream.len());
        // Honest header: 1 GiB declared.
        let bomb = raw_zip(&[Raw {
            central_name: b"zeros.bin",
            local_name: b"zeros.bin",
            method: 8,
            flags: 0,
            crc: 0, // never reached: the check stops long before the end
            data: &stream,
            size: GIB as u32,
            shared_at: None,
            mode: S_IFREG | 0o644,
        }]);
        let err = check_zip(&bomb, ZipLimits::default()).unwrap_err();
        assert!(
            matches!(
                err,
                ZipError::TotalTooLarge { .. } | ZipError::RatioExceeded { .. }
            ),
            "{err:?}"
        );
        // The same stream behind a header that claims 1000 bytes: only reading with a limit
        // catches it.
        let liar = raw_zip(&[Raw {
            central_name: b"small.txt",
            local_name: b"small.txt",
            method: 8,
            flags: 0,
            crc: 0,
            data: &stream,
            size: 1000,
            shared_at: None,
            mode: S_IFREG | 0o644,
        }]);
        assert_eq!(
            check_zip(&liar, small()),
            Err(ZipError::RatioExceeded {
                name: "small.txt".into(),
                limit: 10
            })
        );
        // And with a generous ratio, the total budget stops it.
        let total = ZipLimits {
            max_ratio: 1_000_000,
            max_total_uncompressed: 8 * 1024 * 1024,
            ..small()
        };
        assert_eq!(
            check_zip(&liar, total),
            Err(ZipError::TotalTooLarge {
                limit: 8 * 1024 * 1024
            })
        );
    }

    #[test]
    fn api_5_the_stream_really_inflates_to_zeros() {
        // The hand-made stream is valid DEFLATE: a small one inflates to exactly its zeros.
        let data = vec![0u8; 100_000];
        let stream = zeros_deflate(data.len() as u64);
        let ok = raw_zip(&[Raw {
            central_name: b"zeros.bin",
            local_name: b"zeros.bin",
            method: 8,
            flags: 0,
            crc: crc32(&data),
            data: &stream,
            size: data.len() as u32,
            shared_at: None,
            mode: S_IFREG | 0o644,
        }]);
        let limits = ZipLimits {
            max_ratio: 1000,
            ..small()
        };
        let entries = check_zip(&ok, limits).unwrap();
        assert_eq!(entries[0].size, 100_000);
        // The ratio (about 1000:1) is refused under the default limit of 100.
        assert!(matches!(
            check_zip(
                &ok,
                ZipLimits {
                    ratio_grace_bytes: 0,
                    ..ZipLimits::default()
                }
            ),
            Err(ZipError::RatioExceeded { .. })
        ));
    }

    #[test]
    fn api_5_sizes_and_headers_must_tell_the_truth() {
        // A declared size larger than the content.
        let mut e = stored(b"a.txt", b"abc");
        e.size = 10;
        e.data = b"abc";
        assert!(matches!(
            check_zip(&raw_zip(&[e]), small()),
            Err(ZipError::SizeMismatch { .. } | ZipError::Malformed(_))
        ));
        // A corrupted CRC.
        let mut e = stored(b"a.txt", b"abc");
        e.crc ^= 1;
        assert!(matches!(
            check_zip(&raw_zip(&[e]), small()),
            Err(ZipError::Malformed(_))
        ));
        // The local header names another file than the central one.
        let mut e = stored(b"safe.txt", b"abc");
        e.local_name = b"../evil";
        assert_eq!(
            check_zip(&raw_zip(&[e]), small()),
            Err(ZipError::HeaderMismatch {
                name: "safe.txt".into()
            })
        );
    }

    #[test]
    fn api_5_encrypted_and_unsupported_entries_are_refused() {
        let mut e = stored(b"secret.txt", b"abc");
        e.flags = 1;
        assert_eq!(
            check_zip(&raw_zip(&[e]), small()),
            Err(ZipError::Encrypted {
                name: "secret.txt".into()
            })
        );
        let bytes = build(|w| {
            use zip::unstable::write::FileOptionsExt;
            w.start_file(
                "secret.txt",
                opts().with_deprecated_encryption(b"pw").unwrap(),
            )
            .unwrap();
            w.write_all(b"hidden").unwrap();
        });
        assert_eq!(
            check_zip(&bytes, small()),
            Err(ZipError::Encrypted {
                name: "secret.txt".into()
            })
        );
        let mut e = stored(b"x.bz2", b"abc");
        e.method = 12; // bzip2
        assert_eq!(
            check_zip(&raw_zip(&[e]), small()),
            Err(ZipError::UnsupportedCompression {
                name: "x.bz2".into()
            })
        );
    }

    #[test]
    fn api_5_overlapping_entries_are_refused() {
        // "a.txt" is stored and its data *is* the local entry of "b.txt": both local headers
        // are genuine, but b's bytes are inside a's.
        let b = stored(b"b.txt", b"abc");
        let inner = local_bytes(&b);
        let a = stored(b"a.txt", &inner);
        let b_at = 30 + 5; // a's local header: 30 bytes + its name
        let shared = Raw {
            shared_at: Some(b_at),
            ..stored(b"b.txt", b"abc")
        };
        let bytes = raw_zip(&[a, shared]);
        assert_eq!(check_zip(&bytes, small()), Err(ZipError::Overlapping));
    }

    #[test]
    fn api_5_garbage_is_malformed_not_a_panic() {
        for bytes in [
            &b""[..],
            b"PK\x03\x04",
            b"PK\x05\x06\0\0\0\0\x01\0\x01\0\xff\xff\xff\xff\xff\xff\xff\xff\0\0",
            b"not a zip at all",
        ] {
            assert!(check_zip(bytes, small()).is_err());
        }
        // Every truncation of a good archive is refused without a panic.
        let good = with_files(&[("a.txt", b"hello"), ("b/c.txt", b"world")]);
        for cut in 0..good.len() {
            let _ = check_zip(&good[..cut], small());
        }
    }

    #[test]
    fn api_5_every_error_has_a_distinct_code() {
        let n = || "x".to_owned();
        let all = [
            ZipError::Malformed(n()),
            ZipError::TooManyEntries { limit: 1 },
            ZipError::BadName {
                name: n(),
                reason: NameError::Empty,
            },
            ZipError::Symlink { name: n() },
            ZipError::SpecialFile { name: n() },
            ZipError::Duplicate { name: n() },
            ZipError::Encrypted { name: n() },
            ZipError::UnsupportedCompression { name: n() },
            ZipError::RatioExceeded {
                name: n(),
                limit: 1,
            },
            ZipError::TotalTooLarge { limit: 1 },
            ZipError::SizeMismatch { name: n() },
            ZipError::HeaderMismatch { name: n() },
            ZipError::Overlapping,
        ];
        let codes: BTreeSet<_> = all.iter().map(ZipError::code).collect();
        assert_eq!(codes.len(), all.len());
    }
}
