-- Bridges: one per enrolled daemon/workspace. `catalog` is the servers list of the daemon's
-- last hello (JSON), kept so initialize and tools/list answer while the daemon is offline.
CREATE TABLE bridges (
    name        TEXT PRIMARY KEY NOT NULL,
    created_at  INTEGER NOT NULL,
    catalog     TEXT
);

-- One-time enrollment codes, stored as SHA-256 hashes.
CREATE TABLE enrollments (
    code_hash   TEXT PRIMARY KEY NOT NULL,
    bridge      TEXT NOT NULL REFERENCES bridges(name) ON DELETE CASCADE,
    expires_at  INTEGER NOT NULL,
    used_at     INTEGER
);

-- Device public keys registered at enrollment (SEC1 uncompressed, base64url).
CREATE TABLE device_keys (
    key_id      TEXT PRIMARY KEY NOT NULL,
    bridge      TEXT NOT NULL REFERENCES bridges(name) ON DELETE CASCADE,
    public_key  TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);

-- Static bearer tokens, stored as SHA-256 hashes.
CREATE TABLE tokens (
    id          TEXT PRIMARY KEY NOT NULL,
    bridge      TEXT NOT NULL REFERENCES bridges(name) ON DELETE CASCADE,
    role        TEXT NOT NULL,
    token_hash  TEXT NOT NULL UNIQUE,
    label       TEXT,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);
