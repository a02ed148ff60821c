//! Confirmed publishing: every publish goes out on the confirm-mode channel and resolves to the
//! broker's answer, never to "not requested". The channel's confirm ledger decides which
//! publish a returned message belongs to.

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::Map;
use lapin::options::BasicPublishOptions;
use lapin::{Confirmation, ErrorKind, PublisherConfirm};

use super::confirm_ledger::{Answer, Failure};
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
pub(super) async fn publish(shared: &Shared, message: OutgoingMessage) -> Result<Confirm> {
    let options = BasicPublishOptions {
        mandatory: message.mandatory,
        immediate: false,
    };
    let target = Some(Target::exchange(&message.exchange));
    let (mut stale, mut deadline, mut retries) = (None, None, 0);
    loop {
        let session = shared.session(stale, &mut deadline, OPERATION).await?;
        let error = match session.publisher().await {
            Ok(publishing) => {
                // Converted per attempt: lapin takes its arguments by value.
                let exchange = short(OPERATION, "exchange name", &message.exchange)?;
                let routing_key = short(OPERATION, "routing key", &message.routing_key)?;
                let properties = properties_to_amqp(OPERATION, &message.properties)?;
                let pending = publishing.ledger.begin();
                match publishing
                    .channel
                    .basic_publish(exchange, routing_key, options, &message.body, properties)
                    .await
                {
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
                target,
                &error,
                &mut stale,
                &mut deadline,
                &mut retries,
            )
            .await?
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
