//! The URN → handler registry.

use std::collections::HashMap;
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::Job;

/// Why a handler failed, as the `dead_letter` block records it.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    /// The error's message.
    pub(crate) message: String,
    /// The error's type name (informational, like Go's `%T`).
    pub(crate) exception: String,
}

impl Failure {
    /// A caught panic: its text, and `panic` as the type.
    pub(crate) fn panicked(panic: polyq_runtime::Panic) -> Self {
        Self {
            message: panic.into_message(),
            exception: "panic".to_owned(),
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
                }),
                // One bad message must not take the worker down: a panic is a failure like any
                // other, retried or dead-lettered.
                Err(panic) => Err(Failure::panicked(panic)),
            }
        })
    }
}

/// URN → handler, exact match, the last registration of a URN wins.
#[derive(Clone, Default)]
pub(crate) struct Registry {
    handlers: HashMap<String, Arc<dyn Handler>>,
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
        self.handlers.insert(urn.into(), Arc::new(handler));
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
}
