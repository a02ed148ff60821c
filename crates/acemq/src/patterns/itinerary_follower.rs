//! Carried itineraries: a run whose route travels in the message as the
//! `acemq-routing-slip` JSON ([`Itinerary`]), followed by services that need no declaration.
//!
//! [`start`] publishes to the itinerary's first stop. A follower ([`follow`]) runs its
//! handler, moves the stop it made to `done` stamped with `completedAt` (seconds, `Z`, as Java
//! and Go write it), and publishes the handler's result to the next stop (its exchange and
//! routing key) with the advanced itinerary. No stop left ends the run. A slip that cannot be
//! read is fatal: the message goes to `Q.dlq` without running the handler and is never
//! retried. A message carrying both this and the `x-acemq-route` trio is read by its
//! itinerary (Python and Go read the JSON slip first).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use acemq::patterns::itinerary_follower::{follow, start};
//! use acemq::{AceMq, Itinerary, Stop};
//! use polyq_amqp::QueueSpec;
//! use serde_json::{Value, json};
//!
//! let mq = AceMq::connect("memory://doc-itinerary").await?;
//! for queue in ["resize", "archive"] {
//!     mq.client().declare_queue(&QueueSpec::new(queue)).await?;
//! }
//! let resize = follow(&mq, mq.consumer::<Value>("resize"), |m: acemq::Message<Value>| async move {
//!     Ok::<_, std::convert::Infallible>(json!({"resized": m.payload()}))
//! })
//! .await?;
//! let trip = Itinerary::of([Stop::new("", "resize", "resize"), Stop::new("", "archive", "")]);
//! start(&mq, &trip, &json!("cat.png")).await?;
//!
//! use futures_util::StreamExt as _;
//! let mut archive = mq.client().consume("archive", &Default::default()).await?;
//! let arrived = archive.next().await.expect("a message")?;
//! assert_eq!(&arrived.body[..], br#"{"resized":"cat.png"}"#);
//! # resize.drain(std::time::Duration::from_secs(5)).await;
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use time::OffsetDateTime;

use super::PatternError;
use super::pipeline::application_headers;
use crate::contract::{headers, wire};
use crate::runtime::consumer::{
    Consumer, ConsumerBuilder, DrainReport, HandlerError, Message, Outcome,
};
use crate::{AceMq, Envelope, Itinerary, RuntimeError};

/// Publishes `payload` (JSON) to the first stop of `itinerary`, carrying it. Returns the
/// envelope sent; an itinerary with no stops is refused.
pub async fn start(
    mq: &AceMq,
    itinerary: &Itinerary,
    payload: &Value,
) -> Result<Envelope, PatternError> {
    let first = itinerary
        .next()
        .ok_or_else(|| RuntimeError::InvalidOption {
            queue: String::new(),
            reason: "an itinerary to start needs at least one stop".to_owned(),
        })?;
    let envelope = Envelope::of(wire::type_for(first.routing_key()))
        .header(headers::ROUTING_SLIP, itinerary.to_json())
        .build()
        .map_err(RuntimeError::from)?;
    Ok(send(mq, itinerary, envelope, payload).await?)
}

async fn send(
    mq: &AceMq,
    itinerary: &Itinerary,
    envelope: Envelope,
    payload: &Value,
) -> Result<Envelope, RuntimeError> {
    let stop = itinerary
        .next()
        .ok_or_else(|| RuntimeError::InvalidOption {
            queue: String::new(),
            reason: "the itinerary has no stop left".to_owned(),
        })?;
    mq.publisher::<Value>(stop.exchange(), stop.routing_key())
        .send_with(payload, envelope)
        .await
}

#[derive(Debug, Default)]
struct Counts {
    forwarded: AtomicU64,
    completed: AtomicU64,
}

/// The counts of a follower; a handle that stays readable after the follower was drained.
#[derive(Debug, Clone)]
pub struct FollowerCounts(Arc<Counts>);

impl FollowerCounts {
    /// Messages sent on to their next stop.
    pub fn forwarded(&self) -> u64 {
        self.0.forwarded.load(Ordering::Relaxed)
    }

    /// Runs that ended here: no stop left after this one (or a message with no itinerary).
    pub fn completed(&self) -> u64 {
        self.0.completed.load(Ordering::Relaxed)
    }
}

/// A running follower: its consumer and its counts.
#[derive(Debug)]
pub struct Follower {
    consumer: Consumer,
    counts: Arc<Counts>,
}

impl Follower {
    /// The follower's counts. A message's count is taken after its next hop was confirmed,
    /// so read them after [`drain`](Follower::drain) to see every message handled.
    pub fn counts(&self) -> FollowerCounts {
        FollowerCounts(Arc::clone(&self.counts))
    }

    /// Drains the consumer; see [`Consumer::drain`].
    pub async fn drain(self, timeout: Duration) -> DrainReport {
        self.consumer.drain(timeout).await
    }
}

/// Follows the itineraries of the messages `consumer` (made from `mq`) receives: `handler`
/// does this stop's work and returns the payload for the next stop; an error takes the
/// consumer's retry path. A message without an itinerary is handled and ends there.
pub async fn follow<E, F, Fut>(
    mq: &AceMq,
    consumer: ConsumerBuilder<Value>,
    handler: F,
) -> Result<Follower, RuntimeError>
where
    E: Into<HandlerError> + Send + 'static,
    F: Fn(Message<Value>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Value, E>> + Send + 'static,
{
    let counts = Arc::new(Counts::default());
    let handler = Arc::new(handler);
    let mq = mq.clone();
    let consumer = consumer
        .start({
            let counts = Arc::clone(&counts);
            move |message: Message<Value>| {
                let handler = Arc::clone(&handler);
                let counts = Arc::clone(&counts);
                let mq = mq.clone();
                async move { hop(&mq, &counts, &*handler, message).await }
            }
        })
        .await?;
    Ok(Follower { consumer, counts })
}

async fn hop<E, F, Fut>(
    mq: &AceMq,
    counts: &Counts,
    handler: &F,
    message: Message<Value>,
) -> Outcome
where
    E: Into<HandlerError>,
    F: Fn(Message<Value>) -> Fut,
    Fut: Future<Output = Result<Value, E>>,
{
    let itinerary = match message.envelope().itinerary() {
        Ok(itinerary) => itinerary,
        Err(unreadable) => return Outcome::reject(unreadable),
    };
    let previous = message.envelope().clone();
    let payload = match handler(message).await {
        Ok(payload) => payload,
        Err(e) => return Outcome::Retry(e.into()),
    };
    let Some(advanced) = itinerary
        .map(|i| i.advance(OffsetDateTime::now_utc()))
        .filter(|i| !i.is_finished())
    else {
        counts.completed.fetch_add(1, Ordering::Relaxed);
        return Outcome::Accept;
    };
    let next_key = advanced.next().map(|s| s.routing_key()).unwrap_or_default();
    let envelope = previous
        .causing(wire::type_for(next_key))
        .headers(application_headers(previous.headers()))
        .header(headers::ROUTING_SLIP, advanced.to_json())
        .build();
    let sent = match envelope {
        Ok(envelope) => send(mq, &advanced, envelope, &payload).await,
        Err(e) => Err(e.into()),
    };
    match sent {
        Ok(_) => {
            counts.forwarded.fetch_add(1, Ordering::Relaxed);
            Outcome::Accept
        }
        Err(e) => Outcome::retry(e),
    }
}
