//! The bounded file layer (DUR-4) and the content-addressed artifact store (DUR-5).
//!
//! Everything a sandbox leaves in its output folder is hostile input: names, file types, link
//! counts and sizes are all chosen by the workload. This crate is the one place that reads such a
//! folder, and it does so only through directory descriptors it opened itself, one path component
//! at a time, never following a symbolic link, so nothing outside the folder can be reached.
//!
//! - [`collect_into`] walks an output folder under a [`Budget`] and publishes every regular file
//!   into an [`ArtifactStore`], returning one [`Collected`] record (path, size, SHA-256, media
//!   type) per file for the caller to store in the database.
//! - [`read_bounded`] reads one small file (e.g. `result.json`) under the same rules.
//! - [`ArtifactStore`] stages bytes in `tmp/`, hashes what it actually wrote, and publishes by an
//!   atomic rename into `sha256/<aa>/<hex>`.
//! - [`sniff`] names a media type from content, never letting a file name claim an active type.
//! - [`names::validate_relative_path`] is the rule for every file name or relative path a user
//!   chooses (uploads, artifact names in URLs, archive entries), percent-encoded forms included.
//! - [`workdir::WorkDir`] is a run's work directory as the trusted agent harness touches it:
//!   bounded reads, atomic writes under a byte and entry budget, and listings whose names are
//!   escaped for a model, all with the same no-symlink, no-FIFO rules, over a directory the
//!   workload writes too.
//! - [`trash`] moves a checked file into a trash area and back (`airlock gc`): `O_NOFOLLOW`,
//!   identity compared before and after a `RENAME_NOREPLACE`, nothing overwritten.
//! - [`zipcheck::check_zip`] decides whether an uploaded ZIP is safe to keep: entry names, no
//!   symlinks, no duplicates, no encryption, and bounded expansion (zip bombs).
//!
//! Architecture invariants:
//! - No `unsafe` here (`unsafe_code = "forbid"` via the workspace lints); raw descriptors come
//!   from `nix`'s safe wrappers.
//! - Nothing in this crate reads an untrusted folder by path string: after the root descriptor,
//!   every open is `openat2(dirfd, one_component, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | ...)`.
//! - Budgets are enforced before any byte is decoded, and again while copying (a file that grows
//!   after it was measured is cut at the budget, never read past it).
//! - This crate knows nothing about runs, the database or HTTP; it never prints.

mod collect;
mod error;
mod name;
pub mod names;
mod open;
mod sniff;
mod store;
pub mod trash;
pub mod workdir;
pub mod zipcheck;

pub use collect::{Budget, Collected, collect_into, read_bounded};
pub use error::FileError;
pub use sniff::{MAGIC, SNIFF_LEN, sniff};
pub use store::{ArtifactStore, BlobListing};
