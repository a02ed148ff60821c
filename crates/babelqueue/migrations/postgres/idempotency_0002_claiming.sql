-- BabelQueue idempotency, the claiming store (ADR-0022): the table
-- `idempotency::PostgresClaimingStore` reads and writes. Same layout as the PHP SDK's
-- `PdoStore::ddl()` (`bq_idempotency`), so PHP and Rust consumers of one queue share it. Run it
-- with `babelqueue::idempotency::migrate` or your own migration tool; safe to run again.
--
-- state:      'claimed' while a consumer runs the handler, 'seen' once it committed.
-- expires_at: epoch seconds after which a 'claimed' row may be taken over (the backstop for a
--             consumer that died holding it); NULL for a 'seen' row, which is permanent.

CREATE TABLE IF NOT EXISTS bq_idempotency (
    message_id VARCHAR(255) NOT NULL,
    state      VARCHAR(16)  NOT NULL,
    expires_at BIGINT       NULL,
    PRIMARY KEY (message_id)
);
