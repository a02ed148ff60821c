//! `--key-file`: the key ring that shows encrypted AceMQ bodies (`application/vnd.acemq.encrypted`)
//! in plaintext beside their raw bytes. Without it an encrypted body shows its key id and a
//! note. Keys are never printed.

use std::path::PathBuf;

use acemq::codec::keyring::KeyRing;
use acemq::inspect::EncryptedView;
use anyhow::Context as _;
use polyq_amqp::MessageJson;
use serde_json::Value;

/// The key ring flag.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct KeyFileArg {
    /// A key file that decrypts encrypted AceMQ bodies (application/vnd.acemq.encrypted) for
    /// display: one `KEY-ID = KEY` per line, the key in Base64 or `hex:` hex (docs/INTEROP.md).
    /// Without it an encrypted body shows its key id only. Keys are never printed.
    #[arg(long = "key-file", value_name = "FILE")]
    pub(crate) key_file: Option<PathBuf>,
}

impl KeyFileArg {
    /// The key ring of the file, when one is given.
    pub(crate) fn load(&self) -> anyhow::Result<Option<KeyRing>> {
        self.key_file
            .as_ref()
            .map(|path| KeyRing::from_file(path).context("--key-file"))
            .transpose()
    }
}

/// Adds `encrypted` (key id, and with `keys` the decoded plaintext, or a note) to `decoded`, the
/// inspection of `message`, when the message is encrypted.
pub(crate) fn show_encrypted(decoded: &mut Value, message: &MessageJson, keys: Option<&KeyRing>) {
    let content_type = message.properties.content_type.as_deref();
    if let (Some(view), Some(object)) = (
        EncryptedView::of(content_type, &message.body, keys),
        decoded.as_object_mut(),
    ) {
        object.insert(
            "encrypted".to_owned(),
            serde_json::to_value(view).unwrap_or(Value::Null),
        );
    }
}
