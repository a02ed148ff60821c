//! Avro framed with the id its writer schema is registered under (feature `avro`).

use std::sync::Arc;

use apache_avro::Schema;
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::avro::{parse, read, schema_name, write};
use super::{CodecError, Decode, Encode, Format, Preparation};

/// The content type the registered Avro codec writes.
pub const REGISTERED_AVRO_CONTENT_TYPE: &str = "application/vnd.acemq.avro";

/// The byte opening every frame (Confluent's "magic byte").
const MAGIC: u8 = 0;
/// The magic byte and the 4-byte schema id.
const HEADER_LEN: usize = 5;

/// The writer schemas a [`RegisteredAvro`] codec reads with, by id: what this process holds
/// now, and the work fetching one it does not hold yet. The
/// [`SchemaRegistry`](crate::schema_registry::SchemaRegistry) is one.
pub trait WriterSchemas: Send + Sync + 'static {
    /// The schema registered under `id`, when this process already holds it. No I/O.
    fn cached(&self, id: u32) -> Option<Arc<Schema>>;
    /// Fetches the schema registered under `id` so that [`WriterSchemas::cached`] has it; an
    /// error says why it could not (an id the registry does not know is one).
    fn fetch(&self, id: u32) -> Preparation;
}

/// The schema id and the Avro datum of a Confluent-framed body: `0x00`, the id as 4 bytes
/// big-endian, the datum.
///
/// # Errors
///
/// When `body` is shorter than the 5-byte header or does not open with `0x00`.
///
/// ```
/// let (id, datum) = acemq::codec::frame(b"\x00\x00\x00\x00\x07\x06o-1")?;
/// assert_eq!((id, datum), (7, &b"\x06o-1"[..]));
/// # Ok::<(), acemq::codec::CodecError>(())
/// ```
pub fn frame(body: &[u8]) -> Result<(u32, &[u8]), CodecError> {
    match body {
        [MAGIC, a, b, c, d, datum @ ..] => Ok((u32::from_be_bytes([*a, *b, *c, *d]), datum)),
        [first, ..] if body.len() >= HEADER_LEN => Err(CodecError(format!(
            "not a registered Avro frame: it opens with 0x{first:02x}, not 0x00"
        ))),
        _ => Err(CodecError(format!(
            "not a registered Avro frame: {} bytes, shorter than the 5-byte header",
            body.len()
        ))),
    }
}

/// Avro framed with its writer schema's registry id (Confluent framing: `0x00`, the id as 4
/// bytes big-endian, the Avro datum), as the Java, Go and Python ports write it. Writes and
/// reads `application/vnd.acemq.avro`.
///
/// On publish the body is framed with the id the registry gave the codec's schema. On consume
/// the id says which schema wrote the body; it is taken from the [`WriterSchemas`] and
/// resolved onto the reader schema, by default the codec's own schema (the fixtures'
/// `resolved` column), or another ([`RegisteredAvro::reading`]), or none
/// ([`RegisteredAvro::without_reader_schema`]: the record as written, the `writerShape`
/// column).
///
/// Decoding is synchronous, and the registry may be a database: the consumer asks the codec
/// what it lacks ([`Decode::prepare`]) and awaits the registry's fetch of an id it has not
/// seen before decoding, so only the first message of each writer schema waits for the
/// registry. An id the registry does not know sets the message aside into `Q.parked` with its
/// bytes; register the schema and replay it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use acemq::codec::{Decode, Encode};
/// use acemq::schema_registry::SchemaRegistry;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, PartialEq, Serialize, Deserialize)]
/// struct Order {
///     total: i32,
/// }
///
/// let registry = SchemaRegistry::in_memory();
/// let codec = registry
///     .codec(r#"{"type":"record","name":"Order","fields":[{"name":"total","type":"int"}]}"#)
///     .await?;
/// let body = codec.encode(&Order { total: 1250 })?;
/// assert_eq!(&body[..], b"\x00\x00\x00\x00\x01\xc4\x13", "schema id 1");
/// let back: Order = codec.decode(&body)?;
/// assert_eq!(back, Order { total: 1250 });
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RegisteredAvro {
    id: u32,
    schema: Arc<Schema>,
    reader: Option<Arc<Schema>>,
    schemas: Arc<dyn WriterSchemas>,
}

impl std::fmt::Debug for RegisteredAvro {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredAvro")
            .field("id", &self.id)
            .field("schema", &schema_name(&self.schema))
            .field("reader", &self.reader.as_deref().map(schema_name))
            .finish_non_exhaustive()
    }
}

impl RegisteredAvro {
    /// A codec writing with `schema`, registered under `id`, and reading the writer schemas
    /// `schemas` holds onto `schema`.
    /// [`SchemaRegistry::codec`](crate::schema_registry::SchemaRegistry::codec) registers the
    /// schema and builds it.
    pub fn new(id: u32, schema: Arc<Schema>, schemas: Arc<dyn WriterSchemas>) -> Self {
        Self {
            id,
            reader: Some(Arc::clone(&schema)),
            schema,
            schemas,
        }
    }

