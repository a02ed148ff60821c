//! Retry policies: the schedule, the retry decision, jitter, and which waits go to the broker.
//!
//! The arithmetic is identical in every AceMQ port and pinned by the shared
//! `contract-fixtures.json`: `exponential` doubles from the initial delay up to the ceiling with
//! 20 % jitter; `fixed` repeats one delay with no jitter; `none` makes one attempt. Waits at or
//! above the broker-wait threshold (default 30 s) are held on a rung queue, un-jittered; shorter
//! ones are held by the consumer, jittered and floored at 1 ms.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;

use crate::error::{Error, Result};

/// Waits this long or longer are held in the broker by default.
pub const DEFAULT_BROKER_WAIT_THRESHOLD: Duration = Duration::from_secs(30);

/// The jitter factor of [`RetryPolicy::exponential`]: ±20 %.
pub const EXPONENTIAL_JITTER: f64 = 0.2;

/// The shortest wait a consumer ever holds after jitter.
pub const MIN_CONSUMER_WAIT: Duration = Duration::from_millis(1);

/// When, and how often, a failed message is tried again, and where the waiting happens.
///
/// Durations are kept to the millisecond, the unit of rung queue TTLs.
///
/// ```
/// use std::time::Duration;
/// use acemq::retry::{RetryDecision, RetryPolicy, WaitPlace};
///
/// let policy: RetryPolicy = "exponential(6, 10s, 1m)".parse()?;
/// assert_eq!(
///     policy.schedule(),
///     [10_000, 20_000, 40_000, 60_000, 60_000].map(Duration::from_millis)
/// );
/// assert_eq!(policy.broker_rungs(), [40_000, 60_000].map(Duration::from_millis));
///
/// let mut rng = rand::rng();
/// match policy.decide(3, Some(Duration::ZERO), &mut rng) {
///     RetryDecision::Retry(wait) => {
///         assert_eq!(wait.place(), WaitPlace::Broker);
///         assert_eq!(wait.delay(), Duration::from_secs(40));
///     }
///     RetryDecision::GiveUp(reason) => panic!("{reason}"),
/// }
/// assert!(!policy.retries(6, None));
/// # Ok::<(), acemq::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    max_attempts: u32,
    schedule: Vec<Duration>,
    max_message_age: Duration,
    jitter_factor: f64,
    broker_wait_threshold: Duration,
}

impl Default for RetryPolicy {
    /// [`RetryPolicy::none`]: one attempt, then the dead-letter queue.
    fn default() -> Self {
        Self::none()
    }
}

impl RetryPolicy {
    /// Never retries: one attempt, then `.dlq`. The default when no policy is configured.
    pub fn none() -> Self {
        Self::with_schedule(1, Vec::new(), 0.0)
    }

    /// `max_attempts` deliveries in total, `delay` apart, with no jitter (a caller who says
    /// "every thirty seconds" said something exact).
    pub fn fixed(max_attempts: u32, delay: Duration) -> Result<Self> {
        check_attempts(max_attempts)?;
        let delay = whole_millis(delay);
        let retries = (max_attempts - 1) as usize;
        Ok(Self::with_schedule(max_attempts, vec![delay; retries], 0.0))
    }

    /// `max_attempts` deliveries in total; the first wait is `initial`, each next one doubles,
    /// capped at `max`; jitter [`EXPONENTIAL_JITTER`].
    pub fn exponential(max_attempts: u32, initial: Duration, max: Duration) -> Result<Self> {
        check_attempts(max_attempts)?;
        let (initial, max) = (whole_millis(initial), whole_millis(max));
        if initial.is_zero() {
            return Err(Error::InvalidPolicy {
                reason: "the initial delay must be at least 1 ms".into(),
            });
        }
        let mut schedule = Vec::with_capacity((max_attempts - 1) as usize);
        let mut next = initial.min(max);
        for _ in 1..max_attempts {
            schedule.push(next);
            next = next.saturating_mul(2).min(max);
        }
        Ok(Self::with_schedule(
            max_attempts,
            schedule,
            EXPONENTIAL_JITTER,
        ))
    }

    fn with_schedule(max_attempts: u32, schedule: Vec<Duration>, jitter_factor: f64) -> Self {
        Self {
            max_attempts,
            schedule,
            max_message_age: Duration::ZERO,
            jitter_factor,
            broker_wait_threshold: DEFAULT_BROKER_WAIT_THRESHOLD,
        }
    }

