//! The AceMQ rules of `polyq doctor`: a message's reserved headers and a source queue's
//! topology judged against the contract, pure.
//!
//! A message is judged by its headers alone ([`check_headers`]). A queue is judged by what a
//! caller found on the broker ([`Estate`]): [`probes`] names what to look at for a source
//! queue and its consumer's policy, [`source_declarations`] the redeclarations that tell how
//! it was declared, and [`check_queue`] judges what was found.
//!
//! ```
//! use acemq::doctor::{self, Severity};
//! use polyq_amqp::{FieldTable, FieldValue};
//!
//! let headers = FieldTable::from([("x-acemq-attempt".to_owned(), FieldValue::I32(0))]);
//! let findings = doctor::check_headers("queue orders, message 1", &headers);
//! assert_eq!(findings[0].rule, doctor::rules::COUNTER_BELOW_ONE);
//! assert_eq!(findings[0].severity, Severity::Error);
//! ```

use std::collections::{BTreeMap, BTreeSet};

use polyq_amqp::{FieldTable, QueueSpec};
pub use polyq_runtime::{Finding, Severity};

use crate::contract::headers;
use crate::contract::lenient;
use crate::contract::retry::RetryPolicy;
use crate::contract::topology::{self, QueueType, SourceQueue};

/// The rule names, `acemq/<name>`.
pub mod rules {
    /// The source queue does not exist.
    pub const QUEUE_MISSING: &str = "acemq/queue-missing";
    /// A known reserved header whose value cannot be read as its type.
    pub const MALFORMED_RESERVED_HEADER: &str = "acemq/malformed-reserved-header";
    /// `x-acemq-attempt` or `x-acemq-version` below 1.
    pub const COUNTER_BELOW_ONE: &str = "acemq/counter-below-one";
    /// An `x-acemq-*` header this release does not know.
    pub const UNKNOWN_RESERVED_HEADER: &str = "acemq/unknown-reserved-header";
    /// A rung queue the consumer's policy needs is not declared.
    pub const RUNG_MISSING: &str = "acemq/rung-missing";
    /// A source queue is classic where the contract expects quorum.
    pub const SOURCE_NOT_QUORUM: &str = "acemq/source-not-quorum";
    /// A dead-letter exchange, or the queue it routes to, does not exist.
    pub const DEAD_LETTER_NOWHERE: &str = "acemq/dead-letter-nowhere";
    /// The rungs' dead-letter route (`acemq.retry` on the source queue's name) has no binding
    /// to the source queue: a retry that expires there is dropped by the broker.
    pub const RUNG_ROUTE_NOWHERE: &str = "acemq/rung-route-nowhere";
}

/// How a header of the contract is typed on the wire.
#[derive(Clone, Copy)]
enum Kind {
    Text,
    /// A signed 32-bit counter, at least 1.
    FromOne,
    /// A signed 32-bit counter, at least 0.
    FromZero,
    EpochMillis,
}

const KNOWN: [(&str, Kind); 13] = [
    (headers::ID, Kind::Text),
    (headers::TYPE, Kind::Text),
    (headers::VERSION, Kind::FromOne),
    (headers::CORRELATION, Kind::Text),
    (headers::CAUSATION, Kind::Text),
    (headers::ATTEMPT, Kind::FromOne),
    (headers::FIRST_SEEN, Kind::EpochMillis),
    (headers::ORIGIN, Kind::Text),
    (headers::ERROR, Kind::Text),
    (headers::CLAIM, Kind::Text),
    (headers::ROUTE, Kind::Text),
    (headers::ROUTE_POSITION, Kind::FromZero),
    (headers::ROUTE_ID, Kind::Text),
];

