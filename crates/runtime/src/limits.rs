//! The runtime's own bounds: sizes, counts and durations that only the runtime enforces.
//!
//! Sizes are in bytes, durations are [`Duration`]s, counts are plain integers. A bound
//! that crosses a process boundary lives in `protocol::limits` instead.

use protocol::limits::RELAY_FRAME_MAX_BYTES;
use std::time::Duration;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

// === Concurrency ===

/// Tool calls one principal other than the owner (a relay token or account whose role is not
/// `owner`) runs at once in a runtime; one more gets `limit_exceeded` naming this limit, so no
/// such caller holds every slot. The owner (the local user, or the `owner` role) is not capped.
pub const CALLS_PER_PRINCIPAL: usize = 8;
/// Slots of [`CONCURRENT_TOOL_CALLS`](protocol::limits::CONCURRENT_TOOL_CALLS) that only the
/// runtime's owner (the local user, or a remote
/// principal with the `owner` role) may take: every other principal together runs at most
/// `CONCURRENT_TOOL_CALLS - OWNER_RESERVED_CALLS` calls, so the owner always gets service.
pub const OWNER_RESERVED_CALLS: usize = 4;

// === Processes ===

/// Shortest process timeout a caller may ask for.
pub const PROCESS_TIMEOUT_MIN: Duration = Duration::from_secs(1);
/// Longest process timeout a caller may ask for.
pub const PROCESS_TIMEOUT_MAX: Duration = Duration::from_secs(600);
/// Process timeout when the caller names none.
pub const PROCESS_TIMEOUT_DEFAULT: Duration = Duration::from_secs(120);
/// Output kept per stream of a one-shot process (head and tail).
pub const PROCESS_OUTPUT_MAX_BYTES: usize = 512 * KIB;
/// Most argv entries of a process.
pub const PROCESS_ARGV_MAX: usize = 256;
/// Largest total size of a process's argv (or a shell command line).
pub const PROCESS_COMMAND_MAX_BYTES: usize = 64 * KIB;
/// Largest stdin payload of a one-shot process.
pub const PROCESS_STDIN_MAX_BYTES: usize = MIB;
/// Live process sessions at once.
pub const PROCESS_SESSIONS_MAX: usize = 8;
/// Output retained per stream of a process session.
pub const SESSION_OUTPUT_RETAINED_BYTES: usize = MIB;
/// Largest single write to a process session's stdin.
pub const SESSION_STDIN_WRITE_MAX_BYTES: usize = 64 * KIB;
/// How long an exited process session stays readable (unless discarded earlier by
/// [`EXITED_SESSIONS_MAX`] or [`EXITED_SESSIONS_OUTPUT_MAX_BYTES`]).
pub const SESSION_RETENTION_AFTER_EXIT: Duration = Duration::from_secs(30 * 60);
/// Exited process sessions one runtime keeps, across all principals. When one more exits, the
/// exited session that ended first is discarded (its output freed; `read_process` of it then gets
/// `not_found` saying so). Running sessions are never discarded; they are bounded by
/// [`PROCESS_SESSIONS_MAX`].
pub const EXITED_SESSIONS_MAX: usize = 32;
/// Output bytes held for exited process sessions in total, across all principals: for each
/// session, what its two streams retain (each stream's newest [`SESSION_OUTPUT_RETAINED_BYTES`]
/// plus the first `PROCESS_OUTPUT_MAX_BYTES / 2`, so at most 2.5 MiB a session). Beyond it, the
/// exited sessions that ended first are discarded until the rest fit, as for
/// [`EXITED_SESSIONS_MAX`]. With this value at least six exited sessions with full output fit.
pub const EXITED_SESSIONS_OUTPUT_MAX_BYTES: usize = 16 * MIB;
/// Ids of discarded process sessions remembered (with their owner), so that `read_process` of
/// one says it was discarded rather than that it never existed. The oldest is forgotten first;
/// a forgotten id gets the plain `not_found`.
pub const DISCARDED_SESSIONS_REMEMBERED: usize = 256;

// === Tasks (MCP extension `io.modelcontextprotocol/tasks`, SEP-2663) ===

