//! The canonical encoding: the one byte layout every SDK writes, with forbidden keys refused.

use crate::codec::envelope::{
    CORE_META_KEYS, Envelope, FORBIDDEN_META, FORBIDDEN_TOP, RawJson, Slot, pointer,
};
use crate::codec::raw_json::push_str_literal;
use crate::codec::whitespace::is_blank;
use crate::error::{Error, Result};

impl Envelope {
    /// The canonical bytes: compact, fixed key order (`job, trace_id, data, meta{id, queue, lang,
    /// schema_version, created_at, extras…}, attempts, dead_letter, extras…`), `/` and non-ASCII
    /// unescaped. `urn` is never written.
    ///
    /// # Errors
    /// [`Error::BlankUrn`] when the envelope has no identity; [`Error::ReservedKey`] when it
    /// carries a forbidden key.
    pub fn encode(&self) -> Result<String> {
        if is_blank(&self.job) {
            return Err(Error::BlankUrn(self.job.to_string()));
        }
        self.check_forbidden()?;
        let mut out = String::with_capacity(self.encoded_len());
        out.push_str("{\"job\":");
        push_str_literal(&mut out, &self.job);
        let mut obj = ObjectWriter {
            out: &mut out,
            first: false,
        };
        obj.string("\"trace_id\":", &self.trace_id);
        obj.raw("\"data\":", &self.data);
        match &self.meta {
            Slot::Absent => {}
            Slot::Null => obj.key_null("\"meta\":"),
            Slot::Set(meta) => {
                obj.key("\"meta\":");
                obj.out.push('{');
                let mut inner = ObjectWriter {
                    out: obj.out,
                    first: true,
                };
                inner.string("\"id\":", &meta.id);
                inner.string("\"queue\":", &meta.queue);
                inner.string("\"lang\":", &meta.lang);
                inner.integer("\"schema_version\":", &meta.schema_version);
                inner.integer("\"created_at\":", &meta.created_at);
                inner.extras(&meta.extras);
                inner.out.push('}');
            }
        }
        obj.integer("\"attempts\":", &self.attempts);
        obj.raw("\"dead_letter\":", &self.dead_letter);
        obj.extras(&self.extras);
        out.push('}');
        Ok(out)
    }

    /// At least the encoded length (unless strings need escapes), so `encode` allocates once.
    fn encoded_len(&self) -> usize {
        // Keys, quotes, separators and the integers of the frame take fewer bytes than this.
        const FRAME: usize = 200;
        fn text(slot: &Slot<impl AsRef<str>>) -> usize {
            slot.get().map_or(0, |text| text.as_ref().len())
        }
        fn raw(slot: &Slot<RawJson>) -> usize {
            slot.get().map_or(0, |raw| raw.as_str().len())
        }
        fn extras(members: &[(String, RawJson)]) -> usize {
            members
                .iter()
                .map(|(key, value)| key.len() + value.as_str().len() + 4)
                .sum()
        }
        let meta = self.meta.get().map_or(0, |meta| {
            text(&meta.id) + text(&meta.queue) + text(&meta.lang) + extras(&meta.extras)
        });
        FRAME
            + self.job.len()
            + text(&self.trace_id)
            + raw(&self.data)
            + meta
            + raw(&self.dead_letter)
            + extras(&self.extras)
    }

    fn check_forbidden(&self) -> Result<()> {
        let refused = |pointer: String| Error::ReservedKey {
            pointer,
            reason: "forbidden keys (message-envelope §10) and the inbound-only urn alias are never written",
        };
        if let Some((key, _)) = self
            .extras
            .iter()
            .find(|(key, _)| key == "urn" || FORBIDDEN_TOP.contains(&key.as_str()))
        {
            return Err(refused(pointer(&[key])));
        }
        if let Some(meta) = self.meta.get()
            && let Some((key, _)) = meta.extras.iter().find(|(key, _)| {
                FORBIDDEN_META.contains(&key.as_str()) || CORE_META_KEYS.contains(&key.as_str())
            })
        {
            return Err(refused(pointer(&["meta", key])));
        }
        Ok(())
    }
}

/// Writes the members of one object; known keys come already quoted, with their colon. Inlined,
/// so that each key is a constant and is copied without a call.
struct ObjectWriter<'a> {
    out: &'a mut String,
    first: bool,
}

impl ObjectWriter<'_> {
    #[inline(always)]
    fn key(&mut self, quoted_key: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.out.push_str(quoted_key);
    }

    #[inline(always)]
    fn key_null(&mut self, quoted_key: &str) {
        self.key(quoted_key);
        self.out.push_str("null");
    }

    #[inline(always)]
    fn string(&mut self, quoted_key: &str, slot: &Slot<impl AsRef<str>>) {
        match slot {
            Slot::Absent => {}
            Slot::Null => self.key_null(quoted_key),
            Slot::Set(text) => {
                self.key(quoted_key);
                push_str_literal(self.out, text.as_ref());
            }
        }
    }

    #[inline(always)]
    fn integer(&mut self, quoted_key: &str, slot: &Slot<i64>) {
        match slot {
            Slot::Absent => {}
            Slot::Null => self.key_null(quoted_key),
            Slot::Set(n) => {
                self.key(quoted_key);
                self.out.push_str(itoa::Buffer::new().format(*n));
            }
        }
    }

    #[inline(always)]
    fn raw(&mut self, quoted_key: &str, slot: &Slot<RawJson>) {
        match slot {
            Slot::Absent => {}
            Slot::Null => self.key_null(quoted_key),
            Slot::Set(raw) => {
                self.key(quoted_key);
                self.out.push_str(raw.as_str());
            }
        }
    }

    fn extras(&mut self, members: &[(String, RawJson)]) {
        for (key, value) in members {
            if !self.first {
                self.out.push(',');
            }
            self.first = false;
            push_str_literal(self.out, key);
            self.out.push(':');
            self.out.push_str(value.as_str());
        }
    }
}