/// The findings on one message's headers: known reserved headers that cannot be read as their
/// type, `x-acemq-attempt` / `x-acemq-version` below 1, and `x-acemq-*` names this release does
/// not know. Values are never quoted, only header names.
pub fn check_headers(subject: &str, headers: &FieldTable) -> Vec<Finding> {
    let mut findings = Vec::new();
    for (name, value) in headers.iter() {
        if !headers::is_ace_header(name) {
            continue;
        }
        let Some((_, kind)) = KNOWN.iter().find(|(known, _)| known == name) else {
            findings.push(Finding::new(
                rules::UNKNOWN_RESERVED_HEADER,
                Severity::Warning,
                subject,
                format!("the reserved header {name} is not part of this release's contract"),
                "a newer AceMQ port wrote it; upgrade acemq on the consumers of this queue \
                 (until then the header is dropped from the application headers)",
            ));
            continue;
        };
        let value = Some(value);
        let problem = match kind {
            Kind::Text => lenient::text(value).is_none().then_some("is not text"),
            Kind::EpochMillis => lenient::epoch_millis(value)
                .is_none()
                .then_some("is not epoch milliseconds"),
            Kind::FromOne | Kind::FromZero => match lenient::number(value) {
                None => Some("is not an integer"),
                Some(n) if n > i64::from(i32::MAX) => Some("exceeds the signed 32-bit range"),
                Some(n) if matches!(kind, Kind::FromOne) && n < 1 => {
                    findings.push(Finding::new(
                        rules::COUNTER_BELOW_ONE,
                        Severity::Error,
                        subject,
                        format!("{name} is below 1"),
                        "fix the publisher that wrote it: attempts and versions count from 1 \
                         (a consumer reads it as 1)",
                    ));
                    None
                }
                Some(n) if n < 0 => Some("is negative"),
                Some(_) => None,
            },
        };
        if let Some(problem) = problem {
            findings.push(Finding::new(
                rules::MALFORMED_RESERVED_HEADER,
                Severity::Error,
                subject,
                format!("the reserved header {name} {problem}"),
                "fix the publisher that wrote it; a consumer falls back to the default, which \
                 loses what the header meant",
            ));
        }
    }
    findings
}

/// What a caller should look up on the broker to judge `queue` with [`check_queue`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Probes {
    /// Queues whose existence matters.
    pub queues: Vec<String>,
    /// Exchanges whose existence matters.
    pub exchanges: Vec<String>,
    /// Exchange and queue pairs whose bindings matter (their routing keys go in
    /// [`Estate::bindings`]): `acemq.retry` and the source queue, when the policy has rungs.
    pub bindings: Vec<(String, String)>,
}

/// The queues and exchanges that decide the findings on source queue `queue`, consumed with
/// `policy` when one is given.
pub fn probes(queue: &str, policy: Option<&RetryPolicy>) -> Probes {
    let mut queues = vec![queue.to_owned(), topology::dead_letter_queue(queue)];
    let rungs = policy
        .map(|policy| topology::rungs(queue, policy))
        .unwrap_or_default();
    let bindings = if rungs.is_empty() {
        Vec::new()
    } else {
        vec![(topology::RETRY_EXCHANGE.to_owned(), queue.to_owned())]
    };
    queues.extend(rungs.into_iter().map(|r| r.queue));
    Probes {
        queues,
        exchanges: vec![
            topology::DEAD_LETTER_EXCHANGE.to_owned(),
            topology::RETRY_EXCHANGE.to_owned(),
        ],
        bindings,
    }
}

/// One declaration AceMQ makes of a source queue, and what the broker accepting it again
/// tells about the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceDeclaration {
    /// The declaration, exactly as [`topology::SourceQueue`] plans it.
    pub spec: QueueSpec,
    /// The queue's type when the broker accepts it.
    pub queue_type: QueueType,
    /// The queue's `x-dead-letter-exchange` when the broker accepts it.
    pub dead_letter_exchange: Option<String>,
}

