//! Stopping a worker or a consumer: gracefully (finish what is in flight) or at once.

use tokio_util::sync::CancellationToken;

/// A stop request shared by a worker (or consumer) and whoever stops it. Cheap to clone.
///
/// [`Shutdown::stop`] asks for a graceful stop: no new message is taken, in-flight handlers run
/// to completion for up to the runtime's shutdown timeout, then what is left is released back to
/// the broker unchanged. [`Shutdown::stop_now`] ends the wait at once.
///
/// `babelqueue::worker::Worker::run` and `acemq::Consumer::drain_on` take it.
///
/// ```
/// let shutdown = polyq_runtime::Shutdown::new();
/// assert!(!shutdown.is_stopping());
/// shutdown.stop();
/// assert!(shutdown.is_stopping());
/// ```
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    graceful: CancellationToken,
    immediate: CancellationToken,
}

impl Shutdown {
    /// A handle nobody has stopped yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A handle stopped by the process's signals: the first SIGINT or SIGTERM asks for a
    /// graceful stop, the second one for an immediate one. Needs a running tokio runtime.
    ///
    /// The listeners are installed before this returns, so no signal sent afterwards is missed;
    /// when they cannot be installed the handle only stops when asked to, and a warning says so.
    pub fn on_signals() -> Self {
        let shutdown = Self::new();
        let mut signals = match Signals::new() {
            Ok(signals) => signals,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for shutdown signals; stop the worker another way");
                return shutdown;
            }
        };
        let listener = shutdown.clone();
        tokio::spawn(async move {
            signals.next().await;
            tracing::info!("shutdown signal: finishing in-flight messages");
            listener.stop();
            signals.next().await;
            tracing::warn!("second shutdown signal: releasing in-flight messages now");
            listener.stop_now();
        });
        shutdown
    }

    /// Asks for a graceful stop.
    pub fn stop(&self) {
        self.graceful.cancel();
    }

    /// Asks for an immediate stop: in-flight handlers are abandoned and their messages released.
    pub fn stop_now(&self) {
        self.graceful.cancel();
        self.immediate.cancel();
    }

    /// `true` once a stop was asked for.
    pub fn is_stopping(&self) -> bool {
        self.graceful.is_cancelled()
    }

    /// Resolves when a stop is asked for.
    pub async fn stopping(&self) {
        self.graceful.cancelled().await;
    }

    /// Resolves when an immediate stop is asked for.
    pub async fn stopping_now(&self) {
        self.immediate.cancelled().await;
    }

    /// The graceful-stop token, to tie other tasks to the same stop.
    pub fn token(&self) -> CancellationToken {
        self.graceful.clone()
    }
}

/// SIGTERM and SIGINT (Ctrl-C elsewhere), listened to from creation on so none is missed.
struct Signals {
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    #[cfg(unix)]
    fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    #[cfg(not(unix))]
    fn new() -> std::io::Result<Self> {
        Ok(Self {})
    }

    #[cfg(unix)]
    async fn next(&mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {},
            _ = self.interrupt.recv() => {},
        }
    }

    #[cfg(not(unix))]
    async fn next(&mut self) {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
