//! TEMPORARY interface stub: the signatures the client dispatches to. Replaced by the real
//! implementation.
#![allow(dead_code, unused_variables, missing_docs)]

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;

use crate::Confirm;
use crate::client::{ClientOptions, ConsumeOptions};
use crate::error::Result;
use crate::message::{Delivery, OutgoingMessage};
use crate::topology::{Binding, ExchangeSpec, QueueInfo, QueueSpec};

#[derive(Clone)]
pub(crate) struct MemoryClient;

impl MemoryClient {
    pub(crate) fn connect(url: &str, options: &ClientOptions) -> Result<Self> {
        todo!()
    }
    pub(crate) fn url(&self) -> String {
        todo!()
    }
    pub(crate) async fn declare_exchange(&self, spec: &ExchangeSpec) -> Result<()> {
        todo!()
    }
    pub(crate) async fn delete_exchange(&self, name: &str) -> Result<()> {
        todo!()
    }
    pub(crate) async fn declare_queue(&self, spec: &QueueSpec) -> Result<QueueInfo> {
        todo!()
    }
    pub(crate) async fn inspect_queue(&self, name: &str) -> Result<QueueInfo> {
        todo!()
    }
    pub(crate) async fn delete_queue(&self, name: &str) -> Result<u32> {
        todo!()
    }
    pub(crate) async fn purge_queue(&self, name: &str) -> Result<u32> {
        todo!()
    }
    pub(crate) async fn bind_queue(&self, binding: &Binding) -> Result<()> {
        todo!()
    }
    pub(crate) async fn unbind_queue(&self, binding: &Binding) -> Result<()> {
        todo!()
    }
    pub(crate) async fn publish(&self, message: OutgoingMessage) -> Result<Confirm> {
        todo!()
    }
    pub(crate) async fn get(&self, queue: &str) -> Result<Option<Delivery>> {
        todo!()
    }
    pub(crate) async fn consume(
        &self,
        queue: &str,
        options: &ConsumeOptions,
    ) -> Result<crate::Consumer> {
        todo!()
    }
    pub(crate) async fn close(&self) -> Result<()> {
        todo!()
    }
}

#[derive(Debug)]
pub(crate) struct Acker;

impl Acker {
    pub(crate) async fn ack(&self) -> Result<()> {
        todo!()
    }
    pub(crate) async fn nack(&self, requeue: bool) -> Result<()> {
        todo!()
    }
    pub(crate) async fn reject(&self, requeue: bool) -> Result<()> {
        todo!()
    }
}

pub(crate) struct Consumer;

impl Consumer {
    pub(crate) async fn cancel(self) -> Result<()> {
        todo!()
    }
}

impl Stream for Consumer {
    type Item = Result<Delivery>;
    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        todo!()
    }
}
