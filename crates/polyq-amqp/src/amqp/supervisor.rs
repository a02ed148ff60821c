//! The recovery supervisor: one task per client that watches the connection, reconnects with
//! capped exponential backoff, declares again what the client declared, and re-creates its
//! consumers. Operations wait for it (up to `ClientOptions::recovery_wait`) instead of failing
//! on the first lost connection.
//!
//! lapin's own auto-recovery stays off: a new connection per generation means a delivery from
//! an old channel can never be acknowledged on a new one (its acker belongs to a closed
//! channel), and every pending publisher confirm of a dead connection fails rather than being
//! carried over.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable as LapinTable;
use lapin::uri::AMQPUri;
use lapin::{Channel, Connection, ConnectionProperties};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::consumer::ConsumerSlot;
use super::convert::lapin_tls;
use super::errors::{Failure, Target, classify, from_lapin};
use super::ops::{Op, Outcome};
use super::record::{Declared, Record};
use super::session::{SerialChannel, Session};
use crate::client::ClientOptions;
use crate::error::{Error, Result};
use crate::health::HealthTracker;

/// How often the supervisor looks at the connection state even when nothing reported a failure;
/// a safety net for failures lapin does not announce as events.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// Upper bound of the first connection attempt, unless the URL sets `connection_timeout`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Upper bound of one reconnect attempt, unless the URL sets a shorter `connection_timeout`: an
/// attempt caught by a broker that went away again (or a network that drops packets) is given
/// up soon, so that the next one, quite likely to succeed, is not held back by it.
const RECONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long `close` waits for the broker's close-ok.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// How many times an operation is tried again on a fresh channel after its channel closed under
/// it while the connection stayed up.
const CHANNEL_RETRIES: u8 = 3;
/// The blocked reason shown when the broker blocked the connection before its reason could be
/// heard.
const UNKNOWN_BLOCK_REASON: &str = "blocked by the broker (reason not received)";

/// The state of the client's connection, watched by every operation.
#[derive(Clone)]
pub(super) enum Link {
    Up(Arc<Session>),
    Down,
    Closed,
}

enum Request {
    /// Something failed; look at the connection now.
    Check,
    /// A consumer's lapin consumer ended (attachment `seq`): start it again.
    Reattach(Arc<ConsumerSlot>, u64),
}

/// State shared by the client handles, their consumers and the supervisor task.
pub(super) struct Shared {
    /// The URL with its password hidden, for logs and errors.
    pub(super) shown_url: String,
    /// The nodes the URL lists, tried in turn.
    nodes: Vec<Node>,
    /// The node of the current (or last) connection.
    current: AtomicUsize,
    password: String,
    connection_name: String,
    pub(super) options: ClientOptions,
    link: watch::Sender<Link>,
    pub(super) record: Mutex<Record>,
    consumers: Mutex<HashMap<u64, Arc<ConsumerSlot>>>,
    next_consumer: AtomicU64,
    requests: mpsc::UnboundedSender<Request>,
    pub(super) closed: CancellationToken,
    pub(super) health: HealthTracker,
}

/// One broker node of the URL.
struct Node {
    uri: AMQPUri,
    /// Its URL with the password hidden.
    shown: String,
}

impl Node {
    fn parse(url: &str, listed_in: &str) -> Result<Self> {
        let shown = crate::redact_url(url);
        let invalid = |reason: String| Error::InvalidUrl {
            url: crate::redact_url(listed_in),
            reason,
        };
        let uri: AMQPUri = url
            .parse()
            .map_err(|reason: String| invalid(reason.replace(url, &shown)))?;
        Ok(Self { uri, shown })
    }
}

