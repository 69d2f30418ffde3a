//! An operator's ask for a server (PV-03, issue 29): the words checked before anything is made,
//! each refusal naming its field; the label the instance is made with (unique per provision, so
//! a create that may have happened is found again by it); the image a provider gets when none is
//! named.

use capstan_events::provisioning::{CloudProvider, InstallKind};
use capstan_events::Word as _;

/// The longest node name a provision takes (a Docker host's agent adds `-host`).
pub const NAME_MAX_CHARS: usize = 50;

/// The image a provision gets when the operator names none: each provider's Debian 12.
pub fn default_image(provider: CloudProvider) -> &'static str {
    match provider {
        CloudProvider::Linode => "linode/debian12",
        CloudProvider::Hetzner => "debian-12",
    }
}

/// A provision's words, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub kind: InstallKind,
    pub name: String,
    pub region: String,
    pub size: String,
    pub image: String,
}

/// Why an ask is refused: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {why}")]
pub struct Refused {
    pub field: &'static str,
    pub why: String,
}

fn refused(field: &'static str, why: impl Into<String>) -> Refused {
    Refused {
        field,
        why: why.into(),
    }
}

/// A provider's word for a region, size or image: letters, digits, `-`, `_`, `.` and `/`,
/// 1 to 100 characters.
fn provider_word(field: &'static str, text: &str) -> Result<String, Refused> {
    let text = text.trim();
    if text.is_empty() || text.len() > 100 {
        return Err(refused(field, "must be 1 to 100 characters"));
    }
    if !text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
    {
        return Err(refused(
            field,
            format!("{text:?} holds a character a provider's name never has"),
        ));
    }
    Ok(text.to_string())
}

/// PV-03: a node name is lower-case letters, digits and `-`, starting with a letter, not
/// ending in `-`, at most [`NAME_MAX_CHARS`]; it becomes the machine's host name and its
/// agent's join name.
pub fn check_name(name: &str) -> Result<String, Refused> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > NAME_MAX_CHARS {
        return Err(refused(
            "name",
            format!("must be 1 to {NAME_MAX_CHARS} characters"),
        ));
    }
    let mut chars = name.chars();
    let first_is_letter = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if !first_is_letter
        || name.ends_with('-')
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(refused(
            "name",
            format!("{name:?} must be lower-case letters, digits and '-', starting with a letter and not ending in '-'"),
        ));
    }
    Ok(name.to_string())
}

/// Checks an ask's words; `image` absent is the provider's Debian.
pub fn check(
    provider: CloudProvider,
    kind: &str,
    name: &str,
    region: &str,
    size: &str,
    image: Option<&str>,
) -> Result<Checked, Refused> {
    let kind = InstallKind::parse(kind.trim()).ok_or_else(|| {
        refused(
            "kind",
            format!("{kind:?} is not one of agent, site, docker-host"),
        )
    })?;
    Ok(Checked {
        kind,
        name: check_name(name)?,
        region: provider_word("region", region)?,
        size: provider_word("size", size)?,
        image: match image {
            Some(image) => provider_word("image", image)?,
            None => default_image(provider).to_string(),
        },
    })
}

/// The label the instance is made with: the node's name and the provision's number, so two
/// provisions of one name (a retry after a delete) never share one and a create that may have
/// happened is found again by it.
pub fn instance_label(name: &str, provision_id: i64) -> String {
    format!("{name}-p{provision_id}")
}

/// The swap every instance is made with where the provider takes it (PV-48: explicit, never
/// the provider's default).
pub const SWAP_MB: u32 = 512;

/// What a create asks of the provider beyond region, size and image (PV-48): Linode's disk
/// encryption on and its swap set; Hetzner Cloud has neither option (asking is refused), so
/// its defaults stand (`None`, `None`).
pub fn create_options(provider: CloudProvider) -> (Option<bool>, Option<u32>) {
    match provider {
        CloudProvider::Linode => (Some(true), Some(SWAP_MB)),
        CloudProvider::Hetzner => (None, None),
    }
}

/// The tags every instance a provision makes carries.
pub fn instance_tags(kind: InstallKind) -> Vec<String> {
    vec!["capstan".to_string(), format!("capstan-{}", kind.as_str())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pv_03_an_ask_is_checked_and_an_absent_image_is_the_providers_debian() {
        let checked = check(
            CloudProvider::Linode,
            "site",
            "shop-1",
            "us-east",
            "g6-nanode-1",
            None,
        )
        .unwrap();
        assert_eq!(checked.kind, InstallKind::Site);
        assert_eq!(checked.image, "linode/debian12");
        let hetzner = check(
            CloudProvider::Hetzner,
            "docker-host",
            "dock",
            "fsn1",
            "cx22",
            None,
        )
        .unwrap();
        assert_eq!(hetzner.image, "debian-12");
    }

    #[test]
    fn pv_03_each_bad_word_is_refused_naming_its_field() {
        let cases = [
            ("vm", "shop", "us-east", "g6", None, "kind"),
            ("site", "Shop", "us-east", "g6", None, "name"),
            ("site", "1shop", "us-east", "g6", None, "name"),
            ("site", "shop-", "us-east", "g6", None, "name"),
            ("site", "shop;rm", "us-east", "g6", None, "name"),
            ("site", "", "us-east", "g6", None, "name"),
            ("site", "shop", "us east", "g6", None, "region"),
            ("site", "shop", "us-east", "", None, "size"),
            (
                "site",
                "shop",
                "us-east",
                "g6",
                Some("debian$(id)"),
                "image",
            ),
        ];
        for (kind, name, region, size, image, field) in cases {
            let refused =
                check(CloudProvider::Linode, kind, name, region, size, image).unwrap_err();
            assert_eq!(
                refused.field, field,
                "{kind} {name} {region} {size} {image:?}"
            );
        }
        let long = "a".repeat(NAME_MAX_CHARS + 1);
        assert_eq!(check_name(&long).unwrap_err().field, "name");
    }

    #[test]
    fn pv_48_disk_encryption_and_swap_are_asked_only_of_a_provider_that_has_them() {
        assert_eq!(
            create_options(CloudProvider::Linode),
            (Some(true), Some(SWAP_MB))
        );
        assert_eq!(create_options(CloudProvider::Hetzner), (None, None));
    }

    #[test]
    fn pv_03_the_instance_label_is_unique_per_provision() {
        assert_eq!(instance_label("shop", 42), "shop-p42");
        assert_ne!(instance_label("shop", 42), instance_label("shop", 43));
        assert_eq!(
            instance_tags(InstallKind::DockerHost),
            vec!["capstan", "capstan-docker-host"]
        );
    }
}
