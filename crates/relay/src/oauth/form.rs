//! Strict `application/x-www-form-urlencoded` parsing for the OAuth endpoints.
//!
//! OAuth parameters "MUST NOT be included more than once" and "parameters sent without a value
//! MUST be treated as if they were omitted" (RFC 6749 §3.1, §3.2); values are UTF-8 (RFC 6749
//! Appendix B). So a duplicated name, a value that is not UTF-8 after percent-decoding, or a value
//! longer than the caller's bound is an error naming the parameter, never a guess.

use std::collections::BTreeMap;

use percent_encoding::percent_decode;

/// A parsed form: each name at most once, empty values dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Form {
    values: BTreeMap<String, String>,
}

/// Why a form was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormError {
    /// A parameter appears twice (RFC 6749 §3.1).
    #[error("parameter {0:?} appears more than once")]
    Duplicate(String),
    /// A name or value is not UTF-8 once percent-decoded.
    #[error("parameter {0:?} is not UTF-8")]
    NotUtf8(String),
    /// A value is longer than allowed.
    #[error("parameter {0:?} is longer than {1} bytes")]
    TooLong(String, usize),
}

fn decode(raw: &[u8]) -> Result<String, Vec<u8>> {
    let plus: Vec<u8> = raw
        .iter()
        .map(|&b| if b == b'+' { b' ' } else { b })
        .collect();
    let bytes: Vec<u8> = percent_decode(&plus).collect();
    String::from_utf8(bytes).map_err(|e| e.into_bytes())
}

impl Form {
    /// Parses `body` (or a query string). Each value may be at most `max_value` bytes, except the
    /// names listed in `long` which may be at most `long_max` bytes.
    ///
    /// # Errors
    /// [`FormError`] for the first offending parameter.
    pub fn parse(
        body: &[u8],
        max_value: usize,
        long: &[&str],
        long_max: usize,
    ) -> Result<Self, FormError> {
        let mut values = BTreeMap::new();
        for pair in body.split(|&b| b == b'&').filter(|p| !p.is_empty()) {
            let (name, value) = match pair.iter().position(|&b| b == b'=') {
                Some(i) => (&pair[..i], &pair[i + 1..]),
                None => (pair, &b""[..]),
            };
            let name = decode(name)
                .map_err(|b| FormError::NotUtf8(String::from_utf8_lossy(&b).into_owned()))?;
            let value = decode(value).map_err(|_| FormError::NotUtf8(name.clone()))?;
            let cap = if long.contains(&name.as_str()) {
                long_max
            } else {
                max_value
            };
            if value.len() > cap {
                return Err(FormError::TooLong(name, cap));
            }
            if values.contains_key(&name) {
                return Err(FormError::Duplicate(name));
            }
            // Dropped only after the duplicate check: `a=&a=x` is still a duplicate.
            values.insert(name, value);
        }
        values.retain(|_, v| !v.is_empty());
        Ok(Self { values })
    }

    /// The value of `name`, if present and not empty.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// Whether `name` is present.
    pub fn has(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &[u8]) -> Result<Form, FormError> {
        Form::parse(s, 16, &["long"], 64)
    }

    #[test]
    fn values_are_decoded_and_empty_ones_dropped() {
        let f = parse(b"a=x+y%21&b=&c&d=%C3%A9").unwrap();
        assert_eq!(f.get("a"), Some("x y!"));
        assert_eq!(f.get("b"), None);
        assert!(!f.has("c"));
        assert_eq!(f.get("d"), Some("é"));
    }

    #[test]
    fn duplicates_non_utf8_and_long_values_are_refused_by_name() {
        assert_eq!(parse(b"a=1&a=2"), Err(FormError::Duplicate("a".into())));
        assert_eq!(parse(b"a=&a=2"), Err(FormError::Duplicate("a".into())));
        assert_eq!(parse(b"a=%FF"), Err(FormError::NotUtf8("a".into())));
        assert!(matches!(parse(b"%FF=1"), Err(FormError::NotUtf8(_))));
        assert_eq!(
            parse(b"a=0123456789abcdefX"),
            Err(FormError::TooLong("a".into(), 16))
        );
        assert!(parse(b"long=0123456789abcdefX").is_ok());
    }
}