/// Connects and starts the supervisor.
pub(super) async fn start(url: &str, options: &ClientOptions) -> Result<Arc<Shared>> {
    let shown_url = crate::redact_url(url);
    let listed = crate::addresses::split_addresses(url);
    if listed.len() > 1
        && listed
            .iter()
            .any(|node| crate::addresses::has_empty_host(node))
    {
        return Err(Error::InvalidUrl {
            url: shown_url,
            reason: "an empty address in the list of nodes (write `host1:port1,host2:port2`)"
                .to_owned(),
        });
    }
    let nodes = listed
        .iter()
        .map(|node| Node::parse(node, url))
        .collect::<Result<Vec<_>>>()?;
    let (requests, requests_rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        shown_url,
        password: nodes[0].uri.authority.userinfo.password.clone(),
        nodes,
        current: AtomicUsize::new(0),
        connection_name: options.connection_name.clone(),
        options: options.clone(),
        link: watch::Sender::new(Link::Down),
        record: Mutex::new(Record::default()),
        consumers: Mutex::new(HashMap::new()),
        next_consumer: AtomicU64::new(0),
        requests,
        closed: CancellationToken::new(),
        health: HealthTracker::up(0),
    });
    let session = shared
        .open(0, CONNECT_TIMEOUT, 0)
        .await
        .map_err(|error| Error::Connect {
            url: shared.shown_url.clone(),
            source: shared.scrub_error(error),
        })?;
    shared.link.send_replace(Link::Up(Arc::new(session)));
    shared.health.connected(0);
    tokio::spawn(supervise(shared.clone(), requests_rx));
    Ok(shared)
}

