-- Revocation (issue 12 items 6 and 8): an enrollment code may leave the bridge's other device keys
-- in place (a second machine) or replace them (the default), and every change that revokes a
-- credential bumps one counter, which a running relay polls to end what it holds for it at once.
ALTER TABLE enrollments ADD COLUMN keep_existing INTEGER NOT NULL DEFAULT 0;

CREATE TABLE relay_state (
    name   TEXT PRIMARY KEY NOT NULL,
    value  INTEGER NOT NULL
);
INSERT INTO relay_state (name, value) VALUES ('revocations', 0);
