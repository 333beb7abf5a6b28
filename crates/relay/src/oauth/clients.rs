//! OAuth clients: the metadata the relay keeps (RFC 7591 §2), how it is validated for a dynamic
//! registration or a client ID metadata document, redirect URI matching (RFC 8252 §7.3), and
//! client authentication at the token and revocation endpoints (RFC 6749 §2.3, RFC 7523 §2.2).

use axum::http::{HeaderMap, header};
use base64::{Engine, engine::general_purpose::STANDARD};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use subtle::ConstantTimeEq;

use super::{OAuthError, form::Form, resource};
use crate::{
    auth::sha256_hex,
    storage::oauth::{ClientKind, ClientRecord},
};
use crate::{limits::CLIENT_REDIRECT_URIS_MAX, limits::OAUTH_PARAM_MAX_BYTES};

/// How a client authenticates at the token endpoint (RFC 7591 §2 `token_endpoint_auth_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthMethod {
    /// A public client: `client_id` only; PKCE protects the code.
    None,
    /// The secret in the form body.
    ClientSecretPost,
    /// The secret in HTTP Basic.
    ClientSecretBasic,
    /// A JWT signed with a key of the client's JWK Set (RFC 7523 §2.2).
    PrivateKeyJwt,
}

impl AuthMethod {
    /// Every method, as the authorization server metadata lists them.
    pub const ALL: [AuthMethod; 4] = [
        AuthMethod::None,
        AuthMethod::ClientSecretPost,
        AuthMethod::ClientSecretBasic,
        AuthMethod::PrivateKeyJwt,
    ];

    /// The registered name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::None => "none",
            AuthMethod::ClientSecretPost => "client_secret_post",
            AuthMethod::ClientSecretBasic => "client_secret_basic",
            AuthMethod::PrivateKeyJwt => "private_key_jwt",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// Whether the client holds a secret the relay issued.
    pub fn uses_secret(self) -> bool {
        matches!(
            self,
            AuthMethod::ClientSecretPost | AuthMethod::ClientSecretBasic
        )
    }
}

/// The grant types the relay issues tokens for.
pub const GRANT_TYPES: [&str; 2] = ["authorization_code", "refresh_token"];

/// What the relay keeps of a client's metadata; stored as JSON, with absent optional members
/// left out (no empty strings or nulls).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientMetadata {
    /// Redirect URIs, exactly as registered.
    pub redirect_uris: Vec<String>,
    /// The method the client declared.
    pub token_endpoint_auth_method: AuthMethod,
    /// Further methods a metadata document allows (a list some documents give beside the
    /// single declared method); the client may use any of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_auth_methods: Vec<AuthMethod>,
    /// Of [`GRANT_TYPES`], those the client asked for.
    pub grant_types: Vec<String>,
    /// Always `["code"]`.
    pub response_types: Vec<String>,
    /// Human-readable name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_name: Option<String>,
    /// The client's home page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_uri: Option<String>,
    /// The client's logo (shown on no page; kept for the listing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logo_uri: Option<String>,
    /// Of the relay's scopes, those asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// `web` or `native` (OpenID Connect Dynamic Client Registration §2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_type: Option<String>,
    /// The software's id and version as the client reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub software_id: Option<String>,
    /// See `software_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub software_version: Option<String>,
    /// Where the client's public keys are (for `private_key_jwt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_uri: Option<String>,
    /// The client's public keys inline (for `private_key_jwt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks: Option<Value>,
}

/// Whether `c` changes the direction of the text around it (Unicode bidirectional controls:
/// ALM, LRM, RLM, the embeddings, overrides and isolates); in a client's name on the consent page
/// it would rewrite the page's own text.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

fn text(v: &Value, key: &str, max_chars: usize) -> Option<String> {
    let s = v.get(key)?.as_str()?;
    let clean: String = s
        .chars()
        .filter(|c| !c.is_control() && !is_bidi_control(*c))
        .take(max_chars)
        .collect();
    let clean = clean.trim().to_owned();
    (!clean.is_empty()).then_some(clean)
}

