//! Redaction of job output: every resource a job uses is replaced by `[resource:ALIAS]`
//! wherever its exact bytes, their base64 (standard and URL-safe, padded or not, and wrapped
//! at 64 or 76 columns as `openssl base64` and `base64` print it) or hex (lower- and
//! upper-case, and wrapped at 60 columns as `xxd -p` prints it) forms, or its paths appear.
//! Each form is also matched with one trailing newline removed, since a secret file usually
//! ends in one that a program's output does not repeat.
//!
//! One pass over the text: every occurrence of every form is found, and the leftmost, then
//! longest, non-overlapping ones are replaced. [`Redactor::head`] and [`Redactor::tail`] cut
//! in the *original* text's coordinates, so a form that starts inside the part kept is
//! replaced whole even where it runs past the cut, and no part of one is ever shown.

use base64::Engine as _;

/// Forms shorter than this are not searched for (a resource must be at least this long:
/// [`crate::tools::resources::engine::RESOURCE_MIN_BYTES`]).
const MIN_NEEDLE: usize = 4;

/// The needles of a job's resources.
#[derive(Debug, Default, Clone)]
pub(crate) struct Redactor {
    needles: Vec<(Vec<u8>, Vec<u8>)>,
}

/// `s` with a line break after every `width` characters (none at the end).
fn wrapped(s: &str, width: usize) -> Option<Vec<u8>> {
    if s.len() <= width {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() + s.len() / width);
    for (i, chunk) in s.as_bytes().chunks(width).enumerate() {
        if i > 0 {
            out.push(b'\n');
        }
        out.extend_from_slice(chunk);
    }
    Some(out)
}

impl Redactor {
    /// Adds the resource `alias` with its `bytes` and the `paths` it is known by.
    pub(crate) fn add(&mut self, alias: &str, bytes: &[u8], paths: &[&[u8]]) {
        let token = format!("[resource:{alias}]").into_bytes();
        let mut forms: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let trimmed = trim_newline(bytes);
        // The exact bytes keep their line break in the output: `[resource:A]\n`.
        let mut with_break = token.clone();
        with_break.extend_from_slice(&bytes[trimmed.len()..]);
        forms.push((bytes.to_vec(), with_break));
        for value in [bytes, trimmed] {
            forms.push((value.to_vec(), token.clone()));
            for engine in [
                &base64::engine::general_purpose::STANDARD,
                &base64::engine::general_purpose::STANDARD_NO_PAD,
                &base64::engine::general_purpose::URL_SAFE,
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            ] {
                let b64 = engine.encode(value);
                for width in [64, 76] {
                    forms.extend(wrapped(&b64, width).map(|w| (w, token.clone())));
                }
                forms.push((b64.into_bytes(), token.clone()));
            }
            let hex = hex::encode(value);
            for h in [hex.to_ascii_uppercase(), hex] {
                forms.extend(wrapped(&h, 60).map(|w| (w, token.clone())));
                forms.push((h.into_bytes(), token.clone()));
            }
        }
        forms.extend(paths.iter().map(|p| (p.to_vec(), token.clone())));
        for (f, t) in forms {
            if f.len() >= MIN_NEEDLE && !self.needles.iter().any(|(n, _)| *n == f) {
                self.needles.push((f, t));
            }
        }
    }

    /// Whether no needle was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// The longest needle's length: an occurrence starting in the first `n` bytes of a text lies
    /// within its first `n + longest` bytes.
    pub(crate) fn longest(&self) -> usize {
        self.needles.iter().map(|(n, _)| n.len()).max().unwrap_or(0)
    }

    /// The occurrences to replace in `data`: `(start, end, token)`, leftmost then longest,
    /// not overlapping, in order.
    fn matches(&self, data: &[u8]) -> Vec<(usize, usize, &[u8])> {
        let mut all: Vec<(usize, usize, &[u8])> = Vec::new();
        for (needle, token) in &self.needles {
            for k in memchr::memmem::find_iter(data, needle) {
                all.push((k, k + needle.len(), token));
            }
        }
        all.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut out: Vec<(usize, usize, &[u8])> = Vec::new();
        for m in all {
            match out.last_mut() {
                Some(l) if m.0 < l.1 => {
                    // Overlapping forms (two resources sharing bytes) are replaced as one.
                    l.1 = l.1.max(m.1);
                }
                _ => out.push(m),
            }
        }
        out
    }

    /// The original bytes of `data` from `from` to `to`, every occurrence that starts in that
    /// range replaced whole (it may run past `to`), and none that starts before `from` shown
    /// in part.
    fn range(&self, data: &[u8], from: usize, to: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(to.saturating_sub(from));
        let mut at = from;
        for (start, end, token) in self.matches(data) {
            if end <= from {
                continue;
            }
            if start >= to {
                break;
            }
            if start < from {
                // It began before the part kept: none of it is shown.
                at = at.max(end);
                continue;
            }
            if start > at {
                out.extend_from_slice(&data[at..start]);
            }
            out.extend_from_slice(token);
            at = end;
        }
        if at < to {
            out.extend_from_slice(&data[at..to]);
        }
        out
    }

