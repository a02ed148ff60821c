//! The routes: pages (GET), actions (POST, token required, refused when read-only),
//! `/events` (the overview's live updates), `/metrics` and `/health`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, RawQuery, Request, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures_util::Stream;
use maud::Markup;

use super::actions::{self, Params};
use super::auth::CSRF_FIELD;
use super::discovery::{self, QueueSet};
use super::pages::{self, Reader};
use super::{App, Broker};
use crate::cli::dlq::row::{Family, Selection};

/// How often the overview refreshes itself.
const REFRESH: Duration = Duration::from_secs(2);

type Shared = State<Arc<App>>;

/// Every route of the console.
pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(overview))
        .route("/events", get(events))
        .route("/dlq", get(queue))
        .route("/message", get(message))
        .route("/edit", get(edit_form).post(edit))
        .route("/action", axum::routing::post(action))
        .route("/audit", get(audit))
        .route("/login", get(login_form).post(login))
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .layer(middleware::from_fn_with_state(app.clone(), guard_reads))
        .with_state(app)
}

/// Beyond loopback, only `/login` and `/health` are open without the token.
async fn guard_reads(State(app): Shared, request: Request, next: Next) -> Response {
    let open = matches!(request.uri().path(), "/login" | "/health");
    if app.auth.guards_reads && !open && !app.auth.knows(request.headers()) {
        let reader = reader(&app, request.headers());
        return (StatusCode::UNAUTHORIZED, pages::login(&reader, false)).into_response();
    }
    next.run(request).await
}

fn reader<'a>(app: &'a App, headers: &HeaderMap) -> Reader<'a> {
    Reader {
        csrf: app.auth.csrf_for(headers),
        read_only: app.read_only,
    }
}

/// A page or, on failure, a page that says what went wrong.
fn answer(app: &App, headers: &HeaderMap, page: anyhow::Result<Markup>) -> Response {
    match page {
        Ok(page) => page.into_response(),
        Err(error) => {
            let text = polyq_amqp::error_chain(error.as_ref());
            let page = pages::notice("Cannot do that", &reader(app, headers), &text, Some("/"));
            (StatusCode::BAD_REQUEST, page).into_response()
        }
    }
}

/// Every broker's queues, or why they could not be read; the depth gauges follow.
async fn snapshot(app: &App) -> Vec<(String, anyhow::Result<Vec<QueueSet>>)> {
    let mut brokers = Vec::with_capacity(app.brokers.len());
    for broker in &app.brokers {
        let queues = discovery::queues(broker, &app.named).await;
        if let Ok(queues) = &queues {
            gauge(broker, queues);
        }
        brokers.push((broker.label.clone(), queues));
    }
    brokers
}

fn gauge(broker: &Broker, queues: &[QueueSet]) {
    for set in queues {
        for (queue, kind, depth) in [
            (set.name.clone(), "ready", set.source),
            (set.dlq_name(), "dead_letter", set.dlq),
            (set.parked_name(), "parked", set.parked),
        ] {
            if let Some(depth) = depth {
                metrics::gauge!("polyq_console_queue_depth", "broker" => broker.label.clone(), "queue" => queue, "kind" => kind)
                    .set(depth.ready as f64);
            }
        }
    }
}

async fn overview(State(app): Shared, headers: HeaderMap) -> Response {
    let tables = pages::overview_tables(&snapshot(&app).await);
    pages::overview(&reader(&app, &headers), tables).into_response()
}

async fn events(State(app): Shared) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let updates = futures_util::stream::unfold((app, true), |(app, first)| async move {
        if !first {
            tokio::time::sleep(REFRESH).await;
        }
        let tables = pages::overview_tables(&snapshot(&app).await).into_string();
        let event = Event::default().event("overview").data(tables);
        Some((Ok(event), (app, false)))
    });
    Sse::new(updates).keep_alive(KeepAlive::default())
}

async fn queue(State(app): Shared, headers: HeaderMap, RawQuery(query): RawQuery) -> Response {
    let params = Params::parse(query.unwrap_or_default().as_bytes());
    let page = async {
        let index = params.broker()?;
        let broker = app.broker(index)?;
        let queue = params.queue()?;
        let all = crate::cli::dlq::selected(&broker.store, queue, &Selection::default()).await?;
        let total = all.len();
        let selection = params.selection()?;
        let rows: Vec<_> = all
            .into_iter()
            .filter(|row| selection.matches(row))
            .collect();
        let groups = crate::cli::dlq::render::groups(&rows);
        let filters = params.filters();
        let view = pages::QueuePage {
            broker: index,
            broker_label: &broker.label,
            queue,
            rows: &rows,
            total,
            groups: &groups,
            filters: &filters,
            page: params.number("page", 1)?.saturating_sub(1),
            done: params.get("done"),
        };
        Ok(pages::queue(&reader(&app, &headers), &view))
    }
    .await;
    answer(&app, &headers, page)
}