    /// A copy that gives up on a message once its age reaches `age`. Zero means no limit (the
    /// default of every factory).
    pub fn give_up_after(mut self, age: Duration) -> Self {
        self.max_message_age = whole_millis(age);
        self
    }

    /// A copy with consumer waits varied by ±`factor` (0 to 1).
    pub fn with_jitter(mut self, factor: f64) -> Result<Self> {
        if !(0.0..=1.0).contains(&factor) {
            return Err(Error::InvalidPolicy {
                reason: format!("the jitter factor must be between 0 and 1, was {factor}"),
            });
        }
        self.jitter_factor = factor;
        Ok(self)
    }

    /// A copy holding waits of `threshold` or longer in the broker. Zero sends nothing to the
    /// broker, so no rung queue is ever declared.
    pub fn wait_in_broker_from(mut self, threshold: Duration) -> Self {
        self.broker_wait_threshold = whole_millis(threshold);
        self
    }

    /// Total deliveries allowed, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// One un-jittered delay per retry, in order: `max_attempts - 1` entries.
    pub fn schedule(&self) -> &[Duration] {
        &self.schedule
    }

    /// The age limit, or `None` when there is none.
    pub fn max_message_age(&self) -> Option<Duration> {
        (!self.max_message_age.is_zero()).then_some(self.max_message_age)
    }

    /// The fraction by which a consumer wait is varied, in both directions.
    pub fn jitter_factor(&self) -> f64 {
        self.jitter_factor
    }

    /// Waits this long or longer are held in the broker; zero means never.
    pub fn broker_wait_threshold(&self) -> Duration {
        self.broker_wait_threshold
    }

    /// Whether an un-jittered wait of `delay` is held on a rung queue rather than in the
    /// consumer: the threshold is non-zero, the delay is non-zero and at least the threshold.
    pub fn waits_in_broker(&self, delay: Duration) -> bool {
        !self.broker_wait_threshold.is_zero()
            && !delay.is_zero()
            && delay >= self.broker_wait_threshold
    }

    /// The delays that need a rung queue: the distinct schedule entries held in the broker, in
    /// the order the schedule reaches them.
    pub fn broker_rungs(&self) -> Vec<Duration> {
        let mut rungs: Vec<Duration> = Vec::new();
        for &delay in &self.schedule {
            if self.waits_in_broker(delay) && !rungs.contains(&delay) {
                rungs.push(delay);
            }
        }
        rungs
    }

    /// Whether the attempt that just failed (from 1) is retried at `age` (`None` when unknown,
    /// which counts as young enough): `attempt < max_attempts` and the age is below a non-zero
    /// limit.
    pub fn retries(&self, attempt: u32, age: Option<Duration>) -> bool {
        self.give_up_reason(attempt, age).is_none()
    }

    /// The un-jittered delay after the failed `attempt`:
    /// `schedule[min(attempt - 1, len - 1)]`, or `None` for a policy that never retries.
    pub fn scheduled_delay(&self, attempt: u32) -> Option<Duration> {
        let last = self.schedule.len().checked_sub(1)?;
        let index = usize::try_from(attempt.saturating_sub(1)).map_or(last, |i| i.min(last));
        self.schedule.get(index).copied()
    }

    /// The bounds a consumer wait of `delay` lands in after jitter:
    /// `[max(delay·(1-f), 1 ms), max(delay·(1+f), 1 ms)]`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use acemq::retry::RetryPolicy;
    ///
    /// let policy: RetryPolicy = "exponential(5, 1s, 24h)".parse()?;
    /// assert_eq!(
    ///     policy.jitter_bounds(Duration::from_secs(1)),
    ///     (Duration::from_millis(800), Duration::from_millis(1200))
    /// );
    /// let waited = policy.jittered(Duration::from_secs(1), &mut rand::rng());
    /// assert!(waited >= Duration::from_millis(800) && waited <= Duration::from_millis(1200));
    /// # Ok::<(), acemq::Error>(())
    /// ```
    pub fn jitter_bounds(&self, delay: Duration) -> (Duration, Duration) {
        let f = self.jitter_factor;
        (
            delay.mul_f64(1.0 - f).max(MIN_CONSUMER_WAIT),
            delay.mul_f64(1.0 + f).max(MIN_CONSUMER_WAIT),
        )
    }

