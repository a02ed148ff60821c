-- The AceMQ schema registry, in the Java port's table layout (JdbcSchemaRegistry,
-- schema-registry-schema.sql), so Rust and Java services can read each other's ids from one
-- table. `${table}` is replaced by the store's table name (default acemq_schema_registry),
-- validated as a plain SQL identifier first.
--
-- An id stands for one schema forever. fingerprint identifies a schema's text (polyq writes
-- the hex SHA-256 of the exact text it registers) and is unique, so the same schema offered
-- twice comes back with the same id. format is `avro`; subject is the schema's full name.
-- `${table}_seq` holds the last id handed out in its one row; a registering transaction
-- locks that row, so concurrent registrations queue for an instant and no id is given twice.

CREATE TABLE IF NOT EXISTS ${table} (
    id            INTEGER                  NOT NULL PRIMARY KEY,
    fingerprint   VARCHAR(64)              NOT NULL,
    format        VARCHAR(32)              NOT NULL,
    subject       VARCHAR(255)             NOT NULL,
    definition    TEXT                     NOT NULL,
    registered_at TIMESTAMP WITH TIME ZONE NOT NULL
);

CREATE UNIQUE INDEX IF NOT EXISTS ${table}_fingerprint ON ${table} (fingerprint);

CREATE TABLE IF NOT EXISTS ${table}_seq (
    only_row INTEGER NOT NULL PRIMARY KEY,
    last_id  INTEGER NOT NULL
);

INSERT INTO ${table}_seq (only_row, last_id) VALUES (1, 0) ON CONFLICT DO NOTHING;
