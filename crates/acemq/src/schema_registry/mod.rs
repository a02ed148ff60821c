//! The schema registry behind the registered Avro codec (feature `avro`): Avro schemas under
//! numeric ids, as the Java, Go and Python ports keep them.
//!
//! The rules are the reference's: an id, once given, stands for its schema forever;
//! registering the same schema text again returns its id (idempotent by content, the exact
//! text, since a re-rendered schema is not guaranteed the same bytes and defaults matter to
//! resolution); new ids come from a counter. A [`SchemaRegistry`] caches both ways (id to
//! schema, schema to id) in front of its [`SchemaStore`]: [`InMemorySchemaStore`] (the
//! embedded default, one process) or, with the `postgres` feature,
//! [`postgres::PostgresSchemaStore`], shared by every instance and every port that points at
//! its table, ids drawn from a locked counter row.
//!
//! Decoding is synchronous and a store may be a database, so a
//! [`RegisteredAvro`] codec reads writer schemas from the
//! registry's cache ([`WriterSchemas::cached`]) and a consumer, before decoding a body framed
//! with an id the cache lacks, awaits the registry's fetch of it ([`WriterSchemas::fetch`]).
//! Schemas never change under an id, so the cache never goes stale; only the first message of
//! each writer schema waits for the store.

mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use apache_avro::Schema;
use futures_util::future::BoxFuture;

pub use memory::InMemorySchemaStore;

use crate::codec::{CodecError, Preparation, RegisteredAvro, WriterSchemas};

/// The error a backend gives, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The format a registry entry of the registered Avro codec has (the Java port's
/// `SchemaDefinition.format`).
pub const AVRO: &str = "avro";

/// Where a registry keeps its schemas: ids given out for schema texts, and the texts back.
pub trait SchemaStore: Send + Sync + 'static {
    /// The id of `schema`, the exact text, whose full name is `subject`: the one it already
    /// has, or a new one.
    fn register<'a>(
        &'a self,
        subject: &'a str,
        schema: &'a str,
    ) -> BoxFuture<'a, Result<u32, SchemaRegistryError>>;
    /// The Avro schema text registered under `id`, if any.
    fn schema(&self, id: u32) -> BoxFuture<'_, Result<Option<String>, SchemaRegistryError>>;
}

/// What a registry or its store could not do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaRegistryError {
    /// The store's backend failed or could not be reached.
    #[error("the {store} schema registry could not {operation}; check that it is reachable")]
    Backend {
        /// `postgres`.
        store: &'static str,
        /// What was asked, such as `look up schema id 7`.
        operation: String,
        /// The backend's error.
        #[source]
        source: BoxError,
    },
    /// A schema text that is not a valid Avro schema; it is not registered.
    #[error("{0}")]
    InvalidSchema(#[source] CodecError),
    /// No schema is registered under the id.
    #[error("schema id {0} is not in the schema registry")]
    Unknown(u32),
    /// An id asked to stand for a schema while another one holds it: ids never change.
    #[error("schema id {id} is already registered for another schema; ids never change")]
    Conflict {
        /// The id.
        id: u32,
    },
    /// The counter has given out every id it holds.
    #[error("the schema registry has no ids left")]
    Exhausted,
    /// The counter row is missing: the migration has not run, or created the schema table
    /// without its counter.
    #[error("the schema registry's counter row is missing from `{table}`; run the migration")]
    MissingCounter {
        /// The counter table.
        table: String,
    },
    /// The id stands for a schema of another format (another port's Protobuf entry, say).
    #[error("schema id {id} is registered as {format}, not avro")]
    OtherFormat {
        /// The id.
        id: u32,
        /// The format it is registered as.
        format: String,
    },
    /// A table name the store refuses.
    #[error("`{name}` cannot name a schema registry table: {reason}")]
    InvalidName {
        /// The refused name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl SchemaRegistryError {
    /// Whether trying again later may succeed: `true` for a backend failure only.
    pub fn is_transient(&self) -> bool {
        matches!(self, SchemaRegistryError::Backend { .. })
    }

    /// Whether the id asked for is not registered.
    pub fn is_unknown(&self) -> bool {
        matches!(self, SchemaRegistryError::Unknown(_))
    }

    /// The error of the `store` backend that could not do `operation`.
    #[cfg(feature = "postgres")]
    fn backend(
        store: &'static str,
        operation: String,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        SchemaRegistryError::Backend {
            store,
            operation,
            source: Box::new(error),
        }
    }
}

/// A [`SchemaStore`] with its schemas cached both ways, and the source of writer schemas of
/// the [`RegisteredAvro`] codecs it builds. Clones share the store and the cache.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), acemq::schema_registry::SchemaRegistryError> {
/// use acemq::schema_registry::SchemaRegistry;
///
/// let registry = SchemaRegistry::in_memory();
/// let schema = r#"{"type":"record","name":"Order","fields":[{"name":"total","type":"int"}]}"#;
/// let id = registry.register(schema).await?;
/// assert_eq!(registry.register(schema).await?, id, "the same text keeps its id");
/// assert_eq!(registry.schema(id).await?.name().unwrap().to_string(), "Order");
/// assert!(registry.schema(id + 1).await.unwrap_err().is_unknown());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SchemaRegistry {
    store: Arc<dyn SchemaStore>,
    cache: Arc<Cache>,
}

/// Both ways: parsed schemas by id, ids by schema text.
#[derive(Default)]
struct Cache {
    by_id: RwLock<HashMap<u32, Arc<Schema>>>,
    by_text: RwLock<HashMap<String, u32>>,
}

