//! What the two families' transactional outboxes share: the status they report, the relay's
//! poll loop, its backoff arithmetic and the check on a table name.

use std::future::Future;
use std::time::Duration;

use crate::Shutdown;

/// What an outbox holds that is not yet published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutboxStatus {
    /// Rows a relay will still publish.
    pub pending: u64,
    /// Rows a relay gave up on or can never publish; each keeps its `last_error`.
    pub failed: u64,
    /// How long the oldest pending row has waited: the relay's lag. `None` when nothing is
    /// pending.
    pub oldest_pending_age: Option<Duration>,
}

impl OutboxStatus {
    /// The status from what an SQL count returns: counts as `bigint`, the age in seconds as
    /// `double precision` (`NULL` when nothing is pending). A negative figure, which only a
    /// clock step can produce, reads as zero.
    pub fn from_sql(pending: i64, failed: i64, oldest_age_secs: Option<f64>) -> Self {
        Self {
            pending: pending.try_into().unwrap_or(0),
            failed: failed.try_into().unwrap_or(0),
            oldest_pending_age: oldest_age_secs.map(|secs| Duration::from_secs_f64(secs.max(0.0))),
        }
    }
}

#[cfg(feature = "sqlx")]
impl OutboxStatus {
    /// The status from a row of the outbox's status query: the columns `pending` and `failed`
    /// (`bigint`) and `age` (`double precision`, seconds), as [`OutboxStatus::from_sql`] reads
    /// them.
    pub fn from_row(row: &sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        use sqlx::Row as _;
        Ok(Self::from_sql(
            row.try_get("pending")?,
            row.try_get("failed")?,
            row.try_get("age")?,
        ))
    }
}

/// The backoff after a row's publish failed for the `prior_attempts + 1`-th time: `step` per
/// failure, at most `cap` (linear and bounded, as the BabelQueue Go relay).
///
/// ```
/// use std::time::Duration;
/// use polyq_runtime::outbox::linear_backoff;
///
/// let (step, cap) = (Duration::from_millis(50), Duration::from_secs(5));
/// assert_eq!(linear_backoff(step, cap, 0), Duration::from_millis(50));
/// assert_eq!(linear_backoff(step, cap, 2), Duration::from_millis(150));
/// assert_eq!(linear_backoff(step, cap, 1_000), cap);
/// ```
pub fn linear_backoff(step: Duration, cap: Duration, prior_attempts: u32) -> Duration {
    step.saturating_mul(prior_attempts.saturating_add(1))
        .min(cap)
}

/// Runs relay passes until `shutdown` stops it. `pass` returns whether it found a full batch:
/// then the next pass starts at once, otherwise after `idle` (or at the stop, whichever comes
/// first). A pass under way when the stop comes is finished.
pub async fn relay_until_stopped<F, Fut>(shutdown: &Shutdown, idle: Duration, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    while !shutdown.is_stopping() {
        if !pass().await {
            tokio::select! {
                () = tokio::time::sleep(idle) => {}
                () = shutdown.stopping() => {}
            }
        }
    }
}

/// One family's steps of a relay pass, which [`relay_streak`] overlaps: lease a batch, publish
/// it and await the broker's answer to each row, mark each row by that answer.
///
/// The engine never marks a batch before its own publish step has finished, so a row is marked
/// published only after its confirm whatever the overlap; leasing (`FOR UPDATE SKIP LOCKED` and
/// a lease per batch) stays each family's, so two relays never hold the same row.
pub trait RelaySteps: Sync {
    /// Rows leased together.
    type Batch: Send;
    /// A batch with the broker's answer for each row (and the rows that could not be sent).
    type Published: Send;
    /// What marking one batch did; [`RelaySteps::add`] sums them.
    type Report: Default + Send;
    /// A failure of the database (a lease or a mark), which ends the streak.
    type Error: Send;
    /// A row's place in the pending index, which a lease may start behind.
    type Position: Clone + Send;

    /// Leases the next batch: with `after`, of the rows behind that one in the pending index
    /// (see [`relay_streak`]), else from its start.
    fn lease(
        &self,
        after: Option<Self::Position>,
    ) -> impl Future<Output = Result<Self::Batch, Self::Error>> + Send;

