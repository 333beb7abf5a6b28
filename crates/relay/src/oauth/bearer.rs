//! The resource-server side (MCP Basic › Authorization › Access Token Usage; OAuth 2.1 §5.2):
//! who a request to an MCP URL is, from its `Authorization` header.
//!
//! Static bearer tokens (`mbt_…`, `relay token create`) and, in OAuth mode, access tokens
//! (`mba_…`) are accepted. An access token must be live (its grant, account version and client),
//! issued for this MCP URL (RFC 8707; a token for the relay itself covers every MCP URL of its
//! account's bridge), and, when bound to a DPoP key, come as `Authorization: DPoP` with a proof of
//! that key for this request (RFC 9449 §7). Every refusal is a 401 whose `WWW-Authenticate` says
//! where the metadata is, with `invalid_token` when a token was presented; a static token of
//! another bridge stays a 403.

use axum::http::{HeaderMap, Method, StatusCode, header};

use super::{jwt, resource, token::htu_is};
use crate::{
    auth::{self, BridgePrincipal},
    config::{AuthMode, RelayConfig},
    error::HttpError,
    storage::Store,
};

/// The refusal of an `Authorization` header without the Bearer (or DPoP) scheme (the scheme's
/// name is case-insensitive, RFC 9110 §11.1, so `bearer x` is accepted).
pub const WRONG_SCHEME: &str = "the Authorization header has no Bearer scheme: use `Authorization: Bearer <token>` (or `DPoP <token>` with a DPoP proof for a DPoP-bound access token)";

