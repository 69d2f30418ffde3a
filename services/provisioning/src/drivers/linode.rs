//! Linode API v4 (<https://techdocs.akamai.com/linode-api/reference/api>): bearer token,
//! `https://api.linode.com/v4` by default, pages of `{"data", "page", "pages", "results"}`
//! asked with `page` and `page_size`, errors as `{"errors": [{"reason", "field"}]}`.

use std::net::IpAddr;

use capstan_events::provisioning::rpc::{RegionOffer, SizeOffer};
use chrono::{DateTime, NaiveDateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use hyper::Method;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};

use super::api::{Api, Http, Limits, Retry};
use super::{
    address, by_label, create_once, shown, text, CloudProvider, CreateInstance, Created, Firewall,
    Instance, Power, ProviderError, Status, Volume, MAX_PAGES,
};

/// The published base URL.
pub const BASE_URL: &str = "https://api.linode.com/v4";
/// Rows asked per page (the API's most is 500).
pub const PAGE_SIZE: u32 = 500;

/// Linode's error body in its own words: every `reason`, with its `field` when named.
pub fn error_words(body: &Value) -> Option<String> {
    let errors = body["errors"].as_array()?;
    let words: Vec<String> = errors
        .iter()
        .filter_map(|error| {
            let reason = error["reason"].as_str()?;
            Some(match error["field"].as_str() {
                Some(field) => format!("{field}: {reason}"),
                None => reason.to_string(),
            })
        })
        .collect();
    (!words.is_empty()).then(|| words.join("; "))
}

/// One Linode account.
#[derive(Debug, Clone)]
pub struct Linode {
    api: Api,
}

impl Linode {
    pub fn new(
        base: &str,
        token: SecretString,
        http: Http,
        limits: Limits,
    ) -> Result<Linode, ProviderError> {
        Ok(Linode {
            api: Api::new("linode", base, token, http, limits, error_words)?,
        })
    }

    /// Every row of a paged listing.
    async fn all(&self, path: &str) -> Result<Vec<Value>, ProviderError> {
        let mut rows = Vec::new();
        let mut page = 1;
        loop {
            let answer = self
                .api
                .get(&format!("{path}?page={page}&page_size={PAGE_SIZE}"))
                .await?;
            let data = answer["data"].as_array().ok_or_else(|| {
                ProviderError::BadAnswer(format!("{path}: no \"data\" in {}", shown(&answer)))
            })?;
            rows.extend(data.iter().cloned());
            let pages = answer["pages"].as_u64().unwrap_or(1);
            if u64::from(page) >= pages || page >= MAX_PAGES {
                return Ok(rows);
            }
            page += 1;
        }
    }

    async fn instances(&self) -> Result<Vec<Instance>, ProviderError> {
        self.all("linode/instances")
            .await?
            .iter()
            .map(instance)
            .collect()
    }
}