/// The declarations AceMQ makes of source queue `queue`, quorum first: with dead-lettering,
/// plain, then the classic pair.
///
/// A broker accepts a redeclaration only when the arguments it compares are equal, and an
/// accepted one changes nothing, so the first of these an existing queue accepts is how it
/// was declared; none accepted means arguments of its own. Quorum goes first because a broker
/// may accept a declaration that leaves `x-queue-type` out for a quorum queue.
///
/// ```
/// use acemq::topology::QueueType;
///
/// let declarations = acemq::doctor::source_declarations("orders");
/// assert_eq!(declarations.len(), 4);
/// assert_eq!(declarations[0].queue_type, QueueType::Quorum);
/// assert_eq!(declarations[0].dead_letter_exchange.as_deref(), Some("acemq.dlx"));
/// ```
pub fn source_declarations(queue: &str) -> Vec<SourceDeclaration> {
    let quorum = SourceQueue::new(queue);
    let classic = SourceQueue::new(queue).classic();
    [
        (quorum.clone().with_dead_letter(), QueueType::Quorum, true),
        (quorum, QueueType::Quorum, false),
        (classic.clone().with_dead_letter(), QueueType::Classic, true),
        (classic, QueueType::Classic, false),
    ]
    .into_iter()
    .filter_map(|(source, queue_type, dead_letters)| {
        // Only arguments a caller adds can make a plan fail; these have none.
        let spec = source.spec().ok()?;
        Some(SourceDeclaration {
            spec,
            queue_type,
            dead_letter_exchange: dead_letters.then(|| topology::DEAD_LETTER_EXCHANGE.to_owned()),
        })
    })
    .collect()
}

/// What a caller found on the broker.
#[derive(Debug, Clone, Default)]
pub struct Estate {
    /// Queues that exist.
    pub queues: BTreeSet<String>,
    /// Exchanges that exist.
    pub exchanges: BTreeSet<String>,
    /// The type of a queue, where the broker told it.
    pub queue_types: BTreeMap<String, QueueType>,
    /// The `x-dead-letter-exchange` of a queue, where the broker told it; absent when unknown.
    pub dead_letter_exchanges: BTreeMap<String, Option<String>>,
    /// The routing keys bound from an exchange to a queue, keyed `(exchange, queue)`, where the
    /// caller could read them (AMQP cannot tell them; RabbitMQ's management API can); absent
    /// when unknown, empty when there is no binding.
    pub bindings: BTreeMap<(String, String), BTreeSet<String>>,
}