/// The broker and queue fields of a page about one queue.
fn target(params: &Params) -> anyhow::Result<[(&'static str, &str); 2]> {
    Ok([
        ("b", params.get("b").unwrap_or("0")),
        ("q", params.queue()?),
    ])
}

async fn message(State(app): Shared, headers: HeaderMap, RawQuery(query): RawQuery) -> Response {
    let params = Params::parse(query.unwrap_or_default().as_bytes());
    let page = async {
        let mut row = actions::find_row(&app, &params)
            .await?
            .with_keys(app.keys.as_ref());
        if let Some(registry) = &app.registry {
            row.mask(registry)?;
        }
        let target = target(&params)?;
        let position = row.summary.position.to_string();
        let id = row.summary.id.clone().unwrap_or_default();
        let edit = pages::href(
            "/edit",
            &[target[0], target[1], ("pos", &position), ("id", &id)],
        );
        Ok(pages::message(
            &reader(&app, &headers),
            &target,
            &row,
            &edit,
        ))
    }
    .await;
    answer(&app, &headers, page)
}

async fn edit_form(State(app): Shared, headers: HeaderMap, RawQuery(query): RawQuery) -> Response {
    let params = Params::parse(query.unwrap_or_default().as_bytes());
    let page = async {
        let row = actions::find_row(&app, &params).await?;
        let body = match row.summary.family {
            Family::Acemq => std::str::from_utf8(&row.message.body)
                .map_err(|_| {
                    anyhow::anyhow!(
                        "the body is not UTF-8 text: export it with `polyq dlq export`, edit the \
                         file and import it"
                    )
                })?
                .to_owned(),
            Family::Babelqueue => row.decoded["envelope"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "the job does not decode to an envelope; there is nothing to edit"
                    )
                })?,
        };
        let position = row.summary.position.to_string();
        let id = row.summary.id.clone().unwrap_or_default();
        let [b, q] = target(&params)?;
        let fields = [b, q, ("pos", position.as_str()), ("id", id.as_str())];
        Ok(pages::edit(&reader(&app, &headers), &fields, &row, &body))
    }
    .await;
    answer(&app, &headers, page)
}

/// Why an action may not run, if it may not.
fn refusal(app: &App, headers: &HeaderMap, params: &Params) -> Option<Response> {
    let text = if app.read_only {
        "refused: the console is read-only (--read-only)"
    } else if !app.auth.may_act(headers, params.get(CSRF_FIELD)) {
        "refused: actions need the token (log in, or send `Authorization: Bearer <token>`)"
    } else {
        return None;
    };
    let page = pages::notice("Refused", &reader(app, headers), text, Some("/login"));
    Some((StatusCode::FORBIDDEN, page).into_response())
}

/// Back to the queue's page, saying what was done.
fn done(params: &Params, text: &str) -> Response {
    let b = params.get("b").unwrap_or("0");
    let q = params.get("q").unwrap_or_default();
    let location = pages::href("/dlq", &[("b", b), ("q", q), ("done", text)]);
    (StatusCode::SEE_OTHER, [(LOCATION, location)]).into_response()
}

/// Runs the mutation the form in `body` asks for, once `refusal` lets it, then goes back to the
/// queue's page saying what was done.
async fn mutate(
    app: &App,
    headers: &HeaderMap,
    body: &[u8],
    run: impl AsyncFnOnce(&Params) -> anyhow::Result<String>,
) -> Response {
    let params = Params::parse(body);
    if let Some(refused) = refusal(app, headers, &params) {
        return refused;
    }
    match run(&params).await {
        Ok(text) => done(&params, &text),
        Err(error) => answer(app, headers, Err(error)),
    }
}

async fn action(
    State(app): Shared,
    ConnectInfo(from): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    mutate(&app, &headers, &body, async |params| {
        actions::act(&app, params, from).await
    })
    .await
}

async fn edit(
    State(app): Shared,
    ConnectInfo(from): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    mutate(&app, &headers, &body, async |params| {
        actions::edit_replay(&app, params, from).await
    })
    .await
}

async fn audit(State(app): Shared, headers: HeaderMap) -> Response {
    let page = app
        .audit
        .recent()
        .map(|entries| pages::audit(&reader(&app, &headers), &entries));
    answer(&app, &headers, page)
}

async fn login_form(State(app): Shared, headers: HeaderMap) -> Response {
    pages::login(&reader(&app, &headers), false).into_response()
}

async fn login(State(app): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let params = Params::parse(&body);
    if params
        .get("token")
        .is_some_and(|token| app.auth.is_token(token))
    {
        let cookie = app.auth.session_cookie();
        return (
            StatusCode::SEE_OTHER,
            [(LOCATION, "/".to_owned()), (SET_COOKIE, cookie)],
        )
            .into_response();
    }
    (
        StatusCode::UNAUTHORIZED,
        pages::login(&reader(&app, &headers), true),
    )
        .into_response()
}

async fn metrics(State(app): Shared) -> Response {
    snapshot(&app).await;
    (
        [
            (CONTENT_TYPE, "text/plain; version=0.0.4"),
            (CACHE_CONTROL, "no-store"),
        ],
        app.metrics.render(),
    )
        .into_response()
}

async fn health() -> Response {
    ([(CONTENT_TYPE, "application/json")], r#"{"status":"ok"}"#).into_response()
}
