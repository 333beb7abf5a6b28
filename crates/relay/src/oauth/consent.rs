//! The consent page: one HTML form that names the client, where it will be sent back, the MCP
//! resource and what each role allows, and signs the account in and approves in one POST. It
//! works without JavaScript, cannot be framed (`frame-ancestors 'none'`, `X-Frame-Options`),
//! loads nothing (`default-src 'none'`), and is never cached.

use axum::{
    http::{HeaderValue, StatusCode, header},
    response::{Html, IntoResponse, Response},
};

use crate::auth::Role;

/// Escapes text for HTML element content and double-quoted attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// What the consent page shows.
#[derive(Debug, Clone)]
pub struct View<'a> {
    /// The client's name as shown to people.
    pub client: &'a str,
    /// Host (or scheme, for an app's own scheme) of the redirect URI.
    pub redirect_host: &'a str,
    /// The MCP URL (or the relay, for a grant on every URL of the bridge).
    pub resource: &'a str,
    /// The bridge, when the resource names one; else the page asks for it.
    pub bridge: Option<&'a str>,
    /// The signed authorization request the form carries back.
    pub request: &'a str,
    /// The account name to fill in again after a failed attempt.
    pub account: &'a str,
    /// A problem with the last attempt.
    pub error: Option<&'a str>,
}

const STYLE: &str = "body{font:16px/1.5 system-ui,sans-serif;max-width:34rem;margin:2rem auto;padding:0 1rem;color:#1b1b1b}\
h1{font-size:1.35rem}code{overflow-wrap:anywhere;background:#f2f2f2;padding:0 .2rem}\
table{border-collapse:collapse;margin:.5rem 0 1rem;font-size:.9rem}td{padding:.2rem .5rem;border-top:1px solid #ddd;vertical-align:top}\
label{display:block;margin:.6rem 0 .2rem;font-weight:600}input[type=text],input[type=password]{width:100%;padding:.45rem;font:inherit;box-sizing:border-box}\
.error{background:#fde8e8;border:1px solid #e0a0a0;padding:.5rem .75rem}.buttons{margin-top:1.2rem;display:flex;gap:.75rem}\
button{font:inherit;padding:.5rem 1.2rem;cursor:pointer}button.allow{background:#1a5fb4;color:#fff;border:1px solid #1a5fb4}\
.small{color:#555;font-size:.85rem}";

fn headers(status: StatusCode, body: String) -> Response {
    let mut r = (status, Html(body)).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Not `no-referrer`: under it browsers send `Origin: null` on the form's own POST, which
    // the same-origin check cannot tell from a foreign page's. The redirect to the client still
    // carries no Referer (it is cross-origin).
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// The consent page with `status` (200, or 401/403/429 after a failed attempt).
pub fn page(view: &View<'_>, status: StatusCode) -> Response {
    let client = escape(view.client);
    let roles: String = Role::ALL
        .iter()
        .map(|r| {
            format!(
                "<tr><td><b>{}</b></td><td>{}</td></tr>",
                r.as_str(),
                escape(r.allows())
            )
        })
        .collect();
    let error = view
        .error
        .map(|e| format!("<p class=\"error\" role=\"alert\">{}</p>", escape(e)))
        .unwrap_or_default();
    let bridge = match view.bridge {
        Some(b) => format!("<p>Sign in with an account of bridge <b>{}</b>.</p>", escape(b)),
        None => "<label for=\"bridge\">Bridge</label><input type=\"text\" id=\"bridge\" name=\"bridge\" required autocomplete=\"off\">".to_owned(),
    };
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>Allow {client}? — machine-mcp</title><style>{STYLE}</style></head><body>\
<h1>Allow <bdi id=\"client\">{client}</bdi> to use this machine?</h1>{error}\
<p>It asks for access to <code id=\"resource\">{resource}</code>. After you sign in you are sent back to \
<b id=\"redirect-host\">{redirect}</b>.</p>\
<p>It will act with your account's role. What each role allows:</p><table>{roles}</table>\
<form method=\"post\" action=\"{action}\">\
<input type=\"hidden\" name=\"request\" value=\"{request}\">{bridge}\
<label for=\"account\">Account name</label>\
<input type=\"text\" id=\"account\" name=\"account\" value=\"{account}\" required autocomplete=\"username\" autocapitalize=\"none\">\
<label for=\"password\">Password</label>\
<input type=\"password\" id=\"password\" name=\"password\" required autocomplete=\"current-password\">\
<div class=\"buttons\"><button class=\"allow\" type=\"submit\" name=\"action\" value=\"approve\">Allow</button>\
<button type=\"submit\" name=\"action\" value=\"deny\" formnovalidate>Deny</button></div></form>\
<p class=\"small\">Only approve if you started this from {client}. You can revoke access at any time \
with <code>machine-mcp relay client revoke</code>.</p></body></html>",
        resource = escape(view.resource),
        redirect = escape(view.redirect_host),
        action = super::resource::AUTHORIZE_PATH,
        request = escape(view.request),
        account = escape(view.account),
    );
    headers(status, body)
}

/// A page that explains why the request cannot go on (no redirect: the client or redirect URI
/// could not be trusted, RFC 6749 §4.1.2.1).
pub fn error_page(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Cannot sign in — machine-mcp</title>\
<style>{STYLE}</style></head><body><h1>This sign-in request cannot be completed</h1>\
<p class=\"error\" role=\"alert\">{}</p><p>Start again from the application that sent you here.</p></body></html>",
        escape(message)
    );
    headers(status, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_for_html() {
        assert_eq!(
            escape("<a href=\"x\">'&'</a>\u{7}"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt; "
        );
    }

    #[tokio::test]
    async fn the_page_cannot_be_framed_or_cached_and_escapes_the_client_name() {
        let r = page(
            &View {
                client: "<script>x</script>",
                redirect_host: "claude.ai",
                resource: "https://r.example/b/x/mcp",
                bridge: Some("x"),
                request: "abc",
                account: "",
                error: None,
            },
            StatusCode::OK,
        );
        let csp = r.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(csp.contains("frame-ancestors 'none'"));
        assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
        let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        let body = String::from_utf8(body.to_vec()).unwrap();
        assert!(!body.contains("<script>"));
        assert!(body.contains("name=\"request\" value=\"abc\""));
        assert!(body.contains("name=\"password\""));
    }
}
