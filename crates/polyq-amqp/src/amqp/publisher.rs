//! Confirmed publishing: every publish goes out on the confirm-mode channel and resolves to the
//! broker's answer, never to "not requested". The channel's confirm ledger decides which
//! publish a returned message belongs to.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::Map;
use lapin::options::BasicPublishOptions;
use lapin::{Confirmation, ErrorKind, PublisherConfirm};

use super::confirm_ledger::{Answer, Failure, Publishing};
use super::convert::{properties_from_amqp, properties_to_amqp, short};
use super::errors::Target;
use super::supervisor::Shared;
use crate::Confirm;
use crate::error::{Error, Result};
use crate::message::{OutgoingMessage, ReturnedMessage};

const OPERATION: &str = "publish";

/// A lapin confirm, read as what lapin reported.
pub(super) type LapinConfirm = Map<PublisherConfirm, fn(lapin::Result<Confirmation>) -> Answer>;

/// Sends `message` and returns its pending confirm once the frames are written. During an
/// outage it waits for recovery up to `recovery_wait`. A send that failed is retried: the broker
/// discards a message whose frames did not all arrive, so a retry cannot lose it, only (rarely)
/// duplicate it.
pub(super) async fn publish(shared: &Shared, mut message: OutgoingMessage) -> Result<Confirm> {
    let options = BasicPublishOptions {
        mandatory: message.mandatory,
        immediate: false,
    };
    let (mut stale, mut deadline, mut retries) = (None, None, 0);
    loop {
        let session = shared.session(stale, &mut deadline, OPERATION).await?;
        let error = match session.publisher().await {
            Ok(publishing) => {
                // Converted per attempt: lapin takes its arguments by value.
                let exchange = short(OPERATION, "exchange name", &message.exchange)?;
                let routing_key = short(OPERATION, "routing key", &message.routing_key)?;
                let properties = properties_to_amqp(OPERATION, &message.properties)?;
                let channel = publishing.channel.clone();
                let body = message.body.clone();
                let mut sending = Sending {
                    send: Some(Box::pin(async move {
                        channel
                            .basic_publish(exchange, routing_key, options, &body, properties)
                            .await
                    })),
                    publishing: Some((publishing.ledger.begin(), message)),
                };
                let written = (&mut sending).await;
                let (pending, sent) = sending.finished();
                message = sent;
                match written {
                    Ok(confirm) => {
                        let answered = pending.sent(confirm.map(answer as _), message);
                        return Ok(Confirm::new(async move {
                            answered.await.unwrap_or(Err(Error::Closed))
                        }));
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

/// A `basic.publish` whose frames lapin is writing. lapin registers the confirm before the
/// write, and a confirm dropped unregistered still takes a return when it completes, which
/// would then never reach the ledger: so a send whose caller is cancelled finishes on a task of
/// its own and registers its confirm like any other.
struct Sending<S>
where
    S: Future<Output = lapin::Result<PublisherConfirm>> + Send + 'static,
{
    send: Option<Pin<Box<S>>>,
    publishing: Option<(Publishing<LapinConfirm>, OutgoingMessage)>,
}

impl<S> Sending<S>
where
    S: Future<Output = lapin::Result<PublisherConfirm>> + Send + 'static,
{
    /// What the finished send leaves for registering or retrying.
    fn finished(mut self) -> (Publishing<LapinConfirm>, OutgoingMessage) {
        self.send = None;
        self.publishing
            .take()
            .unwrap_or_else(|| unreachable!("a send is finished once"))
    }
}

impl<S> Future for Sending<S>
where
    S: Future<Output = lapin::Result<PublisherConfirm>> + Send + 'static,
{
    type Output = lapin::Result<PublisherConfirm>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.send.as_mut() {
            Some(send) => send.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

impl<S> Drop for Sending<S>
where
    S: Future<Output = lapin::Result<PublisherConfirm>> + Send + 'static,
{
    fn drop(&mut self) {
        let (Some(send), Some((pending, message))) = (self.send.take(), self.publishing.take())
        else {
            return;
        };
        // Without a runtime the tombstone `pending` leaves is all the ledger can have.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Ok(confirm) = send.await {
                    drop(pending.sent(confirm.map(answer as _), message));
                }
            });
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
                reason: error.to_string(),
            },
            _ => Failure::Lost(error.to_string()),
        }),
    }
}

fn neutral(returned: lapin::message::BasicReturnMessage) -> ReturnedMessage {
    ReturnedMessage {
        reply_code: returned.reply_code,
        reply_text: returned.reply_text.as_str().to_owned(),
        properties: properties_from_amqp(&returned.delivery.properties),
        exchange: returned.delivery.exchange.as_str().to_owned(),
        routing_key: returned.delivery.routing_key.as_str().to_owned(),
        body: Bytes::from(returned.delivery.data),
    }
}
