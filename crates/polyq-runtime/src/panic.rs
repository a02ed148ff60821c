//! Panic containment: one bad message must not take a worker down, so the runtimes run every
//! piece of application code (handlers, interceptors) through these guards and turn a panic
//! into a failure of that one message.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt as _;

/// A panic caught in application code, with the text it was raised with.
///
/// ```
/// let caught = polyq_runtime::catch_panic_sync(|| -> u32 { panic!("bad input") }).unwrap_err();
/// assert_eq!(caught.message(), "bad input");
/// assert_eq!(caught.to_string(), "bad input");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Panic {
    message: String,
}

impl Panic {
    /// The payload's text: the `&str` or `String` it was raised with, or a stand-in for any
    /// other payload.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The text, giving up the rest.
    pub fn into_message(self) -> String {
        self.message
    }

    fn from_payload(payload: &(dyn Any + Send)) -> Self {
        Self {
            message: panic_message(payload),
        }
    }
}

/// The text a panic was raised with: the payload of `panic!("...")` is a `&str` or a `String`;
/// anything else (`std::panic::panic_any`) has no text to show.
///
/// ```
/// let payload = std::panic::catch_unwind(|| panic!("code {}", 7)).unwrap_err();
/// assert_eq!(polyq_runtime::panic_message(payload.as_ref()), "code 7");
/// ```
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Runs `future` to completion, turning a panic while it is polled into [`Panic`].
///
/// A panic in the code that makes the future (before it is first polled) is not inside it:
/// wrap that call in [`catch_panic_sync`], or make the future inside an `async` block.
///
/// The future is asserted unwind-safe: after a panic it is dropped and nothing it borrowed is
/// used again by the runtime, which only reads the [`Panic`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polyq_runtime::catch_panic;
///
/// assert_eq!(catch_panic(async { 2 + 2 }).await, Ok(4));
/// let caught = catch_panic(async {
///     let order: Option<u32> = None;
///     order.expect("an order")
/// })
/// .await
/// .unwrap_err();
/// assert_eq!(caught.message(), "an order");
/// # }
/// ```
pub fn catch_panic<F: Future>(future: F) -> impl Future<Output = Result<F::Output, Panic>> {
    AssertUnwindSafe(future)
        .catch_unwind()
        .map(|caught| caught.map_err(|payload| Panic::from_payload(payload.as_ref())))
}

/// Calls `call`, turning a panic into [`Panic`]; for the synchronous parts of application code
/// (interceptors, the call that makes a handler's future).
///
/// `call` is asserted unwind-safe, as in [`catch_panic`].
///
/// ```
/// use polyq_runtime::catch_panic_sync;
///
/// assert_eq!(catch_panic_sync(|| 6 * 7), Ok(42));
/// assert_eq!(
///     catch_panic_sync(|| -> u32 { panic!("{} is not a tenant", "umbrella") })
///         .unwrap_err()
///         .message(),
///     "umbrella is not a tenant"
/// );
/// ```
pub fn catch_panic_sync<R>(call: impl FnOnce() -> R) -> Result<R, Panic> {
    std::panic::catch_unwind(AssertUnwindSafe(call))
        .map_err(|payload| Panic::from_payload(payload.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_without_text_has_a_stand_in() {
        let payload = std::panic::catch_unwind(|| std::panic::panic_any(7_u8)).unwrap_err();
        assert_eq!(panic_message(payload.as_ref()), "a panic without a message");
    }

    #[tokio::test]
    async fn a_panic_after_an_await_is_caught() {
        let caught = catch_panic(async {
            tokio::task::yield_now().await;
            if true {
                panic!("late");
            }
        })
        .await;
        assert_eq!(caught.unwrap_err().into_message(), "late");
    }

    #[test]
    fn a_future_made_by_a_panicking_call_is_not_made() {
        let make = |fail: bool| -> std::future::Ready<u8> {
            assert!(!fail, "refused before the future existed");
            std::future::ready(1)
        };
        let caught = catch_panic_sync(|| make(true)).unwrap_err();
        assert_eq!(caught.message(), "refused before the future existed");
        assert!(catch_panic_sync(|| make(false)).is_ok());
    }
}
