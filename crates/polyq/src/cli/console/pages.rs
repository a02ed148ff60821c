//! The pages, rendered with maud: every value goes through its escaping, so a body or header
//! value that holds markup is shown as text. The only script is the overview's live update,
//! a constant, which puts server-rendered (escaped) HTML in place.

use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde_json::Value;

use super::audit::Entry;
use super::auth::CSRF_FIELD;
use super::discovery::QueueSet;
use crate::cli::dlq::render::{Group, age};
use crate::cli::dlq::row::Row;
use crate::cli::dlq::store::Depth;
use crate::cli::estate::QueueRates;

/// Messages on one page of a dead-letter queue.
pub(crate) const PAGE_SIZE: usize = 50;

const CSS: &str = "body{font:14px system-ui,sans-serif;margin:0;color:#1d1d1f}\
header{background:#23395d;padding:8px 16px}header a{color:#fff;margin-right:16px}\
header .who{color:#cfd8e6;float:right}main{padding:8px 16px}\
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccd;padding:3px 8px;\
text-align:left;vertical-align:top}th{background:#eef1f6}td.n{text-align:right}\
pre{white-space:pre-wrap;word-break:break-all;background:#f6f7f9;padding:6px;margin:0}\
.cols{display:flex;gap:16px}.cols>section{flex:1;min-width:0}\
form.inline{display:inline}.note{background:#fff6d8;padding:6px;border:1px solid #e6d38a}\
textarea{width:100%;font:12px monospace}button{margin:2px}";

/// The overview's live update: each `overview` event carries the tables, rendered and escaped
/// on the server.
const LIVE: &str = "new EventSource('/events').addEventListener('overview',\
function(e){document.getElementById('overview').innerHTML=e.data;});";

/// What the page knows of its reader.
pub(crate) struct Reader<'a> {
    /// The form field for actions; `None` when this reader cannot act.
    pub(crate) csrf: Option<&'a str>,
    pub(crate) read_only: bool,
}

impl Reader<'_> {
    fn can_act(&self) -> bool {
        self.csrf.is_some() && !self.read_only
    }
}

/// A link to `path` with `params` as its query.
pub(crate) fn href(path: &str, params: &[(&str, &str)]) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in params {
        query.append_pair(name, value);
    }
    format!("{path}?{}", query.finish())
}

