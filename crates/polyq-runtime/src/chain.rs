//! The interceptor chain runner: interceptors of one kind run in registration order before the
//! handler and in reverse after it, only those whose `before` passed get the `after` call, and a
//! panic in any of them is contained.
//!
//! The interceptor traits themselves belong to each family (they see that family's message);
//! the chain only decides what runs when.

use crate::panic::{Panic, catch_panic_sync};

/// Interceptors of one kind (`I` is a trait object such as `dyn JobInterceptor`), in
/// registration order, each with the type name that says which one refused or panicked.
///
/// ```
/// use polyq_runtime::{InterceptorChain, Refusal};
///
/// trait Check: Send + Sync {
///     fn before(&self, order: u32) -> Result<(), String>;
///     fn after(&self, log: &mut Vec<&'static str>);
/// }
///
/// struct Positive;
/// impl Check for Positive {
///     fn before(&self, order: u32) -> Result<(), String> {
///         if order == 0 { Err("order 0 does not exist".into()) } else { Ok(()) }
///     }
///     fn after(&self, log: &mut Vec<&'static str>) { log.push("positive") }
/// }
///
/// struct Small;
/// impl Check for Small {
///     fn before(&self, order: u32) -> Result<(), String> {
///         assert!(order < 100, "order {order} is too large");
///         Ok(())
///     }
///     fn after(&self, log: &mut Vec<&'static str>) { log.push("small") }
/// }
///
/// let mut chain: InterceptorChain<dyn Check> = InterceptorChain::new();
/// chain.push("Positive", Box::new(Positive));
/// chain.push("Small", Box::new(Small));
///
/// let passed = chain.before(|check| check.before(7));
/// assert_eq!((passed.passed, passed.refusal.is_none()), (2, true));
/// let mut log = Vec::new();
/// chain.after(passed.passed, |check| check.after(&mut log), |_, _| {});
/// assert_eq!(log, ["small", "positive"]);
///
/// let refused = chain.before(|check| check.before(0));
/// assert_eq!(refused.passed, 0);
/// assert!(matches!(refused.refusal, Some(Refusal::Refused { interceptor: "Positive", .. })));
///
/// let panicked = chain.before(|check| check.before(500));
/// assert_eq!(panicked.passed, 1);
/// match panicked.refusal {
///     Some(Refusal::Panicked { interceptor, panic }) => {
///         assert_eq!((interceptor, panic.message()), ("Small", "order 500 is too large"));
///     }
///     other => panic!("{other:?}"),
/// }
/// ```
pub struct InterceptorChain<I: ?Sized> {
    links: Vec<(&'static str, Box<I>)>,
}

impl<I: ?Sized> Default for InterceptorChain<I> {
    fn default() -> Self {
        Self { links: Vec::new() }
    }
}

impl<I: ?Sized> std::fmt::Debug for InterceptorChain<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.links.iter().map(|(name, _)| name))
            .finish()
    }
}

/// How the `before` half of a chain went.
#[derive(Debug)]
#[must_use = "the interceptors that passed are owed their `after` call"]
pub struct Before<E> {
    /// How many interceptors passed, from the first: they, and only they, get the `after` call.
    pub passed: usize,
    /// Why the next one stopped the chain, if one did.
    pub refusal: Option<Refusal<E>>,
}

/// Why an interceptor stopped the chain before the handler.
#[derive(Debug)]
pub enum Refusal<E> {
    /// It returned an error.
    Refused {
        /// Its name, as registered.
        interceptor: &'static str,
        /// What it returned.
        error: E,
    },
    /// It panicked.
    Panicked {
        /// Its name, as registered.
        interceptor: &'static str,
        /// The panic, contained.
        panic: Panic,
    },
}

impl<E> Refusal<E> {
    /// The name of the interceptor that stopped the chain.
    pub fn interceptor(&self) -> &'static str {
        match self {
            Refusal::Refused { interceptor, .. } | Refusal::Panicked { interceptor, .. } => {
                interceptor
            }
        }
    }
}

impl<I: ?Sized> InterceptorChain<I> {
    /// A chain with no interceptor.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `interceptor` at the end, under `name` (its type name, say, from
    /// [`std::any::type_name_of_val`]).
    pub fn push(&mut self, name: &'static str, interceptor: Box<I>) {
        self.links.push((name, interceptor));
    }

    /// Whether there is no interceptor, so the runtime can skip the chain's bookkeeping.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// How many interceptors there are.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Calls `call` on each interceptor in registration order until one returns an error or
    /// panics.
    pub fn before<E>(&self, mut call: impl FnMut(&I) -> Result<(), E>) -> Before<E> {
        for (passed, (name, interceptor)) in self.links.iter().enumerate() {
            let refusal = match catch_panic_sync(|| call(interceptor.as_ref())) {
                Ok(Ok(())) => continue,
                Ok(Err(error)) => Refusal::Refused {
                    interceptor: name,
                    error,
                },
                Err(panic) => Refusal::Panicked {
                    interceptor: name,
                    panic,
                },
            };
            return Before {
                passed,
                refusal: Some(refusal),
            };
        }
        Before {
            passed: self.links.len(),
            refusal: None,
        }
    }

    /// Calls `call` on the first `passed` interceptors in reverse order. The `after` half only
    /// observes: a panic there goes to `on_panic` (to be logged) and the next one still runs.
    pub fn after(
        &self,
        passed: usize,
        mut call: impl FnMut(&I),
        mut on_panic: impl FnMut(&'static str, Panic),
    ) {
        for (name, interceptor) in self.links[..passed.min(self.links.len())].iter().rev() {
            if let Err(panic) = catch_panic_sync(|| call(interceptor.as_ref())) {
                on_panic(name, panic);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    trait Step: Send + Sync {
        fn run(&self) -> Result<(), &'static str>;
    }

    struct Fails;
    impl Step for Fails {
        fn run(&self) -> Result<(), &'static str> {
            Err("no")
        }
    }

    #[test]
    fn an_empty_chain_passes() {
        let chain: InterceptorChain<dyn Step> = InterceptorChain::new();
        let before = chain.before(|step| step.run());
        assert_eq!(before.passed, 0);
        assert!(before.refusal.is_none());
        assert!(chain.is_empty());
    }

    #[test]
    fn after_panics_are_reported_and_the_rest_still_runs() {
        let mut chain: InterceptorChain<dyn Step> = InterceptorChain::new();
        chain.push("first", Box::new(Fails));
        chain.push("second", Box::new(Fails));
        assert_eq!(chain.len(), 2);
        let mut called = Vec::new();
        let mut panicked = Vec::new();
        chain.after(
            2,
            |_| {
                called.push(called.len());
                assert!(called.len() != 1, "the last one panics");
            },
            |name, panic| panicked.push((name, panic.into_message())),
        );
        assert_eq!(called, [0, 1]);
        assert_eq!(panicked, [("second", "the last one panics".to_owned())]);
    }

    #[test]
    fn the_refusal_names_its_interceptor() {
        let mut chain: InterceptorChain<dyn Step> = InterceptorChain::new();
        chain.push("Fails", Box::new(Fails));
        let refusal = chain.before(|step| step.run()).refusal.unwrap();
        assert_eq!(refusal.interceptor(), "Fails");
        assert!(matches!(refusal, Refusal::Refused { error: "no", .. }));
        assert_eq!(format!("{chain:?}"), r#"["Fails"]"#);
    }
}
