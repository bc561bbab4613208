//! `e2b serve`: E2B's sandbox API on this machine (see the `e2b-serve` crate).

/// Runs `e2b serve` (or its internal mode, which its sandboxes run as `e2b serve envd …`) and
/// returns the exit code.
///
/// # Errors
///
/// The message of [`e2b_serve::ServeError`] when a port cannot be bound or the key stored.
pub async fn serve(args: e2b_serve::ServeArgs) -> Result<i32, String> {
    // `e2b`'s `main` enters a sandbox before any thread starts (`enter_sandbox_if_child`), so
    // `e2b serve` can run isolated sandboxes (`--isolation auto` picks them where the machine
    // supports it).
    e2b_serve::run_cli_with(args, &["serve"], true)
        .await
        .map_err(|e| e.to_string())
}