/// The findings on source queue `queue` consumed with `policy` (when given): rungs the policy
/// needs and the broker lacks, a classic source queue, and dead-letter exchanges (the queue's
/// own, and `acemq.retry` behind its rungs) or dead-letter queues that do not exist. A queue
/// that does not exist is one finding, nothing else.
pub fn check_queue(queue: &str, policy: Option<&RetryPolicy>, estate: &Estate) -> Vec<Finding> {
    let subject = format!("queue {queue}");
    if !estate.queues.contains(queue) {
        return vec![Finding::new(
            rules::QUEUE_MISSING,
            Severity::Error,
            subject,
            "the source queue does not exist",
            "declare it (polyq acemq topology apply, or the service that owns it)",
        )];
    }
    let mut findings = Vec::new();
    if estate.queue_types.get(queue) == Some(&QueueType::Classic) {
        findings.push(Finding::new(
            rules::SOURCE_NOT_QUORUM,
            Severity::Warning,
            &subject,
            "the source queue is classic; AceMQ source queues are quorum",
            "declare a quorum queue (x-queue-type = quorum), move the messages over and point \
             the bindings at it; a queue's type cannot be changed in place",
        ));
    }
    if let Some(Some(exchange)) = estate.dead_letter_exchanges.get(queue) {
        if !estate.exchanges.contains(exchange) {
            findings.push(Finding::new(
                rules::DEAD_LETTER_NOWHERE,
                Severity::Error,
                &subject,
                format!("its dead-letter exchange {exchange} does not exist; the broker drops what it dead-letters"),
                format!("declare the exchange {exchange} (a consumer with dead-lettering declares it)"),
            ));
        } else if exchange == topology::DEAD_LETTER_EXCHANGE {
            let dlq = topology::dead_letter_queue(queue);
            if !estate.queues.contains(&dlq) {
                findings.push(Finding::new(
                    rules::DEAD_LETTER_NOWHERE,
                    Severity::Error,
                    &subject,
                    format!("it dead-letters to {dlq}, which does not exist"),
                    format!(
                        "declare {dlq} bound to {exchange} on its own name (a consumer declares it)"
                    ),
                ));
            }
        }
    }
    let Some(policy) = policy else {
        return findings;
    };
    let rungs = topology::rungs(queue, policy);
    let mut declared_rungs = 0;
    for rung in &rungs {
        if estate.queues.contains(&rung.queue) {
            declared_rungs += 1;
        } else {
            findings.push(Finding::new(
                rules::RUNG_MISSING,
                Severity::Error,
                &subject,
                format!(
                    "the rung {} its consumer's policy waits in is not declared",
                    rung.queue
                ),
                "start the consumer with this policy once (it declares its rungs), or apply the \
                 topology with the consumer in it",
            ));
        }
    }
    if declared_rungs == 0 {
        return findings;
    }
    if !estate.exchanges.contains(topology::RETRY_EXCHANGE) {
        findings.push(Finding::new(
            rules::DEAD_LETTER_NOWHERE,
            Severity::Error,
            &subject,
            format!(
                "its rungs dead-letter to {}, which does not exist; a retry waiting there is dropped",
                topology::RETRY_EXCHANGE
            ),
            format!(
                "declare the direct exchange {} and bind the queue to it on its own name",
                topology::RETRY_EXCHANGE
            ),
        ));
    } else if let Some(keys) = estate
        .bindings
        .get(&(topology::RETRY_EXCHANGE.to_owned(), queue.to_owned()))
        && !keys.contains(queue)
    {
        findings.push(Finding::new(
            rules::RUNG_ROUTE_NOWHERE,
            Severity::Error,
            &subject,
            format!(
                "its rungs dead-letter through {} on key {queue}, but no binding leads from there                  to the queue; the broker drops a retry that expires on a rung, without a trace",
                topology::RETRY_EXCHANGE
            ),
            format!(
                "bind {queue} to {} on routing key {queue} (a consumer with this policy binds it                  at start)",
                topology::RETRY_EXCHANGE
            ),
        ));
    }
    findings
}

#[cfg(test)]
mod tests {
    use polyq_amqp::FieldValue;

    use super::*;