impl Shared {
    /// The current session, waiting for recovery when the connection is down. `stale` is a
    /// generation known to be dead. The wait is bounded by `deadline`, set on first need to
    /// now + `recovery_wait`, so retries of one operation share one bound.
    pub(super) async fn session(
        &self,
        stale: Option<u64>,
        deadline: &mut Option<Instant>,
        operation: &str,
    ) -> Result<Arc<Session>> {
        if let Link::Up(session) = &*self.link.borrow()
            && Some(session.generation) != stale
            && session.is_up()
        {
            return Ok(session.clone());
        }
        let until = *deadline.get_or_insert_with(|| Instant::now() + self.options.recovery_wait);
        let mut link = self.link.subscribe();
        loop {
            match &*link.borrow_and_update() {
                Link::Up(session) if Some(session.generation) != stale && session.is_up() => {
                    return Ok(session.clone());
                }
                Link::Up(_) => self.check(),
                Link::Down => {}
                Link::Closed => return Err(Error::Closed),
            }
            match tokio::time::timeout_at(until, link.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Error::Closed),
                Err(_) => {
                    return Err(Error::Unavailable {
                        url: self.shown_url.clone(),
                        operation: operation.to_owned(),
                        waited_ms: u64::try_from(self.options.recovery_wait.as_millis())
                            .unwrap_or(u64::MAX),
                    });
                }
            }
        }
    }

    /// Decides what to do after an operation failed on `session`: `Ok(())` to try again (after
    /// waiting for a new connection when this one is gone), or the error to report.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn after_failure(
        &self,
        session: &Session,
        operation: &str,
        target: Option<Target<'_>>,
        error: &lapin::Error,
        stale: &mut Option<u64>,
        deadline: &mut Option<Instant>,
        channel_retries: &mut u8,
    ) -> Result<()> {
        if self.closed.is_cancelled() {
            return Err(Error::Closed);
        }
        match classify(operation, target, error, session.is_up()) {
            Failure::Fatal(error) => Err(error),
            Failure::ChannelGone if *channel_retries < CHANNEL_RETRIES => {
                *channel_retries += 1;
                debug!(url = %self.shown_url, operation, %error, "channel closed; retrying on a new one");
                Ok(())
            }
            Failure::ChannelGone => Err(from_lapin(operation, target, error)),
            Failure::ConnectionGone => {
                debug!(url = %self.shown_url, operation, %error, "connection lost; waiting for recovery");
                self.check();
                *stale = Some(session.generation);
                deadline.get_or_insert_with(|| Instant::now() + self.options.recovery_wait);
                Ok(())
            }
        }
    }

    /// Runs `op` on the session's declaration channel.
    pub(super) async fn run_op(
        &self,
        operation: &str,
        target: Option<Target<'_>>,
        op: &Op,
    ) -> Result<Outcome> {
        self.on_serial_channel(
            |session| &session.ops,
            operation,
            target,
            |channel, _| async move { op.run(&channel).await },
        )
        .await
    }

    /// Runs `f` on one of the session's serial channels, opening it when needed, and retries
    /// through channel errors and connection loss as [`Shared::after_failure`] decides.
    pub(super) async fn on_serial_channel<T, F, Fut>(
        &self,
        pick: fn(&Session) -> &SerialChannel,
        operation: &str,
        target: Option<Target<'_>>,
        f: F,
    ) -> Result<T>
    where
        F: Fn(Arc<Channel>, &CancellationToken) -> Fut,
        Fut: Future<Output = lapin::Result<T>>,
    {
        let (mut stale, mut deadline, mut retries) = (None, None, 0);
        loop {
            let session = self.session(stale, &mut deadline, operation).await?;
            let mut guard = pick(&session).lock().await;
            let open = guard.as_ref().filter(|c| c.status().connected()).cloned();
            let result = match open {
                Some(channel) => f(channel, &session.lost).await,
                None => match session.open_channel().await {
                    Ok(channel) => {
                        let channel = Arc::new(channel);
                        *guard = Some(channel.clone());
                        f(channel, &session.lost).await
                    }
                    Err(error) => Err(error),
                },
            };
            drop(guard);
            match result {
                Ok(value) => return Ok(value),
                Err(error) => {
                    self.after_failure(
                        &session,
                        operation,
                        target,
                        &error,
                        &mut stale,
                        &mut deadline,
                        &mut retries,
                    )
                    .await?
                }
            }
        }
    }

    /// Starts `slot`'s consumer on its own channel of `session`, with its prefetch applied to
    /// that channel only.
    pub(super) async fn attach(
        &self,
        session: &Session,
        slot: &Arc<ConsumerSlot>,
    ) -> lapin::Result<()> {
        let channel = session.open_channel().await?;
        channel
            .basic_qos(slot.options.prefetch, BasicQosOptions { global: false })
            .await?;
        let consumer = channel
            .basic_consume(
                slot.queue_name.clone(),
                slot.tag.clone(),
                BasicConsumeOptions {
                    exclusive: slot.options.exclusive,
                    ..BasicConsumeOptions::default()
                },
                LapinTable::default(),
            )
            .await?;
        slot.install(consumer, Arc::new(channel), session.lost.clone());
        Ok(())
    }

    /// Keeps `slot` in the set re-created after a reconnect.
    pub(super) fn register(&self, slot: &Arc<ConsumerSlot>) -> u64 {
        let id = self.next_consumer.fetch_add(1, Ordering::Relaxed);
        self.consumers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, slot.clone());
        id
    }

    /// Forgets a cancelled or dropped consumer.
    pub(super) fn unregister(&self, id: u64) {
        self.consumers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }

    /// Asks the supervisor to look at the connection now.
    pub(super) fn check(&self) {
        let _ = self.requests.send(Request::Check);
    }

    /// Asks the supervisor to start a consumer again whose attachment `seq` ended.
    pub(super) fn reattach(&self, slot: Arc<ConsumerSlot>, seq: u64) {
        if self
            .requests
            .send(Request::Reattach(slot.clone(), seq))
            .is_err()
        {
            slot.end();
        }
    }

    /// Closes the client: operations fail with [`Error::Closed`], consumer streams end.
    pub(super) async fn close(&self) -> Result<()> {
        self.closed.cancel();
        let link = self.link.send_replace(Link::Closed);
        self.health.closed();
        self.end_consumers();
        if let Link::Up(session) = link {
            // Settlements still waiting end as stale, whatever the close does.
            let _lost = session.lost.clone().drop_guard();
            if session.is_up() {
                let _ = tokio::time::timeout(CLOSE_WAIT, session.close_publishing()).await;
                let closing = session
                    .connection
                    .close(200, "closed by the application".into());
                match tokio::time::timeout(CLOSE_WAIT, closing).await {
                    Ok(Ok(())) => {}
                    // A channel closing at that moment (a cancelled consumer's, or one the
                    // supervisor was opening) can make lapin report an error although the
                    // connection did close; only a connection still open is a failure to close.
                    Ok(Err(error)) if session.is_up() => {
                        return Err(from_lapin("close the connection", None, &error));
                    }
                    Ok(Err(error)) => {
                        debug!(url = %self.shown_url, %error, "connection closed with an error");
                    }
                    // lapin can miss the broker's close-ok in that same race; the connection is
                    // dropped with the session either way.
                    Err(_) => debug!(url = %self.shown_url, "no close-ok from the broker in time"),
                }
            }
        }
        Ok(())
    }

    fn end_consumers(&self) {
        let slots: Vec<_> = self
            .consumers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .map(|(_, slot)| slot)
            .collect();
        for slot in slots {
            slot.end();
        }
    }

    /// Opens generation `generation`'s connection and its session on the first node that
    /// answers, trying them in turn from node `first`; each attempt is bounded by `limit`
    /// unless the URL sets its own `connection_timeout`. Fails with the last node's error.
    async fn open(&self, generation: u64, limit: Duration, first: usize) -> lapin::Result<Session> {
        let mut last = None;
        for offset in 0..self.nodes.len() {
            let index = (first + offset) % self.nodes.len();
            let node = &self.nodes[index];
            match self.open_on(node, generation, limit).await {
                Ok(session) => {
                    self.current.store(index, Ordering::Relaxed);
                    if self.nodes.len() > 1 {
                        info!(url = %self.shown_url, node = %node.shown, generation, "connected to a node of the list");
                    }
                    return Ok(session);
                }
                Err(error) => {
                    if self.nodes.len() > 1 {
                        debug!(node = %node.shown, %error, "node did not answer; trying the next");
                    }
                    last = Some(error);
                }
            }
        }
        Err(last.unwrap_or_else(|| unreachable!("a URL names at least one node")))
    }

    async fn open_on(
        &self,
        node: &Node,
        generation: u64,
        limit: Duration,
    ) -> lapin::Result<Session> {
        let properties = ConnectionProperties::default()
            .with_connection_name(self.connection_name.clone().into());
        let limit = node
            .uri
            .query
            .connection_timeout
            .map_or(limit, Duration::from_millis);
        // The session's channel is opened within the same bound: a node that takes the
        // connection but never answers on it is as dead as one that refuses it.
        let opening = async {
            let connection = Connection::connect_uri_with_config(
                node.uri.clone(),
                properties,
                lapin_tls(&self.options.tls),
                lapin::runtime::default_runtime()?,
            )
            .await?;
            Session::open(generation, connection).await
        };
        match tokio::time::timeout(limit, opening).await {
            Ok(session) => session,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within {} ms", limit.as_millis()),
            )
            .into()),
        }
    }

    /// Declares the record again, then re-creates every consumer. A declaration the broker now
    /// refuses is logged and skipped; a consumer whose queue is gone ends with that error.
    ///
    /// A server-named queue is looked for rather than declared: when it went with the old
    /// connection (exclusive or auto-delete), the record forgets it and its bindings, and its
    /// consumers end with [`Error::QueueLost`].
    async fn restore(&self, session: &Session) -> lapin::Result<()> {
        let items = self
            .record
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .items();
        let mut lost = HashSet::new();
        let mut channel = session.open_channel().await?;
        for item in &items {
            if let Declared::Binding(binding) = item
                && lost.contains(binding.queue.as_str())
            {
                continue;
            }
            let Ok(op) = Op::redeclare(item) else {
                continue;
            };
            if let Err(error) = op.run(&channel).await {
                if !session.is_up() {
                    return Err(error);
                }
                match item {
                    Declared::ServerNamedQueue(name) if is_not_found(&error) => {
                        info!(url = %self.shown_url, queue = %name, "server-named queue went with the lost connection; its consumers end");
                        self.record
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .queue_deleted(name);
                        lost.insert(name.as_str());
                    }
                    _ => {
                        warn!(url = %self.shown_url, ?item, %error, "could not declare again after reconnecting");
                    }
                }
                channel = session.open_channel().await?;
            }
        }
        drop(channel);
        let slots: Vec<_> = self
            .consumers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for slot in slots {
            if slot.is_ended() {
                continue;
            }
            if lost.contains(slot.queue_name.as_str()) {
                slot.fail(Error::QueueLost {
                    name: slot.queue_name.to_string(),
                });
                continue;
            }
            self.attach_or_fail(session, &slot).await?;
        }
        Ok(())
    }

    /// Attaches `slot`; a channel-level refusal (its queue is gone) ends the consumer with that
    /// error, a connection failure is returned for the supervisor to handle.
    async fn attach_or_fail(
        &self,
        session: &Session,
        slot: &Arc<ConsumerSlot>,
    ) -> lapin::Result<()> {
        match self.attach(session, slot).await {
            Ok(()) => Ok(()),
            Err(error) if !session.is_up() => Err(error),
            Err(error) => {
                let operation = format!("consume from queue `{}`", slot.queue_name);
                warn!(url = %self.shown_url, %error, "{operation} failed; ending the consumer");
                slot.fail(from_lapin(
                    &operation,
                    Some(Target::queue(slot.queue_name.as_str())),
                    &error,
                ));
                Ok(())
            }
        }
    }

    async fn reconnect(&self, generation: u64) -> Option<Arc<Session>> {
        let mut delay = self.options.reconnect_initial;
        // The node that was lost is tried last: in a cluster another is more likely up.
        let first = self.current.load(Ordering::Relaxed) + 1;
        for attempt in 1u64.. {
            if self.closed.is_cancelled() {
                return None;
            }
            let outcome = match self.open(generation, RECONNECT_TIMEOUT, first).await {
                Ok(session) => match self.restore(&session).await {
                    Ok(()) => Ok(session),
                    Err(error) => Err(error),
                },
                Err(error) => Err(error),
            };
            match outcome {
                Ok(session) => {
                    info!(url = %self.shown_url, attempt, "reconnected to the broker");
                    return Some(Arc::new(session));
                }
                Err(error) => {
                    let error = self.scrub(&error.to_string());
                    warn!(url = %self.shown_url, attempt, %error, "reconnect failed; retrying in {delay:?}");
                    self.health.attempt_failed(error);
                }
            }
            tokio::select! {
                () = self.closed.cancelled() => return None,
                () = tokio::time::sleep(delay) => {}
            }
            delay = delay.saturating_mul(2).min(self.options.reconnect_max);
        }
        None
    }

    /// Publishes a new link state unless the client was closed meanwhile: close always wins.
    fn replace_link(&self, new: Link) -> bool {
        self.link.send_if_modified(|link| {
            if matches!(link, Link::Closed) {
                false
            } else {
                *link = new;
                true
            }
        })
    }

    /// `error` as a source, or its scrubbed text when the text carries the password.
    fn scrub_error(&self, error: lapin::Error) -> crate::SourceError {
        let text = error.to_string();
        if self.password.is_empty() || !text.contains(&self.password) {
            Box::new(error)
        } else {
            Box::new(std::io::Error::other(self.scrub(&text)))
        }
    }

    /// Library messages should not carry the password, but a message built from the URL would.
    fn scrub(&self, text: &str) -> String {
        if self.password.is_empty() {
            text.to_owned()
        } else {
            text.replace(&self.password, "***")
        }
    }
}

