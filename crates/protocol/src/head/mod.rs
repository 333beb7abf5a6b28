//! Message heads and the MCP era, sans I/O: what every transport reads of a JSON-RPC message
//! before it decides where the message goes, read in one place.
//!
//! A [`Head`] is read once per message and process hop, then passed along instead of probing
//! the message again:
//! - [`Head::of`] reads a message already parsed into a [`Value`] (the relay's POST body, a link
//!   frame's `message`, a line the daemon read from a child): a few map lookups, nothing parsed;
//! - [`Head::parse`] reads raw bytes without building a [`Value`] tree: the members a head
//!   needs are built, every other member is skipped (its syntax checked, nothing kept); the
//!   whole text must be one valid JSON object, as for a full parse;
//! - [`Head::scan`] reads the top-level members of raw bytes lazily (sonic-rs): a member the
//!   head does not need (a `result` of megabytes) is skipped by its brackets, not parsed. For
//!   messages of a trusted peer only (the supervisor's own worker): a damaged member after the
//!   ones read is not noticed.
//!
//! Rules of a head (JSON-RPC 2.0 § 4–5; MCP Basic § Messages):
//! - A message is one JSON object with `"jsonrpc": "2.0"`; a JSON array is a batch, which MCP
//!   does not have (removed in 2025-06-18).
//! - Its [`Kind`] follows its members: a string `method` and a non-null `id` make a request, a
//!   string `method` alone a notification, a non-null `id` without one a response — an error
//!   response when it has an `error` member.
//! - A duplicated member counts once, the last one, as in a full parse (`serde_json`).
//! - What a head keeps of `params`: `name`, `uri`, `taskId` (what `Mcp-Name` mirrors),
//!   `requestId` and `reason` (`notifications/cancelled`), `progressToken`
//!   (`notifications/progress`), `protocolVersion` (`initialize`), and
//!   of `params._meta` the per-request fields of MCP 2026-07-28 ([`Meta`]) and the progress
//!   token. Only when `params` (and `_meta`) is an object, as a lookup in the object would.
//!
//! One file per concern: this one is the head and how it is read (`parse` the byte readers);
//! [`era`] decides the era of a message; [`meta`] validates the per-request `_meta` and the
//! headers that mirror a request ([`mirror`]); [`discover`] derives a `server/discover` result
//! from an `initialize` result; [`result`] completes results of the 2026-07-28 era; [`peek`]
//! reads one member of a parsed message, borrowed, as a head would; [`rewrite`] changes what a
//! message names (its progress token, its per-request `_meta`) on its way between peers, as
//! [`set_id`] changes its id.

pub mod discover;
pub mod era;
pub mod meta;
pub mod mirror;
mod parse;
pub mod peek;
pub mod result;
pub mod rewrite;

#[cfg(feature = "count-reads")]
pub mod count;

use std::fmt;

use serde_json::Value;

use crate::{
    jsonrpc::{RequestId, VERSION},
    mcp::{
        META_CLIENT_CAPABILITIES, META_CLIENT_INFO, META_PROTOCOL_VERSION, META_SUBSCRIPTION_ID,
    },
};

pub use era::{Carrier, Era};
pub use meta::Refusal;
pub use parse::{Captures, HeadError};

/// What a message is, by its members (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string `method` and a non-null `id`.
    Request,
    /// A string `method`, no `id` (or a null one).
    Notification,
    /// A non-null `id`, no string `method`, no `error` member.
    Response,
    /// A non-null `id`, no string `method`, an `error` member.
    Error,
    /// None of these (no string `method`, no non-null `id`).
    Neither,
}

/// The JSON type of a member whose content a head does not keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A JSON object.
    Object,
    /// Anything else (`null` included).
    Other,
}

impl Shape {
    fn of(v: &Value) -> Self {
        if v.is_object() {
            Self::Object
        } else {
            Self::Other
        }
    }
}

/// The outermost JSON value of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Form {
    /// An object: a message.
    #[default]
    Object,
    /// An array: a batch.
    Batch,
    /// Any other value.
    Other,
}