    /// Reads onto `reader_schema` instead of the codec's own schema.
    ///
    /// # Errors
    ///
    /// When `reader_schema` is not a valid Avro schema, saying why.
    pub fn reading(mut self, reader_schema: &str) -> Result<Self, CodecError> {
        self.reader = Some(parse(reader_schema, "reader schema")?);
        Ok(self)
    }

    /// Reads each body as its writer's schema declares it, resolving nothing.
    pub fn without_reader_schema(mut self) -> Self {
        self.reader = None;
        self
    }

    /// The id the codec frames its bodies with.
    pub fn schema_id(&self) -> u32 {
        self.id
    }
}

impl<T: Serialize + ?Sized> Encode<T> for RegisteredAvro {
    fn content_type(&self) -> &str {
        REGISTERED_AVRO_CONTENT_TYPE
    }

    fn encode(&self, payload: &T) -> Result<Bytes, CodecError> {
        let mut body = Vec::with_capacity(64);
        body.push(MAGIC);
        body.extend_from_slice(&self.id.to_be_bytes());
        write(&self.schema, payload, &mut body)?;
        Ok(Bytes::from(body))
    }
}

impl<T: DeserializeOwned> Decode<T> for RegisteredAvro {
    fn accepts(&self, content_type: Option<&str>) -> bool {
        Format::AvroRegistered.names(content_type)
    }

    fn decode(&self, body: &Bytes) -> Result<T, CodecError> {
        let (id, datum) = frame(body)?;
        let writer = self.schemas.cached(id).ok_or_else(|| unknown_schema(id))?;
        // Resolving a schema onto itself changes nothing: a body of the codec's own schema
        // is read as written.
        let reader = self.reader.as_ref().filter(|r| !Arc::ptr_eq(r, &writer));
        read(&writer, reader.map(AsRef::as_ref), datum)
    }

    fn prepare(&self, body: &Bytes) -> Option<Preparation> {
        let (id, _) = frame(body).ok()?;
        match self.schemas.cached(id) {
            Some(_) => None,
            None => Some(self.schemas.fetch(id)),
        }
    }
}

/// Why a body framed with `id` cannot be read: its writer schema is not known.
pub(crate) fn unknown_schema(id: u32) -> CodecError {
    CodecError(format!(
        "schema id {id} is not in the schema registry: register the writer's schema, then \
         replay the message"
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use serde::Deserialize;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct T {
        n: i32,
    }

    const SCHEMA: &str = r#"{"type":"record","name":"T","fields":[{"name":"n","type":"int"}]}"#;

    /// Writer schemas in a map, fetching from a second map the way a registry would.
    #[derive(Default)]
    struct Held {
        cached: Mutex<HashMap<u32, Arc<Schema>>>,
        registered: HashMap<u32, Arc<Schema>>,
    }

    impl WriterSchemas for Arc<Held> {
        fn cached(&self, id: u32) -> Option<Arc<Schema>> {
            self.cached.lock().unwrap().get(&id).cloned()
        }

        fn fetch(&self, id: u32) -> Preparation {
            let held = Arc::clone(self);
            Box::pin(async move {
                let schema = held
                    .registered
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| unknown_schema(id))?;
                held.cached.lock().unwrap().insert(id, schema);
                Ok(())
            })
        }
    }

    #[test]
    fn frames_are_read_and_refused_with_their_fault() {
        assert_eq!(frame(&[0, 0, 0, 1, 2]).unwrap(), (258, &[][..]));
        assert_eq!(
            frame(&[1, 0, 0, 0, 7, 6]).unwrap_err().0,
            "not a registered Avro frame: it opens with 0x01, not 0x00"
        );
        assert_eq!(
            frame(&[0, 0, 7]).unwrap_err().0,
            "not a registered Avro frame: 3 bytes, shorter than the 5-byte header"
        );
    }

    #[tokio::test]
    async fn an_unknown_id_is_fetched_before_decoding_and_explained_when_missing() {
        let schema = parse(SCHEMA, "schema").unwrap();
        let held = Arc::new(Held {
            registered: HashMap::from([(9, Arc::clone(&schema))]),
            ..Held::default()
        });
        let codec = RegisteredAvro::new(9, schema, Arc::new(Arc::clone(&held)));
        let body = codec.encode(&T { n: -5 }).unwrap();
        assert_eq!(&body[..5], &[0, 0, 0, 0, 9]);
        assert_eq!(
            Decode::<T>::decode(&codec, &body).unwrap_err(),
            unknown_schema(9),
            "not fetched yet"
        );
        let fetch = Decode::<T>::prepare(&codec, &body).expect("a fetch");
        fetch.await.unwrap();
        assert!(Decode::<T>::prepare(&codec, &body).is_none(), "cached");
        let back: T = codec.decode(&body).unwrap();
        assert_eq!(back, T { n: -5 });

        let mut other = body.to_vec();
        other[4] = 10;
        let other = Bytes::from(other);
        let fetch = Decode::<T>::prepare(&codec, &other).expect("a fetch");
        assert_eq!(fetch.await.unwrap_err(), unknown_schema(10));
    }
}
