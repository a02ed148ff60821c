-- BabelQueue idempotency, the seen-set (ADR-0022), on MariaDB (10.6 and later) or MySQL (8.0 and
-- later): the table `idempotency::MySqlStore` reads and writes, the columns of the Go SDK's
-- idempotency-postgres layout (`babelqueue_idempotency`) with MySQL's types. Run it with
-- `MySqlStore::migrate` or your own migration tool; safe to run again.
--
-- message_id: the envelope's meta.id verbatim, compared byte for byte (utf8mb4_bin; like every
--             PAD SPACE collation it ignores trailing spaces). PostgreSQL's TEXT has no length
--             limit; a primary key here needs one: an id past 255 characters is refused.
-- created_at, expires_at: DATETIME(6) in UTC (the store writes UTC_TIMESTAMP(6)).
--             expires_at NULL = the id stays seen until forgotten; otherwise a row at or past it
--             counts as absent and may be remembered again.
-- The index is named for its column only: MySQL scopes index names to their table, and a
-- table renamed within the 64-character limit would push `<table>_expires_at_idx` past it.

CREATE TABLE IF NOT EXISTS babelqueue_idempotency (
    message_id  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    created_at  DATETIME(6)  NOT NULL,
    expires_at  DATETIME(6)  NULL,
    INDEX expires_at_idx (expires_at)
) ENGINE = InnoDB;
