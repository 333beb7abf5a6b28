//! `/oauth/authorize`: the authorization endpoint (OAuth 2.1 §4.1.1; MCP Basic › Authorization).
//!
//! `GET` validates the request and renders the consent page ([`super::consent`]); `POST` signs
//! the account in and, on approval, redirects (303) to the client with `code`, `state` and `iss`
//! (RFC 9207). Errors about the client or its redirect URI are shown on a page (nothing can be
//! trusted to redirect to, RFC 6749 §4.1.2.1); every other error is redirected with `error`.
//!
//! Rules: PKCE with S256 only (RFC 7636 §4.2; `plain` refused); the redirect URI matches a
//! registered one exactly, except for the port of a loopback redirect (RFC 8252 §7.3); one
//! `resource` (RFC 8707) per grant, an MCP URL of this relay or the relay itself; an omitted
//! `scope` gets `mcp`; `dpop_jkt` (RFC 9449 §10) binds the code to a DPoP key.
//!
//! The open request travels in the form, signed with the store's form key and bound to a
//! browser cookie (so a form posted from another site, or another browser, is refused); the
//! relay keeps no state for a page until it is approved. Failed sign-ins count per account and
//! per client address ([`crate::limits::SIGN_IN_FAILURES_PER_ACCOUNT`],
//! [`crate::limits::SIGN_IN_FAILURES_PER_ADDRESS`]); passwords are checked off the async
//! threads, a bounded number at a time.

use std::{net::SocketAddr, sync::Arc};

