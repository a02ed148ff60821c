//! The URN → handler registry.

use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tracing::debug;

use super::Job;
use crate::idempotency::{Effect, Idempotency, Refusal};

/// Why a handler failed, as the `dead_letter` block records it.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    /// The error's message.
    pub(crate) message: String,
    /// The error's type name (informational, like Go's `%T`).
    pub(crate) exception: String,
    /// The handler did not run because the idempotency store could not decide: the message goes
    /// back to the broker unchanged, no attempt counted.
    pub(crate) hand_back: bool,
}

impl Failure {
    /// A caught panic: its text, and `panic` as the type.
    pub(crate) fn panicked(panic: polyq_runtime::Panic) -> Self {
        Self {
            message: panic.into_message(),
            exception: "panic".to_owned(),
            hand_back: false,
        }
    }
}

pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), Failure>> + Send>>;

/// A registered handler with its error type erased.
pub(crate) trait Handler: Send + Sync {
    fn call(&self, job: Job) -> HandlerFuture;
}

struct FnHandler<F, E> {
    f: F,
    error: std::marker::PhantomData<fn() -> E>,
}

impl<F, Fut, E> Handler for FnHandler<F, E>
where
    F: Fn(Job) -> Fut + Send + Sync,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Display + 'static,
{
    fn call(&self, job: Job) -> HandlerFuture {
        // A closure can panic before it returns its future; that panic takes the same failure
        // path as one raised while the future runs.
        let future = match polyq_runtime::catch_panic_sync(|| (self.f)(job)) {
            Ok(future) => future,
            Err(panic) => return Box::pin(std::future::ready(Err(Failure::panicked(panic)))),
        };
        Box::pin(async move {
            match polyq_runtime::catch_panic(future).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(Failure {
                    message: error.to_string(),
                    exception: std::any::type_name::<E>().to_owned(),
                    hand_back: false,
                }),
                // One bad message must not take the worker down: a panic is a failure like any
                // other, retried or dead-lettered.
                Err(panic) => Err(Failure::panicked(panic)),
            }
        })
    }
}

/// Runs a handler under an idempotency option; the handler's future is only made once the store
/// said to run it.
struct Idempotent {
    handler: Arc<dyn Handler>,
    option: Idempotency,
}

impl Handler for Idempotent {
    fn call(&self, job: Job) -> HandlerFuture {
        let (handler, option) = (self.handler.clone(), self.option.clone());
        Box::pin(async move {
            let meta_id = job.meta().and_then(|meta| meta.id()).map(str::to_owned);
            let queue = job.queue().to_owned();
            match option
                .run(meta_id.as_deref(), async move { handler.call(job).await })
                .await
            {
                Ok(Effect::Ran(())) => Ok(()),
                Ok(Effect::Skipped) => {
                    debug!(%queue, "message id already processed: acknowledged without running the handler");
                    Ok(())
                }
                Err(Refusal::Handler(failure)) => Err(failure),
                // Not the message's fault, but a failure all the same: the retry policy paces
                // the next tries and a long outage ends in the dead-letter queue, as in AceMQ.
                Err(Refusal::Store(error)) => Err(Failure {
                    message: polyq_amqp::error_chain(&error).to_string(),
                    exception: "IdempotencyStore".to_owned(),
                    hand_back: false,
                }),
                Err(Refusal::InProgress(error)) => Err(Failure {
                    message: polyq_amqp::error_chain(&error).to_string(),
                    exception: "IdempotencyInProgress".to_owned(),
                    hand_back: true,
                }),
            }
        })
    }
}

/// URN → handler, exact match, the last registration of a URN wins; each handler under the
/// idempotency option of its URN, or else the one for every URN.
#[derive(Clone, Default)]
pub(crate) struct Registry {
    handlers: HashMap<String, Arc<dyn Handler>>,
    unguarded: HashMap<String, Arc<dyn Handler>>,
    every_urn: Option<Idempotency>,
    per_urn: HashMap<String, Idempotency>,
}

impl Registry {
    pub(crate) fn insert<F, Fut, E>(&mut self, urn: impl Into<String>, f: F)
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + 'static,
    {
        let handler = FnHandler {
            f,
            error: std::marker::PhantomData,
        };
        let urn = urn.into();
        self.unguarded.insert(urn.clone(), Arc::new(handler));
        self.guard(&urn);
    }

    /// Sets the idempotency option of `urn`, or of every URN without one of its own.
    pub(crate) fn idempotent(&mut self, urn: Option<String>, option: Idempotency) {
        match urn {
            Some(urn) => {
                self.per_urn.insert(urn.clone(), option);
                self.guard(&urn);
            }
            None => {
                self.every_urn = Some(option);
                let urns: Vec<String> = self.unguarded.keys().cloned().collect();
                for urn in urns {
                    self.guard(&urn);
                }
            }
        }
    }

