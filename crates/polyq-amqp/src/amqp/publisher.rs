//! Confirmed publishing: every publish goes out on the confirm-mode channel and resolves to the
//! broker's answer, never to "not requested". The channel's confirm ledger decides which
//! publish a returned message belongs to.
//!
//! A publish returns as soon as lapin has queued its frames, without waiting for lapin's io
//! loop to write them: a producer then queues many messages per wake-up of that thread, where
//! waiting for each write costs two thread switches per message. The write is awaited behind
//! the scenes, as the first half of the confirm.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker, ready};

use bytes::Bytes;
use lapin::options::BasicPublishOptions;
use lapin::{Confirmation, ErrorKind, PublisherConfirm};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::blocked;
use super::confirm_ledger::{Answer, Answered, Failure, Settled, unwritten};
use super::convert::{properties_from_amqp, properties_to_amqp, short};
use super::errors::Target;
use super::session::{PublishingChannel, Session};
use super::supervisor::Shared;
use crate::Confirm;
use crate::error::{Error, Result};
use crate::health::UnblockedDeadline;
use crate::message::{OutgoingMessage, PublishOutcome, ReturnedMessage};

const OPERATION: &str = "publish";

/// Publishes of one channel whose frames lapin may hold unwritten: past it a publish waits for
/// the io loop, so a producer faster than the socket is slowed down rather than queueing
/// without bound.
pub(super) const MAX_UNWRITTEN: usize = 1024;

/// How many times a publish whose frames never all reached the socket (the channel or
/// connection went down first) is sent again before its confirm reports it unconfirmed.
const UNWRITTEN_RESENDS: u8 = 3;

/// Sends `message` and returns its pending confirm once lapin has queued the frames. During an
/// outage it waits for recovery up to `recovery_wait`. A send that failed is retried, here or
/// from the confirm when its frames could not be written: the broker discards a message whose
/// frames did not all arrive, so a retry cannot lose it, only (rarely) duplicate it.
///
/// While the broker blocks the connection the message is not sent: it waits for the block to
/// lift, up to `blocked_timeout`. A block that catches it sent but unconfirmed is waited out
/// however long it lasts: the broker answers the publish once the alarm clears, and failing it
/// earlier would have the caller send again what the broker still enqueues. The resend
/// deadline does not run while the connection is blocked either.
pub(super) async fn publish(shared: &Arc<Shared>, message: OutgoingMessage) -> Result<Confirm> {
    let blocked_timeout = shared.options.blocked_timeout;
    if let Err(reason) =
        blocked::unblocked_within(&mut shared.health.watch(), blocked_timeout).await
    {
        return Err(blocked::error(message.exchange, reason, blocked_timeout));
    }
    let exchange = message.exchange.clone();
    let mut resend_until = shared
        .options
        .resend_lost
        .map(|within| UnblockedDeadline::new(shared.health.watch(), within));
    let mut in_flight = send(shared, message, None).await?;
    let shared = Arc::clone(shared);
    Ok(Confirm::new(async move {
        let mut resends = 0;
        loop {
            let settled = match resend_until.as_mut() {
                Some(deadline) => tokio::select! {
                    biased;
                    settled = &mut in_flight.answered => settled,
                    never = deadline.track() => match never {},
                },
                None => (&mut in_flight.answered).await,
            };
            let until = resend_until.as_mut().map(UnblockedDeadline::at);
            match settled {
                Ok(Settled::Outcome(outcome)) => {
                    if matches!(outcome, Ok(PublishOutcome::Nacked)) {
                        // Before the caller hears of it, so that a publish sent again goes
                        // out on the new channel.
                        in_flight.replace_nacked_channel().await;
                    }
                    return outcome;
                }
                Ok(Settled::Unwritten { message, .. })
                    if resends < UNWRITTEN_RESENDS && until.is_none() =>
                {
                    resends += 1;
                    in_flight = send(&shared, message, None).await?;
                }
                Ok(Settled::Unwritten { message, error }) => match until {
                    Some(until) if Instant::now() < until => {
                        in_flight =
                            resend(&shared, message, until, unwritten(&exchange, error)).await?;
                    }
                    _ => return Err(unwritten(&message.exchange, error)),
                },
                Ok(Settled::Lost { message, error }) => match until {
                    Some(until) if Instant::now() < until => {
                        in_flight = resend(&shared, message, until, error).await?;
                    }
                    _ => return Err(error),
                },
                Err(_) => return Err(Error::Closed),
            }
        }
    }))
}

