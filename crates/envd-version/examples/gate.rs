//! Gate a feature on the envd version a sandbox runs.
//!
//! ```sh
//! cargo run -p e2b-envd-version --example gate            # 0.1.0 and 0.5.7 against the table
//! cargo run -p e2b-envd-version --example gate -- 0.4.2  # a version of your own
//! ```
//!
//! A client learns the version from E2B's API (`envdVersion`) or `GET /health`, and checks a
//! feature before it sends anything: `supports` to choose a path, `require` for an error that
//! names the feature, both versions and the fix.

use e2b_envd_version::{EnvdVersion, Feature};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let versions: Vec<EnvdVersion> = match std::env::args().nth(1) {
        Some(v) => vec![v.parse()?],
        None => vec!["0.1.0".parse()?, "v0.5.7".parse()?],
    };
    for version in versions {
        println!("envd {version}:");
        // Choose a path: every feature of the table, with the version that brought it.
        for &feature in Feature::ALL {
            let verdict = if version.supports(feature) {
                "yes"
            } else {
                "no"
            };
            println!("  {feature} (from {}): {verdict}", feature.min_version());
        }
        // Or fail before sending anything, with the teaching error.
        match version.require(Feature::OctetStreamUpload) {
            Ok(()) => println!("  uploads go as raw octet-stream bodies"),
            Err(e) => println!("  uploads fall back to multipart: {e}"),
        }
    }
    Ok(())
}
