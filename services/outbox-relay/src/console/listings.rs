//! The console's searchable listings — stuck rooms, dead letters, the audit
//! trail and a room's timeline — as request handlers: each checks the
//! session, reads one bounded page (`search`, `audit_search`), and renders
//! it with its search form and next-page link. Read-only: the actions on
//! stuck rooms are `handlers`' and `bulk`'s.

use super::refresh::Live;
use super::search::{Scope, SearchForm};
use super::search_pages::{self, Fields};
use super::{Console, consumption, html, optional, pages, search};
use crate::access::Client;
use crate::ops::{self, OperatorName};
use axum::{
    Extension,
    extract::{Query, State},
    http::{HeaderMap, StatusCode, Uri},
    response::Response,
};
use maud::html as markup;

/// Stuck rooms shown per page (each with its decoded payload).
pub const STUCK_PAGE: usize = 20;

pub(super) async fn stuck(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    uri: Uri,
    Query(form): Query<SearchForm>,
) -> Response {
    let live = Live::of(&headers, uri);
    let session = match console.session(&headers, client).await {
        Ok(session) => session,
        Err(refusal) => return refusal,
    };
    let pool = &console.config.pool;
    let fields = Fields {
        room: true,
        status: false,
    };
    let result = async {
        let search = form.checked()?;
        let page = search::page(pool, Scope::Failing("retryable"), &search, STUCK_PAGE).await?;
        let mut jsons = Vec::with_capacity(page.rows.len());
        for found in &page.rows {
            jsons.push(ops::room::event_json(pool, &found.row.event_id).await?);
        }
        let heads: Vec<pages::StuckHead<'_>> = page
            .rows
            .iter()
            .zip(jsons)
            .map(|(found, json)| pages::StuckHead {
                row: &found.row,
                json,
            })
            .collect();
        Ok(markup! {
            (search_pages::search_form("/console/stuck", &form, fields, &[]))
            (pages::stuck(
                &heads,
                &session.csrf,
                session.role == super::auth::Role::ReadOnly,
                session.operator.as_ref().map(OperatorName::as_str),
            ))
            (search_pages::page_footer("/console/stuck", &form, &[], &page, "stuck rooms"))
        })
    }
    .await;
    console.render_live(&session, "Stuck rooms", &live, result)
}

pub(super) async fn dead_letters(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    uri: Uri,
    Query(form): Query<SearchForm>,
) -> Response {
    let live = Live::of(&headers, uri);
    let session = match console.session(&headers, client).await {
        Ok(session) => session,
        Err(refusal) => return refusal,
    };
    let result = async {
        let search = form.checked()?;
        let page = search::page(
            &console.config.pool,
            Scope::Failing("failed"),
            &search,
            search::PAGE,
        )
        .await?;
        Ok(pages::dead_letters(&form, &page))
    }
    .await;
    console.render_live(&session, "Dead letters", &live, result)
}

pub(super) async fn audit(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    uri: Uri,
    Query(form): Query<super::audit_search::AuditForm>,
) -> Response {
    let live = Live::of(&headers, uri);
    let session = match console.session(&headers, client).await {
        Ok(session) => session,
        Err(refusal) => return refusal,
    };
    let result = super::audit_search::page(&console.config.pool, &form, search::PAGE)
        .await
        .map(|page| search_pages::audit(&form, &page));
    console.render_live(&session, "Audit log", &live, result)
}

pub(super) async fn room_timeline(
    State(console): State<Console>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    uri: Uri,
    Query(form): Query<SearchForm>,
) -> Response {
    let live = Live::of(&headers, uri);
    let session = match console.session(&headers, client).await {
        Ok(session) => session,
        Err(refusal) => return refusal,
    };
    let Some(room_id) = optional(&form.room_id) else {
        return super::html(
            StatusCode::OK,
            console.page(&session, "Room timeline", None, pages::room_form("")),
        );
    };
    let result = timeline(&console, &room_id, &form).await;
    match result {
        Ok(body) => console.render_live(&session, "Room timeline", &live, Ok(body)),
        Err(error) => console.error_after(
            &session,
            "Room timeline",
            &error,
            pages::room_form(&room_id),
        ),
    }
}

/// A room's timeline page: the forms, a page of its events newest first
/// (shown in commit order) with each group's consumption, the next page.
async fn timeline(
    console: &Console,
    room_id: &str,
    form: &SearchForm,
) -> Result<maud::Markup, crate::Error> {
    let room_id = ops::checked_room_id(room_id)?;
    let pool = &console.config.pool;
    let search = form.checked()?;
    let mut page = search::page(pool, Scope::Room(room_id), &search, search::PAGE).await?;
    let unfiltered = SearchForm {
        room_id: form.room_id.clone(),
        ..SearchForm::default()
    };
    if page.rows.is_empty() && *form == unfiltered {
        return Err(crate::Error::NotFound(format!(
            "room `{room_id}` has no chain rows in room_outbox (never written, or purged)"
        )));
    }
    page.rows.reverse();
    // The room is the page's (kept as a hidden field), not a filter.
    let form = &SearchForm {
        room_id: String::new(),
        ..form.clone()
    };
    let columns = consumption::columns(&console.config.groups);
    let applied = consumption::applied(pool, &columns, &page.rows).await?;
    let keep = [("room_id", room_id)];
    let fields = Fields {
        room: false,
        status: true,
    };
    Ok(markup! {
        (pages::room_form(room_id))
        (search_pages::search_form("/console/rooms", form, fields, &keep))
        p {
            "Room " (html::room_link(room_id)) ": newest events first, page by page, each page in commit order. "
            "Per group: when it applied the event (and how long after commit and publish), "
            "pending, or not consumed by design (the group does not handle that type)."
        }
        (search_pages::timeline_table(&page.rows, &columns, &applied, console.config.trace_url.as_ref()))
        (search_pages::page_footer("/console/rooms", form, &keep, &page, "events"))
    })
}
