-- The device key a redeemed enrollment code registered: the same code presented again with the
-- same public key (a daemon whose `enrolled` answer was lost) is answered with that key again,
-- while the code is valid and the key not revoked.
ALTER TABLE enrollments ADD COLUMN key_id TEXT;