/// The per-request fields of a message's `params._meta` (MCP 2026-07-28 Basic § `_meta`), as
/// they came; all absent when `_meta` is not an object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meta {
    present: bool,
    protocol_version: Option<Value>,
    client_capabilities: Option<Shape>,
    client_info: Option<Shape>,
    progress_token: Option<Value>,
    subscription_id: Option<Value>,
}

impl Meta {
    /// Whether `params._meta` is an object.
    pub fn present(&self) -> bool {
        self.present
    }

    /// `io.modelcontextprotocol/protocolVersion`, of any JSON type.
    pub fn protocol_version(&self) -> Option<&Value> {
        self.protocol_version.as_ref()
    }

    /// The type of `io.modelcontextprotocol/clientCapabilities`, when present.
    pub fn client_capabilities(&self) -> Option<Shape> {
        self.client_capabilities
    }

    /// The type of `io.modelcontextprotocol/clientInfo`, when present.
    pub fn client_info(&self) -> Option<Shape> {
        self.client_info
    }

    /// `progressToken` (MCP Basic › Utilities › Progress), of any JSON type.
    pub fn progress_token(&self) -> Option<&Value> {
        self.progress_token.as_ref()
    }

    /// `io.modelcontextprotocol/subscriptionId` (Basic › Patterns › Subscriptions).
    pub fn subscription_id(&self) -> Option<&Value> {
        self.subscription_id.as_ref()
    }

    /// Reads one member of `_meta`; other keys are ignored.
    fn take(&mut self, key: &str, v: &Value) {
        match key {
            META_PROTOCOL_VERSION => self.protocol_version = Some(v.clone()),
            META_CLIENT_CAPABILITIES => self.client_capabilities = Some(Shape::of(v)),
            META_CLIENT_INFO => self.client_info = Some(Shape::of(v)),
            META_SUBSCRIPTION_ID => self.subscription_id = Some(v.clone()),
            "progressToken" => self.progress_token = Some(v.clone()),
            _ => {}
        }
    }
}

/// What a head keeps of `params` (module docs).
#[derive(Debug, Clone, Default, PartialEq)]
struct Params {
    /// The type of `params`, when present.
    shape: Option<Shape>,
    name: Option<Value>,
    uri: Option<Value>,
    task_id: Option<Value>,
    request_id: Option<Value>,
    progress_token: Option<Value>,
    reason: Option<String>,
    protocol_version: Option<String>,
    meta: Meta,
}

impl Params {
    /// The keys of `params` a head reads.
    const KEYS: [&'static str; 8] = [
        "name",
        "uri",
        "taskId",
        "requestId",
        "progressToken",
        "reason",
        "protocolVersion",
        "_meta",
    ];

    /// Reads one member of an object `params` (not `_meta`); other keys are ignored.
    fn take(&mut self, key: &str, v: &Value) {
        match key {
            "name" => self.name = Some(v.clone()),
            "uri" => self.uri = Some(v.clone()),
            "taskId" => self.task_id = Some(v.clone()),
            "requestId" => self.request_id = Some(v.clone()),
            "progressToken" => self.progress_token = Some(v.clone()),
            "reason" => self.reason = v.as_str().map(str::to_owned),
            "protocolVersion" => self.protocol_version = v.as_str().map(str::to_owned),
            _ => {}
        }
    }
}

/// What a transport reads of one JSON-RPC message before deciding where it goes (module
/// docs): its kind, method and id, whether it carries a result or an error (and the error's
/// code), the `params` members that routing and the era rules need, and its `_meta`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Head {
    form: Form,
    jsonrpc: bool,
    /// A `method` member of any type.
    method_member: bool,
    method: Option<String>,
    /// The `id` member as it came, `null` included.
    id: Option<Value>,
    result: bool,
    error: bool,
    error_code: Option<i64>,
    params: Params,
}

impl Head {
    /// The head of `message`, a parsed JSON value (any value: an array is a batch, another
    /// non-object is no message). Nothing is parsed; the members read are cloned (the id, the
    /// method, the few `params` values of the module docs).
    pub fn of(message: &Value) -> Self {
        #[cfg(feature = "count-reads")]
        count::read();
        let obj = match message {
            Value::Object(o) => o,
            Value::Array(_) => {
                return Self {
                    form: Form::Batch,
                    ..Self::default()
                };
            }
            _ => {
                return Self {
                    form: Form::Other,
                    ..Self::default()
                };
            }
        };
        let mut head = Self::default();
        for (k, v) in obj {
            head.take(k, v);
        }
        head
    }

