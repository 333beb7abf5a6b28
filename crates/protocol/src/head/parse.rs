//! Reading a [`Head`] from raw bytes: [`Head::parse`] (the whole text checked, only the members
//! a head needs built) and [`Head::scan`] (top-level members read lazily, for a trusted peer's
//! messages of any size).
//!
//! The strict reader is a serde visitor over `serde_json`'s deserializer: a member the head
//! does not keep is skipped with [`IgnoredAny`] (its syntax checked, nothing allocated), and a
//! member it keeps is built alone. It agrees with [`Head::of`] of a full parse on every message
//! a full parse accepts (a property test pins it); what it does not check is the nesting depth
//! and the UTF-8 of skipped strings, which a full parse refuses.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::{Form, Head, Meta, Params, Shape};
use crate::{
    jsonrpc::VERSION,
    mcp::{
        META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION, META_SUBSCRIPTION_ID,
    },
};

/// Why raw bytes have no head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadError {
    /// Not one JSON value (the text says where).
    Syntax(String),
    /// A JSON array: a batch, which MCP does not have.
    Batch,
    /// A JSON value that is neither an object nor an array.
    NotObject,
}

impl fmt::Display for HeadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax(e) => write!(f, "parse error: {e}"),
            Self::Batch => f.write_str("JSON-RPC batches are not supported"),
            Self::NotObject => f.write_str("a JSON-RPC message must be an object"),
        }
    }
}

impl std::error::Error for HeadError {}

/// Members of `params` to capture besides the head, as paths of object keys from `params`
/// (`["arguments", "session_id"]`); the result has one slot per path.
pub type Captures<'p> = &'p [&'p [&'p str]];

impl Head {
    /// Reads the head of `bytes`, one JSON object (surrounding whitespace allowed), without
    /// building the members a head does not keep (module docs of [`crate::head`]).
    ///
    /// # Errors
    /// [`HeadError::Syntax`] when `bytes` are not one JSON value; [`HeadError::Batch`] for an
    /// array; [`HeadError::NotObject`] for another value.
    pub fn parse(bytes: &[u8]) -> Result<Self, HeadError> {
        Self::parse_capturing(bytes, &[]).map(|(head, _)| head)
    }

    /// [`Head::parse`], also capturing the `params` members at `paths` (each a path of object
    /// keys from `params`; a path through a member that is not an object, or that is absent,
    /// captures `None`). A path starting at `_meta` captures nothing: read it through
    /// [`Head::meta`]. The one pass over the bytes reads both.
    ///
    /// # Errors
    /// As [`Head::parse`].
    pub fn parse_capturing(
        bytes: &[u8],
        paths: Captures<'_>,
    ) -> Result<(Self, Vec<Option<Value>>), HeadError> {
        #[cfg(feature = "count-reads")]
        super::count::read();
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let out = de
            .deserialize_any(MessageVisitor { paths })
            .map_err(|e| HeadError::Syntax(e.to_string()))?;
        de.end().map_err(|e| HeadError::Syntax(e.to_string()))?;
        match out.0.form {
            Form::Object => Ok(out),
            Form::Batch => Err(HeadError::Batch),
            Form::Other => Err(HeadError::NotObject),
        }
    }

    /// Reads the head of `bytes` lazily (sonic-rs): the top-level members are iterated, the ones
    /// a head keeps are read, the others skipped by their brackets without being parsed (an
    /// answer of megabytes costs a scan, not a parse). What could not be read is left out: a
    /// text that is not an object gives an empty head, one that breaks off gives what came
    /// before. For the messages of a trusted peer (the supervisor's worker), never a client's.
    pub fn scan(bytes: &[u8]) -> Self {
        #[cfg(feature = "count-reads")]
        super::count::read();
        let mut head = Self::default();
        for pair in sonic_rs::to_object_iter(bytes) {
            let Ok((key, value)) = pair else { break };
            let raw = value.as_raw_str();
            let mut de = serde_json::Deserializer::from_str(raw);
            let member = MemberSeed {
                key: &key,
                paths: &[],
            };
            match member.deserialize(&mut de) {
                Ok(m) => head.apply(m, &mut Vec::new()),
                Err(_) => break,
            }
        }
        head
    }

    /// Stores one member read from bytes.
    fn apply(&mut self, member: Member, captured: &mut Vec<Option<Value>>) {
        match member {
            Member::Jsonrpc(ok) => self.jsonrpc = ok,
            Member::Method(m) => {
                self.method_member = true;
                self.method = m;
            }
            Member::Id(id) => self.id = Some(id),
            Member::Result => self.result = true,
            Member::Error(code) => {
                self.error = true;
                self.error_code = code;
            }
            Member::Params(pc) => {
                let (p, c) = *pc;
                self.params = p;
                *captured = c;
            }
            Member::Other => {}
        }
    }
}

