//! The declared-pipeline routing slip: `x-acemq-route`, `x-acemq-route-position` and
//! `x-acemq-route-id`.

use polyq_amqp::{FieldTable, FieldValue};

use crate::contract::{headers, lenient};
use crate::error::{Error, Result};

/// Where a message travelling a declared pipeline is going, carried by the message.
///
/// The steps are all step names of the pipeline in order (done and to do), the position is the
/// index of the step this message is for, and the run id is constant across every hop, a
/// dead-letter and a replay, which is what lets a replay resume a run instead of restarting it.
///
/// ```
/// use acemq::RoutingSlip;
///
/// let slip = RoutingSlip::start_of(["validate", "enrich", "dispatch"])?;
/// assert_eq!(slip.current(), Some("validate"));
/// assert_eq!(slip.next(), Some("enrich"));
///
/// let last = slip.advance().advance();
/// assert_eq!(last.current(), Some("dispatch"));
/// assert_eq!(last.next(), None);
/// assert!(last.advance().is_finished());
/// assert_eq!(last.run_id(), slip.run_id());
/// # Ok::<(), acemq::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingSlip {
    steps: Vec<String>,
    position: u32,
    run_id: String,
}

impl RoutingSlip {
    /// A slip at the first step of `steps`, with a fresh run id.
    ///
    /// Step names double as routing keys and queue suffixes, so they are restricted to ASCII
    /// letters, digits, dashes and dots; at least one step is required.
    pub fn start_of<I, S>(steps: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(steps, 0, new_run_id())
    }

    /// A slip at `position` of `steps` with the given run id, for a step that needs to place a
    /// message mid-route (for example a replay into a queue with no slip of its own).
    ///
    /// The same step-name rules as [`RoutingSlip::start_of`] apply; the run id must not be
    /// empty, and the position must fit the wire's signed 32-bit integer.
    pub fn new<I, S>(steps: I, position: u32, run_id: impl Into<String>) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let steps: Vec<String> = steps.into_iter().map(Into::into).collect();
        if steps.is_empty() {
            return Err(Error::InvalidRoute {
                reason: "a route needs at least one step".into(),
            });
        }
        if let Some(bad) = steps.iter().find(|step| !is_step_name(step)) {
            return Err(Error::InvalidRoute {
                reason: format!(
                    "step name '{bad}' must be non-empty and use only letters, digits, dashes and dots"
                ),
            });
        }
        if position > i32::MAX as u32 {
            return Err(Error::InvalidRoute {
                reason: format!("position must be at most 2147483647, was {position}"),
            });
        }
        let run_id = run_id.into();
        if run_id.is_empty() {
            return Err(Error::InvalidRoute {
                reason: "the run id must not be empty".into(),
            });
        }
        Ok(Self {
            steps,
            position,
            run_id,
        })
    }

    /// Reads the slip off a message's headers, or `None` when it carries no route.
    ///
    /// Lenient like the rest of the reader: the step list is split on commas, trimmed and
    /// emptied of blanks (an empty list is no route); an unreadable position restarts the route
    /// at 0, because sending the message to an arbitrary step would be worse; a missing run id
    /// gets a fresh one.
    ///
    /// ```
    /// use acemq::RoutingSlip;
    /// use polyq_amqp::{FieldTable, FieldValue};
    ///
    /// let mut headers = FieldTable::new();
    /// headers.insert("x-acemq-route".into(), FieldValue::from("a, b,,c"));
    /// headers.insert("x-acemq-route-position".into(), FieldValue::from("1"));
    /// headers.insert("x-acemq-route-id".into(), FieldValue::from("run-1"));
    /// let slip = RoutingSlip::from_headers(&headers).unwrap();
    /// assert_eq!(slip.steps(), ["a", "b", "c"]);
    /// assert_eq!(slip.current(), Some("b"));
    /// ```
    pub fn from_headers(headers: &FieldTable) -> Option<Self> {
        let route = lenient::text(headers.get(headers::ROUTE))?;
        let steps: Vec<String> = route
            .split(',')
            .map(str::trim)
            .filter(|step| !step.is_empty())
            .map(str::to_owned)
            .collect();
        if steps.is_empty() {
            return None;
        }
        let position = lenient::counter(headers.get(headers::ROUTE_POSITION), 0).unwrap_or(0);
        let run_id = lenient::text(headers.get(headers::ROUTE_ID)).unwrap_or_else(new_run_id);
        Some(Self {
            steps,
            position,
            run_id,
        })
    }

    /// Writes the three headers into `headers`, over any already there.
    pub fn write_headers(&self, headers: &mut FieldTable) {
        headers.insert(
            headers::ROUTE.into(),
            FieldValue::from(self.steps.join(",")),
        );
        headers.insert(
            headers::ROUTE_POSITION.into(),
            // In range by construction: positions above i32::MAX are refused or unread.
            FieldValue::I32(i32::try_from(self.position).unwrap_or(i32::MAX)),
        );
        headers.insert(
            headers::ROUTE_ID.into(),
            FieldValue::from(self.run_id.as_str()),
        );
    }

    /// Every step of the route, in order.
    pub fn steps(&self) -> &[String] {
        &self.steps
    }

    /// Index of the step this message is for, from 0.
    pub fn position(&self) -> u32 {
        self.position
    }

    /// The step this message is for, or `None` when the route is finished.
    pub fn current(&self) -> Option<&str> {
        self.step_at(self.position)
    }

    /// The step after the current one, or `None` when this is the last.
    pub fn next(&self) -> Option<&str> {
        self.step_at(self.position.checked_add(1)?)
    }

    /// The run identifier, stable across every hop, a dead-letter and a replay.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Whether every step has been handled (the position is past the end; not an error).
    pub fn is_finished(&self) -> bool {
        self.current().is_none()
    }

    /// The slip for the next step's message: same route and run, position plus one.
    pub fn advance(&self) -> Self {
        Self {
            position: self.position.saturating_add(1).min(i32::MAX as u32),
            ..self.clone()
        }
    }

    fn step_at(&self, position: u32) -> Option<&str> {
        self.steps
            .get(usize::try_from(position).ok()?)
            .map(String::as_str)
    }
}

