//! What a tool family is to the registry ([`super`]): one [`Family`] entry — its catalog
//! entries, its state, and the MCP resources or prompts it serves — so that nothing outside
//! `tools/` names a family.
//!
//! Rules:
//! - A family's state is made once per runtime, when the runtime is built, by the family's own
//!   [`Family::state`] function ([`States::new`]), and kept by its type. A handler reaches it
//!   with [`Access::state`](crate::Access::state): one lookup by type in a map that never changes
//!   after it is built (O(1), no lock). What a state starts lazily (the delegation manager) it
//!   starts itself.
//! - At shutdown the runtime calls every state's [`FamilyState::shutdown`], in reverse listing
//!   order: a family listed later may use what an earlier one keeps (delegations run agents in
//!   the process family's scratch directory), so it stops first.
//! - What the runtime is doing ([`RuntimeActivity`]: `server_info`'s `activity`, the stdio
//!   supervisor's and the daemon's upgrade checks) is the sum of every state's
//!   [`FamilyState::activity`].
//! - `resources/list`, `resources/templates/list` and `resources/read` serve every family's
//!   [`Resources`]; a URI is read by the family whose [`Resources::prefix`] it starts with.
//!   `prompts/list` and `prompts/get` serve every family's [`Prompts`]. Their functions block
//!   (bounded file system work): the server calls them off the async threads.

use std::{
    any::{Any, TypeId},
    collections::HashMap,
    fmt,
    future::Future,
    panic::RefUnwindSafe,
    pin::Pin,
};

use crate::{
    Access, RuntimeActivity, RuntimeConfig,
    call::{catalog::ToolSpec, error::ToolResult},
};

/// One tool family, as the registry lists it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Family {
    /// Its catalog entries, in listing order.
    pub(crate) specs: fn() -> Vec<ToolSpec>,
    /// Makes its state for a runtime built from the configuration; `None`: it keeps none.
    pub(crate) state: Option<MakeState>,
    /// The MCP resources it serves.
    pub(crate) resources: Option<&'static Resources>,
    /// The MCP prompts it serves.
    pub(crate) prompts: Option<&'static Prompts>,
}

impl Family {
    /// A family of catalog entries only (no state, resources or prompts).
    pub(crate) const fn tools(specs: fn() -> Vec<ToolSpec>) -> Self {
        Self {
            specs,
            state: None,
            resources: None,
            prompts: None,
        }
    }
}

/// How a family makes its state for a runtime built from a configuration.
pub(crate) type MakeState = fn(&RuntimeConfig) -> Box<dyn FamilyState>;

/// A future a [`FamilyState`] hook returns.
pub(crate) type Hook<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// The state a family keeps for the life of a runtime (process sessions, the job store, the
/// delegation manager, ...). Unwind-safe, as the runtime is: a panicking call must not leave a
/// state that other calls then misread (a state whose parts are not says so in an
/// `AssertUnwindSafe`, with its reason).
pub(crate) trait FamilyState: Any + Send + Sync + RefUnwindSafe + fmt::Debug {
    /// Called once when the runtime stops ([`crate::Runtime::shutdown`]): ends what must not
    /// outlive the process (process trees, delegation runs). Nothing by default.
    fn shutdown(&self) -> Hook<'_> {
        Box::pin(std::future::ready(()))
    }

    /// Adds what this family is doing and holding to `activity`. Nothing by default.
    fn activity(&self, _activity: &mut RuntimeActivity) {}
}

/// Every family's state of one runtime, by type, in listing order.
pub(crate) struct States {
    by_type: HashMap<TypeId, usize>,
    states: Vec<Box<dyn FamilyState>>,
}

impl fmt::Debug for States {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(&self.states).finish()
    }
}

impl States {
    /// The states of `families` for a runtime built from `config`.
    pub(crate) fn new(families: &[Family], config: &RuntimeConfig) -> Self {
        let mut by_type = HashMap::new();
        let mut states = Vec::new();
        for make in families.iter().filter_map(|f| f.state) {
            let state = make(config);
            let any: &dyn Any = &*state;
            by_type.insert(any.type_id(), states.len());
            states.push(state);
        }
        Self { by_type, states }
    }

    /// The state of type `S`, when a family keeps one.
    pub(crate) fn get<S: FamilyState>(&self) -> Option<&S> {
        let state = self.states.get(*self.by_type.get(&TypeId::of::<S>())?)?;
        let any: &dyn Any = &**state;
        any.downcast_ref()
    }

    /// Every state, in listing order.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &dyn FamilyState> {
        self.states.iter().map(|s| &**s)
    }
}

/// The MCP resources a family serves.
#[derive(Debug)]
pub(crate) struct Resources {
    /// What the URI of each of its resources starts with (`machine://context/`).
    pub(crate) prefix: &'static str,
    /// Its resource templates.
    pub(crate) templates: &'static [ResourceTemplate],
    /// Its resources for a caller (blocking).
    pub(crate) list: fn(&Access) -> Vec<ResourceEntry>,
    /// Reads one of them for a caller (blocking); `not_found` for a URI it has no resource of.
    pub(crate) read: fn(&Access, &str) -> ToolResult<ResourceText>,
}

/// A resource template (`resources/templates/list`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ResourceTemplate {
    /// The URI template (RFC 6570).
    pub(crate) uri_template: &'static str,
    /// A short name.
    pub(crate) name: &'static str,
    /// What its resources are.
    pub(crate) description: &'static str,
    /// Their MIME type.
    pub(crate) mime_type: &'static str,
}

/// One resource as `resources/list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourceEntry {
    /// Its URI.
    pub(crate) uri: String,
    /// A short name.
    pub(crate) name: String,
    /// What it is.
    pub(crate) description: String,
    /// Its MIME type.
    pub(crate) mime_type: &'static str,
    /// Its size in bytes, when it is a file.
    pub(crate) size: Option<u64>,
}

/// The text of a resource (`resources/read`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourceText {
    /// The URI read.
    pub(crate) uri: String,
    /// Its MIME type.
    pub(crate) mime_type: &'static str,
    /// The text.
    pub(crate) text: String,
}

/// The MCP prompts a family serves.
#[derive(Debug)]
pub(crate) struct Prompts {
    /// Its prompts for a caller (blocking).
    pub(crate) list: fn(&Access) -> Vec<PromptEntry>,
    /// One of them by name (blocking); `not_found` for a name it has no prompt of.
    pub(crate) get: fn(&Access, &str) -> ToolResult<PromptText>,
}

/// A prompt as `prompts/list` shows it (no arguments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PromptEntry {
    /// Its name (the argument of `prompts/get`).
    pub(crate) name: String,
    /// A display title, when it has one.
    pub(crate) title: Option<String>,
    /// What it is for.
    pub(crate) description: String,
}

/// A prompt's text (`prompts/get`): one user message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PromptText {
    /// Its name.
    pub(crate) name: String,
    /// What it is for.
    pub(crate) description: String,
    /// The message.
    pub(crate) text: String,
}
