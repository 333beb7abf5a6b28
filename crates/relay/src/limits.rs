//! Bounds the relay alone enforces (the ones that cross a process boundary are in
//! `protocol::limits`): the budget of MCP request body bytes in flight (`budget`), the part of
//! a body held in memory before it is spilled to disk (`spill`), the drain
//! of a stop (the accept loop of `server`) and the wait for a stream's row before its first
//! event (`mcp`).

use std::time::Duration;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// MCP request body bytes the relay holds in flight (being read or parsed, in memory or spilled
/// to disk: [`REQUEST_BODY_SPILL_THRESHOLD`]) for one holder — a static token, or an OAuth
/// account whatever clients it signed in with: four bodies of the largest size. A body counts
/// from its headers (`Content-Length`, or [`MCP_REQUEST_BODY_MAX_BYTES`] without one) until it
/// is parsed; past the budget the request is answered 429 with `Retry-After` before its body is
/// read.
pub const REQUEST_BODY_BYTES_PER_CREDENTIAL: usize = 4 * MCP_REQUEST_BODY_MAX_BYTES;
/// MCP request body bytes the relay holds in memory in all, each body counted for the part of it
/// kept in memory (at most [`REQUEST_BODY_SPILL_THRESHOLD`] when the relay spills, all of it
/// otherwise); past it a request is answered 503 with `Retry-After` before its body is read.
/// With spilling that is 512 bodies held at once, more than a few holders' budgets.
pub const REQUEST_BODY_BYTES_IN_FLIGHT: usize = 16 * MCP_REQUEST_BODY_MAX_BYTES;
/// MCP request body bytes the relay holds spilled to disk in all (1 GiB: 32 holders' budgets),
/// each body counted for its part past [`REQUEST_BODY_SPILL_THRESHOLD`]; past it a request is
/// answered 503 with `Retry-After` before its body is read.
pub const REQUEST_BODY_BYTES_SPILLED_IN_FLIGHT: usize = 128 * MCP_REQUEST_BODY_MAX_BYTES;
/// The `Retry-After` (seconds) of a request refused by the body budget, or whose body could not
/// be spilled.
pub const REQUEST_BODY_RETRY_AFTER_SECS: u64 = 1;
/// MCP request body bytes the relay holds in memory while one body arrives (256 KiB); each time
/// a body passes it, what is held is written to an anonymous file in the relay's spill
/// directory (`spill`), and the body is parsed from there once complete. So a slow or held body
/// costs at most this much memory, and the budget's 16 largest bodies in flight 4 MiB instead of
/// 128 MiB. Why 256 KiB: nearly every MCP request is far below it (a `tools/call` is a few
/// hundred bytes to a few KiB; a whole source file written in one call rarely passes 64 KiB), so
/// the common case never touches the disk; a body past it costs one write per 256 KiB (32 for
/// the largest) and one read back, about 3 ms for 8 MiB, beside 14 ms or more to parse it. At
/// least [`INLINE_PARSE_MAX_BYTES`] and [`INITIALIZE_BODY_MAX_BYTES`], so a spilled body is one
/// the blocking pool parses anyway, with the oversized-`initialize` scan.
pub const REQUEST_BODY_SPILL_THRESHOLD: usize = 256 * KIB;
const _: () = assert!(
    REQUEST_BODY_SPILL_THRESHOLD >= INLINE_PARSE_MAX_BYTES
        && REQUEST_BODY_SPILL_THRESHOLD >= INITIALIZE_BODY_MAX_BYTES
);
/// Credentials of each kind (static tokens, OAuth access tokens) a relay keeps after the store
/// vouched for them, so that their next requests cost no store query (`storage::credentials`);
/// past it the kept ones of that kind are forgotten at once and read again as presented.
pub const CREDENTIAL_CACHE_ENTRIES: usize = 4096;
/// How long a relay (`relay serve`, `up`) that was asked to stop lets its connections finish:
/// its listener closes at once, requests in progress may complete within this drain, and what
/// is still open after it (SSE streams, listen streams, daemon sockets) is closed; clients resume
/// or reconnect as after a relay restart. A second stop signal ends the process at once.
pub const RELAY_STOP_DRAIN: Duration = Duration::from_secs(10);
/// How long a session's POST answered with SSE waits for the store to hold its stream's row
/// before the stream's first event (the priming event, whose id a client resumes from) leaves:
/// one store transaction normally; past this bound (the store has stalled) the stream is served
/// anyway and a relay crash before the row is written forgets it.
pub const STREAM_STORED_WAIT: Duration = Duration::from_secs(2);
/// How long a relay may hold an `ack` (and a `close {sid}`) for the next frame to its daemon, so
/// that acknowledging a response goes out with the next request instead of in a write of its
/// own; the daemon holds the acknowledged messages that much longer.
pub const ACK_LINGER: Duration = Duration::from_millis(2);
/// How long the first event of a session's POST stream waits for the stream to finish before it
/// leaves (and the response's headers with it): a request answered within it goes to its client
/// whole, in one write with the headers, and is never written to the store — no client holds an
/// event id of it to resume from. Past it the stream is written to the store and its priming
/// event leaves once the store holds it ([`STREAM_STORED_WAIT`]). Short beside any client's wait
/// for headers; long enough for a quick tool call through a loaded relay.
pub const FIRST_EVENT_LINGER: Duration = Duration::from_millis(10);

// === Transport ===

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
/// Bytes a daemon socket's reader asks the kernel for at once, and the capacity its read buffer
/// starts with (8 KiB). A larger frame grows the buffer to its size, which the buffer then keeps
/// for the socket's life; daemons write frames past 16 KiB as fragments, so a connected daemon
/// costs the relay a buffer of a few tens of KiB. Relayed frames are mostly far below 8 KiB; a
/// larger one costs one more read per 8 KiB.
pub const DAEMON_SOCKET_READ_BUFFER_BYTES: usize = 8 * KIB;
/// Largest MCP request body the relay accepts over Streamable HTTP.
pub const MCP_REQUEST_BODY_MAX_BYTES: usize = 8 * MIB;

// === Concurrency ===

/// Open MCP 2026-07-28 `subscriptions/listen` streams per bridge on a relay; counted apart from
/// [`RELAYED_REQUESTS_PER_BRIDGE`](protocol::limits::RELAYED_REQUESTS_PER_BRIDGE) so idle
/// subscriptions never starve calls (HTTP 429 beyond).
pub const SUBSCRIPTIONS_PER_BRIDGE: usize = 64;

// === Relay link timing ===

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
/// counted (`machine_mcp_relay_stream_messages_dropped_total`) and announced to the client that
/// reads
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
/// Silence after which the relay declares a daemon socket dead.
pub const RELAY_LIVENESS_TIMEOUT: Duration = Duration::from_secs(90);

// === Tasks (MCP extension `io.modelcontextprotocol/tasks`, SEP-2663) ===

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
/// Accepted distance of a DPoP proof's or client assertion's `iat` from the relay's clock
/// (RFC 9449 §11.1; RFC 7523 §3).
pub const PROOF_CLOCK_SKEW: Duration = Duration::from_secs(60);
/// Longest lifetime accepted for a client assertion (`exp` − now), and how long DPoP proof and
/// assertion ids are remembered against replay.
pub const PROOF_MAX_AGE: Duration = Duration::from_secs(5 * 60);
/// Proof and assertion ids (`jti`) remembered against replay; past it the oldest are forgotten
/// (their proofs are also past [`PROOF_MAX_AGE`] by then, or proofs are refused until they are).
pub const PROOF_IDS_REMEMBERED: usize = 10_000;