/// How long a task-eligible call (`run_process`, `exec_command`) of a client that declared the
/// tasks extension runs in the foreground before it becomes a task: a call that finishes sooner
/// is answered with its result, one that does not is answered with `CreateTaskResult`.
pub const TASK_FOREGROUND_BUDGET: Duration = Duration::from_secs(3);
/// Tasks one runtime keeps (working, and finished within [`TASK_RETENTION_AFTER_END`]). No task is
/// discarded early to make room: while this many are kept, a long call is not offered as a task
/// (it runs as for a client without tasks). This also bounds working tasks, which give their
/// [`CONCURRENT_TOOL_CALLS`](protocol::limits::CONCURRENT_TOOL_CALLS) slot back.
pub const TASKS_MAX: usize = 64;
/// Tasks one principal other than the runtime's owner may have kept at once:
/// one caller cannot fill the table for the others.
pub const TASKS_PER_PRINCIPAL: usize = 16;
/// Of [`TASKS_MAX`], the tasks principals other than the owner leave to the owner together.
pub const OWNER_RESERVED_TASKS: usize = 16;
/// How long a finished task stays readable with `tasks/get` after it ended.
pub const TASK_RETENTION_AFTER_END: Duration = Duration::from_secs(30 * 60);
/// The polling interval suggested to clients in `pollIntervalMs`.
pub const TASK_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Largest `max_bytes` of one `read_process` call, per stream (all that is retained).
pub const SESSION_READ_MAX_BYTES: usize = MIB;
/// Longest `wait_ms` of one `read_process` call.
pub const SESSION_READ_WAIT_MAX: Duration = Duration::from_secs(30);
/// Terminal size of a PTY session when the caller names none (rows, columns).
pub const PTY_DEFAULT_SIZE: (u16, u16) = (24, 80);
/// Grace between SIGTERM and SIGKILL when a process tree is terminated.
pub const TERMINATION_GRACE: Duration = Duration::from_secs(2);

// === Result sizes (DESIGN §4 "Results sized for hosts", §7) ===

/// Most characters of a tool result's text block by default: a one-line summary, then plain
/// text. Claude Code moves a text result over 50,000 characters to a file; every tool's default
/// output fits in this and says how to continue.
pub const RESULT_TEXT_DEFAULT_CHARS: usize = 45_000;
/// Longest summary line (the first line of a result's text block); a longer one is cut.
pub const RESULT_SUMMARY_MAX_CHARS: usize = 2_000;
/// Characters a tool may put under the summary line by default:
/// [`RESULT_TEXT_DEFAULT_CHARS`] less the summary line and its newline.
pub const RESULT_BODY_DEFAULT_CHARS: usize =
    RESULT_TEXT_DEFAULT_CHARS - RESULT_SUMMARY_MAX_CHARS - 1;
/// Most characters of a result's text when the caller explicitly asked for more entries
/// (`max_entries`, `max_files`, `max_matches`, `count`); such a page still stops at this bound
/// and continues. Also the value tools that accept explicit larger requests declare as
/// `_meta["anthropic/maxResultSizeChars"]` in `tools/list` (Claude Code's own maximum).
pub const RESULT_TEXT_RAISED_MAX_CHARS: usize = 500_000;
/// Error results' text is shorter than this (the stable code and the key details first; a
/// longer message or detail is cut). Claude Code cuts error text at about 11,000 characters.
pub const ERROR_TEXT_MAX_CHARS: usize = 10_000;
/// Every tool description is shorter than this (Claude Code cuts descriptions at 2,048).
pub const TOOL_DESCRIPTION_MAX_CHARS: usize = 1_500;

// === File tools ===