/// A whole page.
pub(crate) fn page(title: &str, reader: &Reader<'_>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · polyq console" }
                style { (PreEscaped(CSS)) }
            }
            body {
                header {
                    a href="/" { "Overview" }
                    a href="/audit" { "Audit log" }
                    span.who {
                        @if reader.read_only { "read-only" }
                        @else if reader.csrf.is_some() { "signed in" }
                        @else { a href="/login" { "Log in to act" } }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// A page that only says something (an outcome, an error).
pub(crate) fn notice(title: &str, reader: &Reader<'_>, text: &str, back: Option<&str>) -> Markup {
    page(
        title,
        reader,
        html! {
            p.note { (text) }
            @if let Some(back) = back { p { a href=(back) { "Back" } } }
        },
    )
}

/// The login form.
pub(crate) fn login(reader: &Reader<'_>, failed: bool) -> Markup {
    page(
        "Log in",
        reader,
        html! {
            @if failed { p.note { "That is not the token." } }
            p { "The token was printed when the console started (or given with --token or POLYQ_CONSOLE_TOKEN)." }
            form method="post" action="/login" {
                input type="password" name="token" autocomplete="off" autofocus;
                button type="submit" { "Log in" }
            }
        },
    )
}

fn depth_cells(depth: Option<Depth>) -> Markup {
    let cell = |n: Option<u64>| n.map_or_else(|| "—".to_owned(), |n| n.to_string());
    html! {
        td.n { (cell(depth.map(|d| d.ready))) }
        td.n { (cell(depth.and_then(|d| d.unacked))) }
        td.n { (cell(depth.and_then(|d| d.consumers))) }
    }
}

/// The management API's rates, `—` where it gives none (over AMQP, or a queue without traffic).
fn rates_text(rates: Option<QueueRates>) -> String {
    let rate = |rate: Option<f64>| rate.map_or_else(|| "—".to_owned(), |rate| format!("{rate:.1}"));
    rates.map_or_else(
        || "—".to_owned(),
        |rates| {
            format!(
                "{} / {} / {}",
                rate(rates.publish),
                rate(rates.deliver_get),
                rate(rates.ack)
            )
        },
    )
}

fn set_aside_cell(broker: usize, queue: String, depth: Option<Depth>) -> Markup {
    html! {
        td.n {
            @match depth {
                Some(depth) => a href=(href("/dlq", &[("b", &broker.to_string()), ("q", &queue)])) { (depth.ready) },
                None => "—",
            }
        }
    }
}

/// The overview's tables: for each broker its queues, or why they could not be read.
pub(crate) fn overview_tables(brokers: &[(String, anyhow::Result<Vec<QueueSet>>)]) -> Markup {
    html! {
        @for (index, (label, queues)) in brokers.iter().enumerate() {
            h2 { (label) }
            @match queues {
                Err(error) => p.note { "Cannot read this broker: " (polyq_amqp::error_chain(error.as_ref())) },
                Ok(queues) if queues.is_empty() => p { "No queues found: no dead-letter lists on Redis; on RabbitMQ, none with a dead-letter or parked queue in the management API, or, when it does not answer, name them with --queue or --topology." },
                Ok(queues) => table {
                    tr { th { "Queue" } th { "Ready" } th { "Unacked" } th { "Consumers" } th { "DLQ" } th { "Parked" } th { "Publish / deliver / ack per s" } }
                    @for set in queues {
                        tr {
                            td { (set.name) }
                            (depth_cells(set.source))
                            (set_aside_cell(index, set.dlq_name(), set.dlq))
                            (set_aside_cell(index, set.parked_name(), set.parked))
                            td.n { (rates_text(set.rates)) }
                        }
                    }
                }
            }
        }
    }
}

/// The overview page.
pub(crate) fn overview(reader: &Reader<'_>, tables: Markup) -> Markup {
    page(
        "Queues",
        reader,
        html! {
            p { "Ready, unacked, consumers and rates of each source queue (unacked and rates from RabbitMQ's management API, or Redis); the depth of its dead-letter and parked queues. Live." }
            div #overview { (tables) }
            script { (PreEscaped(LIVE)) }
        },
    )
}

/// The filters a dead-letter queue page was asked for, as they go back into links and forms.
pub(crate) type Filters<'a> = [(&'a str, &'a str)];

fn hidden(fields: &Filters<'_>) -> Markup {
    html! {
        @for (name, value) in fields {
            @if !value.is_empty() { input type="hidden" name=(name) value=(value); }
        }
    }
}

/// A form that posts an action on a queue.
fn action_form(
    reader: &Reader<'_>,
    target: &Filters<'_>,
    fields: &Filters<'_>,
    action: &str,
    label: &str,
) -> Markup {
    html! {
        form.inline method="post" action="/action" {
            input type="hidden" name=(CSRF_FIELD) value=(reader.csrf.unwrap_or_default());
            (hidden(target))
            (hidden(fields))
            input type="hidden" name="action" value=(action);
            button type="submit" { (label) }
        }
    }
}

fn time_ms(ms: Option<i64>) -> String {
    ms.and_then(|ms| {
        acemq::time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()
    })
    .and_then(|at| {
        at.format(&acemq::time::format_description::well_known::Rfc3339)
            .ok()
    })
    .unwrap_or_default()
}

/// What a dead-letter queue page shows.
pub(crate) struct QueuePage<'a> {
    pub(crate) broker: usize,
    pub(crate) broker_label: &'a str,
    pub(crate) queue: &'a str,
    /// Every message the filters select.
    pub(crate) rows: &'a [Row],
    pub(crate) total: usize,
    pub(crate) groups: &'a [Group],
    /// The filters given, by form field name.
    pub(crate) filters: &'a Filters<'a>,
    pub(crate) page: usize,
    pub(crate) done: Option<&'a str>,
}

/// A dead-letter (or parked) queue: filters, groups, messages, actions.
pub(crate) fn queue(reader: &Reader<'_>, view: &QueuePage<'_>) -> Markup {
    let broker = view.broker.to_string();
    let target: [(&str, &str); 2] = [("b", &broker), ("q", view.queue)];
    let filtered = view.filters.iter().any(|(_, value)| !value.is_empty());
    let value = |name: &str| {
        view.filters
            .iter()
            .find(|(field, _)| *field == name)
            .map_or("", |(_, value)| *value)
    };
    let shown = view.rows.iter().skip(view.page * PAGE_SIZE).take(PAGE_SIZE);
    let pages = view.rows.len().div_ceil(PAGE_SIZE).max(1);
    let page_link = |page: usize| {
        let page = page.to_string();
        let mut params: Vec<(&str, &str)> = target.to_vec();
        params.extend(view.filters.iter().filter(|(_, v)| !v.is_empty()).copied());
        params.push(("page", &page));
        href("/dlq", &params)
    };
    page(
        &format!("Dead letters: {}", view.queue),
        reader,
        html! {
            p { "On " (view.broker_label) ". " (view.rows.len()) " of " (view.total) " messages match." }
            @if let Some(done) = view.done { p.note #done { (done) } }
            form method="get" action="/dlq" {
                (hidden(&target))
                label { "Type/URN " input name="type" value=(value("type")); }
                label { " Error contains " input name="error" value=(value("error")); }
                label { " Older than " input name="older_than" size="5" placeholder="15m" value=(value("older_than")); }
                label { " Grep " input name="grep" value=(value("grep")); }
                label { " Group " input name="group" size="16" value=(value("group")); }
                button type="submit" { "Filter" }
                " " a href=(href("/dlq", &target)) { "clear" }
            }
            h2 { "Failure groups" }
            table #groups {
                tr { th { "Count" } th { "Group" } th { "First seen" } th { "Last seen" } th { "Sample" } th {} }
                @for group in view.groups {
                    tr {
                        td.n { (group.count) }
                        td { a href=(href("/dlq", &[target[0], target[1], ("group", &group.group_key)])) { (group.group) } }
                        td { (time_ms(group.first_seen_ms)) }
                        td { (time_ms(group.last_seen_ms)) }
                        td { (group.sample_error.as_deref().unwrap_or_default()) }
                        td {
                            @if reader.can_act() {
                                (action_form(reader, &target, &[("group", &group.group_key)], "replay", "Replay group"))
                                (action_form(reader, &target, &[("group", &group.group_key)], "delete", "Delete group"))
                            }
                        }
                    }
                }
            }
            @if reader.can_act() {
                p {
                    (action_form(reader, &target, view.filters, "replay", if filtered { "Replay all matching" } else { "Replay all" }))
                    @if filtered { (action_form(reader, &target, view.filters, "delete", "Delete all matching")) }
                    form.inline method="post" action="/action" {
                        input type="hidden" name=(CSRF_FIELD) value=(reader.csrf.unwrap_or_default());
                        (hidden(&target))
                        input type="hidden" name="action" value="purge";
                        label { input type="checkbox" name="confirm" value="yes" required; " remove every message" }
                        button type="submit" { "Purge" }
                    }
                }
            } @else {
                p.note { @if reader.read_only { "Read-only: actions are off." } @else { a href="/login" { "Log in" } " with the token to act." } }
            }
            h2 { "Messages" }
            form method="post" action="/action" #messages {
                input type="hidden" name=(CSRF_FIELD) value=(reader.csrf.unwrap_or_default());
                (hidden(&target))
                table {
                    tr { th {} th { "#" } th { "Family" } th { "Id" } th { "Type" } th { "Attempts" } th { "Age" } th { "Error" } }
                    @for row in shown {
                        @let s = &row.summary;
                        @let position = s.position.to_string();
                        @let id = s.id.as_deref().unwrap_or_default();
                        tr {
                            td { @if !id.is_empty() { input type="checkbox" name="id" value=(id); } }
                            td.n { (s.position) }
                            td { (family(row)) }
                            td { a.message href=(href("/message", &[target[0], target[1], ("pos", &position), ("id", id)])) { @if id.is_empty() { "(no id)" } @else { (id) } } }
                            td { (s.message_type.as_deref().unwrap_or_default()) }
                            td.n { (s.attempts.map(|n| n.to_string()).unwrap_or_default()) }
                            td { (s.age_ms.map(age).unwrap_or_default()) }
                            td { (s.error.as_deref().unwrap_or_default()) }
                        }
                    }
                }
                @if reader.can_act() {
                    button type="submit" name="action" value="replay" { "Replay selected" }
                    button type="submit" name="action" value="delete" { "Delete selected" }
                }
            }
            p {
                "Page " (view.page + 1) " of " (pages) " "
                @if view.page > 0 { a href=(page_link(view.page - 1)) { "previous" } " " }
                @if view.page + 1 < pages { a href=(page_link(view.page + 1)) { "next" } }
            }
        },
    )
}

fn family(row: &Row) -> &'static str {
    match row.summary.family {
        crate::cli::dlq::row::Family::Acemq => "acemq",
        crate::cli::dlq::row::Family::Babelqueue => "babelqueue",
    }
}

