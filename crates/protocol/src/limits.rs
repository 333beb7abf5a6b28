//! The timing and size contract (DESIGN §7), shared by the relay, the daemon and the runtime.
//!
//! Sizes are in bytes, durations are [`Duration`]s, counts are plain integers. Every bound that
//! logic enforces is one of these constants; tests refer to them by name too.

use std::time::Duration;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

// === Transport ===

/// Client connections a relay keeps open at once; past it a new connection is closed at once
/// (`relay serve --max-connections`).
pub const RELAY_CONNECTIONS_MAX: usize = 4096;
/// Client connections a relay keeps open at once from one (non-loopback) address
/// (`relay serve --max-connections-per-address`).
pub const RELAY_CONNECTIONS_PER_ADDRESS: usize = 128;
/// Time a client has to send a request's headers; also how long an idle keep-alive connection
/// is kept.
pub const REQUEST_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a client has to send a request's body once its headers were accepted.
pub const REQUEST_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Daemon sockets that have not yet authenticated (hello verified) a relay keeps at once.
pub const UNVERIFIED_DAEMON_SOCKETS_MAX: usize = 64;
/// Unverified daemon sockets from one (non-loopback) address.
pub const UNVERIFIED_DAEMON_SOCKETS_PER_ADDRESS: usize = 8;
/// Bytes a daemon socket may send before its hello is verified (1 MiB: a link revision 3 hello
/// is about 1 KB; older daemons send their catalog in it).
pub const UNVERIFIED_DAEMON_SOCKET_MAX_BYTES: usize = MIB;

/// Longest JSON-RPC line accepted on stdio (8 MiB, newline excluded). A longer line is answered
/// with a JSON-RPC error and skipped.
pub const STDIO_LINE_MAX_BYTES: usize = 8 * MIB;
/// Largest MCP request body the relay accepts over Streamable HTTP.
pub const MCP_REQUEST_BODY_MAX_BYTES: usize = 8 * MIB;
/// Largest relay ⇄ daemon WebSocket frame.
pub const RELAY_FRAME_MAX_BYTES: usize = 8 * MIB;

// === Concurrency ===

/// Tool calls one runtime executes at once; a call beyond this gets `limit_exceeded` at once.
pub const CONCURRENT_TOOL_CALLS: usize = 16;
/// Tool calls one principal other than the owner (a relay token or account whose role is not
/// `owner`) runs at once in a runtime; one more gets `limit_exceeded` naming this limit, so no
/// such caller holds every slot. The owner (the local user, or the `owner` role) is not capped.
pub const CALLS_PER_PRINCIPAL: usize = 8;
/// Slots of [`CONCURRENT_TOOL_CALLS`] that only the runtime's owner (the local user, or a remote
/// principal with the `owner` role) may take: every other principal together runs at most
/// `CONCURRENT_TOOL_CALLS - OWNER_RESERVED_CALLS` calls, so the owner always gets service.
pub const OWNER_RESERVED_CALLS: usize = 4;
/// Default bound on relayed requests in flight per bridge.
pub const RELAYED_REQUESTS_PER_BRIDGE: usize = 32;
/// Open MCP 2026-07-28 `subscriptions/listen` streams per bridge on a relay; counted apart from
/// [`RELAYED_REQUESTS_PER_BRIDGE`] so idle subscriptions never starve calls (HTTP 429 beyond).
pub const SUBSCRIPTIONS_PER_BRIDGE: usize = 64;
/// Pooled legacy sessions a daemon keeps to bridge MCP 2026-07-28 calls to upstream stdio
/// servers of the old era (one child process per server and principal). When a new one would
/// exceed it, the least recently used idle one is closed; with none idle the call is answered
/// with a retryable error.
pub const UPSTREAM_POOLED_SESSIONS_MAX: usize = 32;
/// How long a pooled legacy upstream session stays open with no call in flight and no
/// `subscriptions/listen` open; then its child process is stopped.
pub const UPSTREAM_POOLED_SESSION_IDLE: Duration = Duration::from_secs(300);

// === Relay link timing ===

/// How long detached calls and sessions wait for the same daemon instance to come back.
pub const RECONNECT_GRACE: Duration = Duration::from_secs(120);

