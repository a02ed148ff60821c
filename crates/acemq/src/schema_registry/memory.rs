//! The in-memory schema store: one process, ids from 1.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::future::BoxFuture;

use super::{SchemaRegistryError, SchemaStore};

/// Schemas in this process's memory, the embedded default. Clones share the schemas.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), acemq::schema_registry::SchemaRegistryError> {
/// use acemq::schema_registry::{InMemorySchemaStore, SchemaStore};
///
/// let store = InMemorySchemaStore::new();
/// // A schema another service registered under 7, known to this one in advance.
/// store.insert(7, r#""string""#)?;
/// assert_eq!(store.register("long", r#""long""#).await?, 8, "new ids follow the highest");
/// assert_eq!(store.schema(7).await?.as_deref(), Some(r#""string""#));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct InMemorySchemaStore {
    inner: Arc<Mutex<Schemas>>,
}

#[derive(Debug, Default)]
struct Schemas {
    by_id: BTreeMap<u32, String>,
    by_text: HashMap<String, u32>,
}

impl InMemorySchemaStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `schema` under `id`, as another registry gave it; new ids follow the highest.
    /// Inserting the same pair again changes nothing.
    ///
    /// # Errors
    ///
    /// [`SchemaRegistryError::Conflict`] when `id` stands for another schema, or `schema`
    /// already has another id.
    pub fn insert(&self, id: u32, schema: &str) -> Result<(), SchemaRegistryError> {
        let mut schemas = self.lock();
        let held = schemas.by_id.get(&id).map(String::as_str);
        let holder = schemas.by_text.get(schema).copied();
        match (held, holder) {
            (Some(text), _) if text == schema => Ok(()),
            (Some(_), _) => Err(SchemaRegistryError::Conflict { id }),
            (None, Some(other)) => Err(SchemaRegistryError::Conflict { id: other }),
            (None, None) => {
                schemas.by_id.insert(id, schema.to_owned());
                schemas.by_text.insert(schema.to_owned(), id);
                Ok(())
            }
        }
    }

    /// How many schemas the store holds.
    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    /// Whether the store holds no schema.
    pub fn is_empty(&self) -> bool {
        self.lock().by_id.is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Schemas> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn register_now(&self, schema: &str) -> Result<u32, SchemaRegistryError> {
        let mut schemas = self.lock();
        if let Some(id) = schemas.by_text.get(schema) {
            return Ok(*id);
        }
        let id = match schemas.by_id.last_key_value() {
            None => 1,
            Some((last, _)) => last.checked_add(1).ok_or(SchemaRegistryError::Exhausted)?,
        };
        schemas.by_id.insert(id, schema.to_owned());
        schemas.by_text.insert(schema.to_owned(), id);
        Ok(id)
    }
}

impl SchemaStore for InMemorySchemaStore {
    fn register<'a>(
        &'a self,
        _subject: &'a str,
        schema: &'a str,
    ) -> BoxFuture<'a, Result<u32, SchemaRegistryError>> {
        Box::pin(std::future::ready(self.register_now(schema)))
    }

    fn schema(&self, id: u32) -> BoxFuture<'_, Result<Option<String>, SchemaRegistryError>> {
        Box::pin(std::future::ready(Ok(self.lock().by_id.get(&id).cloned())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn inserted_ids_hold_and_conflicts_are_refused() {
        let store = InMemorySchemaStore::new();
        store.insert(101, "\"int\"").unwrap();
        store.insert(101, "\"int\"").unwrap();
        assert!(matches!(
            store.insert(101, "\"long\""),
            Err(SchemaRegistryError::Conflict { id: 101 })
        ));
        assert!(matches!(
            store.insert(5, "\"int\""),
            Err(SchemaRegistryError::Conflict { id: 101 })
        ));
        assert_eq!(store.register("int", "\"int\"").await.unwrap(), 101);
        assert_eq!(store.register("long", "\"long\"").await.unwrap(), 102);
        store.insert(u32::MAX, "\"string\"").unwrap();
        assert!(matches!(
            store.register("bytes", "\"bytes\"").await,
            Err(SchemaRegistryError::Exhausted)
        ));
        assert_eq!(store.len(), 3);
    }
}
