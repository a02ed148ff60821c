-- The AceMQ schema registry: Avro schemas under ids that never change. `${table}` is replaced
-- by the store's table name (default acemq_schemas), validated as a plain SQL identifier first.
--
-- A schema is identified by its exact text: fingerprint is the SHA-256 of its UTF-8 bytes,
-- unique, so registering the same text again finds its row. New ids come from the one row of
-- `${table}_ids`, locked by the registering transaction (SELECT ... FOR UPDATE), so concurrent
-- registrations of one schema agree on one id and ids are never reused.

CREATE TABLE IF NOT EXISTS ${table} (
    id            INTEGER                  NOT NULL PRIMARY KEY,
    fingerprint   BYTEA                    NOT NULL,
    schema_text   TEXT                     NOT NULL,
    registered_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
    CONSTRAINT ${table}_text UNIQUE (fingerprint)
);

CREATE TABLE IF NOT EXISTS ${table}_ids (
    singleton BOOLEAN NOT NULL PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    next_id   INTEGER NOT NULL
);

INSERT INTO ${table}_ids (singleton, next_id) VALUES (TRUE, 1) ON CONFLICT DO NOTHING;