fn metadata_error(description: impl Into<String>) -> OAuthError {
    OAuthError::bad("invalid_client_metadata", description)
}

/// `uri` parsed, when the parser keeps it as written (an empty path aside, which it writes `/`).
fn parse_unchanged(uri: &str) -> Result<url::Url, String> {
    let u = url::Url::parse(uri).map_err(|e| e.to_string())?;
    let kept = u.as_str() == uri
        || (u.path() == "/"
            && u.query().is_none()
            && u.fragment().is_none()
            && u.as_str().strip_suffix('/') == Some(uri));
    if kept {
        Ok(u)
    } else {
        Err(format!("the parser reads it as {:?}", u.as_str()))
    }
}

/// Whether `uri` may be a redirect URI: absolute, no fragment, not longer than the parameter
/// bound; `https`, `http` on a loopback host (RFC 8252 §7.3; `localhost` too, as real clients
/// use it), or a private-use scheme (RFC 8252 §7.1, e.g. `cursor://…`, `vscode://…`) — never a
/// scheme that runs or reads something in the browser. It must also be in the form the URL
/// parser keeps (no control characters, no case, port, dot-segment or percent-encoding the parser
/// would rewrite), so the browser is sent to exactly the registered string; the one spelling
/// allowed to differ is an empty path, which the browser requests as `/` anyway.
pub fn valid_redirect_uri(uri: &str) -> Result<url::Url, String> {
    if uri.len() > OAUTH_PARAM_MAX_BYTES {
        return Err(format!(
            "redirect URI longer than {OAUTH_PARAM_MAX_BYTES} bytes"
        ));
    }
    if uri.chars().any(char::is_control) {
        return Err(format!("redirect URI {uri:?} has control characters"));
    }
    let u = parse_unchanged(uri)
        .map_err(|e| format!("redirect URI {uri:?} is not a URL in normal form: {e}"))?;
    if u.fragment().is_some() {
        return Err(format!("redirect URI {uri:?} has a fragment"));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(format!("redirect URI {uri:?} carries credentials"));
    }
    if u.host_str().is_some_and(|h| h.contains('*')) {
        return Err(format!("redirect URI {uri:?} has a wildcard host"));
    }
    match u.scheme() {
        "https" if u.host().is_some() => Ok(u),
        "http" if is_loopback_host(&u) => Ok(u),
        "http" => Err(format!(
            "redirect URI {uri:?}: http is allowed only for loopback hosts (127.0.0.1, [::1], localhost)"
        )),
        "javascript" | "data" | "file" | "vbscript" | "about" | "blob" | "ftp" | "ws" | "wss" => {
            Err(format!("redirect URI {uri:?}: scheme not allowed"))
        }
        _ => Ok(u),
    }
}