    /// Where the last row of `batch` stands in the pending index; `None` for an empty batch.
    fn last_position(batch: &Self::Batch) -> Option<Self::Position>;

    /// Whether `batch` is a full one: only then is another leased after it.
    fn is_full(&self, batch: &Self::Batch) -> bool;

    /// Publishes `batch` and waits for the broker's answer to each of its rows.
    fn publish(&self, batch: Self::Batch) -> impl Future<Output = Self::Published> + Send;

    /// Marks each row of a published batch published or failed, as the broker answered.
    fn mark(
        &self,
        published: Self::Published,
    ) -> impl Future<Output = Result<Self::Report, Self::Error>> + Send;

    /// `report` added to `total`.
    fn add(total: &mut Self::Report, report: Self::Report);

    /// Rows `report` says were published.
    fn published(report: &Self::Report) -> usize;

    /// How often [`RelaySteps::renew`] runs while a leased batch is not marked yet (at most a
    /// third of the lease, so that one late renewal still finds it held).
    fn renew_every(&self) -> Duration;

    /// Extends the lease of every batch leased and not marked yet. A broker that blocks its
    /// publishers (out of memory or disk) holds a batch's publishes back for as long as the
    /// alarm lasts and answers them when it clears; a lease that ran out meanwhile would let
    /// another relay publish the same rows.
    fn renew(&self) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// How much of a relay's work [`relay_streak`] overlaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pipeline {
    /// Batches whose publishes may await the broker at once (at least 1).
    pub window: usize,
    /// Batches leased at most in the streak.
    pub max_batches: usize,
}

/// What a streak of [`relay_streak`] did: the batches' reports added up, and how many batches
/// it leased.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Streak<R> {
    /// The marked batches' reports added up.
    pub report: R,
    /// Batches leased, short or empty ones included.
    pub batches: usize,
}

/// Relays batches back to back while each lease finds a full one, at most
/// [`Pipeline::max_batches`], until `stop` says so. Up to [`Pipeline::window`] batches await
/// their broker's answers at once; meanwhile the next batch is leased and the batches already
/// answered are marked, so the database's round trips overlap the broker's. One leased batch
/// waits for a free place in the window at most, so a lease runs out no sooner than with one
/// batch in flight.
///
/// Each lease after the first starts behind the last row of the batch before, and one in fifty
/// from the start of the pending index: its head keeps an entry for every
/// row leased or marked since the table was last vacuumed, dead, skipped, but read by every walk
/// from the start, so that each lease of a long backlog would cost more than the one before. A
/// row left behind (its backoff over, the lease of a relay that died run out, its transaction
/// committed late) waits that many batches at most.
///
/// While a batch is leased and not marked, its lease is renewed every
/// [`RelaySteps::renew_every`], so that a broker holding its publishes back does not lose it.
///
/// A failed lease, renewal or mark ends the streak: nothing more is leased, what is in flight is
/// still published and marked, then the first error is returned (rows leased and not marked
/// come back when their lease runs out).
///
/// The future is boxed: unboxed, a relay's future nests the family's transport futures
/// so deeply that proving it `Send` for `tokio::spawn` exceeds the compiler's default
/// recursion limit in the application's crate.
///
/// # Errors
/// The first error of [`RelaySteps::lease`], [`RelaySteps::renew`] or [`RelaySteps::mark`].
pub fn relay_streak<'a, S: RelaySteps>(
    steps: &'a S,
    pipeline: Pipeline,
    stop: &'a (dyn Fn() -> bool + Sync),
) -> futures_util::future::BoxFuture<'a, Result<Streak<S::Report>, S::Error>> {
    Box::pin(streak(steps, pipeline, stop))
}

