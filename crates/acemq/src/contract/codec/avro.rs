//! Avro with a schema fixed for the codec's life (feature `avro`), and the Avro reading and
//! writing the registered codec shares.

use std::sync::Arc;

use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::writer::datum::GenericDatumWriter;
use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{CodecError, Decode, Encode, Format};

/// The content type the fixed-schema Avro codec writes.
pub const AVRO_CONTENT_TYPE: &str = "avro/binary";

/// Avro binary with one schema given to the codec, through `apache-avro` and serde. Writes
/// `avro/binary`; reads it, `application/avro` and any `*+avro`, as the other ports do.
///
/// Payloads are written through serde in the schema's own types, strictly: an `int` field
/// takes an `i32`, a `long` an `i64` (Avro has no unsigned integers, so a `u64` is refused,
/// which includes the non-negative integers of a `serde_json::Value`); fields are matched by
/// name and written in the schema's order.
///
/// The body is the bare Avro datum (no container header, no schema id): producer and consumer
/// agree on the schema out of band. A consumer holding a newer schema reads older messages
/// with [`Avro::reading`], which resolves the writer's schema onto it (defaults filled in,
/// fields the reader does not declare skipped).
///
/// ```
/// use acemq::codec::{Avro, Decode, Encode};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, PartialEq, Serialize, Deserialize)]
/// struct Order {
///     #[serde(rename = "orderId")]
///     order_id: String,
///     total: i32,
/// }
///
/// let avro = Avro::new(
///     r#"{"type":"record","name":"Order","fields":[
///         {"name":"orderId","type":"string"},{"name":"total","type":"int"}]}"#,
/// )?;
/// let order = Order { order_id: "o-1".into(), total: 1250 };
/// let body = avro.encode(&order)?;
/// assert_eq!(&body[..], b"\x06o-1\xc4\x13");
/// let back: Order = avro.decode(&body)?;
/// assert_eq!(back, order);
/// # Ok::<(), acemq::codec::CodecError>(())
/// ```
#[derive(Clone)]
pub struct Avro {
    schema: Arc<Schema>,
    reader: Option<Arc<Schema>>,
}

impl std::fmt::Debug for Avro {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Avro")
            .field("schema", &schema_name(&self.schema))
            .field("reader", &self.reader.as_deref().map(schema_name))
            .finish()
    }
}

impl Avro {
    /// A codec writing and reading with `schema`, the schema's JSON text.
    ///
    /// # Errors
    ///
    /// When `schema` is not a valid Avro schema, saying why.
    pub fn new(schema: &str) -> Result<Self, CodecError> {
        Ok(Self {
            schema: parse(schema, "schema")?,
            reader: None,
        })
    }

    /// Reads bodies written with the codec's schema as `reader_schema` declares them: the
    /// writer's schema is resolved onto it. Writing is unchanged.
    ///
    /// # Errors
    ///
    /// When `reader_schema` is not a valid Avro schema, saying why.
    pub fn reading(mut self, reader_schema: &str) -> Result<Self, CodecError> {
        self.reader = Some(parse(reader_schema, "reader schema")?);
        Ok(self)
    }

    /// The schema the codec writes with.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }
}

impl<T: Serialize + ?Sized> Encode<T> for Avro {
    fn content_type(&self) -> &str {
        AVRO_CONTENT_TYPE
    }

    fn encode(&self, payload: &T) -> Result<Bytes, CodecError> {
        let mut body = Vec::new();
        write(&self.schema, payload, &mut body)?;
        Ok(Bytes::from(body))
    }
}

impl<T: DeserializeOwned> Decode<T> for Avro {
    fn accepts(&self, content_type: Option<&str>) -> bool {
        Format::Avro.names(content_type)
    }

    fn decode(&self, body: &Bytes) -> Result<T, CodecError> {
        read(&self.schema, self.reader.as_deref(), body)
    }
}

/// `text` parsed as an Avro schema; `role` names it in the error.
pub(super) fn parse(text: &str, role: &str) -> Result<Arc<Schema>, CodecError> {
    Schema::parse_str(text)
        .map(Arc::new)
        .map_err(|e| CodecError(format!("the Avro {role} is not valid: {e}")))
}

/// The full name of a named schema, or its type: for errors, `Debug`, and the subject the
/// registry records.
pub(crate) fn schema_name(schema: &Schema) -> String {
    schema.name().map_or_else(
        || format!("{:?}", apache_avro::schema::SchemaKind::from(schema)),
        ToString::to_string,
    )
}