fn created_at(value: &Value) -> Result<DateTime<Utc>, ProviderError> {
    let written = text(value, "created")?;
    // Linode writes UTC without a zone: `2018-01-01T00:01:01`.
    NaiveDateTime::parse_from_str(&written, "%Y-%m-%dT%H:%M:%S")
        .map(|naive| naive.and_utc())
        .or_else(|_| DateTime::parse_from_rfc3339(&written).map(|at| at.with_timezone(&Utc)))
        .map_err(|_| ProviderError::BadAnswer(format!("created {written:?} is not a time")))
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A Linode instance in its published shape.
pub fn instance(value: &Value) -> Result<Instance, ProviderError> {
    let status = text(value, "status")?;
    let ipv4 = strings(&value["ipv4"])
        .iter()
        .map(|each| address(each))
        .collect::<Result<Vec<IpAddr>, _>>()?;
    let ipv6 = match value["ipv6"].as_str() {
        Some(slaac) => vec![address(slaac)?],
        None => Vec::new(),
    };
    Ok(Instance {
        id: text(value, "id")?,
        label: text(value, "label")?,
        status: match status.as_str() {
            "running" => Status::Running,
            "provisioning" | "booting" => Status::Starting(status),
            _ => Status::Other(status),
        },
        ipv4,
        ipv6,
        region: text(value, "region")?,
        size: text(value, "type")?,
        image: value["image"].as_str().unwrap_or_default().to_string(),
        tags: strings(&value["tags"]),
        created_at: created_at(value)?,
    })
}

fn create_body(request: &CreateInstance) -> Value {
    let mut body = json!({
        "label": request.label,
        "region": request.region,
        "type": request.size,
        "image": request.image,
        "root_pass": request.root_password.expose_secret(),
        "tags": request.tags,
        "booted": true,
    });
    if let Some(encrypted) = request.disk_encryption {
        body["disk_encryption"] = json!(if encrypted { "enabled" } else { "disabled" });
    }
    if let Some(swap) = request.swap_mb {
        body["swap_size"] = json!(swap);
    }
    body
}

impl CloudProvider for Linode {
    fn create(&self, request: &CreateInstance) -> BoxFuture<'_, Result<Created, ProviderError>> {
        let request = request.clone();
        async move {
            let body = create_body(&request);
            let (body, request) = (&body, &request);
            create_once(
                &self.api,
                || {
                    async move {
                        let answer = self
                            .api
                            .call(
                                Method::POST,
                                "linode/instances",
                                Some(body),
                                Retry::OnlyRateLimited,
                            )
                            .await?;
                        Ok(Created {
                            instance: instance(&answer)?,
                            root_password: request.root_password.clone(),
                        })
                    }
                    .boxed()
                },
                || {
                    async move {
                        let found = self.instances().await?;
                        Ok(by_label(&found, &request.label).map(|instance| Created {
                            instance: instance.clone(),
                            root_password: request.root_password.clone(),
                        }))
                    }
                    .boxed()
                },
            )
            .await
        }
        .boxed()
    }

    fn get(&self, id: &str) -> BoxFuture<'_, Result<Instance, ProviderError>> {
        let path = format!("linode/instances/{id}");
        async move { instance(&self.api.get(&path).await?) }.boxed()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, ProviderError>> {
        self.instances().boxed()
    }

    fn power(&self, id: &str, power: Power) -> BoxFuture<'_, Result<(), ProviderError>> {
        let action = match power {
            Power::On => "boot",
            Power::Off => "shutdown",
        };
        let path = format!("linode/instances/{id}/{action}");
        async move {
            self.api
                .call(Method::POST, &path, Some(&json!({})), Retry::Always)
                .await
                .map(drop)
        }
        .boxed()
    }

    fn offer(&self) -> BoxFuture<'_, Result<Vec<RegionOffer>, ProviderError>> {
        async move {
            let regions = self.all("regions").await?;
            let types = self.all("linode/types").await?;
            let availability = self.all("regions/availability").await?;
            let unavailable = |region: &str, plan: &str| {
                availability.iter().any(|row| {
                    row["region"] == region && row["plan"] == plan && row["available"] == false
                })
            };
            let mut offer = Vec::new();
            for region in &regions {
                if region["status"]
                    .as_str()
                    .is_some_and(|status| status != "ok")
                {
                    continue;
                }
                let id = text(region, "id")?;
                let mut sizes = Vec::new();
                for plan in &types {
                    let plan_id = text(plan, "id")?;
                    if unavailable(&id, &plan_id) {
                        continue;
                    }
                    sizes.push(SizeOffer {
                        id: plan_id,
                        vcpus: plan["vcpus"].as_u64().unwrap_or(0) as u32,
                        memory_mb: plan["memory"].as_u64().unwrap_or(0),
                        disk_gb: plan["disk"].as_u64().unwrap_or(0) / 1024,
                    });
                }
                offer.push(RegionOffer { id, sizes });
            }
            Ok(offer)
        }
        .boxed()
    }

    fn set_reverse_dns(
        &self,
        _instance: &str,
        address: IpAddr,
        name: &str,
    ) -> BoxFuture<'_, Result<(), ProviderError>> {
        let (path, body) = (format!("networking/ips/{address}"), json!({ "rdns": name }));
        async move {
            self.api
                .call(Method::PUT, &path, Some(&body), Retry::Always)
                .await
                .map(drop)
        }
        .boxed()
    }

    fn company_name(&self) -> BoxFuture<'_, Result<String, ProviderError>> {
        async move {
            let account = self.api.get("account").await?;
            Ok(account["company"].as_str().unwrap_or_default().to_string())
        }
        .boxed()
    }

    fn delete_instance(&self, id: &str) -> BoxFuture<'_, Result<(), ProviderError>> {
        let path = format!("linode/instances/{id}");
        async move { self.api.delete(&path).await }.boxed()
    }

    fn volumes(&self) -> BoxFuture<'_, Result<Vec<Volume>, ProviderError>> {
        async move {
            self.all("volumes")
                .await?
                .iter()
                .map(|row| {
                    Ok(Volume {
                        id: text(row, "id")?,
                        label: text(row, "label")?,
                        attached_to: row["linode_id"].as_i64().map(|id| id.to_string()),
                        tags: strings(&row["tags"]),
                        created_at: created_at(row)?,
                    })
                })
                .collect()
        }
        .boxed()
    }

    fn delete_volume(&self, id: &str) -> BoxFuture<'_, Result<(), ProviderError>> {
        let path = format!("volumes/{id}");
        async move { self.api.delete(&path).await }.boxed()
    }

    fn firewalls(&self) -> BoxFuture<'_, Result<Vec<Firewall>, ProviderError>> {
        async move {
            self.all("networking/firewalls")
                .await?
                .iter()
                .map(|row| {
                    Ok(Firewall {
                        id: text(row, "id")?,
                        label: text(row, "label")?,
                        instances: row["entities"]
                            .as_array()
                            .map(|entities| {
                                entities
                                    .iter()
                                    .filter(|entity| entity["type"] == "linode")
                                    .filter_map(|entity| text(entity, "id").ok())
                                    .collect()
                            })
                            .unwrap_or_default(),
                    })
                })
                .collect()
        }
        .boxed()
    }

    fn swap_addresses(
        &self,
        first: &str,
        second: &str,
    ) -> BoxFuture<'_, Result<(), ProviderError>> {
        let (first, second) = (first.to_string(), second.to_string());
        async move {
            let one = self.get(&first).await?;
            let two = self.get(&second).await?;
            if one.region != two.region {
                return Err(ProviderError::Unusable(format!(
                    "instances {first} and {second} are in different regions ({} and {})",
                    one.region, two.region
                )));
            }
            let (Some(one_v4), Some(two_v4)) = (one.ipv4.first(), two.ipv4.first()) else {
                return Err(ProviderError::Unusable(
                    "both instances need a public IPv4 address to swap".into(),
                ));
            };
            // Both assignments in one request: Linode applies them together.
            let body = json!({
                "region": one.region,
                "assignments": [
                    {"address": one_v4.to_string(), "linode_id": two.id.parse::<i64>().unwrap_or_default()},
                    {"address": two_v4.to_string(), "linode_id": one.id.parse::<i64>().unwrap_or_default()},
                ],
            });
            self.api
                .call(Method::POST, "networking/ips/assign", Some(&body), Retry::Always)
                .await
                .map(drop)
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_reads_from_the_published_shape() {
        let value = json!({
            "id": 123, "label": "capstan-5-shop", "status": "running",
            "ipv4": ["203.0.113.1", "192.168.1.5"], "ipv6": "2001:db8::f03c:91ff:fe24:3a2f/128",
            "region": "us-east", "type": "g6-standard-2", "image": "linode/debian12",
            "tags": ["capstan"], "created": "2026-12-01T10:00:00"
        });
        let read = instance(&value).unwrap();
        assert_eq!(read.id, "123");
        assert_eq!(read.status, Status::Running);
        assert_eq!(read.ipv4.len(), 2);
        assert_eq!(
            read.ipv6,
            vec!["2001:db8::f03c:91ff:fe24:3a2f".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(read.created_at.to_rfc3339(), "2026-12-01T10:00:00+00:00");
        let broken = json!({"id": 1, "status": "running"});
        assert!(matches!(
            instance(&broken),
            Err(ProviderError::BadAnswer(_))
        ));
    }

    #[test]
    fn linode_error_bodies_read_as_their_reasons() {
        let body = json!({"errors": [{"reason": "Region is not valid", "field": "region"}, {"reason": "Too many"}]});
        assert_eq!(
            error_words(&body).as_deref(),
            Some("region: Region is not valid; Too many")
        );
        assert_eq!(error_words(&json!({"other": 1})), None);
    }

    #[test]
    fn a_create_body_says_encryption_and_swap_only_when_asked_and_carries_the_password() {
        let mut request = CreateInstance {
            label: "capstan-1-a".into(),
            region: "us-east".into(),
            size: "g6-nanode-1".into(),
            image: "linode/debian12".into(),
            disk_encryption: None,
            swap_mb: None,
            tags: vec![],
            root_password: SecretString::from("pw-123"),
        };
        let body = create_body(&request);
        assert!(body.get("disk_encryption").is_none() && body.get("swap_size").is_none());
        assert_eq!(body["root_pass"], "pw-123");
        request.disk_encryption = Some(false);
        request.swap_mb = Some(0);
        let body = create_body(&request);
        assert_eq!(
            (body["disk_encryption"].as_str(), body["swap_size"].as_u64()),
            (Some("disabled"), Some(0))
        );
        assert!(!format!("{request:?}").contains("pw-123"));
    }
}