    fn rules_of(findings: &[Finding]) -> Vec<&'static str> {
        findings.iter().map(|f| f.rule).collect()
    }

    fn headers(pairs: &[(&str, FieldValue)]) -> FieldTable {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), value.clone()))
            .collect()
    }

    #[test]
    fn a_well_formed_message_has_no_findings() {
        let table = headers(&[
            (headers::ID, FieldValue::from("m-1")),
            (headers::TYPE, FieldValue::from("order.placed")),
            (headers::VERSION, FieldValue::I32(1)),
            (headers::ATTEMPT, FieldValue::I8(3)),
            (headers::FIRST_SEEN, FieldValue::I64(1_770_091_506_789)),
            (headers::ROUTE_POSITION, FieldValue::I32(0)),
            (headers::REPLAYED_FROM, FieldValue::from("q.dlq")),
            ("x-tenant", FieldValue::from("acme")),
        ]);
        assert!(check_headers("m", &table).is_empty());
    }

    #[test]
    fn counters_below_one_are_errors_of_their_own_rule() {
        for name in [headers::ATTEMPT, headers::VERSION] {
            for value in [
                FieldValue::I32(0),
                FieldValue::I64(-4),
                FieldValue::from("0"),
            ] {
                let findings = check_headers("m", &headers(&[(name, value.clone())]));
                assert_eq!(
                    rules_of(&findings),
                    [rules::COUNTER_BELOW_ONE],
                    "{name} {value:?}"
                );
                assert!(findings[0].message.contains(name));
                assert!(findings[0].is_error());
            }
        }
    }

    #[test]
    fn unreadable_reserved_headers_are_malformed() {
        let cases = [
            (headers::ATTEMPT, FieldValue::from("soon")),
            (headers::VERSION, FieldValue::I64(1 << 31)),
            (headers::ID, FieldValue::Bool(true)),
            (headers::TYPE, FieldValue::from("")),
            (headers::FIRST_SEEN, FieldValue::from("yesterday")),
            (headers::ROUTE_POSITION, FieldValue::I32(-1)),
        ];
        for (name, value) in cases {
            let findings = check_headers("m", &headers(&[(name, value.clone())]));
            assert_eq!(
                rules_of(&findings),
                [rules::MALFORMED_RESERVED_HEADER],
                "{name} {value:?}"
            );
            assert!(findings[0].message.contains(name));
        }
    }

    #[test]
    fn findings_name_headers_never_their_values() {
        let findings = check_headers("m", &headers(&[(headers::ID, FieldValue::Bool(true))]));
        assert!(!findings[0].message.contains("true"));
        let findings = check_headers(
            "m",
            &headers(&[(headers::ATTEMPT, FieldValue::from("secret"))]),
        );
        assert!(!findings[0].message.contains("secret"));
    }

    #[test]
    fn unknown_reserved_names_are_warnings_and_shared_names_are_not_checked() {
        let table = headers(&[
            ("x-acemq-added-next-year", FieldValue::I32(1)),
            ("acemq-something-new", FieldValue::I32(1)),
        ]);
        let findings = check_headers("m", &table);
        assert_eq!(rules_of(&findings), [rules::UNKNOWN_RESERVED_HEADER]);
        assert_eq!(findings[0].severity, Severity::Warning);
        assert!(findings[0].message.contains("x-acemq-added-next-year"));
    }

    fn policy() -> RetryPolicy {
        "exponential(6, 10s, 5m)".parse().unwrap()
    }

    fn complete_estate(queue: &str) -> Estate {
        let probes = probes(queue, Some(&policy()));
        Estate {
            queues: probes.queues.into_iter().collect(),
            exchanges: probes.exchanges.into_iter().collect(),
            queue_types: BTreeMap::from([(queue.to_owned(), QueueType::Quorum)]),
            dead_letter_exchanges: BTreeMap::from([(
                queue.to_owned(),
                Some(topology::DEAD_LETTER_EXCHANGE.to_owned()),
            )]),
            bindings: probes
                .bindings
                .into_iter()
                .map(|pair| (pair, BTreeSet::from([queue.to_owned()])))
                .collect(),
        }
    }

    #[test]
    fn probes_name_the_source_its_dlq_its_rungs_and_both_exchanges() {
        let probes = probes("orders", Some(&policy()));
        assert_eq!(
            probes.queues,
            [
                "orders",
                "orders.dlq",
                "orders.retry.40s",
                "orders.retry.80s",
                "orders.retry.160s"
            ]
        );
        assert_eq!(probes.exchanges, ["acemq.dlx", "acemq.retry"]);
        assert_eq!(
            super::probes("orders", None).queues,
            ["orders", "orders.dlq"]
        );
    }

    #[test]
    fn source_declarations_are_the_plans_own_quorum_first() {
        let declarations = source_declarations("orders");
        let types: Vec<_> = declarations.iter().map(|d| d.queue_type).collect();
        assert_eq!(
            types,
            [
                QueueType::Quorum,
                QueueType::Quorum,
                QueueType::Classic,
                QueueType::Classic
            ]
        );
        let planned = topology::Topology::new()
            .queue(SourceQueue::new("orders").with_dead_letter())
            .plan()
            .unwrap();
        assert_eq!(declarations[0].spec, planned.queues[0].item);
        assert_eq!(
            declarations[2].spec.arguments["x-dead-letter-routing-key"],
            polyq_amqp::FieldValue::from("orders.dlq")
        );
        assert!(declarations[3].spec.arguments.is_empty());
        assert!(declarations[1].dead_letter_exchange.is_none());
    }

    #[test]
    fn a_complete_topology_has_no_findings() {
        assert!(check_queue("orders", Some(&policy()), &complete_estate("orders")).is_empty());
        assert!(check_queue("orders", None, &complete_estate("orders")).is_empty());
    }

    #[test]
    fn a_missing_source_queue_is_the_only_finding() {
        let findings = check_queue("orders", Some(&policy()), &Estate::default());
        assert_eq!(rules_of(&findings), [rules::QUEUE_MISSING]);
        assert!(findings[0].message.contains("does not exist"));
    }

    #[test]
    fn each_missing_rung_is_an_error_and_without_a_policy_rungs_are_not_judged() {
        let mut estate = complete_estate("orders");
        estate.queues.remove("orders.retry.80s");
        let findings = check_queue("orders", Some(&policy()), &estate);
        assert_eq!(rules_of(&findings), [rules::RUNG_MISSING]);
        assert!(findings[0].message.contains("orders.retry.80s"));
        assert!(check_queue("orders", None, &estate).is_empty());
    }

    #[test]
    fn a_classic_source_queue_is_a_warning_and_an_unknown_type_is_not_judged() {
        let mut estate = complete_estate("orders");
        estate
            .queue_types
            .insert("orders".into(), QueueType::Classic);
        let findings = check_queue("orders", None, &estate);
        assert_eq!(rules_of(&findings), [rules::SOURCE_NOT_QUORUM]);
        assert_eq!(findings[0].severity, Severity::Warning);
        estate.queue_types.clear();
        assert!(check_queue("orders", None, &estate).is_empty());
    }

    #[test]
    fn a_rung_route_without_its_binding_is_an_error_and_unknown_bindings_are_not_judged() {
        let probes = probes("orders", Some(&policy()));
        assert_eq!(
            probes.bindings,
            [("acemq.retry".to_owned(), "orders".to_owned())]
        );
        assert!(super::probes("orders", None).bindings.is_empty());

        let route = ("acemq.retry".to_owned(), "orders".to_owned());
        let mut estate = complete_estate("orders");
        estate
            .bindings
            .insert(route.clone(), BTreeSet::from(["other".to_owned()]));
        let findings = check_queue("orders", Some(&policy()), &estate);
        assert_eq!(rules_of(&findings), [rules::RUNG_ROUTE_NOWHERE]);
        assert_eq!(findings[0].severity, Severity::Error);
        assert!(
            findings[0].fix.contains("routing key orders"),
            "{}",
            findings[0].fix
        );
        assert!(check_queue("orders", None, &estate).is_empty());

        estate.bindings.remove(&route);
        assert!(check_queue("orders", Some(&policy()), &estate).is_empty());
    }

    #[test]
    fn dead_letter_routes_to_nowhere_are_errors() {
        let mut estate = complete_estate("orders");
        estate.exchanges.remove(topology::DEAD_LETTER_EXCHANGE);
        let findings = check_queue("orders", None, &estate);
        assert_eq!(rules_of(&findings), [rules::DEAD_LETTER_NOWHERE]);
        assert!(findings[0].message.contains("acemq.dlx"));

        let mut estate = complete_estate("orders");
        estate.queues.remove("orders.dlq");
        let findings = check_queue("orders", None, &estate);
        assert_eq!(rules_of(&findings), [rules::DEAD_LETTER_NOWHERE]);
        assert!(findings[0].message.contains("orders.dlq"));

        let mut estate = complete_estate("orders");
        estate.exchanges.remove(topology::RETRY_EXCHANGE);
        let findings = check_queue("orders", Some(&policy()), &estate);
        assert_eq!(rules_of(&findings), [rules::DEAD_LETTER_NOWHERE]);
        assert!(findings[0].message.contains("acemq.retry"));
        assert!(check_queue("orders", None, &estate).is_empty());

        let mut estate = complete_estate("orders");
        estate.dead_letter_exchanges.insert("orders".into(), None);
        estate.exchanges.clear();
        assert!(check_queue("orders", None, &estate).is_empty());
    }
}
