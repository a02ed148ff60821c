-- The AceMQ transactional outbox on MariaDB (10.6 and later) or MySQL (8.0 and later): the
-- columns of the PostgreSQL migration (the Go port's `acemq_outbox` layout and the relay's lease
-- columns), with MySQL's types. The times are DATETIME(6) in UTC: the store writes
-- UTC_TIMESTAMP(6), and the default of created_at (for a writer that leaves it out) is the
-- session's clock, UTC on sqlx's connections.
--
-- MySQL has no partial index: the relay's one hot query (unpublished rows, oldest first) walks
-- an index that starts with published_at. It is named for its use only, since MySQL scopes index
-- names to their table.
--
-- `acemq::outbox::MySqlOutbox::migrate` runs this file with the table name substituted.

CREATE TABLE IF NOT EXISTS acemq_outbox (
    id            VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    exchange      VARCHAR(255) NOT NULL,
    routing_key   VARCHAR(255) NOT NULL,
    body          LONGBLOB     NOT NULL,
    content_type  VARCHAR(255) NOT NULL,
    headers       LONGTEXT     NOT NULL,
    created_at    DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    attempts      INTEGER      NOT NULL DEFAULT 0,
    last_error    TEXT,
    properties    LONGTEXT,
    mandatory     BOOLEAN      NOT NULL DEFAULT TRUE,
    published_at  DATETIME(6),
    locked_by     VARCHAR(64),
    locked_until  DATETIME(6),
    INDEX pending (published_at, created_at, id)
) ENGINE = InnoDB;