/// How the MCP request presented its token.
enum Credential<'a> {
    Bearer(&'a str),
    Dpop(&'a str),
}

fn credential(headers: &HeaderMap) -> Result<Option<Credential<'_>>, &'static str> {
    let Some(v) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let v = v
        .to_str()
        .map_err(|_| "the Authorization header is not ASCII")?;
    if let Some(t) = auth::bearer(v) {
        return Ok(Some(Credential::Bearer(t)));
    }
    match v.split_once(' ') {
        Some((scheme, t)) if scheme.eq_ignore_ascii_case("dpop") && !t.trim().is_empty() => {
            Ok(Some(Credential::Dpop(t.trim())))
        }
        // A bare token, or another scheme (`Token x`, `Basic …`): say how to send it.
        _ => Err(WRONG_SCHEME),
    }
}

/// The 401 for MCP path `path`, with `invalid` naming why a presented token was refused. With
/// `dpop` (the request used the DPoP scheme, or the token is DPoP-bound) the challenge is the
/// DPoP scheme's (RFC 9449 §7.1: `DPoP error="invalid_token", algs="ES256"`).
pub fn unauthorized(
    config: &RelayConfig,
    path: &str,
    dpop: bool,
    invalid: Option<&str>,
) -> HttpError {
    let message = invalid.unwrap_or("authorization is required");
    let challenge = match config.auth {
        AuthMode::OAuth if dpop => {
            let why: String = message
                .chars()
                .filter(|c| *c != '"' && *c != '\\')
                .collect();
            format!(
                "DPoP error=\"invalid_token\", error_description=\"{why}\", algs=\"ES256\", resource_metadata=\"{}\"",
                resource::metadata_url(config, path)
            )
        }
        AuthMode::OAuth => resource::challenge(config, path, invalid),
        _ => match invalid {
            Some(_) => "Bearer realm=\"machine-mcp\", error=\"invalid_token\"".to_owned(),
            None => "Bearer realm=\"machine-mcp\"".to_owned(),
        },
    };
    HttpError {
        challenge: Some(challenge.into()),
        ..HttpError::new(StatusCode::UNAUTHORIZED, message)
    }
}

/// The principal of a request to the MCP URL of `bridge` and `server` (none = the runtime).
///
/// # Errors
/// 401 (see the module) for a missing, unknown, expired, revoked, foreign-resource or wrongly
/// presented token; 403 for a static token of another bridge; 503 when the store fails.
pub async fn principal(
    config: &RelayConfig,
    store: &Store,
    bridge: &str,
    server: Option<&str>,
    method: &Method,
    headers: &HeaderMap,
) -> Result<BridgePrincipal, HttpError> {
    let path = resource::mcp_path(bridge, server);
    let unavailable = |_| {
        HttpError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the relay store is unavailable",
        )
    };
    let presented = credential(headers).map_err(|e| unauthorized(config, &path, false, Some(e)))?;
    let Some(presented) = presented else {
        return Err(unauthorized(config, &path, false, None));
    };
    let mut dpop = matches!(presented, Credential::Dpop(_));
    let token = match presented {
        Credential::Bearer(t) | Credential::Dpop(t) => t,
    };
    if config.auth == AuthMode::OAuth && token.starts_with("mba_") {
        let grant = store
            .access_grant(&auth::sha256_hex(token))
            .await
            .map_err(unavailable)?
            .map(|g| g.grant)
            .ok_or_else(|| {
                unauthorized(
                    config,
                    &path,
                    dpop,
                    Some("the access token is invalid, expired or revoked"),
                )
            })?;
        dpop |= grant.dpop_jkt.is_some();
        let target = resource::Target::Endpoint {
            bridge: bridge.to_owned(),
            server: server.map(str::to_owned),
        };
        let for_this = grant.resource == resource::resource(config, &target)
            || grant.resource == resource::issuer(config);
        if !for_this || grant.account.bridge != bridge {
            return Err(unauthorized(
                config,
                &path,
                dpop,
                Some("the access token was issued for another resource"),
            ));
        }
        match (&grant.dpop_jkt, presented) {
            (None, Credential::Bearer(_)) => {}
            (None, Credential::Dpop(_)) => {
                return Err(unauthorized(
                    config,
                    &path,
                    dpop,
                    Some("the access token is not DPoP-bound: send it as Bearer"),
                ));
            }
            (Some(_), Credential::Bearer(_)) => {
                return Err(unauthorized(
                    config,
                    &path,
                    dpop,
                    Some("the access token is DPoP-bound: send it as DPoP with a proof"),
                ));
            }
            (Some(jkt), Credential::Dpop(_)) => {
                let proof = headers
                    .get("dpop")
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| {
                        unauthorized(config, &path, dpop, Some("a DPoP proof is required"))
                    })?;
                let v = jwt::verify_dpop(
                    proof,
                    method.as_str(),
                    |htu| htu_is(config, htu, &path),
                    Some(token),
                )
                .map_err(|e| unauthorized(config, &path, dpop, Some(&e)))?;
                if &v.jkt != jkt {
                    return Err(unauthorized(
                        config,
                        &path,
                        dpop,
                        Some("the DPoP proof is signed with another key"),
                    ));
                }
                jwt::consume(&v, store.guards())
                    .await
                    .map_err(|e| unauthorized(config, &path, dpop, Some(&e)))?;
            }
        }
        return Ok(BridgePrincipal {
            id: format!("{}.v{}", grant.account.id, grant.account.version),
            bridge: bridge.to_owned(),
            role: grant.account.role,
            credential: grant.family_id.clone(),
        });
    }
    let Credential::Bearer(token) = presented else {
        return Err(unauthorized(
            config,
            &path,
            false,
            Some("static tokens are sent as Bearer"),
        ));
    };
    let rec = store
        .static_token(&auth::sha256_hex(token))
        .await
        .map_err(unavailable)?
        .ok_or_else(|| {
            unauthorized(
                config,
                &path,
                dpop,
                Some("the bearer token is unknown or revoked"),
            )
        })?;
    if rec.bridge != bridge {
        return Err(HttpError::new(
            StatusCode::FORBIDDEN,
            "the token is not valid for this bridge",
        ));
    }
    Ok(BridgePrincipal {
        credential: rec.id.clone(),
        id: rec.id,
        bridge: rec.bridge,
        role: rec.role,
    })
}