    /// `data` with every occurrence replaced.
    pub(crate) fn redact(&self, data: &[u8]) -> Vec<u8> {
        self.range(data, 0, data.len())
    }

    /// The first `keep` bytes of `data` (which holds [`Redactor::longest`] bytes more when
    /// there are), redacted.
    pub(crate) fn head(&self, data: &[u8], keep: usize) -> Vec<u8> {
        self.range(data, 0, keep.min(data.len()))
    }

    /// The last `keep` bytes of `data` (which holds [`Redactor::longest`] bytes more before
    /// them when there are), redacted.
    pub(crate) fn tail(&self, data: &[u8], keep: usize) -> Vec<u8> {
        self.range(data, data.len().saturating_sub(keep), data.len())
    }

    /// [`Redactor::redact`] of a string (lossy for the rare needle that splits a character).
    pub(crate) fn redact_str(&self, s: &str) -> String {
        if self.is_empty() {
            return s.to_owned();
        }
        String::from_utf8_lossy(&self.redact(s.as_bytes())).into_owned()
    }
}

fn trim_newline(b: &[u8]) -> &[u8] {
    let b = b.strip_suffix(b"\n").unwrap_or(b);
    b.strip_suffix(b"\r").unwrap_or(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_a_secret_is_replaced() {
        let mut r = Redactor::default();
        r.add("tok", b"hunter2-secret\n", &[b"/home/u/.tok"]);
        let b64 = base64::engine::general_purpose::STANDARD.encode(b"hunter2-secret");
        let hex = hex::encode(b"hunter2-secret\n");
        let text = format!("a hunter2-secret b {b64} c {hex} d /home/u/.tok e hunter2-secret\nf");
        let out = String::from_utf8(r.redact(text.as_bytes())).unwrap();
        assert_eq!(
            out,
            "a [resource:tok] b [resource:tok] c [resource:tok] d [resource:tok] e [resource:tok]\nf"
        );
    }

    #[test]
    fn wrapped_base64_and_hex_are_replaced() {
        let secret = "L0ngS3cr3t".repeat(10) + "\n";
        let mut r = Redactor::default();
        r.add("long", secret.as_bytes(), &[]);
        let b64 = base64::engine::general_purpose::STANDARD.encode(secret.as_bytes());
        let hex = hex::encode(secret.as_bytes());
        for text in [
            wrapped(&b64, 76).unwrap(),
            wrapped(&b64, 64).unwrap(),
            wrapped(&hex, 60).unwrap(),
        ] {
            let out = r.redact(&text);
            assert_eq!(
                out,
                b"[resource:long]",
                "{}",
                String::from_utf8_lossy(&text)
            );
        }
    }

    #[test]
    fn a_short_secret_redacts_nothing_shorter_and_text_without_one_is_unchanged() {
        let mut r = Redactor::default();
        r.add("x", b"abc\n", &[]);
        assert_eq!(
            r.redact(b"banana abc"),
            b"banana abc",
            "3 bytes are below the minimum"
        );
        let mut r = Redactor::default();
        r.add("x", b"secret", &[]);
        assert_eq!(r.redact(b"nothing here"), b"nothing here");
        assert_eq!(r.redact(b"secretsecret"), b"[resource:x][resource:x]");
        let mut r = Redactor::default();
        r.add("selfref", b"resource", &[]);
        assert_eq!(r.redact(b"a resource"), b"a [resource:selfref]", "one pass");
    }

    /// Two resources that overlap are both replaced whole: no part of the second is left.
    #[test]
    fn overlapping_resources_are_replaced_whole() {
        let a = b"XXXXfirstpart-ABCDEFGHshared-0123456789";
        let b = b"shared-0123456789lastpart-QRSTUVWXYZYY";
        let mut r = Redactor::default();
        r.add("a", a, &[]);
        r.add("b", b, &[]);
        let mut text = a.to_vec();
        text.extend_from_slice(&b[17..]);
        let out = String::from_utf8(r.redact(&text)).unwrap();
        assert!(!out.contains("lastpart"), "{out}");
    }

    /// No part of a secret repeated back to back survives a cut into head and tail.
    #[test]
    fn no_part_of_a_repeated_secret_survives_a_head_and_tail_cut() {
        let secret = b"NoTrailingNewlineSecret42";
        let mut r = Redactor::default();
        r.add("nonl", secret, &[]);
        let data: Vec<u8> = secret.repeat(4500);
        for keep in [1000, 1001, 1013, 1024, 32 * 1024] {
            let margin = r.longest();
            let head = r.head(&data[..keep + margin], keep);
            let tail = r.tail(&data[data.len() - keep - margin..], keep);
            for part in [&head, &tail] {
                let text = String::from_utf8_lossy(part);
                let stripped = text.replace("[resource:nonl]", "");
                for w in secret.windows(6) {
                    assert!(
                        !stripped.as_bytes().windows(6).any(|x| x == w),
                        "keep {keep}: a piece of the secret survived: {stripped:?}"
                    );
                }
            }
        }
    }
}
