//! The `amqp://` / `amqps://` implementation over lapin, with this crate's own recovery
//! supervisor.
//!
//! Channel layout, per connection: one publishing channel in confirm mode shared by all
//! publishes (confirms are per message, so many publishes can be in flight); one channel per
//! consumer, so each consumer's prefetch is its own; one serial channel for declarations and
//! one for `basic.get`, each opened again after a channel error so the client stays usable.

mod acker;
mod blocked;
mod confirm_ledger;
mod consumer;
mod convert;
mod errors;
mod ops;
mod publisher;
mod record;
mod session;
mod supervisor;

use std::sync::Arc;

pub(crate) use acker::Acker;
pub(crate) use consumer::Consumer;
use consumer::{ConsumerSlot, to_delivery};
use convert::short;
use errors::Target;
use lapin::options::BasicGetOptions;
use ops::{Op, Outcome};
use supervisor::Shared;

use crate::Confirm;
use crate::client::{ClientOptions, ConsumeOptions, ConsumerInner};
use crate::error::{Error, Result};
use crate::health::Health;
use crate::message::{Delivery, OutgoingMessage};
use crate::topology::{Binding, ExchangeSpec, QueueInfo, QueueSpec};

/// A RabbitMQ client. Clones share the connection; the last clone (including consumers) to go
/// stops the supervisor and closes the connection.
#[derive(Clone)]
pub(crate) struct AmqpClient {
    handle: Arc<Handle>,
}

struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.closed.cancel();
        self.shared.health.closed();
    }
}

impl AmqpClient {
    pub(crate) async fn connect(url: &str, options: &ClientOptions) -> Result<Self> {
        let shared = supervisor::start(url, options).await?;
        Ok(Self {
            handle: Arc::new(Handle { shared }),
        })
    }

    fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    pub(crate) fn url(&self) -> String {
        self.shared().shown_url.clone()
    }

    pub(crate) fn health(&self) -> Health {
        self.shared().health.current()
    }

    pub(crate) fn health_watch(&self) -> tokio::sync::watch::Receiver<Health> {
        self.shared().health.watch()
    }

    pub(crate) async fn declare_exchange(&self, spec: &ExchangeSpec) -> Result<()> {
        let operation = format!("declare exchange `{}`", spec.name);
        let op = Op::declare_exchange(&operation, spec)?;
        self.shared()
            .run_op(&operation, Some(Target::exchange(&spec.name)), &op)
            .await?;
        self.record().exchange_declared(spec);
        Ok(())
    }

    pub(crate) async fn inspect_exchange(&self, name: &str) -> Result<()> {
        let operation = format!("inspect exchange `{name}`");
        let op = Op::inspect_exchange(&operation, name)?;
        self.shared()
            .run_op(&operation, Some(Target::exchange(name)), &op)
            .await
            .map(drop)
    }

    pub(crate) async fn delete_exchange(&self, name: &str) -> Result<()> {
        let operation = format!("delete exchange `{name}`");
        let op = Op::delete_exchange(&operation, name)?;
        self.shared()
            .run_op(&operation, Some(Target::exchange(name)), &op)
            .await?;
        self.record().exchange_deleted(name);
        Ok(())
    }

    pub(crate) async fn declare_queue(&self, spec: &QueueSpec) -> Result<QueueInfo> {
        let operation = format!("declare queue `{}`", spec.name);
        let op = Op::declare_queue(&operation, spec)?;
        let info = queue_info(
            &operation,
            self.shared()
                .run_op(&operation, Some(Target::queue(&spec.name)), &op)
                .await?,
        )?;
        self.record().queue_declared(spec, &info.name);
        Ok(info)
    }

    pub(crate) async fn inspect_queue(&self, name: &str) -> Result<QueueInfo> {
        let operation = format!("inspect queue `{name}`");
        let op = Op::inspect_queue(&operation, name)?;
        queue_info(
            &operation,
            self.shared()
                .run_op(&operation, Some(Target::queue(name)), &op)
                .await?,
        )
    }

    pub(crate) async fn delete_queue(&self, name: &str) -> Result<u32> {
        let operation = format!("delete queue `{name}`");
        let op = Op::delete_queue(&operation, name)?;
        let count = count(
            &operation,
            self.shared()
                .run_op(&operation, Some(Target::queue(name)), &op)
                .await?,
        )?;
        self.record().queue_deleted(name);
        Ok(count)
    }

    pub(crate) async fn purge_queue(&self, name: &str) -> Result<u32> {
        let operation = format!("purge queue `{name}`");
        let op = Op::purge_queue(&operation, name)?;
        count(
            &operation,
            self.shared()
                .run_op(&operation, Some(Target::queue(name)), &op)
                .await?,
        )
    }