    /// Reads one top-level member (not `params`'s contents, which `take` reads from a value).
    fn take(&mut self, key: &str, v: &Value) {
        match key {
            "jsonrpc" => self.jsonrpc = v.as_str() == Some(VERSION),
            "method" => {
                self.method_member = true;
                self.method = v.as_str().map(str::to_owned);
            }
            "id" => self.id = Some(v.clone()),
            "result" => self.result = true,
            "error" => {
                self.error = true;
                self.error_code = v.get("code").and_then(Value::as_i64);
            }
            "params" => self.params = Params::of(v),
            _ => {}
        }
    }

    /// Its kind (module docs).
    pub fn kind(&self) -> Kind {
        match (&self.method, self.id()) {
            (Some(_), Some(_)) => Kind::Request,
            (Some(_), None) => Kind::Notification,
            (None, Some(_)) if self.error => Kind::Error,
            (None, Some(_)) => Kind::Response,
            (None, None) => Kind::Neither,
        }
    }

    /// Whether it is a request ([`Kind::Request`]).
    pub fn is_request(&self) -> bool {
        self.kind() == Kind::Request
    }

    /// Whether it answers a request: no `method` member, and a `result` or an `error` (its id
    /// may be null: an error answering a message that could not be read).
    pub fn is_response(&self) -> bool {
        !self.method_member && (self.result || self.error)
    }

    /// Whether it has a `method` member, of any type (the envelope rules look at members, not
    /// at their types).
    pub fn has_method(&self) -> bool {
        self.method_member
    }

    /// Its method, when `method` is a string.
    pub fn method(&self) -> Option<&str> {
        self.method.as_deref()
    }

    /// Whether its method is `method`.
    pub fn is(&self, method: &str) -> bool {
        self.method.as_deref() == Some(method)
    }

    /// Its id, when present and not null.
    pub fn id(&self) -> Option<&Value> {
        self.id.as_ref().filter(|i| !i.is_null())
    }

    /// Its `id` member as it came, `null` included.
    pub fn id_member(&self) -> Option<&Value> {
        self.id.as_ref()
    }

    /// The id an answer to it names: its id as it came, or null without one.
    pub fn reply_id(&self) -> Value {
        self.id.clone().unwrap_or(Value::Null)
    }

    /// Its id as a [`RequestId`], when present and not null.
    pub fn request_id(&self) -> Option<RequestId> {
        self.id().cloned().map(RequestId::new)
    }

    /// Whether it has a `result` member.
    pub fn has_result(&self) -> bool {
        self.result
    }

    /// Whether it has an `error` member.
    pub fn has_error(&self) -> bool {
        self.error
    }

    /// The `code` of its `error`, when it is an integer.
    pub fn error_code(&self) -> Option<i64> {
        self.error_code
    }

    /// The type of `params`, when present.
    pub fn params_shape(&self) -> Option<Shape> {
        self.params.shape
    }

    /// `params._meta` (MCP 2026-07-28 Basic § `_meta`).
    pub fn meta(&self) -> &Meta {
        &self.params.meta
    }

    /// The progress token of `params._meta` (MCP Basic › Utilities › Progress).
    pub fn progress_token(&self) -> Option<&Value> {
        self.params.meta.progress_token()
    }

    /// `params.name` (`tools/call`, `prompts/get`).
    pub fn name(&self) -> Option<&Value> {
        self.params.name.as_ref()
    }

    /// `params.uri` (`resources/read`).
    pub fn uri(&self) -> Option<&Value> {
        self.params.uri.as_ref()
    }

    /// `params.taskId` (`tasks/*`, SEP-2663).
    pub fn task_id(&self) -> Option<&Value> {
        self.params.task_id.as_ref()
    }

    /// The tool a `tools/call` names (`params.name`, a string).
    pub fn tool(&self) -> Option<&str> {
        if !self.is("tools/call") {
            return None;
        }
        self.name()?.as_str()
    }

