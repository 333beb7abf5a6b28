//! Where running supervisors announce themselves, so that `machine-mcp reload` finds every one of
//! this user's, whatever name or link the host started the binary by:
//! `$XDG_RUNTIME_DIR/machine-mcp/supervisors/PID` (else `TMPDIR/machine-mcp-UID/supervisors/PID`),
//! the directory owner-only, the file holding the process's start time (clock ticks since boot)
//! so that a PID reused by another process is never signalled. A supervisor removes its entry
//! when it ends; an entry of a process that is gone is removed by the next [`running`].

use std::{
    os::unix::fs::{DirBuilderExt, MetadataExt},
    path::PathBuf,
};

/// The directory of the entries, created owner-only (0700) when missing.
fn dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_dir())
        .map(|p| p.join("machine-mcp"))
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("machine-mcp-{}", nix::unistd::getuid()))
        });
    let dir = base.join("supervisors");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .ok()?;
    // Somebody else's directory (a shared /tmp) is not used.
    let meta = std::fs::symlink_metadata(&base).ok()?;
    (meta.uid() == nix::unistd::getuid().as_raw() && meta.is_dir()).then_some(dir)
}

/// This process's entry; removed when dropped.
#[derive(Debug)]
pub(super) struct Registration(Option<PathBuf>);

impl Registration {
    /// Announces this process (best effort: without a usable directory it is simply not
    /// found by `machine-mcp reload`, which can still be given `--pid`).
    pub(super) fn announce() -> Self {
        let pid = std::process::id();
        let Some(dir) = dir() else {
            return Self(None);
        };
        let Some(id) = runtime::procs::identity(pid) else {
            return Self(None);
        };
        let path = dir.join(pid.to_string());
        match std::fs::write(&path, id.start_ticks.to_string()) {
            Ok(()) => Self(Some(path)),
            Err(_) => Self(None),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The process ids of this user's running supervisors (entries of processes that are gone, or
/// whose PID another process now has, are removed).
pub fn running() -> Vec<u32> {
    let Some(dir) = dir() else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let recorded = std::fs::read_to_string(e.path())
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok());
        let live = runtime::procs::identity(pid).map(|id| id.start_ticks);
        if recorded.is_some() && recorded == live {
            out.push(pid);
        } else {
            let _ = std::fs::remove_file(e.path());
        }
    }
    out.sort_unstable();
    out
}