fn is_step_name(step: &str) -> bool {
    !step.is_empty()
        && step
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

fn new_run_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, FieldValue)]) -> FieldTable {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn step_names_that_cannot_travel_are_refused() {
        for bad in [vec![], vec!["a,b"], vec![""], vec!["a b"]] {
            assert!(
                matches!(
                    RoutingSlip::start_of(bad.clone()),
                    Err(Error::InvalidRoute { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(RoutingSlip::new(["a"], 0, "").is_err());
        assert!(RoutingSlip::new(["a"], 1 << 31, "r").is_err());
    }

    #[test]
    fn unreadable_position_restarts_and_missing_run_id_is_fresh() {
        let slip = RoutingSlip::from_headers(&headers(&[
            (crate::contract::headers::ROUTE, FieldValue::from("a,b")),
            (
                crate::contract::headers::ROUTE_POSITION,
                FieldValue::from("soon"),
            ),
        ]))
        .unwrap();
        assert_eq!(slip.position(), 0);
        assert_eq!(slip.run_id().len(), 36);
    }

    #[test]
    fn a_route_of_blanks_is_no_route() {
        let none = headers(&[(crate::contract::headers::ROUTE, FieldValue::from(" , ,"))]);
        assert_eq!(RoutingSlip::from_headers(&none), None);
        assert_eq!(RoutingSlip::from_headers(&FieldTable::new()), None);
    }

    #[test]
    fn written_headers_read_back() {
        let slip = RoutingSlip::new(["a", "b.c", "d-e"], 2, "run").unwrap();
        let mut table = FieldTable::new();
        slip.write_headers(&mut table);
        assert_eq!(
            table[crate::contract::headers::ROUTE],
            FieldValue::from("a,b.c,d-e")
        );
        assert_eq!(
            table[crate::contract::headers::ROUTE_POSITION],
            FieldValue::I32(2)
        );
        assert_eq!(RoutingSlip::from_headers(&table), Some(slip));
    }
}
