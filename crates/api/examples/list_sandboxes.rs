//! List the running sandboxes of your E2B team, page by page.
//!
//! ```sh
//! E2B_API_KEY=e2b_... cargo run -p e2b-api --example list_sandboxes
//! ```
//!
//! Reads the same variables as E2B's SDKs (`E2B_API_KEY`, `E2B_DOMAIN`, `E2B_API_URL`; point
//! `E2B_API_URL` at `e2b serve` to list local sandboxes). Without a key it says what to do and
//! exits with status 2; any other failure
//! (a wrong key, an unreachable URL) is printed as the error's message, status 1.

use e2b_api::{ApiClient, ApiError, ListQuery};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    if std::env::var("E2B_API_KEY").map_or(true, |k| k.trim().is_empty()) {
        eprintln!(
            "E2B_API_KEY is not set: get an API key at https://e2b.dev/dashboard and run \
             `E2B_API_KEY=e2b_... cargo run -p e2b-api --example list_sandboxes`, or start \
             `e2b serve` here and export the E2B_API_URL and E2B_API_KEY it prints"
        );
        return std::process::ExitCode::from(2);
    }
    match list().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The error says what happened and what to do (a wrong key, an unreachable URL).
            eprintln!("list_sandboxes: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn list() -> Result<(), ApiError> {
    let client = ApiClient::from_env()?;
    println!("listing sandboxes at {}", client.base_url());
    let mut pages = client.list(ListQuery::new().limit(50));
    let mut total = 0;
    while let Some(page) = pages.next_page().await? {
        for s in page {
            total += 1;
            println!(
                "{}  template {}  state {:?}  started {}  ends {}",
                s.sandbox_id, s.template_id, s.state, s.started_at, s.end_at
            );
        }
    }
    println!("{total} sandboxes");
    Ok(())
}