/// A JSON value as text: strings as they are, anything else as compact JSON.
fn text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn key_values(object: &Value) -> Markup {
    html! {
        table {
            @if let Some(object) = object.as_object() {
                @for (key, value) in object {
                    tr { th { (key) } td { pre { (text(value)) } } }
                }
            }
        }
    }
}

/// One message: the inspection view beside the wire message, its history, its message JSON.
pub(crate) fn message(
    reader: &Reader<'_>,
    target: &Filters<'_>,
    row: &Row,
    edit_link: &str,
) -> Markup {
    let s = &row.summary;
    let wire = serde_json::to_value(&row.message).unwrap_or(Value::Null);
    let id = s.id.as_deref().unwrap_or_default();
    page(
        &format!("Message {}", if id.is_empty() { "(no id)" } else { id }),
        reader,
        html! {
            table #summary {
                tr { th { "Family" } td { (family(row)) } }
                tr { th { "Type" } td { (s.message_type.as_deref().unwrap_or_default()) } }
                tr { th { "Error" } td { (s.error.as_deref().unwrap_or_default()) } }
                tr { th { "Group" } td { (s.group) " (" (s.group_key) ")" } }
                tr { th { "Attempts" } td { (s.attempts.map(|n| n.to_string()).unwrap_or_default()) } }
                tr { th { "Failed or first seen" } td { (time_ms(s.at_ms)) } }
                tr { th { "Replayed from" } td { (s.replayed_from.as_deref().unwrap_or_default()) } }
                tr { th { "Replay count" } td { (s.replay_count.map(|n| n.to_string()).unwrap_or_default()) } }
                tr { th { "Redelivered" } td { (s.redelivered) } }
            }
            @if reader.can_act() && !id.is_empty() {
                p {
                    (action_form(reader, target, &[("id", id)], "replay", "Replay"))
                    (action_form(reader, target, &[("id", id)], "delete", "Delete"))
                    a href=(edit_link) { "Edit and replay" }
                }
            }
            div.cols {
                section #decoded {
                    h2 { "Decoded" }
                    (key_values(&row.decoded))
                    @if let Some(block) = &row.dead_letter {
                        h3 { "dead_letter" }
                        pre { (serde_json::to_string_pretty(block).unwrap_or_default()) }
                    }
                }
                section #wire {
                    h2 { "Wire" }
                    p { "Exchange " code { (text(&wire["exchange"])) } ", routing key " code { (text(&wire["routing_key"])) } }
                    h3 { "Properties" }
                    (key_values(&wire["properties"]))
                    h3 { "Headers" }
                    (key_values(&wire["headers"]))
                    h3 { "Body" }
                    pre #body { (text(&wire["body"])) }
                }
            }
            h2 { "Message JSON" }
            textarea #message-json readonly rows="12" { (row.message.to_json_pretty()) }
        },
    )
}