    /// `delay` varied uniformly within [`RetryPolicy::jitter_bounds`].
    pub fn jittered<R: Rng + ?Sized>(&self, delay: Duration, rng: &mut R) -> Duration {
        let f = self.jitter_factor;
        let multiplier = if f > 0.0 {
            1.0 + rng.random_range(-f..=f)
        } else {
            1.0
        };
        delay.mul_f64(multiplier).max(MIN_CONSUMER_WAIT)
    }

    /// What to do after `attempt` (from 1) failed for a message of `age`: retry after a wait
    /// (jittered when the consumer holds it, exact when a rung does), or give up and why.
    ///
    /// ```
    /// use std::time::Duration;
    /// use acemq::retry::{RetryDecision, RetryPolicy, WaitPlace};
    ///
    /// let policy: RetryPolicy = "exponential(5, 1s, 24h).giveUpAfter(2m)".parse()?;
    /// let mut rng = rand::rng();
    /// let RetryDecision::Retry(wait) = policy.decide(1, Some(Duration::from_secs(5)), &mut rng)
    /// else {
    ///     unreachable!("a young first attempt is retried")
    /// };
    /// assert_eq!(wait.place(), WaitPlace::Consumer);
    /// assert_eq!(wait.scheduled(), Duration::from_secs(1));
    ///
    /// let old = policy.decide(1, Some(Duration::from_secs(120)), &mut rng);
    /// let RetryDecision::GiveUp(reason) = old else { unreachable!("too old") };
    /// assert_eq!(reason.to_string(), "exceeded the maximum message age of 2m");
    /// # Ok::<(), acemq::Error>(())
    /// ```
    pub fn decide<R: Rng + ?Sized>(
        &self,
        attempt: u32,
        age: Option<Duration>,
        rng: &mut R,
    ) -> RetryDecision {
        if let Some(reason) = self.give_up_reason(attempt, age) {
            return RetryDecision::GiveUp(reason);
        }
        // `give_up_reason` returns a reason whenever the schedule is empty.
        let scheduled = self.scheduled_delay(attempt).unwrap_or_default();
        let wait = if self.waits_in_broker(scheduled) {
            Wait {
                scheduled,
                delay: scheduled,
                place: WaitPlace::Broker,
            }
        } else {
            Wait {
                scheduled,
                delay: self.jittered(scheduled, rng),
                place: WaitPlace::Consumer,
            }
        };
        RetryDecision::Retry(wait)
    }

    fn give_up_reason(&self, attempt: u32, age: Option<Duration>) -> Option<GiveUpReason> {
        if attempt >= self.max_attempts || self.schedule.is_empty() {
            return Some(GiveUpReason::AttemptsExhausted { attempts: attempt });
        }
        let limit = self.max_message_age()?;
        let age = age?;
        (age >= limit).then_some(GiveUpReason::TooOld { age, limit })
    }
}

impl fmt::Display for RetryPolicy {
    /// A one-line summary for logs: the schedule and every setting.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "schedule[{}] maxAttempts={} giveUpAfter={} jitter={} waitInBrokerFrom={}",
            self.schedule
                .iter()
                .map(|d| render_duration(*d))
                .collect::<Vec<_>>()
                .join(", "),
            self.max_attempts,
            render_duration(self.max_message_age),
            self.jitter_factor,
            render_duration(self.broker_wait_threshold)
        )
    }
}

impl FromStr for RetryPolicy {
    type Err = Error;