async fn supervise(shared: Arc<Shared>, mut requests: mpsc::UnboundedReceiver<Request>) {
    loop {
        let session = match &*shared.link.borrow() {
            Link::Up(session) => session.clone(),
            Link::Down | Link::Closed => return,
        };
        let mut events = session.connection.events_listener();
        let mut events_open = true;
        let mut last_error = None;
        if session.connection.status().blocked() {
            // Blocked before the listener existed, so the broker's reason was missed.
            shared.health.blocked(Some(UNKNOWN_BLOCK_REASON.to_owned()));
        }
        while session.is_up() {
            tokio::select! {
                () = shared.closed.cancelled() => return,
                event = events.next(), if events_open => match event {
                    Some(event) => {
                        if let Some(error) = note_event(&shared.health, &shared.shown_url, event) {
                            last_error = Some(shared.scrub(&error.to_string()));
                        }
                    }
                    None => events_open = false,
                },
                request = requests.recv() => match request {
                    Some(Request::Reattach(slot, seq)) => {
                        if slot.latest() == seq && !slot.is_ended() && session.is_up() {
                            // A connection failure here is picked up by the loop condition.
                            let _ = shared.attach_or_fail(&session, &slot).await;
                        }
                    }
                    Some(Request::Check) => {}
                    None => return,
                },
                () = tokio::time::sleep(WATCH_INTERVAL) => {}
            }
        }
        session.lost.cancel();
        if shared.closed.is_cancelled() {
            return;
        }
        warn!(url = %shared.shown_url, "connection to the broker lost; reconnecting");
        if !shared.replace_link(Link::Down) {
            return;
        }
        shared.health.lost(last_error);
        let generation = session.generation + 1;
        drop(session);
        match shared.reconnect(generation).await {
            Some(session) => {
                if !shared.replace_link(Link::Up(session)) {
                    return;
                }
                shared.health.connected(generation);
            }
            None => return,
        }
    }
}