/// Whether `u`'s host is a loopback name or address (`localhost`, 127.0.0.0/8, `::1`).
pub fn is_loopback_host(u: &url::Url) -> bool {
    match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// A registered `jwks_uri` must be an https URL whose host is not an address the relay would
/// refuse to fetch from anyway (loopback, private, link-local: [`super::document::is_public`]);
/// a name is checked when it is fetched. A client ID metadata document's is checked by the
/// fetcher, whose test switch may allow plain http.
fn check_jwks_uri(uri: &str, kind: ClientKind) -> Result<(), String> {
    let u = url::Url::parse(uri).map_err(|e| format!("jwks_uri {uri:?} is not a URL: {e}"))?;
    if kind == ClientKind::Document {
        return Ok(());
    }
    if u.scheme() != "https" {
        return Err(format!("jwks_uri {uri:?} must be an https URL"));
    }
    let ip = match u.host() {
        Some(url::Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
        Some(url::Host::Domain(d)) if d.eq_ignore_ascii_case("localhost") => {
            return Err(format!("jwks_uri {uri:?} names this machine"));
        }
        _ => None,
    };
    if ip.is_some_and(|ip| !super::document::is_public(ip)) {
        return Err(format!(
            "jwks_uri {uri:?} names a loopback, private or link-local address"
        ));
    }
    Ok(())
}

/// Whether the `requested` redirect URI matches the `registered` one: exactly, except that a
/// loopback `http` redirect may use any port (RFC 8252 §7.3).
pub fn redirect_matches(registered: &str, requested: &str) -> bool {
    if registered == requested {
        return true;
    }
    let (Ok(a), Ok(b)) = (url::Url::parse(registered), parse_unchanged(requested)) else {
        return false;
    };
    a.scheme() == "http"
        && b.scheme() == "http"
        && is_loopback_host(&a)
        && a.host() == b.host()
        && a.path() == b.path()
        && a.query() == b.query()
        && a.username() == b.username()
        && a.password().is_none()
        && b.password().is_none()
        && b.fragment().is_none()
}

impl ClientMetadata {
    /// Validates client metadata: an RFC 7591 registration request (`kind` Registered) or a
    /// fetched client ID metadata document (`kind` Document). Unknown members are ignored
    /// (RFC 7591 §3.1), unsupported grant types and scopes dropped, optional members kept only
    /// when they are non-empty strings.
    ///
    /// # Errors
    /// `invalid_redirect_uri` for a missing or unacceptable redirect URI; `invalid_client_metadata`
    /// for a body that is not an object, no `authorization_code` grant, a response type other
    /// than `code`, an unknown or (for a document) secret-based auth method, `private_key_jwt`
    /// without exactly one of `jwks`/`jwks_uri`, or a document carrying a `client_secret`.
    pub fn validate(v: &Value, kind: ClientKind) -> Result<Self, OAuthError> {
        if !v.is_object() {
            return Err(metadata_error("client metadata must be a JSON object"));
        }
        let uris = match v.get("redirect_uris") {
            Some(Value::Array(a)) if !a.is_empty() => a,
            _ => {
                return Err(OAuthError::bad(
                    "invalid_redirect_uri",
                    "redirect_uris must be a non-empty array of URIs",
                ));
            }
        };
        if uris.len() > CLIENT_REDIRECT_URIS_MAX {
            return Err(OAuthError::bad(
                "invalid_redirect_uri",
                format!("at most {CLIENT_REDIRECT_URIS_MAX} redirect URIs"),
            ));
        }
        let mut redirect_uris = Vec::new();
        for u in uris {
            let s = u.as_str().ok_or_else(|| {
                OAuthError::bad("invalid_redirect_uri", "redirect URIs are strings")
            })?;
            valid_redirect_uri(s).map_err(|e| OAuthError::bad("invalid_redirect_uri", e))?;
            if !redirect_uris.iter().any(|r| r == s) {
                redirect_uris.push(s.to_owned());
            }
        }
        let strings = |key: &str| -> Option<Vec<String>> {
            v.get(key)?.as_array().map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
        };
        let asked = strings("grant_types").unwrap_or_else(|| vec!["authorization_code".into()]);
        let grant_types: Vec<String> = GRANT_TYPES
            .iter()
            .filter(|g| asked.iter().any(|a| a == *g))
            .map(|g| (*g).to_owned())
            .collect();
        if !grant_types.iter().any(|g| g == "authorization_code") {
            return Err(metadata_error(
                "this relay issues tokens only through the authorization_code grant (with refresh_token)",
            ));
        }
        if let Some(rt) = strings("response_types")
            && !rt.iter().any(|r| r == "code")
        {
            return Err(metadata_error("response_types must include \"code\""));
        }
        let declared = match v.get("token_endpoint_auth_method") {
            None | Some(Value::Null) => match kind {
                // RFC 7591 §2's default; a document cannot hold a secret, so it means `none`.
                ClientKind::Registered => AuthMethod::ClientSecretBasic,
                ClientKind::Document => AuthMethod::None,
            },
            Some(Value::String(s)) => AuthMethod::parse(s).ok_or_else(|| {
                metadata_error(format!(
                    "token_endpoint_auth_method {s:?} is not supported (supported: none, client_secret_post, client_secret_basic, private_key_jwt)"
                ))
            })?,
            Some(_) => return Err(metadata_error("token_endpoint_auth_method must be a string")),
        };
        let other_auth_methods: Vec<AuthMethod> = match kind {
            ClientKind::Registered => Vec::new(),
            ClientKind::Document => strings("token_endpoint_auth_methods_supported")
                .unwrap_or_default()
                .iter()
                .filter_map(|m| AuthMethod::parse(m))
                .filter(|m| *m != declared && !m.uses_secret())
                .collect(),
        };
        if kind == ClientKind::Document {
            if declared.uses_secret() {
                return Err(metadata_error(
                    "a client ID metadata document cannot use a client secret",
                ));
            }
            if v.get("client_secret").is_some() || v.get("client_secret_expires_at").is_some() {
                return Err(metadata_error(
                    "a client ID metadata document must not contain a client_secret",
                ));
            }
        }
        let jwks_uri = text(v, "jwks_uri", OAUTH_PARAM_MAX_BYTES);
        let jwks = v.get("jwks").filter(|j| j.is_object()).cloned();
        let needs_keys = declared == AuthMethod::PrivateKeyJwt
            || other_auth_methods.contains(&AuthMethod::PrivateKeyJwt);
        if needs_keys && jwks_uri.is_some() == jwks.is_some() {
            return Err(metadata_error(
                "private_key_jwt needs exactly one of jwks and jwks_uri",
            ));
        }
        if let Some(u) = &jwks_uri
            && let Err(why) = check_jwks_uri(u, kind)
        {
            return Err(metadata_error(why));
        }
        let scope = v.get("scope").and_then(Value::as_str).and_then(|s| {
            let kept: Vec<&str> = s
                .split(' ')
                .filter(|x| *x == resource::SCOPE_MCP || *x == resource::SCOPE_OFFLINE)
                .collect();
            (!kept.is_empty()).then(|| kept.join(" "))
        });
        let application_type =
            text(v, "application_type", 16).filter(|t| t == "web" || t == "native");
        Ok(Self {
            redirect_uris,
            token_endpoint_auth_method: declared,
            other_auth_methods,
            grant_types,
            response_types: vec!["code".into()],
            client_name: text(v, "client_name", 200),
            client_uri: text(v, "client_uri", OAUTH_PARAM_MAX_BYTES)
                .filter(|u| u.starts_with("https://") || u.starts_with("http://")),
            logo_uri: text(v, "logo_uri", OAUTH_PARAM_MAX_BYTES)
                .filter(|u| u.starts_with("https://")),
            scope,
            application_type,
            software_id: text(v, "software_id", 200),
            software_version: text(v, "software_version", 100),
            jwks_uri: if needs_keys { jwks_uri } else { None },
            jwks: if needs_keys { jwks } else { None },
        })
    }

    /// Whether the client may use `method` at the token endpoint.
    pub fn allows(&self, method: AuthMethod) -> bool {
        self.token_endpoint_auth_method == method || self.other_auth_methods.contains(&method)
    }

    /// Whether the client asked for refresh tokens.
    pub fn wants_refresh_tokens(&self) -> bool {
        self.grant_types.iter().any(|g| g == "refresh_token")
    }
}

/// A client the relay knows, as the endpoints use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// The client id.
    pub id: String,
    /// Registered or metadata document.
    pub kind: ClientKind,
    /// Its metadata.
    pub metadata: ClientMetadata,
    /// SHA-256 of its secret, for secret-based methods.
    pub secret_hash: Option<String>,
}

impl Client {
    /// The client of a stored record.
    ///
    /// # Errors
    /// Stored metadata this build cannot read.
    pub fn from_record(r: &ClientRecord) -> Result<Self, OAuthError> {
        let metadata: ClientMetadata = serde_json::from_str(&r.metadata).map_err(|e| {
            tracing::warn!(client = %r.client_id, error = %e, "stored client metadata is unreadable");
            OAuthError::unavailable()
        })?;
        Ok(Self {
            id: r.client_id.clone(),
            kind: r.kind,
            metadata,
            secret_hash: r.secret_hash.clone(),
        })
    }

    /// The name to show people: the registered name, and for a metadata document the host
    /// that vouches for it.
    pub fn display_name(&self) -> String {
        let name = self.metadata.client_name.clone();
        match self.kind {
            ClientKind::Document => {
                let host = url::Url::parse(&self.id)
                    .ok()
                    .and_then(|u| u.host_str().map(str::to_owned))
                    .unwrap_or_default();
                match name {
                    Some(n) => format!("{n} ({host})"),
                    None => host,
                }
            }
            ClientKind::Registered => name.unwrap_or_else(|| "an unnamed application".into()),
        }
    }

    /// The registered redirect URI that `requested` matches, if any.
    pub fn redirect_uri(&self, requested: &str) -> Option<&str> {
        self.metadata
            .redirect_uris
            .iter()
            .find(|r| redirect_matches(r, requested))
            .map(String::as_str)
    }
}

/// How a token or revocation request authenticated its client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presented {
    /// `client_id` only.
    None(String),
    /// `client_id` and `client_secret` in the body.
    SecretPost(String, String),
    /// HTTP Basic.
    SecretBasic(String, String),
    /// A client assertion (RFC 7523 §2.2); the client id comes from the form or the assertion.
    Assertion(Option<String>, String),
}

