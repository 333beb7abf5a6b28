//! Paths in the URIs the runtime hands out (`machine://workspace/<path>` of `search`/`fetch`,
//! `machine://context/file/<path>` of the context resources): each byte outside RFC 3986
//! `unreserved` and `/` percent-encoded (RFC 3986 §2.1), so a path that is not UTF-8 keeps its
//! bytes and every URI decodes back to the same path.

use std::{ffi::OsStr, os::unix::ffi::OsStrExt};

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, percent_encode};

/// Bytes kept as they are in a URI path: RFC 3986 `unreserved` and `/`.
const PATH_KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// `path` percent-encoded for a URI path.
pub(crate) fn encode_path(path: &OsStr) -> String {
    percent_encode(path.as_bytes(), PATH_KEEP).to_string()
}

/// The bytes a percent-encoded URI path names (an invalid escape stays as written).
pub(crate) fn decode_path(encoded: &str) -> Vec<u8> {
    percent_decode_str(encoded).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip_through_their_encoding() {
        let p = OsStr::from_bytes(b"a b/caf\xe9/%20#?.md");
        let e = encode_path(p);
        assert_eq!(e, "a%20b/caf%E9/%2520%23%3F.md");
        assert_eq!(decode_path(&e), p.as_bytes());
    }
}
