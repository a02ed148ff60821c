//! What a request asks for, read from its query or form (one reading for both), and the actions:
//! each is `polyq dlq`'s own verb, audited and counted.

use std::net::SocketAddr;

use anyhow::Context as _;
use serde_json::json;

use super::App;
use super::audit::Entry;
use crate::cli::dlq::row::{Row, Selection, parse_age};

/// The form fields that filter a dead-letter queue, in the order they are shown.
pub(crate) const FILTERS: [&str; 5] = ["type", "error", "older_than", "grep", "group"];

/// The fields of a query string or an `application/x-www-form-urlencoded` body.
pub(crate) struct Params(Vec<(String, String)>);

impl Params {
    pub(crate) fn parse(text: &[u8]) -> Self {
        Self(url::form_urlencoded::parse(text).into_owned().collect())
    }

    /// The first non-blank value of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .filter(|(field, _)| field == name)
            .map(|(_, value)| value.as_str())
            .find(|value| !value.trim().is_empty())
    }

    fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(field, value)| field == name && !value.trim().is_empty())
            .map(|(_, value)| value.clone())
            .collect()
    }

    /// The broker index `b`.
    pub(crate) fn broker(&self) -> anyhow::Result<usize> {
        self.get("b")
            .context("`b`, the broker's index, is missing")?
            .parse()
            .context("`b` is the broker's index, a number")
    }

    /// The queue `q`.
    pub(crate) fn queue(&self) -> anyhow::Result<&str> {
        self.get("q").context("`q`, the queue, is missing")
    }

    /// A number field, `default` when absent.
    pub(crate) fn number(&self, name: &str, default: usize) -> anyhow::Result<usize> {
        self.get(name).map_or(Ok(default), |value| {
            value
                .parse()
                .with_context(|| format!("`{name}` is a number, not `{value}`"))
        })
    }

    /// The filters given, as (field, value), blank ones included as blank.
    pub(crate) fn filters(&self) -> Vec<(&'static str, &str)> {
        FILTERS
            .iter()
            .map(|&name| (name, self.get(name).unwrap_or_default()))
            .collect()
    }

    /// The selection the filters and the ticked ids make: `polyq dlq`'s own.
    pub(crate) fn selection(&self) -> anyhow::Result<Selection> {
        let older_than = self
            .get("older_than")
            .map(|age| parse_age(age).map_err(|why| anyhow::anyhow!("older than: {why}")))
            .transpose()?;
        let owned = |name: &str| self.get(name).map(str::to_owned);
        Ok(Selection {
            ids: self.all("id"),
            group: owned("group"),
            message_type: owned("type"),
            error: owned("error"),
            older_than,
            grep: owned("grep"),
        })
    }

    /// The selection as the audit log records it.
    fn recorded(&self) -> serde_json::Value {
        let mut fields = serde_json::Map::new();
        for (name, value) in self.filters() {
            if !value.is_empty() {
                fields.insert(name.to_owned(), json!(value));
            }
        }
        let ids = self.all("id");
        if !ids.is_empty() {
            fields.insert("ids".to_owned(), json!(ids));
        }
        serde_json::Value::Object(fields)
    }
}

/// The row of `queue` at `pos` with id `id` (the id wins when the queue moved under it).
pub(crate) async fn find_row(app: &App, params: &Params) -> anyhow::Result<Row> {
    let broker = app.broker(params.broker()?)?;
    let queue = params.queue()?;
    let position = params.number("pos", usize::MAX)?;
    let id = params.get("id");
    let mut rows = crate::cli::dlq::selected(&broker.store, queue, &Selection::default()).await?;
    let at = |row: &Row| row.summary.position == position;
    let named = |row: &Row| id.is_some_and(|id| row.summary.id.as_deref() == Some(id));
    let index = rows
        .iter()
        .position(|row| at(row) && (id.is_none() || named(row)))
        .or_else(|| rows.iter().position(named))
        .with_context(|| format!("no such message in {queue} any more"))?;
    Ok(rows.swap_remove(index))
}

/// Runs the action the form asks for; answers what it did, in words.
pub(crate) async fn act(app: &App, params: &Params, from: SocketAddr) -> anyhow::Result<String> {
    let action = params
        .get("action")
        .context("`action` is missing")?
        .to_owned();
    audited(app, params, from, &action, async {
        let broker = app.broker(params.broker()?)?;
        let queue = params.queue()?;
        let selection = params.selection()?;
        let store = &broker.store;
        Ok(match action.as_str() {
            "replay" => {
                let rows = crate::cli::dlq::selected(store, queue, &selection).await?;
                let moved = crate::cli::dlq::replay(
                    &broker.args,
                    queue,
                    &rows,
                    selection.is_everything(),
                    |_| {},
                )
                .await?;
                let count = moved.values().sum();
                (count, format!("replayed {count} of {queue}"))
            }
            "delete" => {
                let count = crate::cli::dlq::delete(store, queue, &selection).await?;
                (count, format!("deleted {count} of {queue}"))
            }
            "purge" => {
                anyhow::ensure!(
                    params.get("confirm") == Some("yes"),
                    "not purged: tick the box that says to remove every message"
                );
                let count = store.purge(queue).await?;
                (count, format!("purged {count} from {queue}"))
            }
            other => anyhow::bail!("no action `{other}`: replay, delete or purge"),
        })
    })
    .await
}

/// Publishes the edited copy, then removes the original; answers where the copy went.
pub(crate) async fn edit_replay(
    app: &App,
    params: &Params,
    from: SocketAddr,
) -> anyhow::Result<String> {
    audited(app, params, from, "edit-replay", async {
        let broker = app.broker(params.broker()?)?;
        let queue = params.queue()?;
        let body = params.get("body").context("the edited body is empty")?;
        let row = find_row(app, params).await?;
        let to =
            crate::cli::dlq::edit::replay_edited(&broker.args, &broker.store, queue, &row, body)
                .await?;
        Ok((
            1,
            format!("the edited copy went to {to}; the original left {queue}"),
        ))
    })
    .await
}

/// Runs `work`, then records it in the audit log and the action counters, whatever its outcome.
async fn audited(
    app: &App,
    params: &Params,
    from: SocketAddr,
    action: &str,
    work: impl Future<Output = anyhow::Result<(u64, String)>>,
) -> anyhow::Result<String> {
    let outcome = work.await;
    let broker = params
        .broker()
        .ok()
        .and_then(|index| app.brokers.get(index))
        .map(|broker| broker.label.clone())
        .unwrap_or_default();
    let entry = Entry {
        at: acemq::time::OffsetDateTime::now_utc()
            .format(&acemq::time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
        from: from.to_string(),
        action: action.to_owned(),
        broker,
        queue: params.get("q").unwrap_or_default().to_owned(),
        selection: params.recorded(),
        count: outcome.as_ref().map_or(0, |(count, _)| *count),
        outcome: match &outcome {
            Ok(_) => "ok".to_owned(),
            Err(error) => polyq_amqp::error_chain(error.as_ref()),
        },
    };
    let result = if outcome.is_ok() { "ok" } else { "error" };
    metrics::counter!("polyq_console_actions_total", "action" => action.to_owned(), "outcome" => result)
        .increment(1);
    metrics::counter!("polyq_console_messages_total", "action" => action.to_owned())
        .increment(entry.count);
    app.audit.record(&entry)?;
    outcome.map(|(_, done)| done)
}
