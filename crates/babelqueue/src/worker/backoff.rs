//! Retry backoff (ADR-0034 §9): `d(n) = min(max, base × multiplier^(n−1))`, optionally drawn
//! uniformly from `[0, d(n)]` (full jitter).

use std::time::Duration;

/// How long the n-th retry waits before it is delivered again. The default is no wait: every SDK
/// defaults to immediate redelivery.
///
/// ```
/// use std::time::Duration;
/// use babelqueue::worker::Backoff;
///
/// let backoff =
///     Backoff::exponential(Duration::from_millis(100), 2.0).max(Duration::from_millis(300));
/// assert_eq!(backoff.delay(1), Duration::from_millis(100));
/// assert_eq!(backoff.delay(2), Duration::from_millis(200));
/// assert_eq!(backoff.delay(3), Duration::from_millis(300));
/// assert_eq!(Backoff::none().delay(5), Duration::ZERO);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    base: Duration,
    multiplier: f64,
    max: Duration,
    full_jitter: bool,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::none()
    }
}

impl Backoff {
    /// No wait (base 0).
    pub fn none() -> Self {
        Self {
            base: Duration::ZERO,
            multiplier: 1.0,
            max: Duration::ZERO,
            full_jitter: false,
        }
    }

    /// The same wait before every retry.
    pub fn fixed(delay: Duration) -> Self {
        Self::exponential(delay, 1.0)
    }

    /// `base × multiplier^(n−1)`. The multiplier must be finite and at least 1: a
    /// [`Worker`](crate::worker::Worker) refuses to start with any other, and [`Backoff::delay`]
    /// reads it as 1.
    pub fn exponential(base: Duration, multiplier: f64) -> Self {
        Self {
            base,
            multiplier,
            ..Self::none()
        }
    }

    /// The multiplier when it is not a finite number of at least 1.
    pub(crate) fn invalid_multiplier(&self) -> Option<f64> {
        (!(self.multiplier.is_finite() && self.multiplier >= 1.0)).then_some(self.multiplier)
    }

    /// Caps every wait (default: zero, which means uncapped).
    pub fn max(mut self, max: Duration) -> Self {
        self.max = max;
        self
    }

    /// Draws each wait uniformly from `[0, d(n)]` (default off).
    pub fn full_jitter(mut self) -> Self {
        self.full_jitter = true;
        self
    }

    /// The wait before retry `attempt` (the `attempts` value the retry carries, 1 for the first
    /// retry), with jitter drawn from the thread's random generator when enabled.
    pub fn delay(&self, attempt: i64) -> Duration {
        if self.full_jitter {
            self.delay_with(attempt, rand::random::<f64>())
        } else {
            self.ceiling(attempt)
        }
    }

    /// The wait before retry `attempt` with the jitter draw `unit` in `[0, 1]` (ignored without
    /// jitter): pure, for tests and reproducible schedules.
    ///
    /// ```
    /// use std::time::Duration;
    /// use babelqueue::worker::Backoff;
    ///
    /// let backoff = Backoff::fixed(Duration::from_secs(2)).full_jitter();
    /// assert_eq!(backoff.delay_with(1, 0.25), Duration::from_millis(500));
    /// assert_eq!(backoff.delay_with(1, 1.0), Duration::from_secs(2));
    /// ```
    pub fn delay_with(&self, attempt: i64, unit: f64) -> Duration {
        let ceiling = self.ceiling(attempt);
        if !self.full_jitter {
            return ceiling;
        }
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.0
        };
        ceiling.mul_f64(unit)
    }

    /// `d(n)` without jitter.
    fn ceiling(&self, attempt: i64) -> Duration {
        if self.base.is_zero() {
            return Duration::ZERO;
        }
        let exponent = i32::try_from(attempt.saturating_sub(1).max(0)).unwrap_or(i32::MAX);
        let multiplier = if self.invalid_multiplier().is_some() {
            1.0
        } else {
            self.multiplier
        };
        let seconds = self.base.as_secs_f64() * multiplier.powi(exponent);
        let uncapped = Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX);
        if self.max.is_zero() {
            uncapped
        } else {
            uncapped.min(self.max)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn grows_geometrically_from_the_first_retry() {
        let backoff = Backoff::exponential(MS * 10, 3.0);
        let delays: Vec<_> = (1..=4).map(|n| backoff.delay(n)).collect();
        assert_eq!(delays, [MS * 10, MS * 30, MS * 90, MS * 270]);
    }

    #[test]
    fn the_cap_bounds_every_delay_and_zero_means_uncapped() {
        let capped = Backoff::exponential(MS * 10, 10.0).max(MS * 500);
        assert_eq!(capped.delay(2), MS * 100);
        assert_eq!(capped.delay(3), MS * 500);
        assert_eq!(capped.delay(60), MS * 500);
        let uncapped = Backoff::exponential(MS * 10, 10.0);
        assert_eq!(uncapped.delay(3), MS * 1000);
    }

    #[test]
    fn huge_exponents_saturate_instead_of_overflowing() {
        assert_eq!(Backoff::exponential(MS, 2.0).delay(i64::MAX), Duration::MAX);
        assert_eq!(
            Backoff::exponential(MS, 2.0).max(MS * 7).delay(i64::MAX),
            MS * 7
        );
    }

    #[test]
    fn attempts_below_one_use_the_base() {
        let backoff = Backoff::exponential(MS * 10, 2.0);
        assert_eq!(backoff.delay(0), MS * 10);
        assert_eq!(backoff.delay(-3), MS * 10);
    }

    #[test]
    fn a_multiplier_below_one_counts_as_one() {
        assert_eq!(Backoff::exponential(MS * 10, 0.5).delay(4), MS * 10);
        assert_eq!(Backoff::exponential(MS * 10, f64::NAN).delay(4), MS * 10);
    }

    #[test]
    fn full_jitter_scales_the_capped_delay_by_the_draw() {
        let backoff = Backoff::exponential(MS * 100, 2.0)
            .max(MS * 300)
            .full_jitter();
        assert_eq!(backoff.delay_with(3, 0.5), MS * 150);
        assert_eq!(backoff.delay_with(2, 0.0), Duration::ZERO);
        assert_eq!(backoff.delay_with(2, 7.0), MS * 200);
        assert_eq!(backoff.delay_with(2, f64::NAN), Duration::ZERO);
        for _ in 0..100 {
            assert!(backoff.delay(3) <= MS * 300);
        }
    }

    #[test]
    fn the_default_waits_nothing() {
        assert_eq!(Backoff::default().delay(3), Duration::ZERO);
        assert_eq!(Backoff::default().full_jitter().delay(3), Duration::ZERO);
    }
}