/// Streaks of [`relay_streak`] until one publishes nothing (the outbox is empty, or only rows
/// under backoff are left), at most `max_batches` batches in all; their reports added up.
///
/// # Errors
/// The first error of a streak.
pub async fn relay_drain<S: RelaySteps>(
    steps: &S,
    window: usize,
    max_batches: usize,
) -> Result<S::Report, S::Error> {
    let mut total = S::Report::default();
    let mut left = max_batches;
    while left > 0 {
        let pipeline = Pipeline {
            window,
            max_batches: left,
        };
        let streak = relay_streak(steps, pipeline, &|| false).await?;
        let published = S::published(&streak.report);
        S::add(&mut total, streak.report);
        left = left.saturating_sub(streak.batches);
        if published == 0 {
            break;
        }
    }
    Ok(total)
}

async fn streak<S: RelaySteps>(
    steps: &S,
    pipeline: Pipeline,
    stop: &(dyn Fn() -> bool + Sync),
) -> Result<Streak<S::Report>, S::Error> {
    use futures_util::StreamExt as _;
    use futures_util::stream::FuturesUnordered;

    let window = pipeline.window.max(1);
    let mut streak = Streak::<S::Report>::default();
    let mut error = None;
    let mut more = true;
    let mut leasing = None;
    let mut ready = None;
    let mut publishing = FuturesUnordered::new();
    let mut marking = FuturesUnordered::new();
    let every = steps.renew_every().max(Duration::from_millis(1));
    let mut renewal = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    renewal.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut renewing = None;
    let mut cursor = LeaseCursor::default();
    loop {
        if publishing.len() < window
            && let Some(batch) = ready.take()
        {
            publishing.push(steps.publish(batch));
        }
        if more && leasing.is_none() && ready.is_none() {
            if streak.batches < pipeline.max_batches && !stop() {
                streak.batches += 1;
                leasing = Some(Box::pin(steps.lease(cursor.lease_after())));
            } else {
                more = false;
            }
        }
        if leasing.is_none() && ready.is_none() && publishing.is_empty() && marking.is_empty() {
            break;
        }
        let in_flight = ready.is_some() || !publishing.is_empty();
        tokio::select! {
            Some(leased) = async {
                match leasing.as_mut() {
                    Some(lease) => Some(lease.await),
                    None => None,
                }
            }, if leasing.is_some() => {
                leasing = None;
                match leased {
                    Ok(batch) => {
                        cursor.leased(S::last_position(&batch));
                        more &= steps.is_full(&batch);
                        ready = Some(batch);
                    }
                    Err(failure) => {
                        more = false;
                        error.get_or_insert(failure);
                    }
                }
            }
            Some(published) = publishing.next(), if !publishing.is_empty() => {
                marking.push(steps.mark(published));
            }
            Some(marked) = marking.next(), if !marking.is_empty() => match marked {
                Ok(report) => S::add(&mut streak.report, report),
                Err(failure) => {
                    more = false;
                    error.get_or_insert(failure);
                }
            },
            _ = renewal.tick(), if renewing.is_none() && in_flight => {
                renewing = Some(Box::pin(steps.renew()));
            }
            Some(renewed) = async {
                match renewing.as_mut() {
                    Some(renew) => Some(renew.await),
                    None => None,
                }
            }, if renewing.is_some() => {
                renewing = None;
                if let Err(failure) = renewed {
                    more = false;
                    error.get_or_insert(failure);
                }
            }
        }
    }
    match error {
        Some(failure) => Err(failure),
        None => Ok(streak),
    }
}

/// Whether a database error is the connection: lost, refused, or none to be had from the pool.
#[cfg(feature = "sqlx")]
pub fn sqlx_is_connection(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed
    )
}

/// Whether the statement can succeed when tried again later: the connection failed
/// ([`sqlx_is_connection`]) or the driver's worker crashed, not a mistake in the statement.
#[cfg(feature = "sqlx")]
pub fn sqlx_is_transient(error: &sqlx::Error) -> bool {
    sqlx_is_connection(error) || matches!(error, sqlx::Error::WorkerCrashed)
}

