//! Lossless text for paths that are not UTF-8: every path a tool returns names the same
//! file again when passed back.
//!
//! A path whose bytes are UTF-8 renders as itself. Any other path renders *quoted*: inside double
//! quotes, each byte that is not part of valid UTF-8 as `\xHH` (lowercase hex), `\` as `\\` and
//! `"` as `\"`; every valid UTF-8 character as itself. So does a UTF-8 path that begins and ends
//! with `"`, so that the quoted form is never ambiguous. A path argument that begins and ends
//! with `"` and parses by these rules names the bytes it decodes to; anything else is taken as
//! written. This is the shape of git's `core.quotePath` output with hex escapes, and the same
//! answer ripgrep's JSON output gives non-UTF-8 paths (`{"bytes": ...}`) in a form that still
//! fits a string argument.

use std::{
    ffi::{OsStr, OsString},
    os::unix::ffi::{OsStrExt, OsStringExt},
};

/// The text of `path` for output: itself when it is UTF-8 and does not look quoted, the quoted
/// form otherwise (module docs).
pub fn render(path: &OsStr) -> String {
    match path.to_str() {
        Some(s) if !looks_quoted(s) => s.to_owned(),
        _ => quote(path.as_bytes()),
    }
}

/// The bytes a path argument names: the decoded bytes when `arg` is a quoted form, `None` when
/// it is to be taken as written.
pub fn parse(arg: &str) -> Option<OsString> {
    if !looks_quoted(arg) {
        return None;
    }
    let inner = &arg.as_bytes()[1..arg.len() - 1];
    let mut out = Vec::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        match inner[i] {
            b'\\' => match inner.get(i + 1)? {
                b'\\' => {
                    out.push(b'\\');
                    i += 2;
                }
                b'"' => {
                    out.push(b'"');
                    i += 2;
                }
                b'x' => {
                    let hex = std::str::from_utf8(inner.get(i + 2..i + 4)?).ok()?;
                    out.push(u8::from_str_radix(hex, 16).ok()?);
                    i += 4;
                }
                _ => return None,
            },
            b'"' => return None,
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(OsString::from_vec(out))
}

fn looks_quoted(s: &str) -> bool {
    s.len() >= 2 && s.starts_with('"') && s.ends_with('"')
}

fn quote(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 8);
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_paths_render_as_themselves_and_parse_as_written() {
        for p in [
            "a.txt",
            "dir/caf\u{e9}",
            "\u{fffd}",
            "\"",
            "a\"b",
            "back\\slash",
        ] {
            assert_eq!(render(OsStr::new(p)), p);
            assert_eq!(parse(p), None, "{p}");
        }
    }

    #[test]
    fn every_byte_string_round_trips() {
        let cases: [&[u8]; 7] = [
            b"caf\xe9.txt",
            b"d\xff/inner",
            b"\"q\"",
            b"\"\"",
            b"\"\\x41\"",
            b"mixed \xc3\xa9 \xc3 \\ \" \x80",
            b"\xf0\x9f\x98",
        ];
        for bytes in cases {
            let text = render(OsStr::from_bytes(bytes));
            assert_eq!(
                parse(&text).as_deref(),
                Some(OsStr::from_bytes(bytes)),
                "{text}"
            );
        }
        assert_eq!(render(OsStr::from_bytes(b"caf\xe9")), "\"caf\\xe9\"");
    }

    #[test]
    fn malformed_quoted_forms_are_taken_as_written() {
        for p in [
            "\"a\\q\"",
            "\"a\"b\"",
            "\"\\x4\"",
            "\"\\xzz\"",
            "\"trailing\\\"",
        ] {
            assert_eq!(parse(p), None, "{p}");
        }
    }
}
