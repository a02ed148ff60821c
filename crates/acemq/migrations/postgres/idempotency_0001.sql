-- The AceMQ idempotency table, in the Java port's layout (JdbcIdempotencyStore), so a Rust
-- worker and a Java worker on one queue can share it. `${table}` is replaced by the store's
-- table name (default acemq_idempotency), validated as a plain SQL identifier first.
--
-- state is CLAIMED or CONFIRMED. claimed_by names the instance holding a claim (NULL once
-- confirmed), so a release gives up only its own. expires_at carries both deadlines, never
-- both meaningful at once: the lease while CLAIMED, the retention once CONFIRMED; the one
-- index serves the claim path and purge_expired.

CREATE TABLE IF NOT EXISTS ${table} (
    message_id  VARCHAR(255)             NOT NULL PRIMARY KEY,
    state       VARCHAR(16)              NOT NULL,
    claimed_by  VARCHAR(64),
    recorded_at TIMESTAMP WITH TIME ZONE NOT NULL,
    expires_at  TIMESTAMP WITH TIME ZONE NOT NULL
);

CREATE INDEX IF NOT EXISTS ${table}_expiry ON ${table} (expires_at);
