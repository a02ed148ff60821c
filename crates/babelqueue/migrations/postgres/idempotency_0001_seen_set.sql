-- BabelQueue idempotency, the seen-set (ADR-0022): the table `idempotency::PostgresStore` reads
-- and writes. Same layout as the Go SDK's idempotency-postgres (`babelqueue_idempotency`), so Go
-- and Rust consumers of one queue share it. Run it with `babelqueue::idempotency::migrate` or
-- your own migration tool; safe to run again.
--
-- message_id: the envelope's meta.id verbatim; the primary key makes exactly one of concurrent
--             INSERT ... ON CONFLICT statements write the row.
-- expires_at: NULL = the id stays seen until forgotten; otherwise a row at or past it counts as
--             absent and may be claimed again.

CREATE TABLE IF NOT EXISTS babelqueue_idempotency (
    message_id  TEXT        NOT NULL PRIMARY KEY,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ NULL
);

CREATE INDEX IF NOT EXISTS babelqueue_idempotency_expires_at_idx
    ON babelqueue_idempotency (expires_at);