use axum::{
    extract::{ConnectInfo, RawQuery, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::{
    OAuth, OAuthError, client_address,
    clients::{self, Client},
    consent::{self, View},
    form::Form,
    password,
    resource::{self, Target},
};
use crate::limits::{
    AUTHORIZATION_CODE_LIFETIME, CONSENT_FORM_LIFETIME, OAUTH_FORM_MAX_BYTES,
    OAUTH_PARAM_MAX_BYTES, SIGN_IN_FAILURES_PER_ACCOUNT, SIGN_IN_FAILURES_PER_ADDRESS,
};
use crate::{
    auth::{random_secret, sha256_hex},
    storage::{
        now,
        oauth::{ClientKind, NewCode},
    },
};

/// The cookie that binds a consent form to the browser that loaded it: a fresh random value set
/// with every new form (never one the browser brought), `HttpOnly`, `SameSite=Strict`, scoped
/// to the authorize path, `Secure` whenever the public URL is https.
const COOKIE: &str = "mb_consent";

/// An authorization request that passed every check, as the form carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Pending {
    client_id: String,
    redirect_uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    state: Option<String>,
    code_challenge: String,
    resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bridge: Option<String>,
    scope: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dpop_jkt: Option<String>,
    /// The browser cookie this form belongs to.
    browser: String,
    /// Unix seconds after which the form is refused.
    expires: i64,
}

impl OAuth {
    fn sign(&self, payload: &str) -> String {
        let Ok(mut m) = Hmac::<Sha256>::new_from_slice(&self.form_key) else {
            return String::new();
        };
        m.update(payload.as_bytes());
        URL_SAFE_NO_PAD.encode(m.finalize().into_bytes())
    }

    fn seal(&self, p: &Pending) -> String {
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(p).unwrap_or_default());
        let sig = self.sign(&payload);
        format!("{payload}.{sig}")
    }

    fn unseal(&self, sealed: &str, browser: Option<&str>) -> Option<Pending> {
        let (payload, sig) = sealed.split_once('.')?;
        let expected = self.sign(payload);
        if !bool::from(expected.as_bytes().ct_eq(sig.as_bytes())) {
            return None;
        }
        let p: Pending = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
        let same_browser =
            browser.is_some_and(|b| bool::from(b.as_bytes().ct_eq(p.browser.as_bytes())));
        (p.expires > now() && same_browser).then_some(p)
    }
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .filter(|v| {
            v.len() == 43
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The redirect (303) to the client: `redirect_uri` with `params` added to its query.
fn redirect(redirect_uri: &str, params: &[(&str, &str)]) -> Response {
    let Ok(mut u) = url::Url::parse(redirect_uri) else {
        return consent::error_page(StatusCode::BAD_REQUEST, "the redirect URI is not a URL");
    };
    {
        let mut q = u.query_pairs_mut();
        for (k, v) in params {
            q.append_pair(k, v);
        }
    }
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(u.as_str()) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// An error redirect (RFC 6749 §4.1.2.1) with `state` and `iss` (RFC 9207 §2: error responses
/// too).
fn redirect_error(
    oauth: &OAuth,
    redirect_uri: &str,
    state: Option<&str>,
    error: &str,
    description: &str,
) -> Response {
    let iss = resource::issuer(&oauth.config);
    let mut params = vec![("error", error), ("error_description", description)];
    if let Some(s) = state {
        params.push(("state", s));
    }
    params.push(("iss", iss.as_str()));
    redirect(redirect_uri, &params)
}

/// Whether `c` is a valid S256 code challenge: 43 base64url characters (RFC 7636 §4.2).
fn valid_challenge(c: &str) -> bool {
    c.len() == 43
        && c.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The granted scope for a requested one: the relay's scopes that were asked for, `mcp` when
/// none was asked for (or none of them is the relay's: unknown scopes are ignored, RFC 6749
/// §3.3), and `mcp` always.
pub fn granted_scope(requested: Option<&str>) -> String {
    let asked: Vec<&str> = requested.unwrap_or("").split(' ').collect();
    let mut granted = vec![resource::SCOPE_MCP];
    if asked.contains(&resource::SCOPE_OFFLINE) {
        granted.push(resource::SCOPE_OFFLINE);
    }
    granted.join(" ")
}

/// Where the redirect URI sends the browser, for the consent page: its host (with a port that
/// is not the scheme's default, except on loopback hosts, where the port is the client's own
/// and may change, RFC 8252 §7.3), or `scheme:` for an app's own scheme.
fn redirect_host(uri: &str) -> String {
    let Ok(u) = url::Url::parse(uri) else {
        return String::new();
    };
    let web = matches!(u.scheme(), "http" | "https");
    match (u.host_str(), u.port()) {
        (None, _) => format!("{}:", u.scheme()),
        (Some(h), _) if !web => format!("{}://{h}", u.scheme()),
        (Some(h), Some(p)) if !clients::is_loopback_host(&u) => format!("{h}:{p}"),
        (Some(h), _) => h.to_owned(),
    }
}

/// Validated request: the client and the pending authorization, or the response that refuses it.
async fn validate(
    oauth: &OAuth,
    form: &Form,
    address: &str,
    browser: &str,
) -> Result<(Client, Pending), Response> {
    let page_err = |m: &str| consent::error_page(StatusCode::BAD_REQUEST, m);
    let Some(client_id) = form.get("client_id") else {
        return Err(page_err("the request has no client_id"));
    };
    let client = clients::find(oauth, client_id, address)
        .await
        .map_err(|e| consent::error_page(e.status, &e.description))?;
    let redirect_uri = match form.get("redirect_uri") {
        Some(r) => r.to_owned(),
        None if client.metadata.redirect_uris.len() == 1 => {
            client.metadata.redirect_uris[0].clone()
        }
        None => return Err(page_err("the request has no redirect_uri")),
    };
    if client.redirect_uri(&redirect_uri).is_none() {
        return Err(page_err(&format!(
            "the redirect URI {redirect_uri} is not one that {} registered",
            client.display_name()
        )));
    }
    let state = form.get("state");
    let fail = |error: &str, description: &str| {
        redirect_error(oauth, &redirect_uri, state, error, description)
    };
    match form.get("response_type") {
        Some("code") => {}
        Some(_) => {
            return Err(fail(
                "unsupported_response_type",
                "only response_type=code is supported",
            ));
        }
        None => return Err(fail("invalid_request", "response_type is required")),
    }
    let Some(challenge) = form.get("code_challenge") else {
        return Err(fail(
            "invalid_request",
            "PKCE is required: send code_challenge with code_challenge_method=S256",
        ));
    };
    if form.get("code_challenge_method") != Some("S256") {
        return Err(fail(
            "invalid_request",
            "code_challenge_method must be S256",
        ));
    }
    if !valid_challenge(challenge) {
        return Err(fail(
            "invalid_request",
            "code_challenge must be 43 base64url characters (S256)",
        ));
    }
    let target = match form.get("resource") {
        None => Target::Relay,
        Some(r) => match resource::parse(&oauth.config, r) {
            Some(t) => t,
            None => {
                return Err(fail(
                    "invalid_target",
                    "resource must be an MCP URL of this relay (RFC 8707)",
                ));
            }
        },
    };
    let bridge = match &target {
        Target::Endpoint { bridge, .. } => Some(bridge.clone()),
        Target::Relay => None,
    };
    let dpop_jkt = form.get("dpop_jkt").map(str::to_owned);
    if dpop_jkt.as_ref().is_some_and(|j| j.len() != 43) {
        return Err(fail(
            "invalid_request",
            "dpop_jkt must be a base64url SHA-256 JWK thumbprint",
        ));
    }
    Ok((
        client,
        Pending {
            client_id: client_id.to_owned(),
            redirect_uri,
            state: state.map(str::to_owned),
            code_challenge: challenge.to_owned(),
            resource: resource::resource(&oauth.config, &target),
            bridge,
            scope: granted_scope(form.get("scope")),
            dpop_jkt,
            browser: browser.to_owned(),
            expires: now() + CONSENT_FORM_LIFETIME.as_secs() as i64,
        },
    ))
}

fn view<'a>(
    client: &'a str,
    p: &'a Pending,
    sealed: &'a str,
    account: &'a str,
    error: Option<&'a str>,
    redirect_host: &'a str,
) -> View<'a> {
    View {
        client,
        redirect_host,
        resource: &p.resource,
        bridge: p.bridge.as_deref(),
        request: sealed,
        account,
        error,
    }
}

/// `GET /oauth/authorize`: validates the request and renders the consent page.
pub async fn show(
    State(oauth): State<Arc<OAuth>>,
    connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let address = client_address(
        &oauth.config.trusted_proxies,
        connect.as_ref().map(|c| &c.0),
        &headers,
    );
    let form = match Form::parse(
        query.unwrap_or_default().as_bytes(),
        OAUTH_PARAM_MAX_BYTES,
        &[],
        0,
    ) {
        Ok(f) => f,
        Err(e) => {
            return consent::error_page(
                StatusCode::BAD_REQUEST,
                &format!("the authorization request is malformed: {e}"),
            );
        }
    };
    // A fresh value for every new form, whatever the browser carries: a value planted by
    // another site (fixation) must never be the one the form is bound to.
    let browser = random_secret("");
    let (client, pending) = match validate(&oauth, &form, &address, &browser).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let sealed = oauth.seal(&pending);
    let name = client.display_name();
    let host = redirect_host(&pending.redirect_uri);
    let mut r = consent::page(
        &view(&name, &pending, &sealed, "", None, &host),
        StatusCode::OK,
    );
    let secure = if oauth.config.public_url.scheme() == "https" {
        "; Secure"
    } else {
        ""
    };
    let c = format!(
        "{COOKIE}={browser}; Path={}; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        resource::AUTHORIZE_PATH,
        CONSENT_FORM_LIFETIME.as_secs()
    );
    if let Ok(v) = HeaderValue::from_str(&c) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// Whether a form POST comes from the relay's own page: no `Origin`, or the relay's origin
/// (loopback aliases of it on a loopback listener), and not a cross-site fetch. `Origin: null`
/// (what a browser sends under a strict referrer policy, or from a privacy-sensitive context)
/// passes only with `Sec-Fetch-Site: same-origin` (Fetch Metadata, which pages cannot forge).
fn same_origin(oauth: &OAuth, headers: &HeaderMap) -> bool {
    let site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if matches!(site, Some("cross-site" | "same-site")) {
        return false;
    }
    match headers.get(header::ORIGIN).map(|v| v.to_str()) {
        None => true,
        Some(Ok("null")) => site == Some("same-origin"),
        Some(Ok(o)) => crate::origin::own_origin(&oauth.config, o),
        Some(Err(_)) => false,
    }
}

/// `POST /oauth/authorize`: the consent form. Signs the account in and redirects with a code
/// (approve) or `access_denied` (deny); a failed sign-in shows the page again with the reason.
pub async fn approve(
    State(oauth): State<Arc<OAuth>>,
    connect: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let address = client_address(
        &oauth.config.trusted_proxies,
        connect.as_ref().map(|c| &c.0),
        &headers,
    );

    if !super::content_type_is(&headers, "application/x-www-form-urlencoded") {
        return consent::error_page(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the form must be sent as application/x-www-form-urlencoded",
        );
    }
    if !same_origin(&oauth, &headers) {
        return consent::error_page(StatusCode::FORBIDDEN, "the form was sent from another site");
    }
    let body = match crate::server::read_body(body, OAUTH_FORM_MAX_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            let status = OAuthError::from(e.clone()).status;
            return consent::error_page(status, &e.to_string());
        }
    };
    let form = match Form::parse(
        &body,
        OAUTH_PARAM_MAX_BYTES,
        &["request"],
        OAUTH_FORM_MAX_BYTES,
    ) {
        Ok(f) => f,
        Err(e) => {
            return consent::error_page(
                StatusCode::BAD_REQUEST,
                &format!("the form is malformed: {e}"),
            );
        }
    };
    let Some(pending) = form
        .get("request")
        .and_then(|r| oauth.unseal(r, cookie(&headers, COOKIE)))
    else {
        return consent::error_page(
            StatusCode::BAD_REQUEST,
            "this sign-in page has expired, was opened in another browser, or the relay restarted since it was opened",
        );
    };
    let client = match clients::find(&oauth, &pending.client_id, &address).await {
        Ok(c) if c.redirect_uri(&pending.redirect_uri).is_some() => c,
        Ok(_) => {
            return consent::error_page(
                StatusCode::BAD_REQUEST,
                "the client no longer lists this redirect URI",
            );
        }
        Err(e) => return consent::error_page(e.status, &e.description),
    };
    let state = pending.state.as_deref();
    if form.get("action") != Some("approve") {
        return redirect_error(
            &oauth,
            &pending.redirect_uri,
            state,
            "access_denied",
            "the user denied the request",
        );
    }
    let name = client.display_name();
    let host = redirect_host(&pending.redirect_uri);
    let sealed = form.get("request").unwrap_or_default();
    let account = form.get("account").unwrap_or_default().trim();
    let again = |status: StatusCode, error: &str| {
        consent::page(
            &view(&name, &pending, sealed, account, Some(error), &host),
            status,
        )
    };
    let Some(bridge) = pending.bridge.as_deref().or(form.get("bridge")) else {
        return again(StatusCode::BAD_REQUEST, "Enter the bridge to sign in to.");
    };
    let (Some(password), false) = (form.get("password"), account.is_empty()) else {
        return again(
            StatusCode::BAD_REQUEST,
            "Enter the account name and its password.",
        );
    };
    let found = match oauth
        .store
        .accounts()
        .account_with_password(bridge, account)
        .await
    {
        Ok(f) => f,
        Err(e) => return OAuthError::from(e).into_response(),
    };
    // Failures count against the account at its version, so a new password (or role) starts
    // afresh; an unknown name counts against the name. Each attempt is counted before its
    // password is checked, so parallel guesses cannot all pass the check.
    let account_key = match &found {
        Some((a, _)) => format!("account {}.v{}", a.id, a.version),
        None => format!("account {bridge}/{}", account.to_lowercase()),
    };
    let address_key = format!("address {address}");
    let guards = oauth.store.guards();
    let taken = match guards
        .take(&account_key, SIGN_IN_FAILURES_PER_ACCOUNT)
        .await
    {
        Ok(()) => {
            let by_address = guards
                .take(&address_key, SIGN_IN_FAILURES_PER_ADDRESS)
                .await;
            if by_address.is_err() {
                guards.forgive(&account_key).await;
            }
            by_address
        }
        refused => refused,
    };
    if let Err(wait) = taken {
        return again(
            StatusCode::TOO_MANY_REQUESTS,
            &format!(
                "Too many failed sign-ins. Try again in {} minutes.",
                wait.as_secs().div_ceil(60)
            ),
        );
    }
    let ok = {
        let Ok(_permit) = oauth.password_checks.acquire().await else {
            return OAuthError::unavailable().into_response();
        };
        let stored = found.as_ref().map(|(_, h)| h.clone());
        let password = password.to_owned();
        tokio::task::spawn_blocking(move || password::verify(&password, stored.as_deref()))
            .await
            .unwrap_or(false)
    };
    let Some((account_row, _)) = found.filter(|_| ok) else {
        tracing::info!(bridge, "a sign-in on the consent page failed");
        return again(StatusCode::UNAUTHORIZED, "Wrong account name or password.");
    };
    guards.clear(&account_key).await;
    guards.forgive(&address_key).await;
    if account_row.disabled {
        return again(StatusCode::FORBIDDEN, "This account is disabled.");
    }
    if client.kind == ClientKind::Document
        && let Err(e) = clients::remember_document(&oauth, &client).await
    {
        return e.into_response();
    }
    let code = random_secret("mbk_");
    let record = NewCode {
        code_hash: sha256_hex(&code),
        client_id: client.id.clone(),
        account_id: account_row.id.clone(),
        account_version: account_row.version,
        redirect_uri: pending.redirect_uri.clone(),
        code_challenge: pending.code_challenge.clone(),
        resource: pending.resource.clone(),
        scope: pending.scope.clone(),
        dpop_jkt: pending.dpop_jkt.clone(),
        expires_at: now() + AUTHORIZATION_CODE_LIFETIME.as_secs() as i64,
    };
    if let Err(e) = oauth.store.oauth().insert_code(&record).await {
        return OAuthError::from(e).into_response();
    }
    let _ = oauth.store.oauth().touch_client(&client.id).await;
    tracing::info!(client = %client.id, bridge, account = %account_row.name, "an OAuth grant was approved");
    let iss = resource::issuer(&oauth.config);
    let mut params = vec![("code", code.as_str())];
    if let Some(s) = state {
        params.push(("state", s));
    }
    params.push(("iss", iss.as_str()));
    redirect(&pending.redirect_uri, &params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_default_to_mcp_and_unknown_ones_are_ignored() {
        assert_eq!(granted_scope(None), "mcp");
        assert_eq!(granted_scope(Some("openid profile")), "mcp");
        assert_eq!(
            granted_scope(Some("mcp offline_access")),
            "mcp offline_access"
        );
    }

    #[tokio::test]
    async fn a_sealed_form_opens_only_unchanged_in_its_browser_and_in_time() {
        let store = crate::storage::memory().await.unwrap();
        let config = Arc::new(crate::config::RelayConfig::for_tests());
        let with_key = |key| OAuth::new(config.clone(), store.clone(), key);
        let o = with_key([1; 32]);
        let p = Pending {
            client_id: "c".into(),
            redirect_uri: "http://127.0.0.1/cb".into(),
            state: None,
            code_challenge: "x".repeat(43),
            resource: "r".into(),
            bridge: None,
            scope: "mcp".into(),
            dpop_jkt: None,
            browser: "b".repeat(43),
            expires: now() + 60,
        };
        let sealed = o.seal(&p);
        assert_eq!(o.unseal(&sealed, Some(&"b".repeat(43))), Some(p.clone()));
        assert_eq!(
            o.unseal(&sealed, Some(&"c".repeat(43))),
            None,
            "another browser"
        );
        assert_eq!(o.unseal(&sealed, None), None);
        let (payload, _) = sealed.split_once('.').unwrap();
        assert_eq!(
            o.unseal(&format!("{payload}.AAAA"), Some(&"b".repeat(43))),
            None
        );
        let expired = o.seal(&Pending {
            expires: now() - 1,
            ..p.clone()
        });
        assert_eq!(o.unseal(&expired, Some(&"b".repeat(43))), None);
        assert_eq!(
            with_key([2; 32]).unseal(&sealed, Some(&"b".repeat(43))),
            None,
            "another store's key"
        );
        assert_eq!(
            with_key([1; 32]).unseal(&sealed, Some(&"b".repeat(43))),
            Some(p.clone()),
            "another process on the same store"
        );
    }

    #[test]
    fn the_page_names_where_the_redirect_goes() {
        assert_eq!(
            redirect_host("https://claude.ai/api/mcp/auth_callback"),
            "claude.ai"
        );
        assert_eq!(
            redirect_host("https://app.example:8443/cb"),
            "app.example:8443"
        );
        assert_eq!(redirect_host("http://127.0.0.1:33418/"), "127.0.0.1");
        assert_eq!(
            redirect_host("cursor://anysphere.cursor-mcp/oauth"),
            "cursor://anysphere.cursor-mcp"
        );
        assert_eq!(redirect_host("com.example.app:/cb"), "com.example.app:");
    }

    #[test]
    fn redirect_params_are_appended_to_the_query() {
        let r = redirect(
            "https://c.example/cb?x=1",
            &[("code", "a b"), ("iss", "https://r")],
        );
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert_eq!(
            r.headers()[header::LOCATION],
            "https://c.example/cb?x=1&code=a+b&iss=https%3A%2F%2Fr"
        );
    }
}
