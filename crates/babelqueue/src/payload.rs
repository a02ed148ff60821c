//! What a producer and a worker do to `data` beyond the codec, per URN: validate it against the
//! URN's schema (ADR-0024) and, with feature `gdpr`, encrypt or decrypt its sensitive fields
//! (ADR-0030). Validation always sees cleartext: after decryption on consume, before
//! encryption on publish.

use std::sync::Arc;

use serde_json::Value;

use crate::schema::SchemaProvider;
use crate::{Envelope, Error, Result};

/// A schema provider shared by a client, its workers and their tasks.
pub type SharedProvider = Arc<dyn SchemaProvider + Send + Sync>;

/// The payload options of a client or a worker; empty by default (nothing is checked).
#[derive(Clone, Default)]
pub(crate) struct PayloadRules {
    validate: Option<SharedProvider>,
    #[cfg(feature = "gdpr")]
    protection: Option<(SharedProvider, Arc<dyn crate::gdpr::Cipher>)>,
}

impl std::fmt::Debug for PayloadRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = f.debug_struct("PayloadRules");
        out.field("validate", &self.validate.is_some());
        #[cfg(feature = "gdpr")]
        out.field("protection", &self.protection.is_some());
        out.finish()
    }
}

impl PayloadRules {
    pub(crate) fn validate_with(&mut self, provider: SharedProvider) {
        self.validate = Some(provider);
    }

    #[cfg(feature = "gdpr")]
    pub(crate) fn protect_with(
        &mut self,
        provider: SharedProvider,
        cipher: Arc<dyn crate::gdpr::Cipher>,
    ) {
        self.protection = Some((provider, cipher));
    }

    fn is_empty(&self) -> bool {
        #[cfg(feature = "gdpr")]
        if self.protection.is_some() {
            return false;
        }
        self.validate.is_none()
    }

    /// The producer's side: validates `envelope`'s `data`, then encrypts its sensitive fields.
    ///
    /// # Errors
    /// [`Error::InvalidPayload`], `Error::Gdpr`, or the provider's [`Error::Registry`].
    pub(crate) fn outgoing(&self, envelope: &mut Envelope) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let data = data_value(envelope)?;
        let urn = envelope.urn().unwrap_or_default();
        if let Some(provider) = &self.validate {
            crate::schema::validate(provider.as_ref(), urn, &data)?;
        }
        #[cfg(feature = "gdpr")]
        if let Some((provider, cipher)) = &self.protection
            && let Some(schema) = provider.schema_for(urn)?
        {
            let mut data = data;
            let changed = crate::gdpr::protect(&mut data, &schema, cipher.as_ref())
                .map_err(|source| gdpr_error(urn, source))?;
            if changed > 0 {
                envelope.set_data(&data)?;
            }
        }
        Ok(())
    }

    /// The consumer's side: the envelope the handler sees when it differs from `envelope` (its
    /// sensitive fields decrypted), once its `data` is valid. `envelope` itself stays as it
    /// arrived, for a retry or the dead-letter queue to carry the producer's bytes.
    ///
    /// # Errors
    /// `Error::Gdpr` (a field does not decrypt), [`Error::InvalidPayload`], or the provider's
    /// [`Error::Registry`].
    pub(crate) fn incoming(&self, envelope: &Envelope) -> Result<Option<Envelope>> {
        if self.is_empty() {
            return Ok(None);
        }
        let data = data_value(envelope)?;
        let urn = envelope.urn().unwrap_or_default();
        #[cfg(feature = "gdpr")]
        let (data, clear) = match &self.protection {
            Some((provider, cipher)) => match provider.schema_for(urn)? {
                Some(schema) => {
                    let mut data = data;
                    let changed = crate::gdpr::unprotect(&mut data, &schema, cipher.as_ref())
                        .map_err(|source| gdpr_error(urn, source))?;
                    let clear = match changed {
                        0 => None,
                        _ => {
                            let mut decrypted = envelope.clone();
                            decrypted.set_data(&data)?;
                            Some(decrypted)
                        }
                    };
                    (data, clear)
                }
                None => (data, None),
            },
            None => (data, None),
        };
        #[cfg(not(feature = "gdpr"))]
        let clear = None;
        if let Some(provider) = &self.validate {
            crate::schema::validate(provider.as_ref(), urn, &data)?;
        }
        Ok(clear)
    }
}

#[cfg(feature = "gdpr")]
fn gdpr_error(urn: &str, source: crate::gdpr::Error) -> Error {
    Error::Gdpr {
        urn: urn.to_owned(),
        source,
    }
}

/// `data` as a value (`{}` when absent: the codec accepts no envelope without an object there).
fn data_value(envelope: &Envelope) -> Result<Value> {
    match envelope.data() {
        Some(raw) => raw.parse(),
        None => Ok(Value::Object(serde_json::Map::new())),
    }
}

/// The `exception` a dead-letter block records for a payload check that failed, in the names
/// the Python SDK raises.
pub(crate) fn exception_name(error: &Error) -> &'static str {
    if error.is_invalid_payload() {
        "InvalidPayloadError"
    } else if error.is_decrypt() {
        "DecryptError"
    } else {
        "SchemaRegistryError"
    }
}
