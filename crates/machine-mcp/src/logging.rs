//! Logging with `tracing`: to stderr (stdout belongs to JSON-RPC), or with `--log-file` to a file
//! rotated by size.

use std::{
    fs::OpenOptions,
    io,
    os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt},
    path::Path,
    sync::Mutex,
};

use file_rotate::{ContentLimit, FileRotate, compression::Compression, suffix::AppendCount};
use tracing_subscriber::EnvFilter;

use crate::cli::{GlobalArgs, LogLevel};

/// Bytes a log file grows to before it is rotated (the line that crosses it is kept whole).
pub(crate) const LOG_FILE_MAX_BYTES: usize = 10 * 1024 * 1024;

/// Rotated log files kept beside the current one (`daemon.log.1` newest … `daemon.log.4`), so at
/// most five files of about [`LOG_FILE_MAX_BYTES`] each.
pub(crate) const LOG_FILES_KEPT: usize = 4;

/// Installs the subscriber: stderr, or the file of `--log-file` (and then nothing on stderr).
/// rmcp is kept at `error` (`warn` with --verbose) because its debug events carry request
/// arguments and results, which are never logged (CONVENTIONS "Logs"). Both destinations get the
/// same filter and format, without ANSI colours.
///
/// # Errors
/// What [`rotating_file`] returns.
pub(crate) fn init(g: &GlobalArgs) -> anyhow::Result<()> {
    let level = match (g.verbose, g.log_level) {
        (true, LogLevel::Trace) => "trace",
        (true, _) => "debug",
        (false, LogLevel::Error) => "error",
        (false, LogLevel::Warn) => "warn",
        (false, LogLevel::Info) => "info",
        (false, LogLevel::Debug) => "debug",
        (false, LogLevel::Trace) => "trace",
    };
    // rmcp warns about every JSON-RPC error it answers; that is per-call noise.
    let rmcp = if g.verbose { "warn" } else { "error" };
    let filter = EnvFilter::new(format!("{level},rmcp={rmcp},ignore=warn,globset=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_target(false);
    let _ = match &g.log_file {
        Some(path) => builder
            .with_writer(Mutex::new(rotating_file(
                path,
                LOG_FILE_MAX_BYTES,
                LOG_FILES_KEPT,
            )?))
            .try_init(),
        None => builder.with_writer(io::stderr).try_init(),
    };
    Ok(())
}

/// A writer appending to `path` that moves it to `path.1` (and older ones up to `path.KEPT`)
/// once it holds more than `max_bytes`. The directories it creates are 0700, the files 0600; an
/// existing file is made 0600.
///
/// # Errors
/// One error naming the path and the fix when a directory cannot be created or the file cannot
/// be opened.
pub(crate) fn rotating_file(
    path: &Path,
    max_bytes: usize,
    kept: usize,
) -> anyhow::Result<FileRotate<AppendCount>> {
    let err = |source: io::Error| {
        anyhow::anyhow!(
            "cannot open the log file {}: {source} (choose another --log-file, or make its directory writable)",
            path.display()
        )
    };
    // file-rotate panics when it cannot create the directory, and forgets a file it cannot open;
    // both are checked here first so the user gets one clear error instead.
    let path = std::path::absolute(path).map_err(err)?;
    let dir = path.parent().ok_or_else(|| {
        err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it names no file",
        ))
    })?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(err)?;
    let mut options = OpenOptions::new();
    options.read(true).create(true).append(true).mode(0o600);
    let file = options.open(&path).map_err(err)?;
    if !file.metadata().map_err(err)?.is_file() {
        return Err(err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is not a regular file",
        )));
    }
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(err)?;
    drop(file);
    Ok(FileRotate::new(
        &path,
        AppendCount::new(kept),
        ContentLimit::BytesSurpassed(max_bytes.max(1)),
        Compression::None,
        Some(options),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Write;

    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn rotates_by_size_keeps_the_newest_files_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("logs/x.log");
        let mut w = rotating_file(&path, 10, 2).unwrap();
        assert_eq!(mode(&tmp.path().join("logs")), 0o700);
        for i in 0..5 {
            w.write_all(format!("line {i} of twelve\n").as_bytes())
                .unwrap();
        }
        w.flush().unwrap();
        // Each line crosses the 10-byte limit: the current file holds the last, `.1` the one
        // before, `.2` the one before that; older ones are gone.
        let read = |p: &str| std::fs::read_to_string(tmp.path().join(p)).unwrap();
        assert_eq!(read("logs/x.log"), "line 4 of twelve\n");
        assert_eq!(read("logs/x.log.1"), "line 3 of twelve\n");
        assert_eq!(read("logs/x.log.2"), "line 2 of twelve\n");
        assert!(!tmp.path().join("logs/x.log.3").exists());
        for p in ["logs/x.log", "logs/x.log.1", "logs/x.log.2"] {
            assert_eq!(mode(&tmp.path().join(p)), 0o600, "{p}");
        }
    }

    #[test]
    fn an_existing_file_is_made_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.log");
        std::fs::write(&path, "old\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut w = rotating_file(&path, 1024, 1).unwrap();
        w.write_all(b"new\n").unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old\nnew\n");
    }

    #[test]
    fn an_unusable_path_is_one_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let blocker = tmp.path().join("file");
        std::fs::write(&blocker, "").unwrap();
        let path = blocker.join("x.log");
        let e = rotating_file(&path, 1024, 1).err().unwrap().to_string();
        assert!(e.contains(&path.display().to_string()), "{e}");
        let e = rotating_file(tmp.path(), 1024, 1)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("cannot open the log file"), "{e}");
    }
}