/// The `FROM` clause that lets one PostgreSQL `UPDATE` of a relay commit without waiting for
/// its WAL flush when `synchronous_commit` is off (empty when it is on):
/// `set_config(…, true)` holds for the statement's own transaction only, so the setting never
/// outlives it on a pooled connection that the application shares. A database crash can then
/// forget the relay's last leases and marks, never a row: the rows were committed by the
/// application's own transaction under its own settings, and a forgotten mark or lease only
/// makes a relay publish the row again.
pub fn relay_commit_clause(synchronous_commit: bool) -> &'static str {
    if synchronous_commit {
        ""
    } else {
        "FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relay_commit"
    }
}

/// Where the next lease of a streak starts (see [`relay_streak`]).
#[derive(Debug)]
struct LeaseCursor<Id> {
    after: Option<Id>,
    behind: usize,
}

impl<Id> Default for LeaseCursor<Id> {
    fn default() -> Self {
        Self {
            after: None,
            behind: 0,
        }
    }
}

impl<Id: Clone> LeaseCursor<Id> {
    /// One lease in this many walks the pending index from its start.
    const EVERY: usize = 50;

    /// The row the next lease starts behind, if any.
    fn lease_after(&mut self) -> Option<Id> {
        if self.behind + 1 >= Self::EVERY {
            self.behind = 0;
            self.after = None;
        }
        if self.after.is_some() {
            self.behind += 1;
        }
        self.after.clone()
    }

    /// Takes note of the last row, in index order, of the batch just leased (`None` for an
    /// empty one, which changes nothing).
    fn leased(&mut self, last: Option<Id>) {
        if last.is_some() {
            self.after = last;
        }
    }
}

/// Sent before a relay's lease in the same simple query, so the lease walks the pending index
/// in its order and stops after its batch, whatever the table's statistics say. Left to its
/// estimates, the planner takes a table never analyzed (autovacuum off, or not run yet) for a
/// handful of pending rows, and for each batch reads and sorts every pending row instead: each
/// lease then costs as much as the backlog behind it. `SET LOCAL` lasts for the implicit
/// transaction of that one query, the lease's own, so nothing reaches the pool's other users.
/// (Not `enable_sort`: the sort of the claimed rows stays, and its disabling cost lifts the
/// plan's estimate above `jit_above_cost`, so that each lease is JIT-compiled.)
pub const WALK_THE_PENDING_INDEX: &str = "SET LOCAL enable_bitmapscan = off;";

