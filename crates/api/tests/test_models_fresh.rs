//! `src/models.rs` is generated from `openapi/e2b.yml`; this test fails when the two disagree.
//!
//! Regenerate after changing the spec:
//! `E2B_API_REGENERATE=1 cargo nextest run -p e2b-api --test test_models_fresh`.

mod codegen;

const MODELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/models.rs");

#[test]
fn models_match_the_vendored_spec() {
    let spec = codegen::load_spec();
    let generated = codegen::rustfmt(&codegen::generate(&spec));
    if std::env::var_os("E2B_API_REGENERATE").is_some() {
        std::fs::write(MODELS, &generated).expect("write src/models.rs");
        return;
    }
    let current = std::fs::read_to_string(MODELS).expect("read src/models.rs");
    assert!(
        current == generated,
        "crates/api/src/models.rs is stale: it no longer matches openapi/e2b.yml. Regenerate it with \
         `E2B_API_REGENERATE=1 cargo nextest run -p e2b-api --test test_models_fresh` and commit the result."
    );
}

#[test]
fn snake_case_names() {
    assert_eq!(codegen::snake("templateID"), "template_id");
    assert_eq!(codegen::snake("memoryMB"), "memory_mb");
    assert_eq!(
        codegen::snake("allow_internet_access"),
        "allow_internet_access"
    );
    assert_eq!(codegen::snake("cpuUsedPct"), "cpu_used_pct");
    assert_eq!(codegen::snake("CPUCount"), "cpu_count");
}

#[test]
fn every_sandbox_schema_is_generated() {
    let spec = codegen::load_spec();
    let names = codegen::selected(&spec);
    for needed in [
        "SandboxState",
        "SandboxMetadata",
        "EnvVars",
        "SandboxNetworkConfig",
        "LogLevel",
    ] {
        assert!(
            names.iter().any(|n| n == needed),
            "{needed} is not generated"
        );
    }
}