/// The JWT bearer assertion type (RFC 7523 §2.2).
pub const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

impl Presented {
    /// Reads the client authentication of a request (RFC 6749 §2.3: exactly one method).
    ///
    /// # Errors
    /// `invalid_request` for several methods at once, a malformed Basic header, an unknown
    /// assertion type, or no client id at all.
    pub fn read(headers: &HeaderMap, form: &Form) -> Result<Self, OAuthError> {
        let basic = match headers.get(header::AUTHORIZATION).map(|v| v.to_str()) {
            None => None,
            Some(Ok(v)) => match v.split_once(' ') {
                Some((scheme, creds)) if scheme.eq_ignore_ascii_case("basic") => {
                    Some(parse_basic(creds.trim())?)
                }
                _ => None,
            },
            Some(Err(_)) => return Err(OAuthError::invalid_request("Authorization is not ASCII")),
        };
        let secret = form.get("client_secret");
        let assertion = form.get("client_assertion");
        let methods = usize::from(basic.is_some())
            + usize::from(secret.is_some())
            + usize::from(assertion.is_some());
        if methods > 1 {
            return Err(OAuthError::invalid_request(
                "use exactly one client authentication method (RFC 6749 §2.3)",
            ));
        }
        let id = form.get("client_id").map(str::to_owned);
        if let Some((bid, bsecret)) = basic {
            if id.as_ref().is_some_and(|i| *i != bid) {
                return Err(OAuthError::invalid_request(
                    "client_id differs from the HTTP Basic user",
                ));
            }
            return Ok(Presented::SecretBasic(bid, bsecret));
        }
        if let Some(a) = assertion {
            if form.get("client_assertion_type") != Some(ASSERTION_TYPE) {
                return Err(OAuthError::invalid_request(format!(
                    "client_assertion_type must be {ASSERTION_TYPE}"
                )));
            }
            return Ok(Presented::Assertion(id, a.to_owned()));
        }
        let id = id.ok_or_else(|| OAuthError::invalid_client("client_id is required"))?;
        Ok(match secret {
            Some(s) => Presented::SecretPost(id, s.to_owned()),
            None => Presented::None(id),
        })
    }

