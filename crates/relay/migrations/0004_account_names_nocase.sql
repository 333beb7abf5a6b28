-- Account names are one name whatever their letter case (`owner`, `Owner` and `OWNER` were three
-- accounts; a sign-in now takes the name in any case).
CREATE UNIQUE INDEX accounts_bridge_name_nocase ON accounts (bridge, name COLLATE NOCASE);
