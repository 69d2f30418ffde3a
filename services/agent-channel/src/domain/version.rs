//! Agent versions and the version floor (AC-20).

/// The oldest agent the plane routes ordinary work to. Below it (or with no version or no
/// vocabulary reported) a node is offered `apply_update` only. A constant, not a setting.
pub const FLOOR: Version = Version(0, 1, 0);

/// A `major.minor.patch` version read as SemVer (`semver`); its pre-release and build parts
/// are read and then ignored, so `2.0.1-rc.1` stands as `2.0.1` against the floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32, pub u32);

impl Version {
    /// `None` for text that is not a SemVer version (or whose numbers pass `u32`).
    pub fn parse(text: &str) -> Option<Version> {
        let version = semver::Version::parse(text).ok()?;
        Some(Version(
            u32::try_from(version.major).ok()?,
            u32::try_from(version.minor).ok()?,
            u32::try_from(version.patch).ok()?,
        ))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// Whether a node that reported `version` and `vocabulary` is below the floor (AC-20).
pub fn below_floor(version: Option<&str>, vocabulary: &[String]) -> bool {
    match version.and_then(Version::parse) {
        Some(version) => version < FLOOR || vocabulary.is_empty(),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numerically_not_as_text() {
        assert!(Version::parse("1.10.0").unwrap() > Version::parse("1.9.9").unwrap());
        assert_eq!(Version::parse("2.0.1-rc.1"), Some(Version(2, 0, 1)));
        assert_eq!(Version::parse("1.2"), None);
        assert_eq!(Version::parse("1.2.3.4"), None);
        assert_eq!(Version::parse("one.two.three"), None);
        assert_eq!(Version::parse("1.2.3+build.7"), Some(Version(1, 2, 3)));
        assert_eq!(Version::parse("1.2.99999999999"), None);
    }

    #[test]
    fn ac_20_a_node_with_no_version_or_no_vocabulary_is_below_the_floor() {
        let words = vec!["check_status".to_string()];
        assert!(below_floor(None, &words));
        assert!(below_floor(Some("garbage"), &words));
        assert!(below_floor(Some("1.0.0"), &[]));
        assert!(!below_floor(Some("0.1.0"), &words));
        assert!(below_floor(Some("0.0.9"), &words));
    }
}
