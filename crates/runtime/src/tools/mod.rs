//! The tool registry: every tool family's catalog entries, in listing order, from which
//! `tools/list` is derived ([`allowed`]) and `tools/call` finds its handler ([`find`]).
//!
//! One module per tool family (a folder holding its handlers, its pure `engine` and their tests;
//! `info` is one file); each family's `specs()` lists its entries, built with [`ToolSpec`].
//! `blocking` is how handlers run blocking work; `cursor` is the continuation token of the
//! paged tools.

use std::sync::LazyLock;

use crate::{call::catalog::ToolSpec, policy::Policy};

pub(crate) mod blocking;
pub(crate) mod context;
mod cursor;
pub mod delegation;
mod edit;
mod fs;
pub(crate) mod git;
pub mod info;
pub mod jobs;
mod knowledge;
mod patch;
pub(crate) mod process;
pub(crate) mod project;
pub mod resources;
mod search;
pub(crate) mod skills;

/// Every tool, in listing order.
fn specs() -> Vec<ToolSpec> {
    let mut v = Vec::new();
    v.extend(info::specs());
    v.extend(context::specs());
    v.extend(project::specs());
    v.extend(skills::specs());
    v.extend(fs::specs());
    v.extend(search::specs());
    v.extend(edit::specs());
    v.extend(patch::specs());
    v.extend(process::specs());
    v.extend(process::session::specs());
    v.extend(git::specs());
    v.extend(jobs::specs());
    v.extend(resources::specs());
    v.extend(delegation::specs());
    v.extend(knowledge::specs());
    v
}

static CATALOG: LazyLock<Vec<ToolSpec>> = LazyLock::new(specs);

/// Every tool this build knows, in listing order.
pub fn all() -> &'static [ToolSpec] {
    &CATALOG
}

/// The tool named `name`, if this build has one.
pub fn find(name: &str) -> Option<&'static ToolSpec> {
    CATALOG.iter().find(|t| t.meta().name == name)
}

/// The tools `policy` allows, in listing order.
pub fn allowed(policy: &Policy) -> impl Iterator<Item = &'static ToolSpec> + '_ {
    CATALOG
        .iter()
        .filter(move |t| policy.allows(t.meta().capability))
}

#[cfg(test)]
mod tests {
    use protocol::limits::{RESULT_TEXT_RAISED_MAX_CHARS, TOOL_DESCRIPTION_MAX_CHARS};

    use crate::call::catalog::MAX_RESULT_SIZE_META;

    #[test]
    fn every_description_is_shorter_than_hosts_cut_them() {
        for t in super::all() {
            let d = t.meta().description;
            assert!(
                d.len() < TOOL_DESCRIPTION_MAX_CHARS,
                "{}: {} characters",
                t.meta().name,
                d.len()
            );
        }
    }

    #[test]
    fn tools_that_take_larger_requests_declare_it_and_no_other_does() {
        for t in super::all() {
            let tool = t.to_tool();
            let declared = tool
                .meta
                .as_ref()
                .and_then(|m| m.0.get(MAX_RESULT_SIZE_META))
                .and_then(|v| v.as_u64());
            let want = t
                .is_larger_on_request()
                .then_some(RESULT_TEXT_RAISED_MAX_CHARS as u64);
            assert_eq!(declared, want, "{}", t.meta().name);
        }
    }
}