/// One top-level member, read.
enum Member {
    Jsonrpc(bool),
    Method(Option<String>),
    Id(Value),
    Result,
    Error(Option<i64>),
    Params(Box<(Params, Vec<Option<Value>>)>),
    Other,
}

/// Reads the value of top-level member `key`.
struct MemberSeed<'a> {
    key: &'a str,
    paths: Captures<'a>,
}

impl<'de> DeserializeSeed<'de> for MemberSeed<'_> {
    type Value = Member;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Member, D::Error> {
        Ok(match self.key {
            "jsonrpc" => Member::Jsonrpc(d.deserialize_any(IsStr(VERSION))?),
            "method" => Member::Method(d.deserialize_any(StrOrSkip)?),
            "id" => Member::Id(<Value as serde::Deserialize>::deserialize(d)?),
            "result" => {
                d.deserialize_ignored_any(IgnoredAny)?;
                Member::Result
            }
            "error" => Member::Error(d.deserialize_any(ErrorCode)?),
            "params" => {
                let pc = d.deserialize_any(ParamsVisitor { paths: self.paths })?;
                Member::Params(Box::new(pc))
            }
            _ => {
                d.deserialize_ignored_any(IgnoredAny)?;
                Member::Other
            }
        })
    }
}

/// The whole message: an object read member by member; an array or another value is consumed
/// and reported by its form.
struct MessageVisitor<'p> {
    paths: Captures<'p>,
}

impl<'de> Visitor<'de> for MessageVisitor<'_> {
    type Value = (Head, Vec<Option<Value>>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut head = Head::default();
        let mut captured = vec![None; self.paths.len()];
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let member = map.next_value_seed(MemberSeed {
                key: key.as_str(),
                paths: self.paths,
            })?;
            head.apply(member, &mut captured);
        }
        captured.resize(self.paths.len(), None);
        Ok((head, captured))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok((
            Head {
                form: Form::Batch,
                ..Head::default()
            },
            Vec::new(),
        ))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(not_object())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(not_object())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(not_object())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(not_object())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(not_object())
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(not_object())
    }
}

fn not_object() -> (Head, Vec<Option<Value>>) {
    (
        Head {
            form: Form::Other,
            ..Head::default()
        },
        Vec::new(),
    )
}

/// An object key, borrowed from the input when it has no escapes.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Self::Borrowed(s) => s,
            Self::Owned(s) => s,
        }
    }
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key<'de>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
        Ok(Key::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
        Ok(Key::Owned(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
        Ok(Key::Owned(v))
    }
}

/// Consumes a map's or a sequence's contents.
fn skip_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Implements the visitor methods of a value whose non-matching JSON types all give `$other`
/// (maps and sequences consumed).
macro_rules! otherwise {
    ($this:ident, $other:expr) => {
        fn visit_bool<E: de::Error>($this, _: bool) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_i64<E: de::Error>($this, _: i64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_u64<E: de::Error>($this, _: u64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_f64<E: de::Error>($this, _: f64) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_unit<E: de::Error>($this) -> Result<Self::Value, E> {
            Ok($other)
        }
        fn visit_seq<A: SeqAccess<'de>>($this, seq: A) -> Result<Self::Value, A::Error> {
            skip_seq(seq)?;
            Ok($other)
        }
    };
}

/// Whether a value is the string `.0`.
struct IsStr(&'static str);

impl<'de> Visitor<'de> for IsStr {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        Ok(v == self.0)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<bool, A::Error> {
        skip_map(map)?;
        Ok(false)
    }

    otherwise!(self, false);
}

/// A string value, or `None` for any other (consumed).
struct StrOrSkip;

impl<'de> Visitor<'de> for StrOrSkip {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(v))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        skip_map(map)?;
        Ok(None)
    }

    otherwise!(self, None);
}

/// The JSON type of a value, its contents consumed.
struct ShapeOf;

impl<'de> Visitor<'de> for ShapeOf {
    type Value = Shape;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Shape, E> {
        Ok(Shape::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Shape, A::Error> {
        skip_map(map)?;
        Ok(Shape::Object)
    }

    otherwise!(self, Shape::Other);
}

/// The integer `code` of an `error` member (`None` when it has none, or is not an object).
struct ErrorCode;

impl<'de> Visitor<'de> for ErrorCode {
    type Value = Option<i64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut code = None;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if key.as_str() == "code" {
                code = map.next_value::<Value>()?.as_i64();
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(code)
    }

    otherwise!(self, None);
}

/// `params`: what a head keeps of it, and the captures.
struct ParamsVisitor<'p> {
    paths: Captures<'p>,
}

impl<'de> Visitor<'de> for ParamsVisitor<'_> {
    type Value = (Params, Vec<Option<Value>>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(self.other())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut params = Params {
            shape: Some(Shape::Object),
            ..Params::default()
        };
        let mut captured = vec![None; self.paths.len()];
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let key = key.as_str();
            if key == "_meta" {
                params.meta = map.next_value_seed(MetaSeed)?;
                continue;
            }
            let mine: Vec<usize> = (0..self.paths.len())
                .filter(|&i| self.paths[i].first() == Some(&key))
                .collect();
            for &i in &mine {
                captured[i] = None;
            }
            if Params::KEYS.contains(&key) || mine.iter().any(|&i| self.paths[i].len() == 1) {
                // Built whole: a member the head keeps, or one captured whole.
                let v: Value = map.next_value()?;
                params.take(key, &v);
                for &i in &mine {
                    captured[i] = walk(&v, &self.paths[i][1..]).cloned();
                }
            } else if !mine.is_empty() {
                let below: Vec<(&[&str], usize)> =
                    mine.iter().map(|&i| (&self.paths[i][1..], i)).collect();
                let found = map.next_value_seed(CaptureSeed { paths: &below })?;
                for (i, v) in found {
                    captured[i] = v;
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok((params, captured))
    }

    otherwise!(self, self.other());
}

impl ParamsVisitor<'_> {
    fn other(&self) -> (Params, Vec<Option<Value>>) {
        (
            Params {
                shape: Some(Shape::Other),
                ..Params::default()
            },
            vec![None; self.paths.len()],
        )
    }
}

impl<'de> DeserializeSeed<'de> for ParamsVisitor<'_> {
    type Value = (Params, Vec<Option<Value>>);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// The value at `path` (object keys) below `v`.
fn walk<'v>(v: &'v Value, path: &[&str]) -> Option<&'v Value> {
    path.iter().try_fold(v, |v, k| v.as_object()?.get(*k))
}