    /// The request a `notifications/cancelled` cancels (`params.requestId`; MCP Basic ›
    /// Utilities › Cancellation).
    pub fn cancelled_request(&self) -> Option<&Value> {
        if !self.is("notifications/cancelled") {
            return None;
        }
        self.params.request_id.as_ref()
    }

    /// The token a `notifications/progress` reports on (`params.progressToken`; MCP Basic ›
    /// Utilities › Progress).
    pub fn progress_of(&self) -> Option<&Value> {
        if !self.is("notifications/progress") {
            return None;
        }
        self.params.progress_token.as_ref()
    }

    /// The `reason` of a `notifications/cancelled`, when a string.
    pub fn cancel_reason(&self) -> Option<&str> {
        self.params.reason.as_deref()
    }

    /// The `protocolVersion` an `initialize` asks for (`params.protocolVersion`, a string).
    pub fn asked_version(&self) -> Option<&str> {
        self.params.protocol_version.as_deref()
    }

    /// Checks its envelope (JSON-RPC 2.0 § 4; MCP Basic § Messages): an object, `"jsonrpc":
    /// "2.0"`, and for a message with a `method` and an `id` an id that is a string or an
    /// integer (MCP Basic § Requests: "MUST NOT be null").
    ///
    /// # Errors
    /// [`EnvelopeError`], checked in that order.
    pub fn check_envelope(&self) -> Result<(), EnvelopeError> {
        match self.form {
            Form::Batch => return Err(EnvelopeError::Batch),
            Form::Other => return Err(EnvelopeError::NotJsonRpc),
            Form::Object => {}
        }
        if !self.jsonrpc {
            return Err(EnvelopeError::NotJsonRpc);
        }
        if self.method_member
            && let Some(id) = &self.id
            && !is_id(id)
        {
            return Err(EnvelopeError::RequestIdType(id.clone()));
        }
        Ok(())
    }

    /// Whether `"jsonrpc"` is `"2.0"`.
    pub fn is_json_rpc(&self) -> bool {
        self.jsonrpc
    }

    /// Whether the message is a JSON object (not a batch, not another value).
    pub fn is_object(&self) -> bool {
        self.form == Form::Object
    }

    /// Whether the message is a JSON array (a batch).
    pub fn is_batch(&self) -> bool {
        self.form == Form::Batch
    }
}

impl Params {
    fn of(v: &Value) -> Self {
        let Value::Object(p) = v else {
            return Self {
                shape: Some(Shape::Other),
                ..Self::default()
            };
        };
        let mut params = Self {
            shape: Some(Shape::Object),
            ..Self::default()
        };
        for (k, v) in p {
            if k == "_meta" {
                params.meta = Meta::default();
                if let Value::Object(m) = v {
                    params.meta.present = true;
                    for (k, v) in m {
                        params.meta.take(k, v);
                    }
                }
            } else {
                params.take(k, v);
            }
        }
        params
    }
}

/// Whether `id` may identify a request: a string or an integer (MCP Basic § Requests).
pub fn is_id(id: &Value) -> bool {
    id.is_string() || id.is_i64() || id.is_u64()
}

/// Sets the id of `message` (an object; anything else is left alone): the one place a message's
/// id is written (the era bridge numbers the requests it forwards to a pooled child).
pub fn set_id(message: &mut Value, id: Value) {
    if let Some(m) = message.as_object_mut() {
        m.insert("id".to_owned(), id);
    }
}

/// Why a message is not a JSON-RPC 2.0 message MCP accepts. The `Display` text is what the
/// relay answers with (-32600, HTTP 400).
#[derive(Debug, Clone, PartialEq)]
pub enum EnvelopeError {
    /// A JSON array: MCP has no batches (removed in 2025-06-18).
    Batch,
    /// Not an object, or `jsonrpc` is not `"2.0"`.
    NotJsonRpc,
    /// A request whose id is neither a string nor an integer (null included; MCP Basic §
    /// Requests: "MUST NOT be null").
    RequestIdType(Value),
}

impl fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Batch => f.write_str("JSON-RPC batches are not supported"),
            Self::NotJsonRpc => f.write_str("not a JSON-RPC 2.0 message"),
            Self::RequestIdType(id) => {
                write!(f, "a request id is a string or an integer, not {id}")
            }
        }
    }
}

impl std::error::Error for EnvelopeError {}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz;