/// A publish sent: where its answer comes, and the channel it went out on.
struct InFlight {
    answered: Answered,
    session: Weak<Session>,
    channel: Weak<PublishingChannel>,
}

impl InFlight {
    /// Has the session replace the channel the publish was nacked on ([`Session::replace_nacked`]).
    async fn replace_nacked_channel(&self) {
        if let (Some(session), Some(channel)) = (self.session.upgrade(), self.channel.upgrade()) {
            session.replace_nacked(&channel).await;
        }
    }
}

/// Sends again, on the next connection, a message whose answer was lost with the last one
/// (`lost` says how). When no connection comes back before `until`, the caller is told of the
/// loss, with the wait as the reason.
async fn resend(
    shared: &Shared,
    message: OutgoingMessage,
    until: Instant,
    lost: Error,
) -> Result<InFlight> {
    let exchange = message.exchange.clone();
    tracing::debug!(
        exchange = exchange.as_str(),
        message_id = message.properties.message_id.as_deref(),
        "sending again a publish whose confirm was lost with the connection"
    );
    send(shared, message, Some(until))
        .await
        .map_err(|error| match error {
            Error::Unavailable { .. } => Error::Unconfirmed {
                exchange,
                reason: "its confirm was lost with the connection, and no connection came back \
                         before the resend deadline"
                    .to_owned(),
                source: Some(Box::new(lost)),
            },
            other => other,
        })
}

/// Queues `message`'s frames on the publishing channel and registers its confirm with the
/// channel's ledger. An outage is waited out until `until`, or for `recovery_wait`.
async fn send(
    shared: &Shared,
    message: OutgoingMessage,
    until: Option<Instant>,
) -> Result<InFlight> {
    let options = BasicPublishOptions {
        mandatory: message.mandatory,
        immediate: false,
    };
    let (mut stale, mut deadline, mut retries) = (None, until, 0);
    loop {
        let session = shared.session(stale, &mut deadline, OPERATION).await?;
        let error = match session.publisher().await {
            Ok(publishing) => {
                // Converted per attempt: lapin takes its arguments by value.
                let exchange = short(OPERATION, "exchange name", &message.exchange)?;
                let routing_key = short(OPERATION, "routing key", &message.routing_key)?;
                let properties = properties_to_amqp(OPERATION, &message.properties)?;
                let slot = Arc::clone(&publishing.unwritten)
                    .acquire_owned()
                    .await
                    .unwrap_or_else(|_| {
                        unreachable!("the unwritten-publish semaphore is never closed")
                    });
                let channel = publishing.channel.clone();
                let body = message.body.clone();
                let mut write: Write = Box::pin(async move {
                    channel
                        .basic_publish(exchange, routing_key, options, &body, properties)
                        .await
                });
                // No await from here to the registration, so a cancelled caller cannot leave a
                // confirm lapin knows of unregistered. lapin takes the delivery tag and queues
                // the frames in the first poll; whoever polls the confirm later is woken by
                // the write, so this poll needs no waker.
                let pending = publishing.ledger.begin();
                let confirm = match write.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                    Poll::Pending => Ok(LapinConfirm::writing(write, slot)),
                    Poll::Ready(Ok(confirm)) => Ok(LapinConfirm::confirming(confirm)),
                    Poll::Ready(Err(error)) => Err(error),
                };
                match confirm {
                    Ok(confirm) => {
                        return Ok(InFlight {
                            answered: pending.sent(confirm, message),
                            session: Arc::downgrade(&session),
                            channel: Arc::downgrade(&publishing),
                        });
                    }
                    Err(error) => error,
                }
            }
            Err(error) => error,
        };
        shared
            .after_failure(
                &session,
                OPERATION,
                Some(Target::exchange(&message.exchange)),
                &error,
                &mut stale,
                &mut deadline,
                &mut retries,
            )
            .await?
    }
}

