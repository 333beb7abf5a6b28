//! Redaction of job output: every resource a job uses is replaced by `[resource:ALIAS]`
//! wherever its exact bytes, their base64 (standard and URL-safe, padded or not) or hex
//! (lower- and upper-case) forms, or its paths appear. Each form is also matched with one
//! trailing newline removed, since a secret file usually ends in one that a program's output
//! does not repeat.

use base64::Engine as _;

/// Forms shorter than this are not searched for: a one- or two-byte "secret" would redact
/// ordinary text without protecting anything.
const MIN_NEEDLE: usize = 3;

/// The needles of a job's resources, longest first.
#[derive(Debug, Default, Clone)]
pub(crate) struct Redactor {
    needles: Vec<(Vec<u8>, Vec<u8>)>,
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
                forms.push((engine.encode(value).into_bytes(), token.clone()));
            }
            let hex = hex::encode(value);
            forms.push((hex.to_ascii_uppercase().into_bytes(), token.clone()));
            forms.push((hex.into_bytes(), token.clone()));
        }
        forms.extend(paths.iter().map(|p| (p.to_vec(), token.clone())));
        for (f, t) in forms {
            if f.len() >= MIN_NEEDLE && !self.needles.iter().any(|(n, _)| *n == f) {
                self.needles.push((f, t));
            }
        }
        self.needles
            .sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    }

    /// Whether no needle was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// The longest needle's length: an occurrence starting in the first `n` bytes of a text lies
    /// within its first `n + longest` bytes.
    pub(crate) fn longest(&self) -> usize {
        self.needles.first().map_or(0, |(n, _)| n.len())
    }

    /// `data` with every needle replaced, longest first.
    pub(crate) fn redact(&self, data: &[u8]) -> Vec<u8> {
        let mut out = data.to_vec();
        for (needle, token) in &self.needles {
            if memchr::memmem::find(&out, needle).is_none() {
                continue;
            }
            let mut next = Vec::with_capacity(out.len());
            let mut at = 0;
            for k in memchr::memmem::find_iter(&out, needle) {
                if k < at {
                    continue;
                }
                next.extend_from_slice(&out[at..k]);
                next.extend_from_slice(token);
                at = k + needle.len();
            }
            next.extend_from_slice(&out[at..]);
            out = next;
        }
        out
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
    fn a_tiny_secret_redacts_nothing_and_text_without_one_is_unchanged() {
        let mut r = Redactor::default();
        r.add("x", b"a\n", &[]);
        assert_eq!(r.redact(b"banana"), b"banana");
        let mut r = Redactor::default();
        r.add("x", b"secret", &[]);
        assert_eq!(r.redact(b"nothing here"), b"nothing here");
        assert_eq!(r.redact(b"secretsecret"), b"[resource:x][resource:x]");
    }
}
