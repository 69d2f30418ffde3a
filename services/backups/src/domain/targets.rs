//! What a backup target must say (BK-04): a provider of the list, an S3 endpoint over HTTPS
//! (plain HTTP only to a loopback address, for a store on the plane's own machine), a region, a
//! bucket, a folder, and its keys. Bad input is refused naming the field; nothing is stored.

use capstan_events::backups::Provider;
use capstan_events::rpc::InvalidInput;
use capstan_events::Word as _;
use url::Url;

/// A target's fields, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTarget {
    pub name: String,
    pub provider: Provider,
    /// `scheme://host[:port]`, no path.
    pub endpoint: Url,
    pub region: String,
    pub bucket: String,
    /// Without leading or trailing slash; may be empty.
    pub folder: String,
}

/// The input as the operator sent it.
pub struct Input<'a> {
    pub name: &'a str,
    pub provider: &'a str,
    pub endpoint: &'a str,
    pub region: &'a str,
    pub bucket: &'a str,
    pub folder: &'a str,
    pub access_key: &'a str,
    pub secret_key: &'a str,
}

fn invalid(field: &'static str, reason: impl Into<String>) -> InvalidInput {
    InvalidInput::new(field, reason)
}

fn printable_token(text: &str) -> bool {
    !text.is_empty() && text.len() <= 256 && text.bytes().all(|byte| byte.is_ascii_graphic())
}

/// BK-04: an endpoint is `https://host[:port]` alone (plain http only to a loopback address).
fn check_endpoint(text: &str) -> Result<Url, InvalidInput> {
    let endpoint = Url::parse(text.trim())
        .map_err(|error| invalid("endpoint", format!("is not a URL: {error}")))?;
    let loopback = match endpoint.host() {
        Some(url::Host::Ipv4(address)) => address.is_loopback(),
        Some(url::Host::Ipv6(address)) => address.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => return Err(invalid("endpoint", "must name a host")),
    };
    match endpoint.scheme() {
        "https" => {}
        "http" if loopback => {}
        "http" => {
            return Err(invalid(
                "endpoint",
                "must be https:// (plain http only to a loopback address)",
            ))
        }
        _ => return Err(invalid("endpoint", "must be https://host[:port]")),
    }
    if !endpoint.username().is_empty()
        || endpoint.password().is_some()
        || endpoint.path() != "/"
        || endpoint.query().is_some()
        || endpoint.fragment().is_some()
    {
        return Err(invalid(
            "endpoint",
            "must be scheme://host[:port] alone: no path, query or credentials",
        ));
    }
    Ok(endpoint)
}

/// BK-04: checks every field; the first bad one is named.
pub fn check(input: &Input<'_>) -> Result<NewTarget, InvalidInput> {
    let name = input.name.trim();
    if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(invalid(
            "name",
            "must be 1 to 100 characters, no control characters",
        ));
    }
    let provider = Provider::parse(input.provider).ok_or_else(|| {
        invalid(
            "provider",
            format!(
                "must be one of {}",
                Provider::ALL.map(Provider::as_str).join(", ")
            ),
        )
    })?;
    let endpoint = check_endpoint(input.endpoint)?;
    let region = input.region.trim();
    if region.is_empty()
        || region.len() > 64
        || !region
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
    {
        return Err(invalid("region", "must be 1 to 64 letters, digits, - or _"));
    }
    let bucket = input.bucket.trim();
    if !(3..=63).contains(&bucket.len())
        || !bucket.bytes().all(|byte| {
            byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-' || byte == b'.'
        })
        || bucket.starts_with(['-', '.'])
        || bucket.ends_with(['-', '.'])
    {
        return Err(invalid(
            "bucket",
            "must be 3 to 63 lower-case letters, digits, - or . (an S3 bucket name)",
        ));
    }
    let folder = input.folder.trim().trim_matches('/');
    if folder.len() > 200
        || folder.split('/').any(|segment| {
            !folder.is_empty()
                && (segment.is_empty()
                    || segment == "."
                    || segment == ".."
                    || !segment.bytes().all(|byte| {
                        byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-')
                    }))
        })
    {
        return Err(invalid(
            "folder",
            "must be up to 200 characters of path segments of letters, digits, . _ -",
        ));
    }
    if !printable_token(input.access_key) {
        return Err(invalid(
            "access_key",
            "must be 1 to 256 printable characters",
        ));
    }
    if !printable_token(input.secret_key) {
        return Err(invalid(
            "secret_key",
            "must be 1 to 256 printable characters",
        ));
    }
    Ok(NewTarget {
        name: name.to_string(),
        provider,
        endpoint,
        region: region.to_string(),
        bucket: bucket.to_string(),
        folder: folder.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Input<'static> {
        Input {
            name: "Offsite",
            provider: "generic_s3",
            endpoint: "https://s3.example.net",
            region: "eu-central-1",
            bucket: "capstan-backups",
            folder: "/fleet/a/",
            access_key: "AKIAEXAMPLE",
            secret_key: "c2VjcmV0",
        }
    }

    #[test]
    fn bk_04_a_target_is_an_s3_endpoint_over_https() {
        let target = check(&good()).unwrap();
        assert_eq!(target.provider, Provider::GenericS3);
        assert_eq!(target.folder, "fleet/a");
        assert_eq!(target.endpoint.as_str(), "https://s3.example.net/");
        let local = Input {
            endpoint: "http://127.0.0.1:9000",
            ..good()
        };
        assert!(check(&local).is_ok());
    }

    #[test]
    fn bk_04_each_bad_field_is_named() {
        let cases: Vec<(&str, Input<'static>)> = vec![
            (
                "name",
                Input {
                    name: " ",
                    ..good()
                },
            ),
            (
                "provider",
                Input {
                    provider: "dropbox",
                    ..good()
                },
            ),
            (
                "endpoint",
                Input {
                    endpoint: "http://s3.example.net",
                    ..good()
                },
            ),
            (
                "endpoint",
                Input {
                    endpoint: "ftp://s3.example.net",
                    ..good()
                },
            ),
            (
                "endpoint",
                Input {
                    endpoint: "https://s3.example.net/bucket",
                    ..good()
                },
            ),
            (
                "endpoint",
                Input {
                    endpoint: "https://user:pw@s3.example.net",
                    ..good()
                },
            ),
            (
                "endpoint",
                Input {
                    endpoint: "not a url",
                    ..good()
                },
            ),
            (
                "region",
                Input {
                    region: "",
                    ..good()
                },
            ),
            (
                "bucket",
                Input {
                    bucket: "Backups",
                    ..good()
                },
            ),
            (
                "bucket",
                Input {
                    bucket: "ab",
                    ..good()
                },
            ),
            (
                "folder",
                Input {
                    folder: "a/../b",
                    ..good()
                },
            ),
            (
                "folder",
                Input {
                    folder: "a//b",
                    ..good()
                },
            ),
            (
                "access_key",
                Input {
                    access_key: "",
                    ..good()
                },
            ),
            (
                "secret_key",
                Input {
                    secret_key: "has space",
                    ..good()
                },
            ),
        ];
        for (field, input) in cases {
            let error = check(&input).unwrap_err();
            assert_eq!(error.field, field, "{error}");
        }
    }
}