/// Whether the broker answered 404 NOT_FOUND.
fn is_not_found(error: &lapin::Error) -> bool {
    matches!(error.kind(), lapin::ErrorKind::ProtocolError(amqp) if amqp.get_id() == 404)
}

/// Applies a connection event to the health, and logs it. Returns the error it reports, if
/// any: the likely reason of a loss that follows.
fn note_event(health: &HealthTracker, url: &str, event: lapin::Event) -> Option<lapin::Error> {
    match event {
        lapin::Event::ConnectionBlocked(reason) => {
            warn!(url, %reason, "the broker blocked publishing on the connection");
            health.blocked(Some(reason));
            None
        }
        lapin::Event::ConnectionUnblocked => {
            info!(url, "the broker unblocked the connection");
            health.blocked(None);
            None
        }
        lapin::Event::Error(error) => {
            debug!(url, %error, "connection event");
            Some(error)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Health;

    #[test]
    fn blocked_and_unblocked_events_show_in_the_health() {
        let health = HealthTracker::up(2);
        let url = "amqp://guest:***@localhost:5672/%2f";
        let blocked = lapin::Event::ConnectionBlocked("low on memory".to_owned());
        assert!(note_event(&health, url, blocked).is_none());
        assert_eq!(health.current().blocked(), Some("low on memory"));
        assert!(matches!(health.current(), Health::Up { generation: 2, .. }));

        assert!(note_event(&health, url, lapin::Event::ConnectionUnblocked).is_none());
        assert_eq!(health.current().blocked(), None);
        assert!(health.current().is_up());
    }

    #[test]
    fn an_error_event_is_kept_as_the_reason_of_a_loss() {
        let health = HealthTracker::up(0);
        let error = lapin::Error::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset by peer",
        ));
        let kept = note_event(&health, "amqp://localhost", lapin::Event::Error(error));
        assert!(kept.is_some_and(|e| e.to_string().contains("reset by peer")));
        assert_eq!(health.current().blocked(), None);
    }
}