/// Captures below one member: each path (non-empty, relative to this value) with its slot.
struct CaptureSeed<'a, 'p> {
    paths: &'a [(&'p [&'p str], usize)],
}

impl<'de> DeserializeSeed<'de> for CaptureSeed<'_, '_> {
    type Value = Vec<(usize, Option<Value>)>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CaptureSeed<'_, '_> {
    type Value = Vec<(usize, Option<Value>)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(self.none())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // By position in `self.paths` until the end, then by the caller's slots.
        let mut out: Vec<Option<Value>> = vec![None; self.paths.len()];
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let key = key.as_str();
            let mine: Vec<usize> = (0..self.paths.len())
                .filter(|&j| self.paths[j].0.first() == Some(&key))
                .collect();
            for &j in &mine {
                out[j] = None;
            }
            if mine.iter().any(|&j| self.paths[j].0.len() == 1) {
                let v: Value = map.next_value()?;
                for &j in &mine {
                    out[j] = walk(&v, &self.paths[j].0[1..]).cloned();
                }
            } else if !mine.is_empty() {
                let below: Vec<(&[&str], usize)> =
                    mine.iter().map(|&j| (&self.paths[j].0[1..], j)).collect();
                for (j, v) in map.next_value_seed(CaptureSeed { paths: &below })? {
                    out[j] = v;
                }
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(out
            .into_iter()
            .enumerate()
            .map(|(j, v)| (self.paths[j].1, v))
            .collect())
    }

    otherwise!(self, self.none());
}

impl CaptureSeed<'_, '_> {
    /// Nothing captured, in the caller's slots.
    fn none(&self) -> Vec<(usize, Option<Value>)> {
        self.paths.iter().map(|(_, slot)| (*slot, None)).collect()
    }
}

/// `params._meta`: the per-request fields, or nothing when it is not an object.
struct MetaSeed;

impl<'de> DeserializeSeed<'de> for MetaSeed {
    type Value = Meta;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Meta, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MetaSeed {
    type Value = Meta;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Meta, E> {
        Ok(Meta::default())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Meta, A::Error> {
        let mut meta = Meta {
            present: true,
            ..Meta::default()
        };
        while let Some(key) = map.next_key_seed(KeySeed)? {
            match key.as_str() {
                META_CLIENT_CAPABILITIES => {
                    meta.client_capabilities = Some(map.next_value_seed(ShapeSeed)?);
                }
                META_CLIENT_INFO => meta.client_info = Some(map.next_value_seed(ShapeSeed)?),
                k @ (META_PROTOCOL_VERSION | META_SUBSCRIPTION_ID | "progressToken") => {
                    let v: Value = map.next_value()?;
                    meta.take(k, &v);
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(meta)
    }

    otherwise!(self, Meta::default());
}

struct ShapeSeed;

impl<'de> DeserializeSeed<'de> for ShapeSeed {
    type Value = Shape;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Shape, D::Error> {
        d.deserialize_any(ShapeOf)
    }
}
