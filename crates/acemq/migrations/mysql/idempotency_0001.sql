-- The AceMQ idempotency table on MariaDB (10.6 and later) or MySQL (8.0 and later): the Java
-- port's layout as the PostgreSQL migration has it, column for column, with MySQL's types.
-- `${table}` is replaced by the store's table name (default acemq_idempotency), validated as a
-- plain SQL identifier first.
--
-- state is CLAIMED or CONFIRMED. claimed_by names the instance holding a claim (NULL once
-- confirmed), so a release gives up only its own. expires_at carries both deadlines, never
-- both meaningful at once: the lease while CLAIMED, the retention once CONFIRMED; the one
-- index serves the claim path and purge_expired.
--
-- The times are DATETIME(6) in UTC (the store writes UTC_TIMESTAMP(6)), which TIMESTAMPTZ
-- becomes here: TIMESTAMP would end in 2038 and follow each session's time zone. message_id
-- compares byte for byte (utf8mb4_bin), as PostgreSQL's varchar does, so keys differing only in
-- case stay two keys; like every PAD SPACE collation it ignores trailing spaces.

CREATE TABLE IF NOT EXISTS ${table} (
    message_id  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    state       VARCHAR(16)  NOT NULL,
    claimed_by  VARCHAR(64),
    recorded_at DATETIME(6)  NOT NULL,
    expires_at  DATETIME(6)  NOT NULL,
    INDEX ${table}_expiry (expires_at)
) ENGINE = InnoDB;
