-- The AceMQ transactional outbox (PostgreSQL).
--
-- The first nine columns are the Go port's `SQLOutboxStore` layout (`acemq_outbox`: id, exchange,
-- routing_key, body, content_type, headers, created_at, attempts, last_error), so rows a Go
-- writer records are published by the Rust relay. The rest are nullable or defaulted, so a
-- writer that does not know them still inserts:
--   properties     the other AMQP properties the publisher set (message id, correlation id,
--                  timestamp, type, delivery mode, expiry, ...), as the `polyq` message JSON
--   mandatory      whether an unroutable publish is a failure (the publisher's default)
--   published_at   set once the broker confirmed; the row is kept for audit
--   locked_by,     the relay's lease on a claimed batch (the Java port's columns); a failed
--   locked_until   publish keeps `locked_until` as the earliest next attempt (the backoff)
--
-- `acemq::outbox::migrate` runs this file with the table name substituted.

CREATE TABLE IF NOT EXISTS acemq_outbox (
    id            VARCHAR(255) PRIMARY KEY,
    exchange      VARCHAR(255) NOT NULL,
    routing_key   VARCHAR(255) NOT NULL,
    body          BYTEA        NOT NULL,
    content_type  VARCHAR(255) NOT NULL,
    headers       TEXT         NOT NULL,
    created_at    TIMESTAMPTZ  NOT NULL DEFAULT now(),
    attempts      INTEGER      NOT NULL DEFAULT 0,
    last_error    TEXT,
    properties    TEXT,
    mandatory     BOOLEAN      NOT NULL DEFAULT TRUE,
    published_at  TIMESTAMPTZ,
    locked_by     VARCHAR(64),
    locked_until  TIMESTAMPTZ
);

-- The relay's one hot query: unpublished rows, oldest first.
CREATE INDEX IF NOT EXISTS acemq_outbox_pending ON acemq_outbox (created_at, id)
    WHERE published_at IS NULL;
