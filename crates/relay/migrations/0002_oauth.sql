-- OAuth 2.1 (DESIGN §6): accounts per bridge, registered and metadata-document clients,
-- authorization codes, token families with rotating refresh tokens, and access tokens.
-- Every secret (password, client secret, code, token) is stored only as a hash.

-- People who sign in on the consent page. `version` grows with every change that must end the
-- account's tokens at once (role change, disable, password rotation); a token records the
-- version it was issued under and is dead when they differ.
CREATE TABLE accounts (
    id             TEXT PRIMARY KEY NOT NULL,
    bridge         TEXT NOT NULL REFERENCES bridges(name) ON DELETE CASCADE,
    name           TEXT NOT NULL,
    role           TEXT NOT NULL,
    password_hash  TEXT NOT NULL,
    version        INTEGER NOT NULL DEFAULT 1,
    disabled_at    INTEGER,
    created_at     INTEGER NOT NULL,
    UNIQUE (bridge, name)
);

-- OAuth clients: registered with RFC 7591 (`kind` 'registered', id `mbc_…`) or identified by
-- the HTTPS URL of their client ID metadata document (`kind` 'document'; stored once a grant is
-- made, with the document and until when it may be used without fetching it again).
CREATE TABLE oauth_clients (
    client_id            TEXT PRIMARY KEY NOT NULL,
    kind                 TEXT NOT NULL,
    metadata             TEXT NOT NULL,
    secret_hash          TEXT,
    created_at           INTEGER NOT NULL,
    last_used_at         INTEGER NOT NULL,
    document_expires_at  INTEGER,
    revoked_at           INTEGER
);

-- One grant: a client, an account (at a version), a redirect URI and a resource. Refresh tokens
-- rotate inside it; revoking it (or replaying a rotated refresh token after the grace) ends
-- every token it holds.
CREATE TABLE oauth_families (
    id               TEXT PRIMARY KEY NOT NULL,
    client_id        TEXT NOT NULL,
    account_id       TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    account_version  INTEGER NOT NULL,
    redirect_uri     TEXT NOT NULL,
    resource         TEXT NOT NULL,
    scope            TEXT NOT NULL,
    dpop_jkt         TEXT,
    created_at       INTEGER NOT NULL,
    last_used_at     INTEGER NOT NULL,
    revoked_at       INTEGER,
    revoked_reason   TEXT
);
CREATE INDEX oauth_families_client ON oauth_families (client_id);
CREATE INDEX oauth_families_account ON oauth_families (account_id);

-- Authorization codes: single use, short-lived. `family_id` is set when the code is redeemed, so
-- that a replayed code can revoke what it produced (OAuth 2.1 §4.1.3).
CREATE TABLE oauth_codes (
    code_hash        TEXT PRIMARY KEY NOT NULL,
    client_id        TEXT NOT NULL,
    account_id       TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    account_version  INTEGER NOT NULL,
    redirect_uri     TEXT NOT NULL,
    code_challenge   TEXT NOT NULL,
    resource         TEXT NOT NULL,
    scope            TEXT NOT NULL,
    dpop_jkt         TEXT,
    expires_at       INTEGER NOT NULL,
    used_at          INTEGER,
    family_id        TEXT
);

-- Refresh tokens: each use marks the token used and issues a child; a used token presented again
-- within the retry grace issues a sibling (hosts refresh from several nodes at once), after it
-- the family is revoked.
CREATE TABLE oauth_refresh_tokens (
    token_hash   TEXT PRIMARY KEY NOT NULL,
    family_id    TEXT NOT NULL REFERENCES oauth_families(id) ON DELETE CASCADE,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    used_at      INTEGER,
    reissued     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX oauth_refresh_tokens_family ON oauth_refresh_tokens (family_id);

-- Access tokens: opaque, short-lived, bound to their family (and through it to everything else).
CREATE TABLE oauth_access_tokens (
    token_hash   TEXT PRIMARY KEY NOT NULL,
    family_id    TEXT NOT NULL REFERENCES oauth_families(id) ON DELETE CASCADE,
    expires_at   INTEGER NOT NULL
);
CREATE INDEX oauth_access_tokens_family ON oauth_access_tokens (family_id);