    /// The method this is.
    pub fn method(&self) -> AuthMethod {
        match self {
            Presented::None(_) => AuthMethod::None,
            Presented::SecretPost(..) => AuthMethod::ClientSecretPost,
            Presented::SecretBasic(..) => AuthMethod::ClientSecretBasic,
            Presented::Assertion(..) => AuthMethod::PrivateKeyJwt,
        }
    }

    /// The client id it names, if it names one outside an assertion.
    pub fn client_id(&self) -> Option<&str> {
        match self {
            Presented::None(id) | Presented::SecretPost(id, _) | Presented::SecretBasic(id, _) => {
                Some(id)
            }
            Presented::Assertion(id, _) => id.as_deref(),
        }
    }

    /// Checks a presented secret against `client` (constant-time).
    pub fn secret_matches(&self, client: &Client) -> bool {
        let secret = match self {
            Presented::SecretPost(_, s) | Presented::SecretBasic(_, s) => s,
            _ => return false,
        };
        client
            .secret_hash
            .as_ref()
            .is_some_and(|h| bool::from(h.as_bytes().ct_eq(sha256_hex(secret).as_bytes())))
    }
}

/// HTTP Basic credentials of a client: base64 of `id:secret`, each form-urlencoded (RFC 6749
/// §2.3.1).
fn parse_basic(creds: &str) -> Result<(String, String), OAuthError> {
    let bad = || OAuthError::invalid_client("malformed HTTP Basic credentials");
    let raw = STANDARD.decode(creds).map_err(|_| bad())?;
    let raw = String::from_utf8(raw).map_err(|_| bad())?;
    let (id, secret) = raw.split_once(':').ok_or_else(bad)?;
    let dec = |s: &str| {
        let plus = s.replace('+', " ");
        percent_encoding::percent_decode_str(&plus)
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| bad())
    };
    Ok((dec(id)?, dec(secret)?))
}