/// Default `max_bytes` of `read_file`: what fits in the default result size under its summary
/// line. Larger reads are explicit (`max_bytes` up to [`READ_HARD_MAX_BYTES`]).
pub const READ_DEFAULT_MAX_BYTES: usize = RESULT_BODY_DEFAULT_CHARS;
/// Hard cap of `read_file`'s `max_bytes`.
pub const READ_HARD_MAX_BYTES: usize = 5 * MIB;
/// Hard cap of `read_file`'s `max_bytes` for a daemon's callers, whose results travel in relay
/// frames: a result carries the text twice (the text block and `structuredContent`) and JSON
/// writes a control character as six bytes (`\u0001`), so twelve times this, with room for the
/// rest of the result, fits in a [`RELAY_FRAME_MAX_BYTES`] frame whatever the text.
pub const READ_REMOTE_MAX_BYTES: usize = 512 * KIB;
const _: () = assert!(12 * READ_REMOTE_MAX_BYTES + 64 * KIB <= RELAY_FRAME_MAX_BYTES - KIB);
/// Largest image `view_image` returns.
pub const IMAGE_MAX_BYTES: usize = 4 * MIB;
/// Largest file `edit_file` and `apply_patch` load to rewrite, and `write_file` accepts.
pub const EDIT_FILE_MAX_BYTES: usize = 32 * MIB;
/// Largest unified diff returned by an edit (`write_file`, `edit_file`, `apply_patch`); longer
/// diffs are cut with a marker. Below [`RESULT_BODY_DEFAULT_CHARS`], so an edit's result text
/// stays within the default result size.
pub const EDIT_DIFF_MAX_BYTES: usize = 40_000;
/// Default `max_bytes` of `git_diff` and `git_show`: the diff text of one page, within the
/// default result size.
pub const GIT_DIFF_DEFAULT_BYTES: usize = RESULT_BODY_DEFAULT_CHARS;
/// Largest `max_bytes` of `git_diff` and `git_show` (4 MiB): the diff text they return at most.
pub const GIT_DIFF_MAX_BYTES: usize = 4 * MIB;
/// Default `count` of `git_log` (a page also stops at the default result size).
pub const GIT_LOG_DEFAULT_COMMITS: usize = 100;
/// Largest `count` of `git_log`.
pub const GIT_LOG_MAX_COMMITS: usize = 2_000;
/// Default `max_entries` of `git_status` (a page also stops at the default result size).
pub const GIT_STATUS_DEFAULT_ENTRIES: usize = 1_000;
/// Largest `max_entries` of `git_status`.
pub const GIT_STATUS_MAX_ENTRIES: usize = 20_000;
/// Default and maximum entries of `list_dir`.
pub const LIST_DIR_DEFAULT_ENTRIES: usize = 1_000;
/// Maximum entries `list_dir` may be asked for.
pub const LIST_DIR_MAX_ENTRIES: usize = 10_000;
/// Default `max_files` of `list_files`.
pub const LIST_FILES_DEFAULT: usize = 2_000;
/// Maximum `max_files` of `list_files`.
pub const LIST_FILES_MAX: usize = 20_000;
/// Default `max_matches` of `search_text`.
pub const SEARCH_DEFAULT_MATCHES: usize = 200;
/// Maximum `max_matches` of `search_text`.
pub const SEARCH_MAX_MATCHES: usize = 5_000;
/// Maximum context lines before or after a search match.
pub const SEARCH_MAX_CONTEXT_LINES: usize = 10;
/// Longest matched line returned by `search_text`; longer lines are cut around the match.
pub const SEARCH_LINE_MAX_BYTES: usize = 1_000;
/// Most unreadable paths `search_text` and `list_files` return in `skipped`; `skipped_count`
/// counts them all.
pub const SKIPPED_PATHS_MAX: usize = 100;
/// Largest part of one ignore file (`.gitignore`, `.ignore`, `.git/info/exclude`, git's global
/// excludes file) that `search_text` and `list_files` apply (1 MiB). Past it the file is read up
/// to the last whole line within the bound, the rest does not apply, and the result's `notes`
/// names the file and the cap. Bounds the memory and time of compiling the file (a glob costs
/// ~16 KB compiled).
pub const IGNORE_FILE_MAX_BYTES: usize = MIB;
/// Most patterns of one ignore file that `search_text` and `list_files` apply (10,000; blank and
/// comment lines do not count). Later patterns do not apply, and the result's `notes` names the
/// file and the cap.
pub const IGNORE_FILE_MAX_PATTERNS: usize = 10_000;
/// Most capped ignore files one `search_text` or `list_files` result names in `notes`.
pub const IGNORE_NOTES_MAX: usize = 20;
/// Minimum interval between two progress notifications of one call.
pub const PROGRESS_MIN_INTERVAL: Duration = Duration::from_millis(250);