/// Appends `payload` written with `schema` to `out`.
pub(super) fn write<T: Serialize + ?Sized>(
    schema: &Schema,
    payload: &T,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let cannot = |e: apache_avro::Error| {
        CodecError(format!(
            "the payload cannot be written as Avro `{}`: {e}",
            schema_name(schema)
        ))
    };
    GenericDatumWriter::builder(schema)
        .build()
        .map_err(cannot)?
        .write_ser(out, &payload)
        .map_err(cannot)?;
    Ok(())
}

/// The payload in `datum`, written with `writer` and resolved onto `reader` when given.
pub(super) fn read<T: DeserializeOwned>(
    writer: &Schema,
    reader: Option<&Schema>,
    mut datum: &[u8],
) -> Result<T, CodecError> {
    let invalid = |e: apache_avro::Error| {
        CodecError(format!(
            "invalid Avro for the writer schema `{}`: {e}",
            schema_name(writer)
        ))
    };
    let value = GenericDatumReader::builder(writer)
        .maybe_reader_schema(reader)
        .build()
        .map_err(invalid)?
        .read_value(&mut datum)
        .map_err(invalid)?;
    if !datum.is_empty() {
        return Err(CodecError(format!(
            "invalid Avro for the writer schema `{}`: {} bytes follow the datum",
            schema_name(writer),
            datum.len()
        )));
    }
    apache_avro::from_value(&value).map_err(|e| {
        CodecError(format!(
            "the Avro datum does not fit {}: {e}",
            std::any::type_name::<T>()
        ))
    })
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::{Value, json};

    use super::*;

    const WRITER: &str = r#"{"type":"record","name":"R","fields":[
        {"name":"a","type":"string"},{"name":"n","type":"long"}]}"#;
    const READER: &str = r#"{"type":"record","name":"R","fields":[
        {"name":"a","type":"string"},{"name":"c","type":"string","default":"GBP"}]}"#;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct R {
        a: String,
        n: i64,
    }

    #[test]
    fn avro_reads_its_aliases_and_refuses_others() {
        let avro = Avro::new(WRITER).unwrap();
        let reads = |c| Decode::<Value>::accepts(&avro, c);
        for accepted in [
            "avro/binary",
            "application/avro",
            "application/vnd.acme.order+avro; v=2",
        ] {
            assert!(reads(Some(accepted)), "{accepted}");
        }
        for refused in [
            None,
            Some("application/json"),
            Some("application/vnd.acemq.avro"),
        ] {
            assert!(!reads(refused), "{refused:?}");
        }
    }

    #[test]
    fn a_reader_schema_fills_defaults_and_skips_what_it_does_not_declare() {
        let avro = Avro::new(WRITER).unwrap();
        let body = avro
            .encode(&R {
                a: "x".into(),
                n: -3,
            })
            .unwrap();
        let as_written: Value = avro.decode(&body).unwrap();
        assert_eq!(as_written, json!({"a": "x", "n": -3}));
        let resolved: Value = avro.clone().reading(READER).unwrap().decode(&body).unwrap();
        assert_eq!(resolved, json!({"a": "x", "c": "GBP"}));
    }

    #[test]
    fn bad_schemas_payloads_and_bodies_are_explained() {
        let error = Avro::new("{\"type\":\"record\"}").unwrap_err();
        assert!(
            error.0.starts_with("the Avro schema is not valid"),
            "{error}"
        );
        let avro = Avro::new(WRITER).unwrap();
        let error = avro.encode(&json!({"a": "x"})).unwrap_err();
        assert!(
            error
                .0
                .starts_with("the payload cannot be written as Avro `R`"),
            "{error}"
        );
        let body = avro
            .encode(&R {
                a: "x".into(),
                n: 1,
            })
            .unwrap();
        let cut = body.slice(..body.len() - 1);
        let error = Decode::<R>::decode(&avro, &cut).unwrap_err();
        assert!(
            error
                .0
                .starts_with("invalid Avro for the writer schema `R`"),
            "{error}"
        );
        let mut longer = body.to_vec();
        longer.push(0);
        let error = Decode::<R>::decode(&avro, &Bytes::from(longer)).unwrap_err();
        assert!(error.0.ends_with("1 bytes follow the datum"), "{error}");
        let error = Decode::<(u8, u8, u8)>::decode(&avro, &body).unwrap_err();
        assert!(
            error.0.starts_with("the Avro datum does not fit"),
            "{error}"
        );
    }
}
