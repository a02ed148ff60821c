//! Forgiving readers for header values, and the two timestamp encodings of the wire.
//!
//! Broker clients disagree about header types: the Java client hands back long strings where
//! another wrote text, Python writes the smallest integer type that fits, Go may hand over
//! bytes. Every reader here accepts all of it and answers `None` for anything it cannot use, so
//! the caller applies its default instead of refusing the message.

use polyq_amqp::FieldValue;
use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset};

/// Text of a header: long strings and byte arrays (UTF-8, lossily, as the Java client decodes
/// them) and integers rendered in decimal. An empty string is absent.
pub(crate) fn text(value: Option<&FieldValue>) -> Option<String> {
    let text = match value? {
        FieldValue::LongString(bytes) | FieldValue::ByteArray(bytes) => {
            String::from_utf8_lossy(bytes).into_owned()
        }
        other => integer(other)?.to_string(),
    };
    (!text.is_empty()).then_some(text)
}

/// An integer of any width, a finite float (truncated, as Java's `intValue` does), a decimal,
/// or decimal-free numeric text.
pub(crate) fn number(value: Option<&FieldValue>) -> Option<i64> {
    let value = value?;
    if let Some(n) = integer(value) {
        return Some(n);
    }
    match value {
        FieldValue::F32(f) => float(f64::from(*f)),
        FieldValue::F64(f) => float(*f),
        FieldValue::Decimal { scale, value } => {
            let divisor = 10_i64.checked_pow(u32::from(*scale))?;
            Some(i64::from(*value) / divisor)
        }
        FieldValue::LongString(bytes) | FieldValue::ByteArray(bytes) => {
            std::str::from_utf8(bytes).ok()?.trim().parse().ok()
        }
        _ => None,
    }
}

/// A counter the wire carries as a signed 32-bit integer, at least `min`.
pub(crate) fn counter(value: Option<&FieldValue>, min: i64) -> Option<u32> {
    let n = number(value)?;
    if n < min || n > i64::from(i32::MAX) {
        return None;
    }
    u32::try_from(n).ok()
}

/// Epoch milliseconds: a number, or an AMQP timestamp (seconds).
pub(crate) fn epoch_millis(value: Option<&FieldValue>) -> Option<OffsetDateTime> {
    let millis = match value? {
        FieldValue::Timestamp(seconds) => i64::try_from(*seconds).ok()?.checked_mul(1000)?,
        other => number(Some(other))?,
    };
    from_epoch_millis(millis)
}

/// A replay timestamp in any of its three forms: epoch milliseconds (older Java), RFC 3339 with
/// `Z` (Java, Go, Ruby) or with `+00:00` (Python).
/// Only years 0 to 9999 are readable, because only those can be written back as RFC 3339.
pub(crate) fn instant(value: Option<&FieldValue>) -> Option<OffsetDateTime> {
    let value = value?;
    let at = match epoch_millis(Some(value)) {
        Some(at) => at,
        None => {
            let text = text(Some(value))?;
            let parsed = OffsetDateTime::parse(text.trim(), &Rfc3339).ok()?;
            truncate_to_millis(parsed.to_offset(UtcOffset::UTC))
        }
    };
    (0..=9999).contains(&at.year()).then_some(at)
}

fn integer(value: &FieldValue) -> Option<i64> {
    match value {
        FieldValue::Timestamp(_) => None,
        other => other.as_i64(),
    }
}

fn float(f: f64) -> Option<i64> {
    // Range-checked rather than wrapped: a counter of 1e300 is unreadable, not some other number.
    (f.is_finite() && f.abs() < 9.0e18).then(|| f.trunc() as i64)
}

/// The instant `millis` after the Unix epoch, when the calendar can represent it.
pub(crate) fn from_epoch_millis(millis: i64) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis) * 1_000_000).ok()
}

/// Milliseconds since the Unix epoch.
pub(crate) fn to_epoch_millis(at: OffsetDateTime) -> i64 {
    // Every instant reachable from an i64 of milliseconds fits back into one.
    i64::try_from(at.unix_timestamp_nanos().div_euclid(1_000_000)).unwrap_or(i64::MAX)
}

/// The instant with everything below the millisecond dropped, in UTC: the precision both
/// timestamp headers carry.
pub(crate) fn truncate_to_millis(at: OffsetDateTime) -> OffsetDateTime {
    let at = if at.offset() == UtcOffset::UTC {
        at
    } else {
        at.to_offset(UtcOffset::UTC)
    };
    let below_millis = at.nanosecond() % 1_000_000;
    // Replacing the sub-second part keeps this off the calendar arithmetic of a full
    // conversion, which the wire path would otherwise pay on every read.
    at.replace_nanosecond(at.nanosecond() - below_millis)
        .unwrap_or(at)
}

