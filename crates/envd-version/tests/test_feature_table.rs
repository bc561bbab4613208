//! Golden table: every feature on both sides of its boundary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use e2b_envd_version::{DEBUG_FALLBACK_VERSION, EnvdVersion, Feature, IMPLEMENTED_ENVD_VERSION};

const TABLE: &[(Feature, &str, &str)] = &[
    (Feature::RecursiveWatch, "0.1.3", "0.1.4"),
    (Feature::Stdin, "0.2.99", "0.3.0"),
    (Feature::DefaultUser, "0.3.9", "0.4.0"),
    (Feature::CloseStdin, "0.5.1", "0.5.2"),
    (Feature::OctetStreamUpload, "0.5.6", "0.5.7"),
    (Feature::FileMetadata, "0.6.1", "0.6.2"),
    (Feature::WatchEntryInfo, "0.6.2", "0.6.3"),
    (Feature::WatchNetworkMounts, "0.6.3", "0.6.4"),
];

#[test]
fn every_feature_on_both_sides_of_its_boundary() {
    assert_eq!(
        TABLE.len(),
        Feature::ALL.len(),
        "the golden table covers every feature"
    );
    for &(feature, below, at) in TABLE {
        let below: EnvdVersion = below.parse().unwrap();
        let at: EnvdVersion = at.parse().unwrap();
        assert_eq!(feature.min_version(), at, "{feature:?}");
        assert!(!below.supports(feature), "{feature:?} below {at}");
        assert!(at.supports(feature), "{feature:?} at {at}");
        let err = below.require(feature).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(feature.describe()), "{msg}");
        assert!(
            msg.contains(&at.to_string()),
            "names the required version: {msg}"
        );
        assert!(
            msg.contains(&below.to_string()),
            "names the actual version: {msg}"
        );
        assert!(
            msg.contains("Rebuild the sandbox template"),
            "names the fix: {msg}"
        );
        assert!(at.require(feature).is_ok());
    }
}

#[test]
fn debug_fallback_and_implemented_open_every_gate() {
    let debug: EnvdVersion = DEBUG_FALLBACK_VERSION.parse().unwrap();
    assert_eq!(debug, EnvdVersion::debug_fallback());
    let implemented: EnvdVersion = IMPLEMENTED_ENVD_VERSION.parse().unwrap();
    assert_eq!(implemented, EnvdVersion::implemented());
    for &f in Feature::ALL {
        assert!(debug.supports(f));
        assert!(implemented.supports(f));
    }
}

#[test]
fn parsing_accepts_plain_and_v_prefixed_and_rejects_garbage() {
    assert_eq!(
        "0.6.13".parse::<EnvdVersion>().unwrap(),
        EnvdVersion::new(0, 6, 13)
    );
    assert_eq!(
        "v0.6.13".parse::<EnvdVersion>().unwrap(),
        EnvdVersion::new(0, 6, 13)
    );
    assert_eq!(
        " 0.1.0 ".parse::<EnvdVersion>().unwrap(),
        EnvdVersion::new(0, 1, 0)
    );
    for bad in ["", "latest", "0.6", "1.x.0", "v", "0.6.13.1"] {
        let err = bad.parse::<EnvdVersion>().unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("is not an envd version"), "{bad}: {msg}");
        assert!(msg.contains("MAJOR.MINOR.PATCH"), "{bad}: {msg}");
        assert_eq!(err.input(), bad);
    }
}

#[test]
fn ordering_is_semver() {
    let a: EnvdVersion = "0.5.10".parse().unwrap();
    let b: EnvdVersion = "0.5.9".parse().unwrap();
    assert!(a > b);
}