/// Finds client `client_id`: a registered client from the store, or a client ID metadata
/// document — the stored one while it is fresh, else fetched ([`super::document::Fetcher`]),
/// validated, and (when the client already holds a grant here) stored again with its new
/// expiry. `address` is the requesting client address, for the fetch throttle.
///
/// # Errors
/// `invalid_client` (401) for an unknown, revoked or unfetchable client or an invalid document
/// (the message says which); 429 past [`crate::limits::CLIENT_METADATA_FETCHES_PER_ADDRESS`]
/// fetches from `address`; 503 when the store fails.
pub async fn find(
    oauth: &super::OAuth,
    client_id: &str,
    address: &str,
) -> Result<Client, OAuthError> {
    let stored = oauth.store.oauth().client(client_id).await?;
    if let Some(r) = &stored {
        if r.revoked {
            return Err(OAuthError::invalid_client(
                "this client was revoked on this relay",
            ));
        }
        let fresh = r
            .document_expires_at
            .is_none_or(|t| t > crate::storage::now());
        if r.kind == ClientKind::Registered || fresh {
            return Client::from_record(r);
        }
    }
    let fetcher = &oauth.fetcher;
    if !fetcher.is_document_url(client_id) {
        return Err(OAuthError::invalid_client(
            "unknown client_id: register again, or use an https client ID metadata document URL",
        ));
    }
    if fetcher.fresh_for(client_id).is_zero() {
        let key = format!("fetch {address}");
        let limit = crate::limits::CLIENT_METADATA_FETCHES_PER_ADDRESS;
        if oauth.store.guards().blocked(&key, limit).await.is_some() {
            return Err(OAuthError::invalid_client(
                "too many client metadata documents fetched for this address; try again later",
            )
            .with_status(axum::http::StatusCode::TOO_MANY_REQUESTS));
        }
        oauth.store.guards().record(&key).await;
    }
    let doc = fetcher
        .document(client_id)
        .await
        .map_err(|e| OAuthError::invalid_client(e.0))?;
    let metadata = ClientMetadata::validate(&doc, ClientKind::Document).map_err(|e| {
        OAuthError::invalid_client(format!(
            "the client ID metadata document is not acceptable: {}",
            e.description
        ))
    })?;
    let client = Client {
        id: client_id.to_owned(),
        kind: ClientKind::Document,
        metadata,
        secret_hash: None,
    };
    if stored.is_some() {
        remember_document(oauth, &client).await?;
    }
    Ok(client)
}

