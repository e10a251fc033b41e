//! The `IDMINT_*` variables idmint reads, and the ones set that it does not. The layering
//! looks each key's variable up by name, so a misspelled variable is never looked at and its
//! value is lost without a word, where the same typo in the file is an error.
//! [`unknown_variables`] finds them, each with the nearest variable idmint reads;
//! `idmint config check` refuses them and `idmint serve` warns about them.

use super::auth::ADMIN_TOKEN_ENV;
use super::errors::{ConfigError, FILE_PROBLEMS_MAX};
use super::keys::{FileConfig, plain_keys};
use super::nearest::{edit_distance, nearest};
use super::origins::env_var;

/// Every variable of idmint's starts with this.
pub const VARIABLE_PREFIX: &str = "IDMINT_";

/// The variables of idmint's test suites start with this (`IDMINT_TEST_MYSQL_URL`, …): set
/// beside a node in CI, never a misspelled key.
pub const TEST_VARIABLE_PREFIX: &str = "IDMINT_TEST_";

/// The variables idmint reads that are not a key's [`env_var`]: the admin token's, the
/// binary's own (`IDMINT_CONFIG`, the log's filter and format), the CLI's server and client
/// token (`next`, `tag`, `seq`), and the seeds and arguments of the test suites.
pub const OTHER_VARIABLES: &[&str] = &[
    ADMIN_TOKEN_ENV,
    "IDMINT_CONFIG",
    "IDMINT_LOG",
    "IDMINT_LOG_FORMAT",
    "IDMINT_SERVER",
    "IDMINT_TOKEN",
    "IDMINT_SIM_SEED",
    "IDMINT_FUZZ_SEED",
    "IDMINT_FUZZ_ARGS",
    "IDMINT_AUTH_FUZZ_SEED",
];

/// The names among `names` (the environment's) that start with `IDMINT_` but that idmint
/// does not read: no key's variable, none of [`OTHER_VARIABLES`], no test suite's, and none
/// that `file` names (a format's `key_env`, a client's `token_env`). Each is a
/// [`ConfigError::UnknownVariable`] naming the nearest variable idmint reads, when one is
/// near; sorted by name, at most [`FILE_PROBLEMS_MAX`].
pub(super) fn unknown_variables(
    names: impl IntoIterator<Item = String>,
    file: &FileConfig,
) -> Vec<ConfigError> {
    let keys: Vec<(String, &str)> = plain_keys().map(|key| (env_var(key), key)).collect();
    let named_by_file = file
        .format
        .values()
        .filter_map(|format| format.key_env.as_deref())
        .chain(file.auth.clients.values().filter_map(|client| client.token_env.as_deref()));
    let named: Vec<&str> = named_by_file.collect();
    let names: Vec<String> = names.into_iter().collect();
    let services: Vec<&str> =
        names.iter().filter_map(|name| name.strip_suffix("_SERVICE_HOST")).collect();
    let known = |name: &str| {
        name.starts_with(TEST_VARIABLE_PREFIX)
            || is_service_link(name, &services)
            || OTHER_VARIABLES.contains(&name)
            || named.contains(&name)
            || keys.iter().any(|(variable, _)| variable == name)
    };
    let mut unknown: Vec<String> = names
        .iter()
        .filter(|n| n.starts_with(VARIABLE_PREFIX) && !known(n.as_str()))
        .cloned()
        .collect();
    unknown.sort();
    unknown.dedup();
    unknown
        .into_iter()
        .take(FILE_PROBLEMS_MAX)
        .map(|name| {
            let (nearest, key) = nearest_variable(&name, &keys);
            ConfigError::UnknownVariable { name, nearest, key }
        })
        .collect()
}

/// The variable idmint reads nearest to `name`, and the key it sets (none for the
/// variables that set no key). A key's variable is also found by the key's name without
/// its section (`IDMINT_REFILL_WAIT_MS` → `IDMINT_SEGMENT_REFILL_WAIT_MS`), at one edit more.
fn nearest_variable(name: &str, keys: &[(String, &str)]) -> (Option<String>, Option<String>) {
    let body =
        |variable: &str| variable.strip_prefix(VARIABLE_PREFIX).unwrap_or(variable).to_string();
    let typed = body(name);
    let of_keys = keys.iter().map(|(variable, key)| {
        let field = key.rsplit('.').next().unwrap_or(key).to_ascii_uppercase();
        let d = edit_distance(&typed, &body(variable)).min(edit_distance(&typed, &field) + 1);
        (variable.clone(), Some(key.to_string()), d)
    });
    let others = OTHER_VARIABLES.iter().map(|variable| {
        let key = (*variable == ADMIN_TOKEN_ENV).then(|| "auth.admin_token".to_string());
        (variable.to_string(), key, edit_distance(&typed, &body(variable)))
    });
    match nearest(&typed, of_keys.chain(others), |(_, _, d)| *d) {
        Some((variable, key, _)) => (Some(variable), key),
        None => (None, None),
    }
}

/// Whether `name` is one of the variables Kubernetes sets in every pod for each Service of
/// its namespace (a Service `idmint` gives `IDMINT_SERVICE_HOST`, `IDMINT_SERVICE_PORT`,
/// `IDMINT_SERVICE_PORT_HTTP`, `IDMINT_PORT`, `IDMINT_PORT_80_TCP`,
/// `IDMINT_PORT_80_TCP_PROTO|PORT|ADDR`): not a typo of idmint's. `services` are the
/// prefixes of the `…_SERVICE_HOST` variables present: Kubernetes always sets that one, so a
/// lone `IDMINT_LISTEN_PORT` is still reported.
pub(super) fn is_service_link(name: &str, services: &[&str]) -> bool {
    if name.ends_with("_SERVICE_HOST") {
        return true;
    }
    services.iter().any(|service| {
        name.strip_prefix(service)
            .and_then(|rest| rest.strip_prefix('_'))
            .is_some_and(is_service_port)
    })
}

/// After a Service's prefix: `SERVICE_PORT[_NAME]`, `PORT` or `PORT_N_PROTO[_FIELD]`.
fn is_service_port(rest: &str) -> bool {
    if rest == "SERVICE_PORT" || rest == "PORT" {
        return true;
    }
    if let Some(port_name) = rest.strip_prefix("SERVICE_PORT_") {
        return !port_name.is_empty();
    }
    let Some(rest) = rest.strip_prefix("PORT_") else { return false };
    let mut parts = rest.split('_');
    let number =
        parts.next().is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    let protocol = parts.next().is_some_and(|p| matches!(p, "TCP" | "UDP" | "SCTP"));
    let field = match parts.next() {
        None => true,
        Some(field) => matches!(field, "PROTO" | "PORT" | "ADDR") && parts.next().is_none(),
    };
    number && protocol && field
}