/// How long a stopping daemon (SIGTERM, Ctrl-C, `service stop`) keeps its link to let calls
/// in flight finish before it closes it: below a takeover's 15 s wait and systemd's
/// `TimeoutStopSec` (30 s in the unit `service install` writes).
pub const DAEMON_STOP_DRAIN: Duration = Duration::from_secs(10);
/// Interval of SSE keepalive comments.
pub const SSE_KEEPALIVE: Duration = Duration::from_secs(10);
/// How long finished SSE streams stay replayable with `Last-Event-ID`.
pub const RESUMABLE_RETENTION: Duration = Duration::from_secs(120);
/// Resumable streams kept per bridge.
pub const RESUMABLE_STREAMS_PER_BRIDGE: usize = 64;
/// Largest terminal message kept for replay (1.5 MB).
pub const RESUMABLE_TERMINAL_MAX_BYTES: usize = 1_500_000;
/// Bytes of messages a session's standalone stream (its `GET` stream) holds for its client
/// (16 MiB; one link frame, at most 8 MiB, always fits). Past it the oldest messages are dropped,
/// counted (`machine_mcp_relay_stream_messages_dropped_total`) and announced to the client that reads
/// past the gap (unbounded, one daemon could make the relay hold 500 MB this way).
pub const STANDALONE_BUFFER_MAX_BYTES: usize = 16 << 20;
/// Bytes the standalone streams of all sessions of one bridge hold together (64 MiB): a
/// daemon's flood of one bridge's sessions holds at most this much of the relay.
pub const STANDALONE_BUFFER_PER_BRIDGE_MAX_BYTES: usize = 64 << 20;
/// Longest execution budget of one call.
pub const CALL_BUDGET_MAX: Duration = Duration::from_secs(600);
/// Relay overhead allowed on top of [`CALL_BUDGET_MAX`].
pub const RELAY_OVERHEAD: Duration = Duration::from_secs(5);
/// Longest a relayed MCP 2026-07-28 `subscriptions/listen` stays open; the relay then ends it
/// gracefully with a `subscriptions/listen` result (MCP 2026-07-28 Basic › Patterns ›
/// Subscriptions § Graceful Closure) and the client listens again.
pub const SUBSCRIPTION_MAX: Duration = Duration::from_secs(24 * 3600);
/// How long the relay holds the answer to an MCP 2026-07-28 request that may be streamed: a
/// response that arrives within it, with nothing before it, is sent as one JSON body (with the
/// HTTP status its error calls for); otherwise the answer becomes an SSE stream.
pub const STATELESS_RESPONSE_HOLD: Duration = Duration::from_millis(1000);
/// Time a daemon has to send `hello` after `welcome`.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(10);
/// Time from `hello_ack` to `ready` (probe and resume).
pub const READINESS_DEADLINE: Duration = Duration::from_secs(15);
/// Application heartbeat interval on the daemon link.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(25);
/// Silence after which the daemon declares the link dead.
pub const HEARTBEAT_SILENCE_TIMEOUT: Duration = Duration::from_secs(75);
/// Silence after which the relay declares a daemon socket dead.
pub const RELAY_LIVENESS_TIMEOUT: Duration = Duration::from_secs(90);
/// Time allowed for one connect attempt (TCP, TLS, WebSocket upgrade).
pub const CONNECT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);
/// Link revision 4: how long after the relay sends a client request to a daemon the daemon may
/// still start it. The relay puts `deliver_by` = its wall clock + this + the daemon's clock skew
/// (as the hello estimated it) on every request frame; a daemon that reads the frame later does
/// not run it. Short, so that a frozen or sleeping daemon (TCP up, nothing read) costs a caller a
/// few seconds, not the liveness timeout and the reconnect grace; long enough
/// for a busy link to carry the frame.
pub const DELIVERY_WINDOW: Duration = Duration::from_millis(2500);
/// Link revision 4: how long past [`DELIVERY_WINDOW`] the relay waits for the daemon's
/// `accepted` before it retracts the request and answers it with a retryable "not delivered"
/// error: the time an `accepted` sent just before `deliver_by` needs to come back. The request
/// is thus answered at most `DELIVERY_WINDOW + DELIVERY_MARGIN` (4 s) after it was sent, well
/// within the ~60 s hosted assistants wait.
pub const DELIVERY_MARGIN: Duration = Duration::from_millis(1500);

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
/// [`CONCURRENT_TOOL_CALLS`] slot back.
pub const TASKS_MAX: usize = 64;
/// MCP sessions (session era) a relay keeps per bridge.
pub const SESSIONS_PER_BRIDGE: usize = 1_000;
/// Sessions one principal other than the bridge's owner role may have open at once (without
/// it, one reviewer token could open 1,000 sessions in 1.4 s and lock the owner out).
pub const SESSIONS_PER_PRINCIPAL: usize = 100;
/// Of [`SESSIONS_PER_BRIDGE`], the sessions principals other than owners leave to owners.
pub const OWNER_RESERVED_SESSIONS: usize = 100;
/// Largest part of a client's `initialize` a session keeps for reopening it on the daemon
/// (`protocolVersion`, `capabilities`, `clientInfo`), serialized; a larger one is refused (a
/// session that kept the whole message would let ten 8 MB initializes hold 1.35 GB).
pub const SESSION_INITIALIZE_MAX_BYTES: usize = 16 * KIB;
/// Largest `initialize` request body the relay reads further than its `jsonrpc`, `method` and
/// `id`: a larger one is refused before it is parsed, since a session keeps at most
/// [`SESSION_INITIALIZE_MAX_BYTES`] of it (1,000 initializes of 8 MB, each parsed whole on the
/// async workers, would take a legitimate client's `ping` p99 to 145 ms).
pub const INITIALIZE_BODY_MAX_BYTES: usize = 4 * SESSION_INITIALIZE_MAX_BYTES;
/// Largest MCP request body the relay parses on the async worker that read it; a larger one is
/// parsed on the blocking pool, a bounded number at once (ten 8 MB bodies of small members
/// parsed on the two workers would stall every other request for 5.4 s).
pub const INLINE_PARSE_MAX_BYTES: usize = 64 * KIB;
/// How far past the last sequence number a daemon's message of a session may be; farther is a
/// protocol error that closes the socket (else a `seq` of 2^64-2 would make every later message
/// look like a replay). A gap is tolerated because the daemon drops its oldest
/// unacknowledged messages past 64 MiB while the relay is away; 2^32 is more than it can drop
/// within a reconnect grace, so a resuming daemon is never refused for its gap.
pub const DAEMON_SEQ_WINDOW: u64 = 1 << 32;
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
//
// Characters are counted as UTF-8 bytes: an upper bound of both Unicode scalar values and the
// UTF-16 code units JavaScript hosts count.

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

