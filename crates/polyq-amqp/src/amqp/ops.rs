//! Topology operations as data, so that the client and the supervisor's replay run the same
//! code, and an operation can be tried again on a new channel.

use lapin::Channel;
use lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::{FieldTable as LapinTable, ShortString};

use super::convert::{short, table_to_amqp};
use super::record::Declared;
use crate::error::Result;
use crate::topology::{Binding, ExchangeKind, ExchangeSpec, QueueInfo, QueueSpec};

/// One topology operation with its arguments already in lapin's types.
#[derive(Debug, Clone)]
pub(super) enum Op {
    DeclareExchange {
        name: ShortString,
        kind: lapin::ExchangeKind,
        options: ExchangeDeclareOptions,
        arguments: LapinTable,
    },
    DeleteExchange {
        name: ShortString,
    },
    DeclareQueue {
        name: ShortString,
        options: QueueDeclareOptions,
        arguments: LapinTable,
    },
    DeleteQueue {
        name: ShortString,
    },
    PurgeQueue {
        name: ShortString,
    },
    Bind {
        binding: PreparedBinding,
    },
    Unbind {
        binding: PreparedBinding,
    },
}

#[derive(Debug, Clone)]
pub(super) struct PreparedBinding {
    queue: ShortString,
    exchange: ShortString,
    routing_key: ShortString,
    arguments: LapinTable,
}

/// What an operation returned.
#[derive(Debug)]
pub(super) enum Outcome {
    Done,
    Queue(QueueInfo),
    Count(u32),
}

impl Op {
    pub(super) fn declare_exchange(operation: &str, spec: &ExchangeSpec) -> Result<Self> {
        Ok(Op::DeclareExchange {
            name: short(operation, "exchange name", &spec.name)?,
            kind: match spec.kind {
                ExchangeKind::Direct => lapin::ExchangeKind::Direct,
                ExchangeKind::Topic => lapin::ExchangeKind::Topic,
                ExchangeKind::Fanout => lapin::ExchangeKind::Fanout,
                ExchangeKind::Headers => lapin::ExchangeKind::Headers,
            },
            options: ExchangeDeclareOptions {
                durable: spec.durable,
                auto_delete: spec.auto_delete,
                ..ExchangeDeclareOptions::default()
            },
            arguments: table_to_amqp(operation, &spec.arguments)?,
        })
    }

    /// A passive declare: succeeds when the exchange exists, 404 when it does not. The broker
    /// ignores the type and flags of a passive declare, so it proves existence only.
    pub(super) fn inspect_exchange(operation: &str, name: &str) -> Result<Self> {
        Ok(Op::DeclareExchange {
            name: short(operation, "exchange name", name)?,
            kind: lapin::ExchangeKind::Direct,
            options: ExchangeDeclareOptions {
                passive: true,
                ..ExchangeDeclareOptions::default()
            },
            arguments: LapinTable::default(),
        })
    }

    pub(super) fn delete_exchange(operation: &str, name: &str) -> Result<Self> {
        Ok(Op::DeleteExchange {
            name: short(operation, "exchange name", name)?,
        })
    }

    pub(super) fn declare_queue(operation: &str, spec: &QueueSpec) -> Result<Self> {
        Ok(Op::DeclareQueue {
            name: short(operation, "queue name", &spec.name)?,
            options: QueueDeclareOptions {
                durable: spec.durable,
                exclusive: spec.exclusive,
                auto_delete: spec.auto_delete,
                ..QueueDeclareOptions::default()
            },
            arguments: table_to_amqp(operation, &spec.arguments)?,
        })
    }

    /// A passive declare: reports counts, 404 when the queue does not exist.
    pub(super) fn inspect_queue(operation: &str, name: &str) -> Result<Self> {
        Ok(Op::DeclareQueue {
            name: short(operation, "queue name", name)?,
            options: QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            arguments: LapinTable::default(),
        })
    }

    pub(super) fn delete_queue(operation: &str, name: &str) -> Result<Self> {
        Ok(Op::DeleteQueue {
            name: short(operation, "queue name", name)?,
        })
    }

    pub(super) fn purge_queue(operation: &str, name: &str) -> Result<Self> {
        Ok(Op::PurgeQueue {
            name: short(operation, "queue name", name)?,
        })
    }

    pub(super) fn bind(operation: &str, binding: &Binding) -> Result<Self> {
        Ok(Op::Bind {
            binding: PreparedBinding::new(operation, binding)?,
        })
    }

    pub(super) fn unbind(operation: &str, binding: &Binding) -> Result<Self> {
        Ok(Op::Unbind {
            binding: PreparedBinding::new(operation, binding)?,
        })
    }

    /// The operation that declares a recorded object again; for a server-named queue, a passive
    /// declare that finds out whether it survived.
    pub(super) fn redeclare(declared: &Declared) -> Result<Self> {
        match declared {
            Declared::Exchange(spec) => Self::declare_exchange("declare exchange again", spec),
            Declared::Queue(spec) => Self::declare_queue("declare queue again", spec),
            Declared::ServerNamedQueue(name) => {
                Self::inspect_queue("look for server-named queue again", name)
            }
            Declared::Binding(binding) => Self::bind("bind queue again", binding),
        }
    }

    /// Runs the operation on `channel`. Arguments are cloned so a failed attempt can be
    /// repeated on another channel.
    pub(super) async fn run(&self, channel: &Channel) -> lapin::Result<Outcome> {
        match self {
            Op::DeclareExchange {
                name,
                kind,
                options,
                arguments,
            } => channel
                .exchange_declare(name.clone(), kind.clone(), *options, arguments.clone())
                .await
                .map(|()| Outcome::Done),
            Op::DeleteExchange { name } => channel
                .exchange_delete(name.clone(), ExchangeDeleteOptions::default())
                .await
                .map(|()| Outcome::Done),
            Op::DeclareQueue {
                name,
                options,
                arguments,
            } => channel
                .queue_declare(name.clone(), *options, arguments.clone())
                .await
                .map(|queue| {
                    Outcome::Queue(QueueInfo {
                        name: queue.name().as_str().to_owned(),
                        message_count: queue.message_count(),
                        consumer_count: queue.consumer_count(),
                    })
                }),
            Op::DeleteQueue { name } => channel
                .queue_delete(name.clone(), QueueDeleteOptions::default())
                .await
                .map(Outcome::Count),
            Op::PurgeQueue { name } => channel
                .queue_purge(name.clone(), QueuePurgeOptions::default())
                .await
                .map(Outcome::Count),
            Op::Bind { binding } => channel
                .queue_bind(
                    binding.queue.clone(),
                    binding.exchange.clone(),
                    binding.routing_key.clone(),
                    QueueBindOptions::default(),
                    binding.arguments.clone(),
                )
                .await
                .map(|()| Outcome::Done),
            Op::Unbind { binding } => channel
                .queue_unbind(
                    binding.queue.clone(),
                    binding.exchange.clone(),
                    binding.routing_key.clone(),
                    binding.arguments.clone(),
                )
                .await
                .map(|()| Outcome::Done),
        }
    }
}

impl PreparedBinding {
    fn new(operation: &str, binding: &Binding) -> Result<Self> {
        Ok(Self {
            queue: short(operation, "queue name", &binding.queue)?,
            exchange: short(operation, "exchange name", &binding.exchange)?,
            routing_key: short(operation, "binding key", &binding.routing_key)?,
            arguments: table_to_amqp(operation, &binding.arguments)?,
        })
    }
}
