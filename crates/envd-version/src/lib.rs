#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc = include_str!("../README.md")]

use std::fmt;
use std::str::FromStr;

use semver::Version;

/// The envd version whose features the local daemon (`e2b-envd`) implements and reports.
pub const IMPLEMENTED_ENVD_VERSION: &str = "0.6.13";

/// The version assumed when talking to a debug envd (E2B's `ENVD_DEBUG_FALLBACK`): every gate open.
pub const DEBUG_FALLBACK_VERSION: &str = "99.99.99";

/// An envd version: a semver `MAJOR.MINOR.PATCH` (a leading `v` is accepted).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EnvdVersion(Version);

impl EnvdVersion {
    /// Builds a version from its three numbers.
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self(Version::new(major, minor, patch))
    }

    /// The debug fallback, 99.99.99: the version assumed for a debug envd.
    pub const fn debug_fallback() -> Self {
        Self::new(99, 99, 99)
    }

    /// The version the local daemon implements ([`IMPLEMENTED_ENVD_VERSION`]).
    pub const fn implemented() -> Self {
        Self::new(0, 6, 13)
    }

    /// The underlying semver version.
    pub fn as_semver(&self) -> &Version {
        &self.0
    }

    /// Whether this envd has `feature`.
    pub fn supports(&self, feature: Feature) -> bool {
        self.0 >= feature.min_version().0
    }

    /// Succeeds when this envd has `feature`; otherwise an error naming the feature, the
    /// required and actual versions, and the fix.
    pub fn require(&self, feature: Feature) -> Result<(), UnsupportedFeature> {
        if self.supports(feature) {
            Ok(())
        } else {
            Err(UnsupportedFeature {
                feature,
                required: feature.min_version(),
                actual: self.clone(),
            })
        }
    }
}

impl Default for EnvdVersion {
    /// The version the local daemon implements.
    fn default() -> Self {
        Self::implemented()
    }
}

impl fmt::Display for EnvdVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for EnvdVersion {
    type Err = VersionParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let trimmed = s.trim();
        let bare = trimmed.strip_prefix('v').unwrap_or(trimmed);
        Version::parse(bare)
            .map(Self)
            .map_err(|source| VersionParseError {
                input: s.to_owned(),
                source,
            })
    }
}

impl From<Version> for EnvdVersion {
    fn from(v: Version) -> Self {
        Self(v)
    }
}

/// A string that is not an envd version.
#[derive(Debug, thiserror::Error)]
#[error(
    "'{input}' is not an envd version: expected MAJOR.MINOR.PATCH such as 0.6.13 (a leading 'v' is allowed); \
     take it from the sandbox's `envdVersion` or use {DEBUG_FALLBACK_VERSION} for a debug envd"
)]
pub struct VersionParseError {
    input: String,
    #[source]
    source: semver::Error,
}

impl VersionParseError {
    /// The text that failed to parse.
    pub fn input(&self) -> &str {
        &self.input
    }
}

/// A call needs a newer envd than the sandbox runs. Nothing was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{feature} needs envd {required} or newer, but this sandbox runs envd {actual}. \
     Rebuild the sandbox template to pick up a newer envd (or upgrade envd on a self-hosted sandbox), \
     then create a new sandbox from it."
)]
pub struct UnsupportedFeature {
    /// The feature that was asked for.
    pub feature: Feature,
    /// The minimum envd version that has it.
    pub required: EnvdVersion,
    /// The version the sandbox runs.
    pub actual: EnvdVersion,
}

macro_rules! features {
    ($( $(#[$doc:meta])* $name:ident => ($maj:literal, $min:literal, $pat:literal, $text:literal), )*) => {
        /// A feature of envd that only newer versions have.
        ///
        /// The table of minimum versions lives in [`Feature::min_version`], mirrored from the E2B
        /// SDKs (`ENVD_*` constants). To add a feature, add one line to the `features!` table.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Feature {
            $( $(#[$doc])* $name, )*
        }

        impl Feature {
            /// Every feature, in table order.
            pub const ALL: &'static [Feature] = &[ $( Feature::$name, )* ];

            /// The first envd version that has this feature.
            pub const fn min_version(self) -> EnvdVersion {
                match self {
                    $( Feature::$name => EnvdVersion::new($maj, $min, $pat), )*
                }
            }

            /// What the feature is, in words a user recognises.
            pub const fn describe(self) -> &'static str {
                match self {
                    $( Feature::$name => $text, )*
                }
            }
        }
    };
}

features! {
    /// Watching a directory recursively (`watch_dir(recursive = true)`).
    RecursiveWatch => (0, 1, 4, "Recursive directory watching"),
    /// Choosing whether a command gets a stdin pipe (`stdin = false`).
    Stdin => (0, 3, 0, "Choosing a command's stdin"),
    /// The template's default user applies when no user is given (older envds need `user`).
    DefaultUser => (0, 4, 0, "The template's default user"),
    /// Closing a command's stdin (EOF) with `CloseStdin`.
    CloseStdin => (0, 5, 2, "Closing a command's stdin"),
    /// Uploading a file as a raw `application/octet-stream` body (and gzip uploads).
    OctetStreamUpload => (0, 5, 7, "Raw octet-stream file upload"),
    /// File metadata through `X-Metadata-*` headers.
    FileMetadata => (0, 6, 2, "File metadata"),
    /// Entry info in directory watch events (`include_entry`).
    WatchEntryInfo => (0, 6, 3, "Entry info in watch events"),
    /// Watching directories on network mounts (`allow_network_mounts`).
    WatchNetworkMounts => (0, 6, 4, "Watching directories on network mounts"),
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}