impl Cache {
    fn insert(&self, id: u32, text: &str, schema: &Arc<Schema>) {
        self.by_id
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Arc::clone(schema));
        self.by_text
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(text.to_owned(), id);
    }
}

impl std::fmt::Debug for SchemaRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cached = self
            .cache
            .by_id
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("SchemaRegistry")
            .field("cached", &cached)
            .finish_non_exhaustive()
    }
}

impl SchemaRegistry {
    /// A registry on `store`, its cache empty.
    pub fn new(store: impl SchemaStore) -> Self {
        Self {
            store: Arc::new(store),
            cache: Arc::default(),
        }
    }

    /// A registry on a new [`InMemorySchemaStore`]: ids from 1, for one process.
    pub fn in_memory() -> Self {
        Self::new(InMemorySchemaStore::new())
    }

    /// The id of `schema` (Avro schema JSON, registered as the exact text): the one it has,
    /// from the cache or the store, or a new one.
    ///
    /// # Errors
    ///
    /// [`SchemaRegistryError::InvalidSchema`] when `schema` is not a valid Avro schema (it
    /// is not registered), or the store's error.
    pub async fn register(&self, schema: &str) -> Result<u32, SchemaRegistryError> {
        Ok(self.registered(schema).await?.0)
    }

    /// The schema registered under `id`, from the cache or the store.
    ///
    /// # Errors
    ///
    /// [`SchemaRegistryError::Unknown`] when no schema has `id`, or the store's error.
    pub async fn schema(&self, id: u32) -> Result<Arc<Schema>, SchemaRegistryError> {
        if let Some(schema) = self.cached(id) {
            return Ok(schema);
        }
        let text = self
            .store
            .schema(id)
            .await?
            .ok_or(SchemaRegistryError::Unknown(id))?;
        let schema = parse(&text)?;
        self.cache.insert(id, &text, &schema);
        Ok(schema)
    }

    /// A [`RegisteredAvro`] codec writing with `schema`, registered here, and reading every
    /// writer schema of this registry onto it.
    ///
    /// # Errors
    ///
    /// As [`SchemaRegistry::register`].
    pub async fn codec(&self, schema: &str) -> Result<RegisteredAvro, SchemaRegistryError> {
        let (id, parsed) = self.registered(schema).await?;
        Ok(RegisteredAvro::new(id, parsed, Arc::new(self.clone())))
    }

    async fn registered(&self, text: &str) -> Result<(u32, Arc<Schema>), SchemaRegistryError> {
        let known = self
            .cache
            .by_text
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(text)
            .copied();
        if let Some(cached) = known.and_then(|id| Some((id, self.cached(id)?))) {
            return Ok(cached);
        }
        let schema = parse(text)?;
        let id = self
            .store
            .register(&crate::codec::schema_name(&schema), text)
            .await?;
        self.cache.insert(id, text, &schema);
        Ok((id, schema))
    }
}

impl WriterSchemas for SchemaRegistry {
    fn cached(&self, id: u32) -> Option<Arc<Schema>> {
        self.cache
            .by_id
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned()
    }

    fn fetch(&self, id: u32) -> Preparation {
        let registry = self.clone();
        Box::pin(async move {
            match registry.schema(id).await {
                Ok(_) => Ok(()),
                Err(SchemaRegistryError::Unknown(_)) => Err(crate::codec::unknown_schema(id)),
                Err(error) => Err(CodecError(format!(
                    "the writer schema of id {id} could not be fetched: {error}"
                ))),
            }
        })
    }
}

fn parse(text: &str) -> Result<Arc<Schema>, SchemaRegistryError> {
    Schema::parse_str(text).map(Arc::new).map_err(|e| {
        SchemaRegistryError::InvalidSchema(CodecError(format!(
            "not a valid Avro schema, so not registered: {e}"
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = r#"{"type":"record","name":"A","fields":[{"name":"n","type":"int"}]}"#;
    const B: &str = r#"{"type":"record","name":"B","fields":[{"name":"n","type":"int"}]}"#;

    #[tokio::test]
    async fn ids_are_stable_idempotent_by_text_and_cached_both_ways() {
        let store = InMemorySchemaStore::new();
        let registry = SchemaRegistry::new(store.clone());
        let a = registry.register(A).await.unwrap();
        let b = registry.register(B).await.unwrap();
        assert_eq!((a, b), (1, 2));
        assert_eq!(registry.register(A).await.unwrap(), a);
        let spaced = A.replace(',', ", ");
        assert_eq!(
            registry.register(&spaced).await.unwrap(),
            3,
            "another text is another schema"
        );
        assert_eq!(store.len(), 3);

        let other = SchemaRegistry::new(store);
        assert!(other.cached(b).is_none());
        assert_eq!(other.schema(b).await.unwrap().name().unwrap().name(), "B");
        assert!(other.cached(b).is_some(), "cached by id");
        assert_eq!(other.register(B).await.unwrap(), b, "cached by text");
    }

    #[tokio::test]
    async fn invalid_schemas_are_refused_and_unknown_ids_named() {
        let registry = SchemaRegistry::in_memory();
        let error = registry.register("{\"type\":\"nope\"}").await.unwrap_err();
        assert!(
            error.to_string().starts_with("not a valid Avro schema"),
            "{error}"
        );
        assert!(!error.is_transient());
        let error = registry.schema(4).await.unwrap_err();
        assert!(error.is_unknown());
        assert_eq!(
            registry.fetch(4).await.unwrap_err(),
            crate::codec::unknown_schema(4)
        );
    }
}