/// The rest of a `basic.publish` after its frames were queued: resolves once lapin's io loop
/// wrote them, to the confirm lapin registered.
type Write = Pin<Box<dyn Future<Output = lapin::Result<PublisherConfirm>> + Send>>;

/// One publish's confirm as the ledger sees it: the write of its frames, then lapin's answer.
pub(super) struct LapinConfirm {
    stage: Stage,
}

enum Stage {
    /// Holds a place among the channel's unwritten publishes until the frames are written.
    Writing {
        write: Write,
        _slot: OwnedSemaphorePermit,
    },
    Confirming(PublisherConfirm),
}

impl LapinConfirm {
    fn writing(write: Write, slot: OwnedSemaphorePermit) -> Self {
        Self {
            stage: Stage::Writing { write, _slot: slot },
        }
    }

    fn confirming(confirm: PublisherConfirm) -> Self {
        Self {
            stage: Stage::Confirming(confirm),
        }
    }
}

impl Future for LapinConfirm {
    type Output = Answer;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        if let Stage::Writing { write, .. } = &mut self.stage {
            match ready!(write.as_mut().poll(cx)) {
                Ok(confirm) => self.stage = Stage::Confirming(confirm),
                Err(error) => {
                    return Poll::Ready(Answer::Failed(Failure::Unwritten(error)));
                }
            }
        }
        match &mut self.stage {
            Stage::Confirming(confirm) => Pin::new(confirm).poll(cx).map(answer),
            Stage::Writing { .. } => unreachable!("a written publish is confirming"),
        }
    }
}

fn answer(confirmation: lapin::Result<Confirmation>) -> Answer {
    match confirmation {
        Ok(Confirmation::Ack(returned)) => Answer::Ack(returned.map(neutral)),
        Ok(Confirmation::Nack(returned)) => Answer::Nack(returned.map(neutral)),
        Ok(Confirmation::NotRequested) => Answer::Failed(Failure::NotConfirming),
        Err(error) => Answer::Failed(match error.kind() {
            ErrorKind::ProtocolError(amqp) => Failure::Refused {
                code: amqp.get_id(),
                text: amqp.get_message().as_str().to_owned(),
                error: error.clone(),
            },
            _ => Failure::Lost(error),
        }),
    }
}

/// Converts a return, logging it the way lapin's own line (which prints the body and headers,
/// see [`crate::LAPIN_RETURN_LOG_OFF`]) does not: by where it went and why, never by content.
fn neutral(returned: lapin::message::BasicReturnMessage) -> ReturnedMessage {
    let properties = &returned.delivery.properties;
    tracing::warn!(
        exchange = returned.delivery.exchange.as_str(),
        routing_key = returned.delivery.routing_key.as_str(),
        reply_code = returned.reply_code,
        reply_text = returned.reply_text.as_str(),
        message_id = properties.message_id().as_ref().map(|id| id.as_str()),
        "the broker returned a mandatory message"
    );
    ReturnedMessage {
        reply_code: returned.reply_code,
        reply_text: returned.reply_text.as_str().to_owned(),
        properties: properties_from_amqp(&returned.delivery.properties),
        exchange: returned.delivery.exchange.as_str().to_owned(),
        routing_key: returned.delivery.routing_key.as_str().to_owned(),
        body: Bytes::from(returned.delivery.data),
    }
}
