//! Shared primitives below every tool family: pure building blocks that know no MCP, no
//! transport and no tool (the tidy test in `crates/machine-mcp/tests/tidy.rs` checks it).
//!
//! - [`text`]: BOM, line endings, binary sniffing, lossy UTF-8, SHA-256.
//! - [`write`]: complete-before-visible writes (staged temp file, fsync, rename or exclusive
//!   link, SHA-256 precondition at commit) and bounded reads of regular files.
//! - [`write_lock`]: the runtime's per-file write locks.
//! - [`private`]: owner-only files and directories of the state directory (jobs, resources).
//! - [`diff`]: unified diffs (via `similar`) and byte caps with a marker.
//! - [`ignores`]: the ignore files of `search_text`/`list_files` walks, capped and shared.
//! - [`skipped`]: paths a walk or search could not read, bounded and in path order.
//! - [`project`]: the project root of a target (nearest Git work tree, else the workspace).
//! - [`uri`]: paths percent-encoded in the URIs tools hand out.

pub(crate) mod diff;
pub(crate) mod ignores;
pub(crate) mod private;
pub(crate) mod project;
pub(crate) mod skipped;
pub(crate) mod text;
pub(crate) mod uri;
pub(crate) mod write;
pub(crate) mod write_lock;
