//! The `[auth]` section: the admin token (`IDMINT_ADMIN_TOKEN`, else `auth.admin_token`) and
//! `[auth.clients.NAME]` clients with their own token and tags. A token is a [`Secret`] and no
//! problem quotes one.

use std::collections::BTreeMap;

use idmint_core::Tag;
use serde::{Deserialize, Serialize};

use super::origins::{Layers, Origin};
use super::secret::Secret;
use crate::auth::{Auth, CLIENTS_MAX, Client, Token};

/// The `[auth]` section.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// The admin token, required by every route that changes the store. Prefer the
    /// `IDMINT_ADMIN_TOKEN` variable: a token in a file is easier to leak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token: Option<Secret>,
    /// `[auth.clients.NAME]`: clients with their own token, for the tags they name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clients: BTreeMap<String, ClientSection>,
}

/// An `[auth.clients.NAME]` section: a client's token and the tags whose ids need it.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSection {
    /// The client's token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    /// The name of an environment variable holding the client's token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// The tags (and sequences) whose ids need this client's token (or the admin token).
    #[serde(default)]
    pub tags: Vec<String>,
}

/// The admin token: `IDMINT_ADMIN_TOKEN`, else `auth.admin_token`.
pub const ADMIN_TOKEN_ENV: &str = "IDMINT_ADMIN_TOKEN";

/// The `[auth]` section resolved: the admin token from `IDMINT_ADMIN_TOKEN` or the file,
/// each client's token from `token` or the variable `token_env` names. `None` (with the
/// problems recorded) if a token is malformed or a client incomplete. No problem quotes a
/// token.
pub(super) fn auth_config(l: &mut Layers<'_>, auth: &mut AuthSection) -> Option<Auth> {
    let mut ok = true;
    let admin = match (l.env)(ADMIN_TOKEN_ENV).filter(|t| !t.is_empty()) {
        Some(text) => {
            let origin = Origin::Env(ADMIN_TOKEN_ENV.to_string());
            l.origins.insert("auth.admin_token".to_string(), origin.clone());
            auth.admin_token = Some(Secret::new(text.clone()));
            let token = l.check(&origin, Token::parse(&text));
            ok &= token.is_some();
            token
        }
        None => match &auth.admin_token {
            Some(text) => {
                let origin = l.optional("auth.admin_token", &auth.admin_token);
                let token = l.check(&origin, Token::parse(text.expose()));
                ok &= token.is_some();
                token
            }
            None => None,
        },
    };
    if auth.clients.len() > CLIENTS_MAX {
        let origin = l.source.origin("auth.clients");
        l.refuse(&origin, format!("{} clients; at most {CLIENTS_MAX}", auth.clients.len()));
        return None;
    }
    let mut clients = Vec::with_capacity(auth.clients.len());
    for (name, client) in &auth.clients {
        let key_of = |field: &str| format!("auth.clients.{name}.{field}");
        let origin = l.source.origin(&format!("auth.clients.{name}"));
        let token_origin = l.optional(&key_of("token"), &client.token);
        let env_origin = l.optional(&key_of("token_env"), &client.token_env);
        let tags_origin = l.source.origin(&key_of("tags"));
        l.origins.insert(key_of("tags"), tags_origin.clone());
        let token = match (&client.token, &client.token_env) {
            (Some(text), None) => l.check(&token_origin, Token::parse(text.expose())),
            (None, Some(var)) => match (l.env)(var) {
                Some(text) => {
                    let parsed =
                        Token::parse(&text).map_err(|e| format!("the token in {var}: {e}"));
                    l.check(&env_origin, parsed)
                }
                None => {
                    l.refuse(&env_origin, format!("token_env names {var:?}, which is not set"));
                    None
                }
            },
            _ => {
                l.refuse(&origin, "give token or token_env (one of them)");
                None
            }
        };
        if client.tags.is_empty() {
            l.refuse(&tags_origin, "tags is empty; name the tags whose ids need this token");
        }
        let tags: Vec<Tag> =
            client.tags.iter().filter_map(|t| l.check(&tags_origin, Tag::parse(t))).collect();
        match token {
            Some(token) if tags.len() == client.tags.len() && !tags.is_empty() => {
                clients.push(Client { name: name.clone(), token, tags });
            }
            _ => ok = false,
        }
    }
    ok.then(|| Auth::new(admin, clients))
}
