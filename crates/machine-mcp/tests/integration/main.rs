//! Integration tests: the real `machine-mcp` binary over real stdio, files and processes.

// Test helpers panic on purpose, and they time a real child process (no tokio clock to pause).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_types)]

mod client_config;
mod containment;
mod context;
mod delegation;
mod delegation_workers;
mod delivery;
mod doctor;
mod edit;
mod era;
mod faults;
mod git;
mod hardening;
mod hosts;
mod jobs;
mod knowledge;
mod net;
mod oauth;
mod oauth_abuse;
mod ops;
mod own_files;
mod own_programs;
mod patch;
mod policy;
mod polish;
mod process;
mod process_lookup;
mod project;
mod protocol;
mod read;
mod relay;
mod relay_memory;
mod relay_restart;
mod reload;
mod reverse_proxy;
mod search;
mod service;
mod sizes;
mod skills;
mod stateless;
mod stop;
mod supervisor;
mod tasks_remote;
mod util;
