//! Discovery documents: RFC 9728 protected-resource metadata, RFC 8414 authorization-server
//! metadata and OpenID Connect Discovery 1.0 (MCP 2026-07-28 Authorization › Authorization
//! Server Discovery: clients must support both).

use std::sync::Arc;

use axum::{
    Json,
    extract::{Path, State},
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use super::{clients::AuthMethod, jwt::ASSERTION_ALGORITHMS, resource};
use crate::config::RelayConfig;

fn cacheable(v: Value) -> Response {
    let mut r = Json(v).into_response();
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    r
}

/// The protected-resource metadata of `target` (RFC 9728 §2): the resource identifier, this
/// relay as its one authorization server, the scope, header-only bearer tokens, and ES256 DPoP.
pub fn protected_resource_document(config: &RelayConfig, target: &resource::Target) -> Value {
    let name = match target {
        resource::Target::Relay => "machine-mcp relay".to_owned(),
        resource::Target::Endpoint {
            bridge,
            server: None,
        } => format!("machine-mcp bridge {bridge}"),
        resource::Target::Endpoint {
            bridge,
            server: Some(s),
        } => format!("machine-mcp bridge {bridge}, server {s}"),
    };
    json!({
        "resource": resource::resource(config, target),
        "authorization_servers": [resource::issuer(config)],
        "scopes_supported": [resource::SCOPE_MCP],
        "bearer_methods_supported": ["header"],
        "resource_name": name,
        "dpop_signing_alg_values_supported": ["ES256"],
    })
}

/// `GET /.well-known/oauth-protected-resource`: the metadata of the relay as a whole (RFC 9728
/// §3: the well-known URL of a resource without a path). A token for it is good for every MCP
/// URL of the signing-in account's bridge.
pub async fn protected_resource_root(State(config): State<Arc<RelayConfig>>) -> Response {
    cacheable(protected_resource_document(
        &config,
        &resource::Target::Relay,
    ))
}

/// `GET /.well-known/oauth-protected-resource/{path}`: the metadata of the MCP URL `/{path}`
/// (RFC 9728 §3.1, path insertion). Unknown bridges get a document too, so the answer says
/// nothing about which bridges exist; other paths get 404.
pub async fn protected_resource(
    State(config): State<Arc<RelayConfig>>,
    Path(path): Path<String>,
) -> Response {
    let full = format!("{}/{path}", resource::issuer(&config));
    match resource::parse(&config, &full) {
        Some(target @ resource::Target::Endpoint { .. }) => {
            cacheable(protected_resource_document(&config, &target))
        }
        _ => (
            StatusCode::NOT_FOUND,
            Json(
                json!({"error": "not_found", "error_description": "no MCP endpoint at this path"}),
            ),
        )
            .into_response(),
    }
}

/// The authorization-server metadata (RFC 8414 §2). `token_endpoint_auth_methods_supported`
/// is exactly what registration accepts; `client_id_metadata_document_supported` (client ID
/// metadata documents draft §6) and `authorization_response_iss_parameter_supported` (RFC 9207
/// §3) are true.
pub fn authorization_server_document(config: &RelayConfig) -> Value {
    let auth_methods: Vec<&str> = AuthMethod::ALL.iter().map(|m| m.as_str()).collect();
    json!({
        "issuer": resource::issuer(config),
        "authorization_endpoint": resource::url(config, resource::AUTHORIZE_PATH),
        "token_endpoint": resource::url(config, resource::TOKEN_PATH),
        "registration_endpoint": resource::url(config, resource::REGISTER_PATH),
        "revocation_endpoint": resource::url(config, resource::REVOKE_PATH),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": auth_methods,
        "token_endpoint_auth_signing_alg_values_supported": ASSERTION_ALGORITHMS,
        "revocation_endpoint_auth_methods_supported": auth_methods,
        "revocation_endpoint_auth_signing_alg_values_supported": ASSERTION_ALGORITHMS,
        "scopes_supported": [resource::SCOPE_MCP, resource::SCOPE_OFFLINE],
        "client_id_metadata_document_supported": true,
        "authorization_response_iss_parameter_supported": true,
        "dpop_signing_alg_values_supported": ["ES256"],
    })
}

/// `GET /.well-known/oauth-authorization-server`.
pub async fn authorization_server(State(config): State<Arc<RelayConfig>>) -> Response {
    cacheable(authorization_server_document(&config))
}

/// `GET /.well-known/openid-configuration`: the same metadata with the members OpenID Connect
/// Discovery 1.0 §3 requires. The relay issues no ID tokens (it does not grant `openid`); the
/// JWK Set it names is empty.
pub async fn openid_configuration(State(config): State<Arc<RelayConfig>>) -> Response {
    let mut doc = authorization_server_document(&config);
    doc["jwks_uri"] = json!(resource::url(&config, resource::JWKS_PATH));
    doc["subject_types_supported"] = json!(["public"]);
    doc["id_token_signing_alg_values_supported"] = json!(["ES256"]);
    cacheable(doc)
}

/// `GET /oauth/jwks`: the relay signs nothing clients verify, so its key set is empty.
pub async fn jwks() -> Response {
    cacheable(json!({"keys": []}))
}