/// Whether `name` is a plain SQL identifier (ASCII letters, digits and `_`, not starting with a
/// digit, at most 63 bytes, PostgreSQL's limit): a table name reaches SQL by interpolation,
/// since no database binds identifiers as parameters, so nothing else may pass.
///
/// ```
/// use polyq_runtime::outbox::is_plain_sql_identifier;
///
/// assert!(is_plain_sql_identifier("acemq_outbox"));
/// assert!(!is_plain_sql_identifier("outbox; DROP TABLE orders"));
/// ```
pub fn is_plain_sql_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 63
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[cfg(feature = "sqlx")]
    #[test]
    fn database_errors_are_classed() {
        let refused = || sqlx::Error::Io(std::io::ErrorKind::ConnectionRefused.into());
        assert!(sqlx_is_connection(&refused()) && sqlx_is_transient(&refused()));
        assert!(sqlx_is_connection(&sqlx::Error::PoolTimedOut));
        assert!(!sqlx_is_connection(&sqlx::Error::WorkerCrashed));
        assert!(sqlx_is_transient(&sqlx::Error::WorkerCrashed));
        assert!(!sqlx_is_transient(&sqlx::Error::RowNotFound));
    }

    #[test]
    fn only_plain_identifiers_pass() {
        for good in ["t", "_t1", "babelqueue_outbox"] {
            assert!(is_plain_sql_identifier(good), "{good}");
        }
        for bad in ["", "1t", "a-b", "a b", "a;b", "é", &"x".repeat(64)] {
            assert!(!is_plain_sql_identifier(bad), "{bad}");
        }
    }

    /// Steps over `full` full batches and then a short one, counting publishes in flight. A
    /// publish takes `publish_takes` (on a paused clock) or three yields. A batch is its number,
    /// and stands for its own position; each lease notes what it was to start behind.
    #[derive(Default)]
    struct Counted {
        full: usize,
        afters: Mutex<Vec<Option<usize>>>,
        fail_lease: Option<usize>,
        fail_renewal: bool,
        publish_takes: Option<Duration>,
        renewed: AtomicUsize,
        leased: AtomicUsize,
        in_flight: AtomicUsize,
        most_in_flight: AtomicUsize,
        published: Mutex<Vec<usize>>,
        marked: Mutex<Vec<usize>>,
    }

    impl RelaySteps for Counted {
        type Batch = usize;
        type Published = usize;
        type Report = usize;
        type Error = usize;
        type Position = usize;

        async fn lease(&self, after: Option<usize>) -> Result<usize, usize> {
            self.afters.lock().unwrap().push(after);
            let batch = self.leased.fetch_add(1, Ordering::SeqCst);
            match self.fail_lease {
                Some(failing) if failing == batch => Err(batch),
                _ => Ok(batch),
            }
        }

        fn last_position(batch: &usize) -> Option<usize> {
            Some(*batch)
        }

        fn is_full(&self, batch: &usize) -> bool {
            *batch < self.full
        }

        async fn publish(&self, batch: usize) -> usize {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_in_flight.fetch_max(now, Ordering::SeqCst);
            match self.publish_takes {
                Some(takes) => tokio::time::sleep(takes).await,
                None => {
                    for _ in 0..3 {
                        tokio::task::yield_now().await;
                    }
                }
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            self.published.lock().unwrap().push(batch);
            batch
        }

        async fn mark(&self, batch: usize) -> Result<usize, usize> {
            assert!(self.published.lock().unwrap().contains(&batch));
            self.marked.lock().unwrap().push(batch);
            Ok(1)
        }

        fn add(total: &mut usize, report: usize) {
            *total += report;
        }

        fn published(report: &usize) -> usize {
            *report
        }

        fn renew_every(&self) -> Duration {
            Duration::from_secs(1)
        }

        async fn renew(&self) -> Result<(), usize> {
            let leased = self.leased.load(Ordering::SeqCst);
            assert!(
                self.marked.lock().unwrap().len() < leased,
                "a renewal with every leased batch marked"
            );
            self.renewed.fetch_add(1, Ordering::SeqCst);
            if self.fail_renewal {
                Err(usize::MAX)
            } else {
                Ok(())
            }
        }
    }

    fn marked(steps: &Counted) -> Vec<usize> {
        let mut marked = steps.marked.lock().unwrap().clone();
        marked.sort_unstable();
        marked
    }

    const UNBOUNDED: Pipeline = Pipeline {
        window: 3,
        max_batches: usize::MAX,
    };

    #[tokio::test]
    async fn a_streak_keeps_the_window_full_and_ends_on_the_short_batch() {
        let steps = Counted {
            full: 9,
            ..Counted::default()
        };
        let streak = relay_streak(&steps, UNBOUNDED, &|| false).await.unwrap();
        assert_eq!(
            streak,
            Streak {
                report: 10,
                batches: 10
            }
        );
        assert_eq!(steps.most_in_flight.load(Ordering::SeqCst), 3);
        assert_eq!(marked(&steps), (0..10).collect::<Vec<_>>());
        // The first lease from the start, each other behind the batch before.
        let afters = steps.afters.lock().unwrap().clone();
        let behind: Vec<Option<usize>> = std::iter::once(None).chain((0..9).map(Some)).collect();
        assert_eq!(afters, behind);
    }

    #[tokio::test]
    async fn a_window_of_one_publishes_one_batch_at_a_time() {
        let steps = Counted {
            full: 5,
            ..Counted::default()
        };
        let pipeline = Pipeline {
            window: 1,
            ..UNBOUNDED
        };
        let streak = relay_streak(&steps, pipeline, &|| false).await.unwrap();
        assert_eq!(streak.report, 6);
        assert_eq!(steps.most_in_flight.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_streak_leases_at_most_its_batches_and_none_once_stopped() {
        let steps = Counted {
            full: usize::MAX,
            ..Counted::default()
        };
        let pipeline = Pipeline {
            max_batches: 4,
            ..UNBOUNDED
        };
        let streak = relay_streak(&steps, pipeline, &|| false).await.unwrap();
        assert_eq!(
            streak,
            Streak {
                report: 4,
                batches: 4
            }
        );
        let stopped = relay_streak(&steps, UNBOUNDED, &|| true).await.unwrap();
        assert_eq!(stopped, Streak::default());
    }

    #[tokio::test]
    async fn a_failed_lease_ends_the_streak_after_the_batches_in_flight_are_marked() {
        let steps = Counted {
            full: usize::MAX,
            fail_lease: Some(3),
            ..Counted::default()
        };
        let failure = relay_streak(&steps, UNBOUNDED, &|| false).await;
        assert_eq!(failure, Err(3));
        assert_eq!(marked(&steps), vec![0, 1, 2]);
        assert_eq!(steps.leased.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn leases_are_renewed_while_a_batch_is_in_flight_and_only_then() {
        let steps = Counted {
            full: 1,
            publish_takes: Some(Duration::from_millis(10_250)),
            ..Counted::default()
        };
        let pipeline = Pipeline {
            window: 1,
            ..UNBOUNDED
        };
        let streak = relay_streak(&steps, pipeline, &|| false).await.unwrap();
        assert_eq!(streak.report, 2);
        // Two batches one after the other, each 10.25 s in flight: one renewal a second.
        assert_eq!(steps.renewed.load(Ordering::SeqCst), 20);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(steps.renewed.load(Ordering::SeqCst), 20);

        let quick = Counted {
            full: 3,
            ..Counted::default()
        };
        relay_streak(&quick, pipeline, &|| false).await.unwrap();
        assert_eq!(quick.renewed.load(Ordering::SeqCst), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_ends_the_streak_after_the_batches_in_flight_are_marked() {
        let steps = Counted {
            full: usize::MAX,
            fail_renewal: true,
            publish_takes: Some(Duration::from_millis(4_250)),
            ..Counted::default()
        };
        let failure = relay_streak(&steps, UNBOUNDED, &|| false).await;
        assert_eq!(failure, Err(usize::MAX));
        // Three batches in flight and a fourth waiting when the first renewal fails: nothing
        // more is leased, and the four stay renewed until the last is marked at 8.5 s.
        assert_eq!(steps.leased.load(Ordering::SeqCst), 4);
        assert_eq!(steps.renewed.load(Ordering::SeqCst), 8);
        let leased = steps.leased.load(Ordering::SeqCst);
        assert_eq!(marked(&steps), (0..leased).collect::<Vec<_>>());
    }

    #[test]
    fn one_lease_in_fifty_walks_from_the_start() {
        let mut cursor = LeaseCursor::default();
        let from_the_start: Vec<usize> = (0..120)
            .filter(|&n| {
                let start = cursor.lease_after().is_none();
                cursor.leased(Some(n));
                start
            })
            .collect();
        assert_eq!(from_the_start, vec![0, 50, 100]);
        let mut cursor = LeaseCursor::default();
        cursor.lease_after();
        cursor.leased(Some("m-7"));
        assert_eq!(cursor.lease_after(), Some("m-7"));
        cursor.leased(None);
        assert_eq!(
            cursor.lease_after(),
            Some("m-7"),
            "an empty batch moves nothing"
        );
    }

    #[tokio::test]
    async fn a_stopped_relay_runs_no_pass() {
        let shutdown = Shutdown::new();
        shutdown.stop();
        let mut passes = 0;
        relay_until_stopped(&shutdown, Duration::from_secs(60), || {
            passes += 1;
            async { true }
        })
        .await;
        assert_eq!(passes, 0);
    }

    #[tokio::test]
    async fn full_passes_follow_each_other_until_the_stop() {
        let shutdown = Shutdown::new();
        let mut passes = 0;
        relay_until_stopped(&shutdown, Duration::from_secs(3600), || {
            passes += 1;
            if passes == 3 {
                shutdown.stop();
            }
            async { true }
        })
        .await;
        assert_eq!(passes, 3);
    }
}