/// The editor for one message's body.
pub(crate) fn edit(reader: &Reader<'_>, target: &Filters<'_>, row: &Row, body: &str) -> Markup {
    let id = row.summary.id.as_deref().unwrap_or_default();
    page(
        &format!("Edit and replay {id}"),
        reader,
        html! {
            p { "The edited copy goes back to the queue it failed on, marked with "
                code { (crate::cli::dlq::edit::EDITED) } "; the original leaves the dead-letter queue once the copy is confirmed." }
            form method="post" action="/edit" {
                input type="hidden" name=(CSRF_FIELD) value=(reader.csrf.unwrap_or_default());
                (hidden(target))
                textarea name="body" rows="16" { (body) }
                button type="submit" { "Publish the edited copy" }
            }
        },
    )
}

/// The audit log, newest first.
pub(crate) fn audit(reader: &Reader<'_>, entries: &[Entry]) -> Markup {
    page(
        "Audit log",
        reader,
        html! {
            table #audit {
                tr { th { "At" } th { "From" } th { "Action" } th { "Broker" } th { "Queue" } th { "Selection" } th { "Count" } th { "Outcome" } }
                @for entry in entries {
                    tr {
                        td { (entry.at) } td { (entry.from) } td { (entry.action) } td { (entry.broker) }
                        td { (entry.queue) } td { (entry.selection.to_string()) } td.n { (entry.count) } td { (entry.outcome) }
                    }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::dlq::store::Stored;
    use polyq_amqp::{FieldValue, MessageJson, Properties};

    const SCRIPT: &str = "<script>alert(1)</script>";

    fn hostile() -> Row {
        let mut properties = Properties::default();
        for (name, value) in [
            ("x-acemq-id", "m-<b>1</b>"),
            ("x-acemq-type", "orders\"><img src=x onerror=alert(2)>"),
            ("x-acemq-error", SCRIPT),
            ("x-tenant", SCRIPT),
        ] {
            properties
                .headers
                .insert(name.to_owned(), FieldValue::from(value));
        }
        let message = MessageJson::new("", "q.dlq", properties, SCRIPT.as_bytes().to_vec());
        let stored = Stored {
            message,
            redelivered: false,
        };
        Row::read(0, stored, false, acemq::time::OffsetDateTime::now_utc())
    }

    fn assert_escaped(html: &str) {
        assert!(!html.contains(SCRIPT), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<b>1"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
    }

    #[test]
    fn a_message_page_shows_markup_in_bodies_and_headers_as_text() {
        let reader = Reader {
            csrf: Some("c"),
            read_only: false,
        };
        let row = hostile();
        let html = message(&reader, &[("b", "0"), ("q", "q.dlq")], &row, "/edit").into_string();
        assert_escaped(&html);
        assert_eq!(html.matches("<script").count(), 0, "{html}");
    }

    #[test]
    fn a_queue_page_shows_markup_in_errors_and_ids_as_text() {
        let reader = Reader {
            csrf: None,
            read_only: true,
        };
        let rows = [hostile()];
        let groups = crate::cli::dlq::render::groups(&rows);
        let view = QueuePage {
            broker: 0,
            broker_label: "amqp://<i>broker</i>",
            queue: "q.dlq",
            rows: &rows,
            total: 1,
            groups: &groups,
            filters: &[("grep", "\"><script>")],
            page: 0,
            done: Some(SCRIPT),
        };
        let html = queue(&reader, &view).into_string();
        assert_escaped(&html);
        assert!(!html.contains("<i>broker"), "{html}");
        assert!(!html.contains("\"><script>"), "{html}");
        assert_eq!(html.matches("<script").count(), 0, "{html}");
    }

    #[test]
    fn the_overview_has_its_one_constant_script() {
        let reader = Reader {
            csrf: None,
            read_only: false,
        };
        let html = overview(&reader, html! {}).into_string();
        assert_eq!(html.matches("<script").count(), 1);
        assert!(html.contains(LIVE));
    }
}