// === OAuth 2.1 on the relay (DESIGN §6) ===

/// Main steps of a job plan: at least one.
pub const JOB_STEPS_MAX: usize = 16;
/// Finally steps of a job plan.
pub const JOB_FINALLY_STEPS_MAX: usize = 16;
/// Temporary files of a job plan.
pub const JOB_TEMP_FILES_MAX: usize = 16;
/// Bytes of all temporary files of a job plan together.
pub const JOB_TEMP_FILES_MAX_BYTES: usize = 512 * KIB;
/// Bytes of one step's `stdin` text.
pub const JOB_STDIN_MAX_BYTES: usize = 256 * KIB;
/// Jobs a step may name in `depends_on`.
pub const JOB_DEPENDS_MAX: usize = 16;
/// Default timeout of one job step.
pub const JOB_STEP_TIMEOUT_DEFAULT: Duration = Duration::from_secs(600);
/// Longest timeout of one job step (6 h).
pub const JOB_STEP_TIMEOUT_MAX: Duration = Duration::from_secs(21_600);
/// Output kept of one stream of one step: head and tail together.
pub const JOB_STREAM_OUTPUT_MAX_BYTES: usize = 64 * KIB;
/// Output kept of one job, every step and stream together.
pub const JOB_OUTPUT_MAX_BYTES: usize = 256 * KIB;
/// Jobs retained in the store; acceptance past it is a retryable `limit_exceeded`.
pub const JOBS_RETAINED_MAX: usize = 512;
/// Unfinished jobs (staged, queued, running, cleaning, recovering) one principal other than the
/// owner may have; past it acceptance is a retryable `limit_exceeded` for that principal only.
pub const JOBS_UNFINISHED_PER_PRINCIPAL: usize = 64;
/// Jobs one principal other than the owner keeps in the store; past it its oldest finished job
/// makes room (a running, staged or unreadable one never does).
pub const JOBS_RETAINED_PER_PRINCIPAL: usize = 128;
/// Jobs of principals other than the owner the store keeps: the rest of
/// [`JOBS_RETAINED_MAX`] is the owner's.
pub const JOBS_RETAINED_OTHERS_MAX: usize = JOBS_RETAINED_MAX - 64;
/// Largest plan, as canonical JSON.
pub const JOB_PLAN_MAX_BYTES: usize = 2 * MIB;
/// Largest `env` of one step (names and values together; Linux's limit of one argument or
/// variable is 128 KiB).
pub const JOB_STEP_ENV_MAX_BYTES: usize = 128 * KIB;
/// How long a terminal job is kept.
pub const JOB_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// How long a staged job waits to be started before it is `expired`.
pub const JOB_STAGED_EXPIRY: Duration = Duration::from_secs(24 * 3600);
/// Jobs running at once; more wait in `queued`.
pub const JOBS_RUNNING_MAX: usize = 8;
/// Recovery attempts of an interrupted job's finally steps.
pub const JOB_RECOVERY_ATTEMPTS_MAX: u32 = 3;
/// Longest `wait_ms` of `read_job`.
pub const JOB_READ_WAIT_MAX: Duration = Duration::from_secs(30);
/// Largest local resource file (its encoded forms are redacted from output, so it stays small).
pub const RESOURCE_MAX_BYTES: usize = 64 * KIB;
/// Bytes of one instruction file (`AGENTS.md`, `AGENTS.override.md`, `CLAUDE.md`, the user's
/// instructions file) that go into the instruction chain; the rest is left out with a note.
pub const INSTRUCTION_FILE_MAX_BYTES: usize = 32 * KIB;
/// Bytes of instruction text in the whole chain; sources past it are cut or left out with a
/// note (the deepest, highest-precedence sources are kept first).
pub const INSTRUCTIONS_TOTAL_MAX_BYTES: usize = 128 * KIB;
/// Bytes of an instruction file hashed for its provenance (`sha256`); a larger file is
/// identified by its size and modification time instead.
pub const INSTRUCTION_HASH_MAX_BYTES: usize = 16 * MIB;
/// Characters of instruction text `session_bootstrap` shows (the rest: `agent_context`).
pub const BOOTSTRAP_INSTRUCTIONS_MAX_CHARS: usize = 24_000;
/// Largest user configuration file (`$XDG_CONFIG_HOME/machine-mcp/config.toml`).
pub const USER_CONFIG_MAX_BYTES: usize = 256 * KIB;
/// Bytes of `project_overview`'s text, either detail level.
pub const PROJECT_OVERVIEW_MAX_BYTES: usize = 16 * KIB;
/// Largest project file read to detect facts or commands (`package.json`, `Cargo.toml`,
/// `Makefile`, `.machine-mcp/commands.toml`, ...); a larger one is reported, not read.
pub const PROJECT_FILE_MAX_BYTES: usize = MIB;
/// Registered commands (manifest entries and automatic aliases) listed for one project.
pub const COMMANDS_MAX: usize = 512;
/// Skills listed by `list_skills` (and as MCP prompts); more are counted, not listed.
pub const SKILLS_MAX: usize = 256;
/// Bytes of a `SKILL.md` read: its front matter and the text `load_skill` returns.
pub const SKILL_FILE_MAX_BYTES: usize = 32 * KIB;
/// Characters of a skill's `description` kept (the Agent Skills format's own bound).
pub const SKILL_DESCRIPTION_MAX_CHARS: usize = 1_024;
/// Files of a skill bundle `load_skill` lists.
pub const SKILL_INVENTORY_MAX: usize = 200;
/// Directory entries a skill scan or bundle inventory visits before it stops (and says so).
pub const SKILL_SCAN_MAX_ENTRIES: usize = 10_000;
/// Characters of a skill's `name` (the Agent Skills format's bound); a longer one is a problem.
pub const SKILL_NAME_MAX_CHARS: usize = 64;
/// YAML parser events (alias replays included) of one `SKILL.md` front matter; more is
/// reported as too complex (an alias bomb stops here instead of expanding).
pub const SKILL_FRONT_MATTER_MAX_EVENTS: usize = 10_000;
/// Directory levels of a skill bundle `load_skill`'s inventory descends; deeper ones are
/// counted as not walked.
pub const SKILL_INVENTORY_MAX_DEPTH: usize = 16;
/// Results of ChatGPT's `search` (deep research and company knowledge).
pub const KNOWLEDGE_SEARCH_RESULTS_MAX: usize = 20;
/// Characters (UTF-8 bytes) of a `search` query.
pub const KNOWLEDGE_QUERY_MAX_CHARS: usize = 1_000;
/// Distinct terms of a `search` query (after stop words are dropped); more is refused.
pub const KNOWLEDGE_QUERY_TERMS_MAX: usize = 16;
/// Matching lines `search` reads from file contents before it ranks: files whose paths match
/// a term are read first, then the rest in path order; past the cap, the files not read yet
/// rank by their paths alone.
pub const KNOWLEDGE_SEARCH_SCAN_LINES_MAX: usize = 10_000;
/// Bytes of a Markdown file `search` and `fetch` read for its first heading (the title).
pub const KNOWLEDGE_TITLE_SCAN_BYTES: usize = 4 * KIB;
/// Ranked files `search` opens, best first, to check that `fetch` can return each (readable,
/// no NUL byte in the bytes `fetch` reads) before it stops looking for more results; past it,
/// fewer results are returned.
pub const KNOWLEDGE_SEARCH_CHECK_MAX: usize = 1_000;
/// Characters of a Markdown heading kept in a `search`/`fetch` title; a longer one is cut.
pub const KNOWLEDGE_TITLE_HEADING_MAX_CHARS: usize = 200;
/// Characters of the message of a JSON-RPC error the runtime answers for a resource or prompt
/// (it may echo the URI or name asked for); a longer one is cut with `…`.
pub const JSONRPC_ERROR_MESSAGE_MAX_CHARS: usize = 1_000;
/// Delegations running at once on one state directory, over every agent (counted over the
/// receipts whose server is alive); more wait `queued`.
pub const DELEGATIONS_RUNNING_MAX: usize = 6;
/// Delegations running at once to one agent; more wait `queued`.
pub const DELEGATIONS_RUNNING_PER_AGENT_MAX: usize = 2;
/// Delegations waiting `queued` on one state directory; one more is refused
/// (`limit_exceeded`).
pub const DELEGATIONS_QUEUED_MAX: usize = 64;
/// Deepest delegation: a caller's request is depth 0, a worker's child its parent's depth + 1;
/// a request deeper than this is refused (`limit_exceeded`).
pub const DELEGATION_DEPTH_MAX: u32 = 4;
/// Requests in one tree (the root request counts); one more is refused (`limit_exceeded`).
pub const DELEGATIONS_PER_ROOT_MAX: usize = 16;
/// Bytes of a delegation's prompt (UTF-8); a larger one is refused (`limit_exceeded`). It goes
/// to the agent on stdin: Linux's `MAX_ARG_STRLEN` (128 KiB) would not take it as one argument.
pub const DELEGATION_PROMPT_MAX_BYTES: usize = 256 * KIB;
/// Bytes of an agent's final answer kept in a receipt; a longer one is cut on a character
/// boundary and flagged `output_truncated`.
pub const DELEGATION_OUTPUT_MAX_BYTES: usize = 256 * KIB;
/// Longest `wait_ms` of `read_delegation`.
pub const DELEGATION_READ_WAIT_MAX: Duration = Duration::from_secs(60);
/// Receipts kept in `STATE_DIR/delegations`; the oldest terminal ones are pruned beyond it
/// (never a queued, running or unreadable one: a store full of those refuses new work with
/// `limit_exceeded`).
pub const DELEGATION_RECORDS_MAX: usize = 1_024;
/// Bytes of one line of an agent's JSON event output that is parsed; a longer line is
/// skipped (an answer of [`DELEGATION_OUTPUT_MAX_BYTES`] fits escaped in one event).
pub const DELEGATION_EVENT_LINE_MAX_BYTES: usize = 4 * MIB;
/// How long one delegation may run; its process tree is then terminated and the receipt is
/// `failed` with diagnostic `timeout`.
pub const DELEGATION_RUN_LIMIT: Duration = Duration::from_secs(3_600);
/// How long an agent's inspection (executable, `--version`, authentication) is reused by
/// `agents_status` and `delegate` before it is run again.
pub const DELEGATION_INSPECTION_CACHE: Duration = Duration::from_secs(30);
/// Longest JSON line on a delegation worker socket (`STATE_DIR/delegations/sockets/PID.sock`),
/// in either direction; a longer one closes the connection with `{"error":"frame_too_large"}`.
pub const DELEGATION_SOCKET_FRAME_MAX_BYTES: usize = MIB;
/// Connections a server's delegation worker socket serves at once; one more is answered
/// `{"error":"busy"}` and closed.
pub const DELEGATION_SOCKET_CONNECTIONS_MAX: usize = 64;
/// Requests one worker connection may have in flight at once (a `read` may wait up to
/// [`DELEGATION_READ_WAIT_MAX`]); one more is answered with a `limit_exceeded` error.
pub const DELEGATION_SOCKET_REQUESTS_IN_FLIGHT_MAX: usize = 8;
/// How long a worker connection has to answer the HMAC challenge before it is closed.
pub const DELEGATION_SOCKET_AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one agent probe (`codex --version`, `codex login status`, `claude auth status`, …)
/// may take before its process group is killed and the probe counts as failed (version) or
/// undecided (authentication).
pub const DELEGATION_PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of an agent probe's stdout (and, separately, stderr) that are kept; the rest is read
/// and dropped.
pub const DELEGATION_PROBE_OUTPUT_MAX_BYTES: usize = 4 * KIB;