    /// Parses the policy text of the shared fixtures: `exponential(n, d, d)`, `fixed(n, d)` or
    /// `none()`, followed by any of `.giveUpAfter(d)`, `.withJitter(f)` and
    /// `.waitInBrokerFrom(d)`; durations are whole numbers with `ms`, `s`, `m` or `h`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use acemq::retry::RetryPolicy;
    ///
    /// let policy: RetryPolicy = "exponential(5, 1s, 24h).giveUpAfter(2m)".parse()?;
    /// assert_eq!(policy.max_message_age(), Some(Duration::from_secs(120)));
    /// assert!("exponential(5, 1s)".parse::<RetryPolicy>().is_err());
    /// # Ok::<(), acemq::Error>(())
    /// ```
    fn from_str(text: &str) -> Result<Self> {
        let syntax = |reason: String| Error::PolicySyntax {
            text: text.to_owned(),
            reason,
        };
        let mut calls = split_calls(text.trim()).map_err(&syntax)?.into_iter();
        let (factory, args) = calls
            .next()
            .ok_or_else(|| syntax("expected a policy such as fixed(4, 30s)".into()))?;
        let mut policy = match (factory, args.as_slice()) {
            ("none", []) => Self::none(),
            ("fixed", [n, d]) => Self::fixed(
                parse_count(n).map_err(&syntax)?,
                parse_duration(d).map_err(&syntax)?,
            )?,
            ("exponential", [n, initial, max]) => Self::exponential(
                parse_count(n).map_err(&syntax)?,
                parse_duration(initial).map_err(&syntax)?,
                parse_duration(max).map_err(&syntax)?,
            )?,
            (name, args) => {
                return Err(syntax(format!(
                    "unknown factory {name}/{} (expected none(), fixed(n, d) or exponential(n, d, d))",
                    args.len()
                )));
            }
        };
        for (modifier, args) in calls {
            policy = match (modifier, args.as_slice()) {
                ("giveUpAfter", [d]) => policy.give_up_after(parse_duration(d).map_err(&syntax)?),
                ("waitInBrokerFrom", [d]) => {
                    policy.wait_in_broker_from(parse_duration(d).map_err(&syntax)?)
                }
                ("withJitter", [f]) => policy.with_jitter(
                    f.parse()
                        .map_err(|_| syntax(format!("'{f}' is not a number")))?,
                )?,
                (name, args) => {
                    return Err(syntax(format!(
                        "unknown modifier .{name}/{} (expected giveUpAfter(d), withJitter(f) or waitInBrokerFrom(d))",
                        args.len()
                    )));
                }
            };
        }
        Ok(policy)
    }
}

/// The outcome of [`RetryPolicy::decide`].
#[derive(Debug, Clone, PartialEq)]
pub enum RetryDecision {
    /// Republish with the attempt raised, after this wait.
    Retry(Wait),
    /// Set the message aside into `.dlq`, with this reason in `x-acemq-error`.
    GiveUp(GiveUpReason),
}

/// How long the next attempt waits, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    scheduled: Duration,
    delay: Duration,
    place: WaitPlace,
}

impl Wait {
    /// The wait to observe: jittered in the consumer, exactly the scheduled delay in the broker
    /// (where it names the rung queue).
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// The un-jittered delay from the schedule.
    pub fn scheduled(&self) -> Duration {
        self.scheduled
    }

    /// Who holds the message while it waits.
    pub fn place(&self) -> WaitPlace {
        self.place
    }
}

/// Who holds a message while it waits for its next attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitPlace {
    /// The consumer holds the delivery (and its prefetch slot), then republishes to the source
    /// queue.
    Consumer,
    /// The message is republished to the rung queue `{queue}.retry.{delay}` and expires home.
    Broker,
}

/// Why a message is not retried. `Display` gives the reason prefix every port writes to
/// `x-acemq-error`; the runtime appends `: <error>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUpReason {
    /// The failed attempt was the last one allowed.
    AttemptsExhausted {
        /// Attempts made.
        attempts: u32,
    },
    /// The message reached the policy's age limit.
    TooOld {
        /// Its age.
        age: Duration,
        /// The limit.
        limit: Duration,
    },
}

impl fmt::Display for GiveUpReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUpReason::AttemptsExhausted { attempts } => {
                write!(f, "exhausted {attempts} attempts")
            }
            GiveUpReason::TooOld { limit, .. } => write!(
                f,
                "exceeded the maximum message age of {}",
                render_duration(*limit)
            ),
        }
    }
}

/// A delay rendered as the shortest exact unit: whole hours `2h`, else whole minutes `5m`,
/// else whole seconds `90s`, else milliseconds `500ms` (Java's rendering; Go, Python and Ruby
/// render sub-second delays as `0s`). This is the suffix of rung queue names.
///
/// ```
/// use std::time::Duration;
/// use acemq::retry::render_duration;
///
/// assert_eq!(render_duration(Duration::from_secs(90)), "90s");
/// assert_eq!(render_duration(Duration::from_secs(300)), "5m");
/// assert_eq!(render_duration(Duration::from_secs(7200)), "2h");
/// assert_eq!(render_duration(Duration::from_millis(1500)), "1500ms");
/// ```
pub fn render_duration(delay: Duration) -> String {
    let millis = delay.as_millis();
    for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if millis >= size && millis.is_multiple_of(size) {
            return format!("{}{unit}", millis / size);
        }
    }
    format!("{millis}ms")
}

