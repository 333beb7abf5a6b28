-- Durable MCP sessions and resumable streams (issue 15 items 1 and 2): a relay restart keeps the
-- session-era MCP sessions, the last events of their POST SSE streams (each with its SHA-256) and
-- a marker for every request in flight, so that a replay after the restart returns what was
-- missed and a request cut off by the restart ends with an error saying so. Rows are deleted
-- when the session ends, when a stream is acknowledged or past its retention.

-- Key material generated once per store (the HMAC key binding MCP-Session-Id to its principal).
CREATE TABLE relay_secrets (
    name   TEXT PRIMARY KEY NOT NULL,
    value  BLOB NOT NULL
);

CREATE TABLE mcp_sessions (
    sid          TEXT PRIMARY KEY NOT NULL,
    bridge       TEXT NOT NULL,
    server       TEXT NOT NULL,
    principal    TEXT NOT NULL,
    credential   TEXT NOT NULL,
    role         TEXT NOT NULL,
    -- What `kept_initialize` kept of the client's initialize (bounded, JSON).
    initialize   TEXT NOT NULL,
    initialized  INTEGER NOT NULL,
    -- The daemon instance the session is open on, if any.
    opened_on    TEXT,
    -- Unix seconds.
    last_active  INTEGER NOT NULL
);

-- One row per POST SSE stream of a session: while `finished_at` is NULL its request is in flight
-- (the in-flight marker).
CREATE TABLE sse_streams (
    id           TEXT PRIMARY KEY NOT NULL,
    sid          TEXT NOT NULL,
    principal    TEXT NOT NULL,
    bridge       TEXT NOT NULL,
    -- The JSON-RPC id of the request (JSON text).
    request_id   TEXT NOT NULL,
    opened_at    INTEGER NOT NULL,
    finished_at  INTEGER,
    -- The number of the stream's last event once finished.
    last_seq     INTEGER
);
CREATE INDEX sse_streams_sid ON sse_streams (sid);

CREATE TABLE sse_events (
    stream  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    data    TEXT NOT NULL,
    -- Lowercase hex SHA-256 of `data`; a mismatch on read is corruption, reported, never served.
    sha256  TEXT NOT NULL,
    PRIMARY KEY (stream, seq)
);
