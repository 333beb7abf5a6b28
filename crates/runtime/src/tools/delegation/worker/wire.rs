//! The lines of the worker socket and its challenge (the module docs of [`super`]): what both
//! ends speak — the server ([`super::serve`]) and the worker MCP server
//! ([`crate::tools::delegation::worker_mcp`]) — and the variables a run gives its agent.

use std::{fmt, io};

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::limits::DELEGATION_SOCKET_FRAME_MAX_BYTES;

/// The environment variable naming the server's worker socket (absolute path).
pub(crate) const SOCKET_VAR: &str = "MACHINE_MCP_DELEGATION_SOCKET";
/// The environment variable naming the worker's own request id.
pub(crate) const REQUEST_VAR: &str = "MACHINE_MCP_DELEGATION_REQUEST";
/// The environment variable holding the worker's capability: 64 lowercase hex digits (32 bytes).
pub(crate) const CAPABILITY_VAR: &str = "MACHINE_MCP_DELEGATION_CAPABILITY";
/// The first line of the HMAC transcript ([`challenge_mac`]); the version names this protocol.
pub(crate) const MAC_CONTEXT: &str = "machine-mcp delegation v1\n";

type HmacSha256 = Hmac<Sha256>;

/// The MAC a worker answers a challenge with: HMAC-SHA256 keyed with the capability's 32
/// bytes over `MAC_CONTEXT + challenge + "\n" + request_id` (the challenge as its 64 hex
/// digits).
pub(crate) fn challenge_mac(capability: &[u8], challenge: &str, request_id: &str) -> Vec<u8> {
    transcript(capability, challenge, request_id)
        .map(|m| m.finalize().into_bytes().to_vec())
        .unwrap_or_default()
}

/// The HMAC of [`challenge_mac`], before it is finalized (the server verifies with it).
pub(super) fn transcript(
    capability: &[u8],
    challenge: &str,
    request_id: &str,
) -> Option<HmacSha256> {
    // HMAC takes a key of any length: this never fails.
    let mut mac = HmacSha256::new_from_slice(capability).ok()?;
    mac.update(MAC_CONTEXT.as_bytes());
    mac.update(challenge.as_bytes());
    mac.update(b"\n");
    mac.update(request_id.as_bytes());
    Some(mac)
}

/// Why [`read_frame`] returned no frame.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// A line longer than [`DELEGATION_SOCKET_FRAME_MAX_BYTES`].
    TooLarge,
    /// Reading failed.
    Io(io::Error),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge => write!(
                f,
                "a line longer than {DELEGATION_SOCKET_FRAME_MAX_BYTES} bytes"
            ),
            Self::Io(e) => e.fmt(f),
        }
    }
}

/// Reads one line (without its `\n`) of at most [`DELEGATION_SOCKET_FRAME_MAX_BYTES`] bytes;
/// `None` at the end of the stream. A last line without `\n` counts.
///
/// # Errors
/// [`FrameError::TooLarge`] for a longer line (the stream is then out of step: close it);
/// [`FrameError::Io`] when reading fails.
pub(crate) async fn read_frame<R: AsyncBufRead + Unpin>(
    reader: &mut R,
) -> Result<Option<Vec<u8>>, FrameError> {
    let mut line = Vec::new();
    let n = (&mut *reader)
        .take(DELEGATION_SOCKET_FRAME_MAX_BYTES as u64 + 1)
        .read_until(b'\n', &mut line)
        .await
        .map_err(FrameError::Io)?;
    if n == 0 {
        return Ok(None);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
    } else if line.len() > DELEGATION_SOCKET_FRAME_MAX_BYTES {
        return Err(FrameError::TooLarge);
    }
    Ok(Some(line))
}

/// Writes `value` as one line.
///
/// # Errors
/// The line would be longer than [`DELEGATION_SOCKET_FRAME_MAX_BYTES`] (`InvalidData`), or
/// writing fails.
pub(crate) async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    value: &Value,
) -> io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(io::Error::other)?;
    if line.len() > DELEGATION_SOCKET_FRAME_MAX_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame longer than {DELEGATION_SOCKET_FRAME_MAX_BYTES} bytes"),
        ));
    }
    line.push(b'\n');
    writer.write_all(&line).await?;
    writer.flush().await
}