    fn guard(&mut self, urn: &str) {
        let Some(handler) = self.unguarded.get(urn).cloned() else {
            return;
        };
        let handler = match self.per_urn.get(urn).or(self.every_urn.as_ref()) {
            Some(option) => Arc::new(Idempotent {
                handler,
                option: option.clone(),
            }),
            None => handler,
        };
        self.handlers.insert(urn.to_owned(), handler);
    }

    pub(crate) fn get(&self, urn: &str) -> Option<&Arc<dyn Handler>> {
        self.handlers.get(urn)
    }

    pub(crate) fn urns(&self) -> impl Iterator<Item = &str> {
        self.handlers.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Job {
        let envelope =
            crate::make("urn:babel:a:b", &serde_json::json!({}), Default::default()).unwrap();
        Job::new(envelope, Vec::new(), "q".to_owned())
    }

    #[tokio::test]
    async fn the_last_registration_of_a_urn_wins_and_matching_is_exact() {
        let mut registry = Registry::default();
        registry.insert("urn:babel:a:b", |_job: Job| async { Err("first") });
        registry.insert("urn:babel:a:b", |_job: Job| async { Ok::<_, &str>(()) });
        assert!(
            registry
                .get("urn:babel:a:b")
                .unwrap()
                .call(job())
                .await
                .is_ok()
        );
        assert!(registry.get("urn:babel:a:B").is_none());
        assert!(registry.get("urn:babel:a:b ").is_none());
    }

    #[derive(Debug)]
    struct Declined;

    impl std::fmt::Display for Declined {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("declined")
        }
    }

    #[tokio::test]
    async fn failures_carry_the_message_and_type_and_panics_are_failures() {
        let mut registry = Registry::default();
        registry.insert("e", |_job: Job| async { Err(Declined) });
        registry.insert("p", |_job: Job| async {
            if true {
                panic!("boom");
            }
            Ok::<_, Declined>(())
        });
        let failure = registry.get("e").unwrap().call(job()).await.unwrap_err();
        assert_eq!(failure.message, "declined");
        assert!(
            failure.exception.ends_with("Declined"),
            "{}",
            failure.exception
        );
        let failure = registry.get("p").unwrap().call(job()).await.unwrap_err();
        assert_eq!(
            (failure.message.as_str(), failure.exception.as_str()),
            ("boom", "panic")
        );
    }

    #[tokio::test]
    async fn a_urn_s_own_idempotency_option_wins_over_the_one_for_all_whenever_set() {
        use crate::idempotency::{IdempotencyStore, InMemoryStore};

        let (every, own) = (
            Arc::new(InMemoryStore::new()),
            Arc::new(InMemoryStore::new()),
        );
        let mut registry = Registry::default();
        registry.idempotent(Some("b".to_owned()), Idempotency::seen_set(own.clone()));
        registry.insert("a", |_job: Job| async { Ok::<_, &str>(()) });
        registry.insert("b", |_job: Job| async { Ok::<_, &str>(()) });
        registry.insert("plain", |_job: Job| async { Ok::<_, &str>(()) });
        registry.idempotent(None, Idempotency::seen_set(every.clone()));
        let (a, b) = (job(), job());
        let id = |job: &Job| job.meta().unwrap().id().unwrap().to_owned();
        let (a_id, b_id) = (id(&a), id(&b));
        registry.get("a").unwrap().call(a).await.unwrap();
        registry.get("b").unwrap().call(b).await.unwrap();
        assert!(every.seen(&a_id).await.unwrap() && !every.seen(&b_id).await.unwrap());
        assert!(own.seen(&b_id).await.unwrap() && !own.seen(&a_id).await.unwrap());
    }

    #[tokio::test]
    async fn a_store_that_cannot_answer_hands_the_job_back_without_running_it() {
        use crate::idempotency::{IdempotencyStore, StoreFuture};

        struct Down;
        impl IdempotencyStore for Down {
            fn seen<'a>(&'a self, _: &'a str) -> StoreFuture<'a, bool> {
                Box::pin(async { Err(crate::Error::Store("down".into())) })
            }
            fn remember<'a>(&'a self, _: &'a str) -> StoreFuture<'a, ()> {
                Box::pin(async { Ok(()) })
            }
            fn forget<'a>(&'a self, _: &'a str) -> StoreFuture<'a, ()> {
                Box::pin(async { Ok(()) })
            }
        }
        let mut registry = Registry::default();
        registry.insert("a", |_job: Job| -> std::future::Ready<Result<(), &str>> {
            panic!("the handler must not be called")
        });
        registry.idempotent(None, Idempotency::seen_set(Arc::new(Down)));
        let failure = registry.get("a").unwrap().call(job()).await.unwrap_err();
        assert!(
            !failure.hand_back,
            "the retry path, as a handler error: {failure:?}"
        );
        assert_eq!(failure.exception, "IdempotencyStore");
    }
}
