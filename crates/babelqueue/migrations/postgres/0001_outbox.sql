-- The BabelQueue transactional outbox, ADR-0029 (PostgreSQL).
--
-- The layout of the upstream PHP outbox table (`babelqueue_outbox` in BabelQueue's
-- `outbox-initorm/schema.sql` example, PostgreSQL variant: id, queue, body, status, attempts,
-- last_error, created_at, published_at, failed_at), so a PHP writer and a Rust relay (or the
-- reverse) can share one table. `body` is the frozen wire envelope, byte for byte; the
-- other columns are the relay's bookkeeping and never travel. `status` is 'pending',
-- 'published', or 'failed' for a row the relay can never publish (a malformed body or queue).
--
-- One column is added, nullable so that writers which do not know it still insert:
--   locked_until   the relay's lease on a claimed batch, and after a failed publish the
--                  earliest next attempt (the backoff)
--
-- `babelqueue::outbox::migrate` runs this file with the table name substituted.

CREATE TABLE IF NOT EXISTS babelqueue_outbox (
    id           BIGSERIAL    PRIMARY KEY,
    queue        VARCHAR(255) NOT NULL,
    body         TEXT         NOT NULL,
    status       VARCHAR(16)  NOT NULL DEFAULT 'pending',
    attempts     INTEGER      NOT NULL DEFAULT 0,
    last_error   VARCHAR(500),
    created_at   TIMESTAMP    NOT NULL DEFAULT now(),
    published_at TIMESTAMP,
    failed_at    TIMESTAMP,
    locked_until TIMESTAMP
);

-- The relay's hot query: pending rows, oldest first.
CREATE INDEX IF NOT EXISTS babelqueue_outbox_pending ON babelqueue_outbox (status, id);
