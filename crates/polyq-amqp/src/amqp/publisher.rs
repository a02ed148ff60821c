//! Confirmed publishing: every publish goes out on the confirm-mode channel and resolves to the
//! broker's answer, never to "not requested".

use bytes::Bytes;
use lapin::options::BasicPublishOptions;
use lapin::{Confirmation, ErrorKind, PublisherConfirm};

use super::convert::{properties_from_amqp, properties_to_amqp, short};
use super::errors::Target;
use super::supervisor::Shared;
use crate::Confirm;
use crate::error::{Error, Result};
use crate::message::{OutgoingMessage, PublishOutcome, ReturnedMessage};

const OPERATION: &str = "publish";

/// Sends `message` and returns its pending confirm once the frames are written. During an
/// outage it waits for recovery up to `recovery_wait`. A send that failed is retried: the broker
/// discards a message whose frames did not all arrive, so a retry cannot lose it, only (rarely)
/// duplicate it.
pub(super) async fn publish(shared: &Shared, message: OutgoingMessage) -> Result<Confirm> {
    let options = BasicPublishOptions {
        mandatory: message.mandatory,
        immediate: false,
    };
    let target = Some(Target::exchange(&message.exchange));
    let (mut stale, mut deadline, mut retries) = (None, None, 0);
    loop {
        let session = shared.session(stale, &mut deadline, OPERATION).await?;
        let sent = match session.publisher().await {
            Ok(channel) => {
                // Converted per attempt: lapin takes its arguments by value.
                let exchange = short(OPERATION, "exchange name", &message.exchange)?;
                let routing_key = short(OPERATION, "routing key", &message.routing_key)?;
                let properties = properties_to_amqp(OPERATION, &message.properties)?;
                channel
                    .basic_publish(exchange, routing_key, options, &message.body, properties)
                    .await
            }
            Err(error) => Err(error),
        };
        match sent {
            Ok(confirm) => return Ok(Confirm::new(settle(confirm, message.exchange))),
            Err(error) => {
                shared
                    .after_failure(
                        &session,
                        OPERATION,
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

/// The broker's answer. A confirm lost with its channel or connection is an error the caller
/// can act on (publish again), never an ack.
async fn settle(confirm: PublisherConfirm, exchange: String) -> Result<PublishOutcome> {
    match confirm.await {
        Ok(Confirmation::Ack(None)) => Ok(PublishOutcome::Acked),
        Ok(Confirmation::Ack(Some(returned))) => Ok(PublishOutcome::Returned(ReturnedMessage {
            reply_code: returned.reply_code,
            reply_text: returned.reply_text.as_str().to_owned(),
            properties: properties_from_amqp(&returned.delivery.properties),
            exchange: returned.delivery.exchange.as_str().to_owned(),
            routing_key: returned.delivery.routing_key.as_str().to_owned(),
            body: Bytes::from(returned.delivery.data),
        })),
        Ok(Confirmation::Nack(_)) => Ok(PublishOutcome::Nacked),
        Ok(Confirmation::NotRequested) => Err(Error::Protocol {
            operation: OPERATION.to_owned(),
            reason: "the publishing channel is not in confirm mode (a polyq-amqp bug)".to_owned(),
        }),
        Err(error) => Err(match error.kind() {
            // Publishing to a missing exchange closes the channel with 404; other publishes
            // pending on that channel see the same error but were not at fault.
            ErrorKind::ProtocolError(amqp)
                if amqp.get_id() == 404
                    && amqp
                        .get_message()
                        .as_str()
                        .contains(&format!("no exchange '{exchange}'")) =>
            {
                Error::NotFound {
                    kind: "exchange",
                    name: exchange,
                }
            }
            _ => Error::Unconfirmed {
                exchange,
                reason: error.to_string(),
            },
        }),
    }
}