/// RFC 3339 in UTC with exactly three fractional digits and `Z`:
/// `2026-02-03T04:05:06.789Z`.
pub(crate) fn rfc3339_millis(at: OffsetDateTime) -> String {
    let at = at.to_offset(UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.millisecond()
    )
}

/// RFC 3339 in UTC to the second with `Z`, as itinerary stops are stamped:
/// `2026-01-02T03:04:05Z`.
pub(crate) fn rfc3339_seconds(at: OffsetDateTime) -> String {
    let at = at.to_offset(UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_from_every_shape() {
        let cases = [
            (FieldValue::I8(4), Some(4)),
            (FieldValue::U16(4), Some(4)),
            (FieldValue::I64(4), Some(4)),
            (FieldValue::F64(4.9), Some(4)),
            (FieldValue::F32(-2.0), Some(-2)),
            (
                FieldValue::Decimal {
                    scale: 1,
                    value: 45,
                },
                Some(4),
            ),
            (FieldValue::from(" 4 "), Some(4)),
            (FieldValue::ByteArray(b"4".to_vec()), Some(4)),
            (FieldValue::from("soon"), None),
            (FieldValue::from("4.0"), None),
            (FieldValue::Bool(true), None),
            (FieldValue::F64(f64::NAN), None),
            (FieldValue::F64(1e300), None),
            (
                FieldValue::Decimal {
                    scale: 255,
                    value: 1,
                },
                None,
            ),
            (FieldValue::Timestamp(4), None),
            (FieldValue::Void, None),
        ];
        for (value, expected) in cases {
            assert_eq!(number(Some(&value)), expected, "{value:?}");
        }
    }

    #[test]
    fn counters_stay_in_the_signed_32_bit_range() {
        assert_eq!(counter(Some(&FieldValue::I64(0)), 1), None);
        assert_eq!(counter(Some(&FieldValue::I64(0)), 0), Some(0));
        assert_eq!(counter(Some(&FieldValue::I64(1 << 31)), 1), None);
        assert_eq!(counter(Some(&FieldValue::I64(-1)), 0), None);
        assert_eq!(counter(Some(&FieldValue::I64(i64::MIN)), 1), None);
        assert_eq!(counter(Some(&FieldValue::I64(i64::MAX)), 1), None);
        assert_eq!(counter(Some(&FieldValue::from("2")), 1), Some(2));
    }

    #[test]
    fn text_is_absent_when_empty_and_readable_from_bytes_and_numbers() {
        assert_eq!(text(Some(&FieldValue::from(""))), None);
        assert_eq!(
            text(Some(&FieldValue::ByteArray(b"a".to_vec()))).as_deref(),
            Some("a")
        );
        assert_eq!(text(Some(&FieldValue::I32(7))).as_deref(), Some("7"));
        assert_eq!(text(Some(&FieldValue::Bool(true))), None);
        assert_eq!(text(None), None);
    }

    #[test]
    fn replay_instants_read_in_all_three_forms() {
        let expected = from_epoch_millis(1_770_091_506_789);
        for value in [
            FieldValue::I64(1_770_091_506_789),
            FieldValue::from("2026-02-03T04:05:06.789Z"),
            FieldValue::from("2026-02-03T04:05:06.789000+00:00"),
            FieldValue::from("2026-02-03T05:05:06.789+01:00"),
        ] {
            assert_eq!(instant(Some(&value)), expected, "{value:?}");
        }
        assert_eq!(instant(Some(&FieldValue::from("yesterday"))), None);
    }

    #[test]
    fn truncation_drops_below_the_millisecond_and_moves_to_utc() {
        let at = time::macros::datetime!(2026-02-03 05:05:06.789_999 +01:00);
        let truncated = truncate_to_millis(at);
        assert_eq!(
            truncated,
            time::macros::datetime!(2026-02-03 04:05:06.789 UTC)
        );
        assert_eq!(truncated.offset(), UtcOffset::UTC);
    }

    #[test]
    fn timestamps_render_as_the_wire_writes_them() {
        let at = from_epoch_millis(1_770_091_506_789).unwrap();
        assert_eq!(rfc3339_millis(at), "2026-02-03T04:05:06.789Z");
        assert_eq!(rfc3339_seconds(at), "2026-02-03T04:05:06Z");
        let whole = from_epoch_millis(1_770_091_506_000).unwrap();
        assert_eq!(rfc3339_millis(whole), "2026-02-03T04:05:06.000Z");
    }
}