/// Lifetime of an authorization code: single use, redeemable for this long (OAuth 2.1 §4.1.2
/// recommends at most 10 minutes).
pub const AUTHORIZATION_CODE_LIFETIME: Duration = Duration::from_secs(5 * 60);
/// Default lifetime of an OAuth access token (configurable per relay for tests).
pub const ACCESS_TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// Lifetime of a refresh token from its issue; every rotation issues a new one, so a client that
/// refreshes at least this often stays signed in.
pub const REFRESH_TOKEN_LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long a rotated refresh token may be presented again and still get a valid pair (hosts
/// refresh from several nodes at once, or lose the answer to a restart); after it, presenting it
/// revokes the whole family (OAuth 2.1 §4.3.1, refresh token rotation).
pub const REFRESH_REUSE_GRACE: Duration = Duration::from_secs(60);
/// Most valid pairs one rotated refresh token may get again within [`REFRESH_REUSE_GRACE`]
/// (more are refused with `invalid_grant`, without revoking the grant).
pub const REFRESH_REISSUES_MAX: i64 = 16;
/// How long a consent form stays valid after the authorization request that rendered it.
pub const CONSENT_FORM_LIFETIME: Duration = Duration::from_secs(10 * 60);
/// Largest client ID metadata document fetched (5 KB; draft-ietf-oauth-client-id-metadata-document
/// §8 recommends a small limit).
pub const CLIENT_METADATA_DOCUMENT_MAX_BYTES: usize = 5 * 1000;
/// Largest JWK Set fetched from a client's `jwks_uri`.
pub const CLIENT_JWKS_MAX_BYTES: usize = 64 * KIB;
/// Time allowed for fetching one client ID metadata document or JWK Set (connect included).
pub const CLIENT_METADATA_FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest a fetched client ID metadata document is used without fetching it again, whatever
/// its caching headers say.
pub const CLIENT_METADATA_CACHE_MAX: Duration = Duration::from_secs(7 * 24 * 3600);
/// Client ID metadata documents the relay fetches for one client address per
/// [`SIGN_IN_WINDOW`] (cached documents do not count).
pub const CLIENT_METADATA_FETCHES_PER_ADDRESS: u32 = 60;
/// Client ID metadata documents kept in memory (least recently used one dropped first).
pub const CLIENT_METADATA_CACHE_ENTRIES: usize = 256;
/// Largest body of a dynamic client registration request (RFC 7591 §3.1).
pub const REGISTRATION_BODY_MAX_BYTES: usize = 16 * KIB;
/// Largest form body of the token, revocation and consent endpoints.
pub const OAUTH_FORM_MAX_BYTES: usize = 16 * KIB;
/// Longest single OAuth parameter (`state`, `redirect_uri`, a client URL, …), in bytes.
pub const OAUTH_PARAM_MAX_BYTES: usize = 2 * KIB;
/// Most redirect URIs one client may register.
pub const CLIENT_REDIRECT_URIS_MAX: usize = 16;
/// A registered client that never got a grant is deleted this long after registration.
pub const REGISTRATION_UNUSED_EXPIRY: Duration = Duration::from_secs(24 * 3600);
/// A registered client with no live grant is deleted this long after its last use.
pub const REGISTRATION_IDLE_EXPIRY: Duration = Duration::from_secs(90 * 24 * 3600);
/// Most registered clients a relay keeps; registration past it is refused until unused ones
/// expire.
pub const REGISTERED_CLIENTS_MAX: i64 = 10_000;
/// Most dynamic client registrations accepted from one client address per
/// [`SIGN_IN_WINDOW`].
pub const REGISTRATIONS_PER_ADDRESS: u32 = 60;
/// Window over which failed sign-ins and registrations are counted.
pub const SIGN_IN_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Failed sign-ins of one account within [`SIGN_IN_WINDOW`] after which further attempts are
/// refused until the window has passed.
pub const SIGN_IN_FAILURES_PER_ACCOUNT: u32 = 5;
/// Failed sign-ins from one client address within [`SIGN_IN_WINDOW`] after which further
/// attempts from it are refused.
pub const SIGN_IN_FAILURES_PER_ADDRESS: u32 = 20;
/// Accounts and addresses whose failed sign-ins are remembered (oldest forgotten first).
pub const SIGN_IN_THROTTLE_ENTRIES: usize = 10_000;
/// Password checks (argon2id) running at once; more wait.
pub const PASSWORD_CHECKS_CONCURRENT: usize = 2;
/// Shortest password an operator may set for an account (generated ones are longer).
pub const PASSWORD_MIN_CHARS: usize = 12;
/// Accepted distance of a DPoP proof's or client assertion's `iat` from the relay's clock
/// (RFC 9449 §11.1; RFC 7523 §3).
pub const PROOF_CLOCK_SKEW: Duration = Duration::from_secs(60);
/// Longest lifetime accepted for a client assertion (`exp` − now), and how long DPoP proof and
/// assertion ids are remembered against replay.
pub const PROOF_MAX_AGE: Duration = Duration::from_secs(5 * 60);
/// Proof and assertion ids (`jti`) remembered against replay; past it the oldest are forgotten
/// (their proofs are also past [`PROOF_MAX_AGE`] by then, or proofs are refused until they are).
pub const PROOF_IDS_REMEMBERED: usize = 10_000;

// Managed jobs and local resources (docs/jobs.md).

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

// Agent context: instructions, project facts, skills, registered commands, search/fetch.

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

// The stdio supervisor: `machine-mcp stdio` keeps the client's connection and runs
// the server as a replaceable worker process.

/// Requests a supervisor holds while no worker can take them (one starting or restarting);
/// one more is answered at once with a `not_sent` error.
pub const SUPERVISOR_QUEUE_MAX: usize = 256;
/// Bytes of the requests a supervisor holds (see [`SUPERVISOR_QUEUE_MAX`]).
pub const SUPERVISOR_QUEUE_MAX_BYTES: usize = 16 * MIB;
/// Restarts of a worker that exited unexpectedly before the supervisor gives up; the count
/// starts again once a restarted worker has served for [`WORKER_HEALTHY_AFTER`].
pub const WORKER_RESTARTS_MAX: u32 = 5;
/// Wait before the first restart of a worker that exited; it doubles for each further attempt.
pub const WORKER_RESTART_BACKOFF_MIN: Duration = Duration::from_secs(1);
/// Longest wait between two restarts of a worker.
pub const WORKER_RESTART_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long a restarted worker must serve before its restarts count from zero again.
pub const WORKER_HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// How long a new worker has to start and answer its `initialize` and `tools/list`.
pub const WORKER_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the supervisor checks whether the installed binary changed.
pub const UPGRADE_CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// How long, from when it noticed a new binary, a daemon waits for ended work to be collected
/// before its restart drops it: process sessions that exited and tasks that finished (still
/// readable), and results the relay has not acknowledged (a link that is down: the relay keeps
/// waiting for them as long, [`RECONNECT_GRACE`]).
pub const UPGRADE_ENDED_GRACE: Duration = RECONNECT_GRACE;
/// How long `BINARY --version` of a changed binary may take.
pub const VERSION_PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a worker replaced by an upgrade keeps serving its calls in flight, process sessions
/// and tasks (by id) before it is stopped; they are then reported as ended by the upgrade.
pub const RETIRED_WORKER_GRACE: Duration = Duration::from_secs(15 * 60);
/// How often the supervisor asks a replaced worker whether it still has work.
pub const RETIRED_WORKER_POLL: Duration = Duration::from_secs(5);
/// Longest line a supervisor takes from its worker: a worker's answer is one line, and an
/// explicit large read is larger than a request may be (a 5 MiB `read_file` is twice that in
/// JSON, more with escapes); a longer one is answered as lost (`outcome_unknown`).
pub const WORKER_LINE_MAX_BYTES: usize = 128 * MIB;
/// Process session and task ids the supervisor remembers the worker of (oldest forgotten first).
pub const SUPERVISOR_OWNED_IDS_MAX: usize = 4096;

// Delegation: background runs of agent CLIs (`codex`, `claude`, `gemini`) with
// receipts in `STATE_DIR/delegations`.

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
