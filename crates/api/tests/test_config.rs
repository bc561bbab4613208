//! Connection settings resolve as the official SDKs resolve them.

use std::collections::HashMap;
use std::time::Duration;

use e2b_api::{ApiError, ConnectionConfig};

fn from(pairs: &[(&str, &str)]) -> ConnectionConfig {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    ConnectionConfig::from_lookup(|k| map.get(k).cloned())
}

#[test]
fn defaults_are_the_sdks() {
    let c = from(&[]);
    assert_eq!(c.resolved_api_url(), "https://api.e2b.app");
    assert!(
        format!("{c:?}").contains("request_timeout: Some(60s)"),
        "{c:?}"
    );
    assert_eq!(e2b_api::DEFAULT_SANDBOX_TIMEOUT, Duration::from_secs(300));
    assert!(matches!(c.checked_api_key(), Err(ApiError::MissingApiKey)));
}

#[test]
fn api_url_precedence_is_explicit_then_debug_then_domain() {
    assert_eq!(
        from(&[("E2B_DOMAIN", "example.org")]).resolved_api_url(),
        "https://api.example.org"
    );
    assert_eq!(
        from(&[("E2B_DEBUG", "TRUE"), ("E2B_DOMAIN", "example.org")]).resolved_api_url(),
        "http://localhost:3000"
    );
    assert_eq!(
        from(&[
            ("E2B_DEBUG", "true"),
            ("E2B_API_URL", "http://127.0.0.1:3999/")
        ])
        .resolved_api_url(),
        "http://127.0.0.1:3999"
    );
    let not_debug = from(&[("E2B_DEBUG", "1")]);
    assert!(
        !not_debug.has_api() && not_debug.resolved_api_url() == "https://api.e2b.app",
        "only `true` turns debug on, as in the SDKs"
    );
    assert_eq!(
        from(&[("E2B_DOMAIN", "  ")]).resolved_api_url(),
        "https://api.e2b.app",
        "empty counts as unset"
    );
}

#[test]
fn envd_url_rule() {
    // E2B's own domains: the shared host, the sandbox is picked by the E2b-Sandbox-Id header.
    let cloud = from(&[]);
    assert_eq!(cloud.envd_url("iabc", None), "https://sandbox.e2b.app");
    assert_eq!(
        cloud.envd_url("iabc", Some("e2b.dev")),
        "https://sandbox.e2b.dev"
    );
    assert_eq!(
        cloud.envd_direct_url("iabc", None),
        "https://49983-iabc.e2b.app"
    );
    // Any other domain (self-hosted): the per-sandbox host. The response's domain wins.
    let own = from(&[("E2B_DOMAIN", "e2b.example.org")]);
    assert_eq!(
        own.envd_url("iabc", None),
        "https://49983-iabc.e2b.example.org"
    );
    assert_eq!(
        own.envd_url("iabc", Some("eu.example.org")),
        "https://49983-iabc.eu.example.org"
    );
    assert_eq!(
        own.host_url("iabc", 8080, None),
        "https://8080-iabc.e2b.example.org"
    );
    // E2B_SANDBOX_URL wins for every sandbox (and for the direct URL).
    let serve = from(&[("E2B_SANDBOX_URL", "http://127.0.0.1:49983/")]);
    assert_eq!(
        serve.envd_url("iabc", Some("e2b.app")),
        "http://127.0.0.1:49983"
    );
    assert_eq!(
        serve.envd_direct_url("iabc", None),
        "http://127.0.0.1:49983"
    );
    // Debug.
    let debug = from(&[("E2B_DEBUG", "true")]);
    assert_eq!(debug.envd_url("iabc", None), "http://localhost:49983");
    assert_eq!(debug.host_url("iabc", 3000, None), "http://localhost:3000");
}

#[test]
fn api_key_check_matches_the_sdks() {
    assert!(e2b_api::looks_like_api_key("e2b_0a9f"));
    assert!(!e2b_api::looks_like_api_key("e2b_"));
    assert!(!e2b_api::looks_like_api_key("e2b_XYZ"));
    assert!(!e2b_api::looks_like_api_key("E2B_00"));
    let c = from(&[("E2B_API_KEY", "e2b_00ff")]);
    assert_eq!(c.checked_api_key().unwrap(), "e2b_00ff");
    let bad = from(&[("E2B_API_KEY", "secret")]);
    assert!(matches!(
        bad.checked_api_key(),
        Err(ApiError::InvalidApiKey)
    ));
    let off = from(&[("E2B_API_KEY", "secret"), ("E2B_VALIDATE_API_KEY", "false")]);
    assert_eq!(off.checked_api_key().unwrap(), "secret");
    // The key never shows in Debug output.
    assert!(!format!("{c:?}").contains("e2b_00ff"));
}

#[test]
fn request_timeout_zero_means_none_and_bad_urls_are_refused() {
    let c = ConnectionConfig::default().request_timeout(Duration::ZERO);
    assert!(format!("{c:?}").contains("request_timeout: None"), "{c:?}");
    let err =
        e2b_api::ApiClient::new(ConnectionConfig::default().api_url("not a url")).unwrap_err();
    assert!(err.to_string().contains("E2B_API_URL"), "{err}");
    let err = e2b_api::ApiClient::new(ConnectionConfig::default().api_url("ftp://x")).unwrap_err();
    assert!(err.to_string().contains("http://"), "{err}");
}

#[test]
fn seconds_round_up_and_saturate() {
    assert_eq!(e2b_api::seconds(Duration::from_millis(1)), 1);
    assert_eq!(e2b_api::seconds(Duration::from_secs(300)), 300);
    assert_eq!(e2b_api::seconds(Duration::from_secs(u64::MAX)), i32::MAX);
}