fn whole_millis(d: Duration) -> Duration {
    Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn check_attempts(max_attempts: u32) -> Result<()> {
    if max_attempts == 0 {
        return Err(Error::InvalidPolicy {
            reason: "max attempts must be at least 1, was 0".into(),
        });
    }
    Ok(())
}

type Call<'a> = (&'a str, Vec<&'a str>);

/// `a(x, y).b(z)` into `[("a", ["x", "y"]), ("b", ["z"])]`.
fn split_calls(text: &str) -> std::result::Result<Vec<Call<'_>>, String> {
    let mut calls = Vec::new();
    let mut rest = text;
    loop {
        let open = rest
            .find('(')
            .ok_or_else(|| format!("expected '(' after '{rest}'"))?;
        let close = rest[open..]
            .find(')')
            .map(|i| open + i)
            .ok_or_else(|| format!("missing ')' in '{rest}'"))?;
        let name = rest[..open].trim();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(format!("'{name}' is not a policy or modifier name"));
        }
        let inner = rest[open + 1..close].trim();
        let args = if inner.is_empty() {
            Vec::new()
        } else {
            inner.split(',').map(str::trim).collect()
        };
        calls.push((name, args));
        rest = rest[close + 1..].trim_start();
        if rest.is_empty() {
            return Ok(calls);
        }
        rest = rest
            .strip_prefix('.')
            .ok_or_else(|| format!("expected '.' before '{rest}'"))?;
    }
}

fn parse_count(text: &str) -> std::result::Result<u32, String> {
    text.parse()
        .map_err(|_| format!("'{text}' is not a whole number of attempts"))
}

pub(crate) fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("'{text}' has no unit (ms, s, m or h)"))?;
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' does not start with a whole number"))?;
    let unit_ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        other => return Err(format!("'{other}' is not a unit (ms, s, m or h)")),
    };
    n.checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("'{text}' is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factories_refuse_what_cannot_be_a_policy() {
        assert!(RetryPolicy::fixed(0, Duration::from_secs(1)).is_err());
        assert!(RetryPolicy::exponential(3, Duration::ZERO, Duration::from_secs(1)).is_err());
        assert!(RetryPolicy::none().with_jitter(1.5).is_err());
        assert!(RetryPolicy::none().with_jitter(-0.1).is_err());
    }

    #[test]
    fn policy_text_errors_say_what_is_wrong() {
        for (text, fragment) in [
            ("", "expected '('"),
            ("fixed(4, 30)", "no unit"),
            ("fixed(4, 30d)", "not a unit"),
            ("fixed(x, 30s)", "whole number"),
            ("linear(3, 1s)", "unknown factory"),
            ("none().retryForever()", "unknown modifier"),
            ("none() fixed", "expected '.'"),
            ("none(", "missing ')'"),
        ] {
            let err = text.parse::<RetryPolicy>().unwrap_err().to_string();
            assert!(err.contains(fragment), "{text}: {err}");
        }
    }

    #[test]
    fn modifiers_parse() {
        let policy: RetryPolicy = "fixed(3, 500ms).withJitter(0.5).waitInBrokerFrom(0s)"
            .parse()
            .unwrap();
        assert_eq!(policy.jitter_factor(), 0.5);
        assert!(policy.broker_rungs().is_empty());
        assert!(policy.to_string().contains("500ms, 500ms"));
    }

    #[test]
    fn give_up_reasons_read_like_the_other_ports() {
        let policy: RetryPolicy = "fixed(2, 1s).giveUpAfter(2m)".parse().unwrap();
        let mut rng = rand::rng();
        assert_eq!(
            policy.decide(2, None, &mut rng),
            RetryDecision::GiveUp(GiveUpReason::AttemptsExhausted { attempts: 2 })
        );
        let RetryDecision::GiveUp(old) = policy.decide(1, Some(Duration::from_secs(120)), &mut rng)
        else {
            panic!("a message at the age limit is not retried");
        };
        assert_eq!(old.to_string(), "exceeded the maximum message age of 2m");
        assert_eq!(
            GiveUpReason::AttemptsExhausted { attempts: 5 }.to_string(),
            "exhausted 5 attempts"
        );
    }

    #[test]
    fn zero_jitter_is_exact_and_floored() {
        let policy = RetryPolicy::fixed(2, Duration::ZERO).unwrap();
        let mut rng = rand::rng();
        assert_eq!(
            policy.jittered(Duration::from_secs(1), &mut rng),
            Duration::from_secs(1)
        );
        assert_eq!(policy.jittered(Duration::ZERO, &mut rng), MIN_CONSUMER_WAIT);
    }
}