/// Stores the client of a metadata document (at its first grant, and after each fetch once it
/// holds one), valid for as long as the fetched document may be cached.
///
/// # Errors
/// 503 when the store fails.
pub async fn remember_document(oauth: &super::OAuth, client: &Client) -> Result<(), OAuthError> {
    let secs = oauth.fetcher.fresh_for(&client.id).as_secs() as i64;
    let metadata =
        serde_json::to_string(&client.metadata).map_err(|_| OAuthError::unavailable())?;
    oauth
        .store
        .oauth()
        .store_document_client(&client.id, &metadata, crate::storage::now() + secs)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Regression: a redirect URI with control characters, or one the URL parser
    /// rewrites, was registered and the browser later sent to the rewritten URL, not the
    /// registered string.
    #[test]
    fn redirect_uris_the_parser_would_change_are_refused_at_registration() {
        for uri in [
            "https://a.example/c\tb",
            "https://a.example/cb\n",
            "https://a.example/c\u{1}b",
            "https://a.example/c\u{7f}b",
            "https://A.example/cb",
            "https://a.example:443/cb",
            "https://a.example/x/../cb",
            "https://a.example/c b",
            "http://127.0.0.1:8/c\\b",
            "cursor://x/c\u{0}b",
        ] {
            let body = json!({"redirect_uris": [uri]});
            let e = ClientMetadata::validate(&body, ClientKind::Registered).unwrap_err();
            assert_eq!(e.error, "invalid_redirect_uri", "{uri:?}");
        }
        // An empty path is the only spelling kept: the browser requests `/` either way.
        for uri in [
            "http://127.0.0.1:33418",
            "https://a.example/cb?x=1",
            "cursor://x/cb",
        ] {
            let body = json!({"redirect_uris": [uri]});
            assert!(
                ClientMetadata::validate(&body, ClientKind::Registered).is_ok(),
                "{uri:?}"
            );
        }
        // A loopback request with another port is matched only in the form the parser keeps.
        assert!(!redirect_matches(
            "http://127.0.0.1/cb",
            "http://127.0.0.1:5/c\tb"
        ));
        assert!(!redirect_matches(
            "http://127.0.0.1/cb",
            "http://127.0.0.1:5/x/../cb"
        ));
    }

    #[test]
    fn registration_bodies_of_real_clients_are_accepted_and_trimmed() {
        // VS Code: several redirect URIs, a device code grant, no auth method → a secret.
        let vscode = json!({
            "client_name": "Visual Studio Code",
            "client_uri": "https://code.visualstudio.com",
            "grant_types": ["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"],
            "response_types": ["code"],
            "redirect_uris": ["https://insiders.vscode.dev/redirect", "https://vscode.dev/redirect",
                              "http://127.0.0.1/", "http://127.0.0.1:33418/"],
            "token_endpoint_auth_method": "none",
            "application_type": "native",
            "extra": {"anything": true}
        });
        let m = ClientMetadata::validate(&vscode, ClientKind::Registered).unwrap();
        assert_eq!(m.grant_types, ["authorization_code", "refresh_token"]);
        assert_eq!(m.redirect_uris.len(), 4);
        assert_eq!(m.token_endpoint_auth_method, AuthMethod::None);
        let stored = serde_json::to_value(&m).unwrap();
        assert!(stored.get("jwks").is_none() && stored.get("scope").is_none());
        // Claude: client_secret_post requested.
        let claude = json!({"client_name": "Claude", "redirect_uris": ["https://claude.ai/api/mcp/auth_callback"],
            "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_post", "scope": "mcp openid"});
        let m = ClientMetadata::validate(&claude, ClientKind::Registered).unwrap();
        assert_eq!(m.token_endpoint_auth_method, AuthMethod::ClientSecretPost);
        assert_eq!(m.scope.as_deref(), Some("mcp"));
        // No method: RFC 7591's default, client_secret_basic.
        let m = ClientMetadata::validate(
            &json!({"redirect_uris": ["http://localhost:9999/cb"], "client_name": ""}),
            ClientKind::Registered,
        )
        .unwrap();
        assert_eq!(m.token_endpoint_auth_method, AuthMethod::ClientSecretBasic);
        assert_eq!(m.client_name, None, "empty strings are not kept");
    }

    #[test]
    fn unacceptable_metadata_is_refused_with_the_registered_error() {
        for (body, error) in [
            (json!([1]), "invalid_client_metadata"),
            (json!({}), "invalid_redirect_uri"),
            (json!({"redirect_uris": []}), "invalid_redirect_uri"),
            (
                json!({"redirect_uris": ["http://evil.example/cb"]}),
                "invalid_redirect_uri",
            ),
            (
                json!({"redirect_uris": ["javascript:alert(1)"]}),
                "invalid_redirect_uri",
            ),
            (
                json!({"redirect_uris": ["https://a.example/cb#x"]}),
                "invalid_redirect_uri",
            ),
            (
                json!({"redirect_uris": ["https://a.example/cb"], "grant_types": ["client_credentials"]}),
                "invalid_client_metadata",
            ),
            (
                json!({"redirect_uris": ["https://a.example/cb"], "response_types": ["token"]}),
                "invalid_client_metadata",
            ),
            (
                json!({"redirect_uris": ["https://a.example/cb"], "token_endpoint_auth_method": "tls_client_auth"}),
                "invalid_client_metadata",
            ),
            (
                json!({"redirect_uris": ["https://a.example/cb"], "token_endpoint_auth_method": "private_key_jwt"}),
                "invalid_client_metadata",
            ),
        ] {
            let e = ClientMetadata::validate(&body, ClientKind::Registered).unwrap_err();
            assert_eq!(e.error, error, "{body}");
        }
        let doc = json!({"redirect_uris": ["https://a.example/cb"], "token_endpoint_auth_method": "client_secret_post"});
        assert!(ClientMetadata::validate(&doc, ClientKind::Document).is_err());
    }

    #[test]
    fn a_document_may_allow_private_key_jwt_and_none() {
        let doc = json!({"client_id": "https://c.example/meta.json", "redirect_uris": ["https://c.example/cb"],
            "token_endpoint_auth_method": "private_key_jwt",
            "token_endpoint_auth_methods_supported": ["private_key_jwt", "none", "client_secret_basic"],
            "jwks": {"keys": []}});
        let m = ClientMetadata::validate(&doc, ClientKind::Document).unwrap();
        assert!(m.allows(AuthMethod::PrivateKeyJwt) && m.allows(AuthMethod::None));
        assert!(!m.allows(AuthMethod::ClientSecretBasic));
        let plain = json!({"redirect_uris": ["https://c.example/cb"]});
        let m = ClientMetadata::validate(&plain, ClientKind::Document).unwrap();
        assert_eq!(m.token_endpoint_auth_method, AuthMethod::None);
    }

    #[test]
    fn loopback_redirects_match_on_any_port_and_others_exactly() {
        assert!(redirect_matches(
            "http://127.0.0.1/cb",
            "http://127.0.0.1:5000/cb"
        ));
        assert!(redirect_matches(
            "http://localhost:1/cb?x=1",
            "http://localhost:2/cb?x=1"
        ));
        assert!(!redirect_matches(
            "http://127.0.0.1/cb",
            "http://127.0.0.1:5000/other"
        ));
        assert!(!redirect_matches(
            "http://127.0.0.1/cb",
            "http://localhost:5000/cb"
        ));
        assert!(!redirect_matches(
            "https://a.example/cb",
            "https://a.example:444/cb"
        ));
        assert!(!redirect_matches(
            "https://a.example/cb",
            "https://a.example/cb/"
        ));
        assert!(redirect_matches(
            "https://a.example/cb",
            "https://a.example/cb"
        ));
    }

    #[test]
    fn basic_credentials_are_form_decoded() {
        let v = STANDARD.encode("my%20client:s%3Acret");
        assert_eq!(
            parse_basic(&v).unwrap(),
            ("my client".into(), "s:cret".into())
        );
        assert!(parse_basic("!!").is_err());
    }
}