    pub(crate) async fn bind_queue(&self, binding: &Binding) -> Result<()> {
        let operation = format!(
            "bind queue `{}` to exchange `{}` with key `{}`",
            binding.queue, binding.exchange, binding.routing_key
        );
        let op = Op::bind(&operation, binding)?;
        self.shared()
            .run_op(&operation, Some(Target::queue(&binding.queue)), &op)
            .await?;
        self.record().bound(binding);
        Ok(())
    }

    pub(crate) async fn unbind_queue(&self, binding: &Binding) -> Result<()> {
        let operation = format!(
            "unbind queue `{}` from exchange `{}` with key `{}`",
            binding.queue, binding.exchange, binding.routing_key
        );
        let op = Op::unbind(&operation, binding)?;
        self.shared()
            .run_op(&operation, Some(Target::queue(&binding.queue)), &op)
            .await?;
        self.record().unbound(binding);
        Ok(())
    }

    pub(crate) async fn publish(&self, message: OutgoingMessage) -> Result<Confirm> {
        publisher::publish(&self.handle.shared, message).await
    }

    pub(crate) async fn get(&self, queue: &str) -> Result<Option<Delivery>> {
        let operation = format!("get from queue `{queue}`");
        let name = short(&operation, "queue name", queue)?;
        self.shared()
            .on_serial_channel(
                |session| &session.getter,
                &operation,
                Some(Target::queue(queue)),
                |channel, lost| {
                    let (name, lost) = (name.clone(), lost.clone());
                    async move {
                        let message = channel
                            .basic_get(name, BasicGetOptions { no_ack: false })
                            .await?;
                        Ok(message.map(|m| to_delivery(m.delivery, &channel, &lost)))
                    }
                },
            )
            .await
    }

    pub(crate) async fn consume(
        &self,
        queue: &str,
        options: &ConsumeOptions,
    ) -> Result<crate::Consumer> {
        let operation = format!("consume from queue `{queue}`");
        let slot = Arc::new(ConsumerSlot::new(
            short(&operation, "queue name", queue)?,
            short(
                &operation,
                "consumer tag",
                options.tag.as_deref().unwrap_or_default(),
            )?,
            options.clone(),
        ));
        let shared = self.shared();
        let (mut stale, mut deadline, mut retries) = (None, None, 0);
        loop {
            let session = shared.session(stale, &mut deadline, &operation).await?;
            match shared.attach(&session, &slot).await {
                Ok(()) => break,
                Err(error) => {
                    shared
                        .after_failure(
                            &session,
                            &operation,
                            Some(Target::queue(queue)),
                            &error,
                            &mut stale,
                            &mut deadline,
                            &mut retries,
                        )
                        .await?
                }
            }
        }
        let id = shared.register(&slot);
        Ok(ConsumerInner::Amqp(Consumer::new(self.clone(), slot, id)).into())
    }

    pub(crate) async fn close(&self) -> Result<()> {
        self.shared().close().await
    }

    fn record(&self) -> std::sync::MutexGuard<'_, record::Record> {
        self.shared()
            .record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn queue_info(operation: &str, outcome: Outcome) -> Result<QueueInfo> {
    match outcome {
        Outcome::Queue(info) => Ok(info),
        other => Err(unexpected(operation, &other)),
    }
}

fn count(operation: &str, outcome: Outcome) -> Result<u32> {
    match outcome {
        Outcome::Count(count) => Ok(count),
        other => Err(unexpected(operation, &other)),
    }
}

fn unexpected(operation: &str, outcome: &Outcome) -> Error {
    Error::Protocol {
        operation: operation.to_owned(),
        reason: format!("unexpected reply {outcome:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_malformed_url_is_refused_without_its_password() {
        let Err(error) = AmqpClient::connect(
            "amqp://user:s3cret@host:notaport/%2f",
            &ClientOptions::default(),
        )
        .await
        else {
            panic!("a URL with a bad port must be refused");
        };
        assert!(matches!(error, Error::InvalidUrl { .. }), "{error:?}");
        assert!(!error.to_string().contains("s3cret"), "{error}");
    }

    #[tokio::test]
    async fn an_unreachable_broker_is_a_connect_error_without_the_password() {
        // Port 1 on loopback refuses connections.
        let Err(error) = AmqpClient::connect(
            "amqp://user:s3cret@127.0.0.1:1/%2f?heartbeat=5",
            &ClientOptions::default(),
        )
        .await
        else {
            panic!("nothing listens on port 1");
        };
        match &error {
            Error::Connect { url, .. } => {
                assert_eq!(url, "amqp://user:***@127.0.0.1:1/%2f?heartbeat=5")
            }
            other => panic!("expected a connect error, got {other:?}"),
        }
        assert!(!error.to_string().contains("s3cret"), "{error}");
    }
}
