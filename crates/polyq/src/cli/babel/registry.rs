//! The payload schema registry and GDPR keys on the `babel` commands: `--registry DIR`,
//! `--gdpr-key-file FILE` (repeatable: the first key encrypts, every key decrypts) and
//! `--mask`, and what they do to a job an operator publishes or reads.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use babelqueue::gdpr::AesGcmCipher;
use babelqueue::schema::{RegistryProvider, SchemaProvider as _};
use babelqueue::{BabelQueue, Envelope, SharedProvider};
use base64::Engine as _;
use serde_json::Value;

/// `--registry` and `--gdpr-key-file`.
#[derive(Debug, Default, clap::Args)]
pub(crate) struct RegistryArgs {
    /// A babelqueue-registry directory (its `registry.json` maps each URN to the schema of its
    /// `data`): payloads are validated against it, and with a key their `x-gdpr-sensitive`
    /// fields are encrypted on publish and decrypted when read.
    #[arg(long, value_name = "DIR")]
    pub(crate) registry: Option<PathBuf>,
    /// A file holding one AES-GCM key of 16, 24 or 32 bytes, in hex or standard base64.
    /// Repeatable for a key ring: the first encrypts, every one decrypts. Needs --registry.
    #[arg(long = "gdpr-key-file", value_name = "FILE", requires = "registry")]
    pub(crate) key_files: Vec<PathBuf>,
}

/// What the flags opened.
#[derive(Debug)]
pub(crate) struct Registry {
    pub(crate) provider: Arc<RegistryProvider>,
    pub(crate) cipher: Option<Arc<AesGcmCipher>>,
}

impl RegistryArgs {
    /// The registry and the key ring, when `--registry` was given.
    pub(crate) fn open(&self) -> anyhow::Result<Option<Registry>> {
        let Some(dir) = &self.registry else {
            return Ok(None);
        };
        let provider = Arc::new(open_registry(dir)?);
        let mut cipher: Option<AesGcmCipher> = None;
        for file in &self.key_files {
            let key = read_key(file)?;
            let flag = || format!("--gdpr-key-file {}", file.display());
            cipher = Some(match cipher {
                None => AesGcmCipher::new(&key).with_context(flag)?,
                Some(ring) => ring.with_retired_key(&key).with_context(flag)?,
            });
        }
        Ok(Some(Registry {
            provider,
            cipher: cipher.map(Arc::new),
        }))
    }
}

/// Reads `<dir>/registry.json`; the error names the flag.
pub(crate) fn open_registry(dir: &Path) -> anyhow::Result<RegistryProvider> {
    RegistryProvider::open(dir).with_context(|| format!("--registry {}", dir.display()))
}

/// A key file's bytes: hex, or standard base64, surrounding whitespace ignored. The error never
/// shows the file's content.
fn read_key(file: &Path) -> anyhow::Result<Vec<u8>> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("--gdpr-key-file {}: cannot read it", file.display()))?;
    let text = text.trim();
    let key = hex::decode(text)
        .ok()
        .or_else(|| base64::engine::general_purpose::STANDARD.decode(text).ok());
    key.ok_or_else(|| {
        anyhow!(
            "--gdpr-key-file {}: expected one key in hex or standard base64",
            file.display()
        )
    })
}

impl Registry {
    /// The registry alone, to read and mask jobs without decrypting them.
    pub(crate) fn masking(provider: RegistryProvider) -> Self {
        Self {
            provider: Arc::new(provider),
            cipher: None,
        }
    }

    fn shared(&self) -> SharedProvider {
        self.provider.clone()
    }

    /// `queue` validating what it publishes and, with a key, encrypting its sensitive fields.
    pub(crate) fn producer(&self, queue: BabelQueue) -> BabelQueue {
        let queue = queue.validate_payloads(self.shared());
        match &self.cipher {
            Some(cipher) => queue.protect_payloads(self.shared(), cipher.clone()),
            None => queue,
        }
    }

    /// The schema of `urn`; an error names the URN and the registry.
    fn schema(&self, urn: &str) -> anyhow::Result<Option<Arc<Value>>> {
        self.provider
            .schema_for(urn)
            .with_context(|| format!("the schema of {urn}"))
    }

    /// What an operator reads of a job: its sensitive fields decrypted (with a key), checked
    /// against the schema, and masked when asked. Returns the violation, if any, as text naming
    /// the URN, the path and the rule.
    pub(crate) fn read(
        &self,
        envelope: &mut Envelope,
        mask: bool,
    ) -> anyhow::Result<Option<String>> {
        let Some(urn) = envelope.urn().map(str::to_owned) else {
            return Ok(None);
        };
        let Some(schema) = self.schema(&urn)? else {
            return Ok(None);
        };
        let mut data: Value = envelope.data_as().unwrap_or(Value::Null);
        if let Some(cipher) = &self.cipher {
            babelqueue::gdpr::unprotect(&mut data, &schema, cipher.as_ref()).map_err(|source| {
                babelqueue::Error::Gdpr {
                    urn: urn.clone(),
                    source,
                }
            })?;
        }
        let violation = babelqueue::schema::validate_value(&schema, &data)
            .map(|violation| format!("{urn}: {violation}"));
        if mask {
            babelqueue::schema::mask(&mut data, &schema);
        }
        if data.is_object() {
            envelope.set_data(&data)?;
        }
        Ok(violation)
    }
}
