//! Hetzner Cloud API v1 (<https://docs.hetzner.cloud/>): bearer token,
//! `https://api.hetzner.cloud/v1` by default, pages asked with `page` and `per_page` and told
//! by `meta.pagination.next_page`, errors as `{"error": {"code", "message"}}`.
//!
//! Where Hetzner differs from the seam: it makes the root password itself (the create's
//! `root_password`, or `reset_password` when a create that failed had made the server); it has
//! no provider disk encryption and no swap option, so asking for either is refused before
//! anything is made; labels stand for tags (a label's key is the tag); an IPv6 is a /64, of
//! which the server answers on `::1`; and its API has no account record, so no company name:
//! a Hetzner account is never disposable for PV-55.

use std::net::{IpAddr, Ipv6Addr};

use capstan_events::provisioning::rpc::{RegionOffer, SizeOffer};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::FutureExt;
use hyper::Method;
use secrecy::SecretString;
use serde_json::{json, Map, Value};

use super::api::{Api, Http, Limits, Retry};
use super::{
    address, create_once, shown, text, CloudProvider, CreateInstance, Created, Firewall, Instance,
    Power, ProviderError, Status, Volume, MAX_PAGES,
};

/// The published base URL.
pub const BASE_URL: &str = "https://api.hetzner.cloud/v1";
/// Rows asked per page (the API's most is 50).
pub const PER_PAGE: u32 = 50;

/// Hetzner's error body in its own words: `code: message`.
pub fn error_words(body: &Value) -> Option<String> {
    let error = &body["error"];
    let message = error["message"].as_str()?;
    Some(match error["code"].as_str() {
        Some(code) => format!("{code}: {message}"),
        None => message.to_string(),
    })
}

/// One Hetzner Cloud project.
#[derive(Debug, Clone)]
pub struct Hetzner {
    api: Api,
}

fn labels(value: &Value) -> Vec<String> {
    value
        .as_object()
        .map(|labels| labels.keys().cloned().collect())
        .unwrap_or_default()
}

fn created_at(value: &Value) -> Result<DateTime<Utc>, ProviderError> {
    let written = text(value, "created")?;
    DateTime::parse_from_rfc3339(&written)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|_| ProviderError::BadAnswer(format!("created {written:?} is not a time")))
}

/// The address a server answers on in its /64: the network's `::1`.
fn first_host(network: &str) -> Result<IpAddr, ProviderError> {
    match address(network)? {
        IpAddr::V6(net) => Ok(IpAddr::V6(Ipv6Addr::from(u128::from(net) | 1))),
        other => Ok(other),
    }
}

/// A Hetzner server in its published shape.
pub fn server(value: &Value) -> Result<Instance, ProviderError> {
    let status = text(value, "status")?;
    let net = &value["public_net"];
    let ipv4 = match net["ipv4"]["ip"].as_str() {
        Some(ip) => vec![address(ip)?],
        None => Vec::new(),
    };
    let ipv6 = match net["ipv6"]["ip"].as_str() {
        Some(network) => vec![first_host(network)?],
        None => Vec::new(),
    };
    Ok(Instance {
        id: text(value, "id")?,
        label: text(value, "name")?,
        status: match status.as_str() {
            "running" => Status::Running,
            "initializing" | "starting" => Status::Starting(status),
            _ => Status::Other(status),
        },
        ipv4,
        ipv6,
        region: text(&value["datacenter"]["location"], "name")?,
        size: text(&value["server_type"], "name")?,
        image: value["image"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        tags: labels(&value["labels"]),
        created_at: created_at(value)?,
    })
}

/// The create's body; refuses what Hetzner cannot do before anything is made.
fn create_body(request: &CreateInstance) -> Result<Value, ProviderError> {
    if request.disk_encryption == Some(true) {
        return Err(ProviderError::Unusable(
            "Hetzner Cloud has no provider disk encryption to turn on".into(),
        ));
    }
    if request.swap_mb.is_some_and(|swap| swap > 0) {
        return Err(ProviderError::Unusable(
            "Hetzner Cloud makes no swap at create; ask for none".into(),
        ));
    }
    let labels: Map<String, Value> = request
        .tags
        .iter()
        .map(|tag| (tag.clone(), json!("")))
        .collect();
    Ok(json!({
        "name": request.label,
        "server_type": request.size,
        "image": request.image,
        "location": request.region,
        "labels": labels,
        "start_after_create": true,
    }))
}

fn password(answer: &Value) -> Result<SecretString, ProviderError> {
    answer["root_password"]
        .as_str()
        .map(SecretString::from)
        .ok_or_else(|| ProviderError::BadAnswer("no root_password in the answer".into()))
}

impl Hetzner {
    pub fn new(
        base: &str,
        token: SecretString,
        http: Http,
        limits: Limits,
    ) -> Result<Hetzner, ProviderError> {
        Ok(Hetzner {
            api: Api::new("hetzner", base, token, http, limits, error_words)?,
        })
    }

    /// Every row under `key` of a paged listing (`path` may carry a query already).
    async fn all(&self, path: &str, key: &str) -> Result<Vec<Value>, ProviderError> {
        let joiner = if path.contains('?') { '&' } else { '?' };
        let mut rows = Vec::new();
        let mut page = 1;
        loop {
            let answer = self
                .api
                .get(&format!("{path}{joiner}page={page}&per_page={PER_PAGE}"))
                .await?;
            let data = answer[key].as_array().ok_or_else(|| {
                ProviderError::BadAnswer(format!("{path}: no {key:?} in {}", shown(&answer)))
            })?;
            rows.extend(data.iter().cloned());
            match answer["meta"]["pagination"]["next_page"].as_u64() {
                Some(next) if next > u64::from(page) && page < MAX_PAGES => page = next as u32,
                _ => return Ok(rows),
            }
        }
    }

    async fn action(&self, path: &str, body: Value) -> Result<Value, ProviderError> {
        self.api
            .call(Method::POST, path, Some(&body), Retry::Always)
            .await
    }

    async fn servers(&self) -> Result<Vec<Instance>, ProviderError> {
        self.all("servers", "servers")
            .await?
            .iter()
            .map(server)
            .collect()
    }

    /// The primary IPv4's id of a server (for the swap).
    async fn primary_v4(&self, id: &str) -> Result<(String, String), ProviderError> {
        let answer = self.api.get(&format!("servers/{id}")).await?;
        let value = &answer["server"];
        if value["status"] != "off" {
            return Err(ProviderError::Unusable(format!(
                "server {id} must be powered off before its address moves"
            )));
        }
        let ipv4 = &value["public_net"]["ipv4"];
        Ok((text(ipv4, "id")?, text(ipv4, "ip")?))
    }
}

impl CloudProvider for Hetzner {
    fn create(&self, request: &CreateInstance) -> BoxFuture<'_, Result<Created, ProviderError>> {
        let request = request.clone();
        async move {
            let body = create_body(&request)?;
            let (body, label) = (&body, request.label.as_str());
            create_once(
                &self.api,
                || {
                    async move {
                        let answer = self
                            .api
                            .call(Method::POST, "servers", Some(body), Retry::OnlyRateLimited)
                            .await?;
                        Ok(Created {
                            instance: server(&answer["server"])?,
                            root_password: password(&answer)?,
                        })
                    }
                    .boxed()
                },
                || {
                    async move {
                        let found = self
                            .all(&format!("servers?name={label}"), "servers")
                            .await?;
                        let Some(made) = found.first() else {
                            return Ok(None);
                        };
                        let instance = server(made)?;
                        // The password went with the lost answer: a new one is asked for.
                        let reset = self
                            .action(
                                &format!("servers/{}/actions/reset_password", instance.id),
                                json!({}),
                            )
                            .await?;
                        Ok(Some(Created {
                            instance,
                            root_password: password(&reset)?,
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
        let path = format!("servers/{id}");
        async move { server(&self.api.get(&path).await?["server"]) }.boxed()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, ProviderError>> {
        self.servers().boxed()
    }

    fn power(&self, id: &str, power: Power) -> BoxFuture<'_, Result<(), ProviderError>> {
        let action = match power {
            Power::On => "poweron",
            Power::Off => "poweroff",
        };
        let path = format!("servers/{id}/actions/{action}");
        async move { self.action(&path, json!({})).await.map(drop) }.boxed()
    }

    fn offer(&self) -> BoxFuture<'_, Result<Vec<RegionOffer>, ProviderError>> {
        async move {
            let locations = self.all("locations", "locations").await?;
            let types = self.all("server_types", "server_types").await?;
            let mut offer = Vec::new();
            for location in &locations {
                let name = text(location, "name")?;
                let mut sizes = Vec::new();
                for size in &types {
                    let deprecated = !size["deprecation"].is_null() || size["deprecated"] == true;
                    let priced_here = size["prices"].as_array().is_some_and(|prices| {
                        prices
                            .iter()
                            .any(|price| price["location"] == name.as_str())
                    });
                    if deprecated || !priced_here {
                        continue;
                    }
                    sizes.push(SizeOffer {
                        id: text(size, "name")?,
                        vcpus: size["cores"].as_u64().unwrap_or(0) as u32,
                        memory_mb: (size["memory"].as_f64().unwrap_or(0.0) * 1024.0) as u64,
                        disk_gb: size["disk"].as_u64().unwrap_or(0),
                    });
                }
                offer.push(RegionOffer { id: name, sizes });
            }
            Ok(offer)
        }
        .boxed()
    }

    fn set_reverse_dns(
        &self,
        instance: &str,
        address: IpAddr,
        name: &str,
    ) -> BoxFuture<'_, Result<(), ProviderError>> {
        let path = format!("servers/{instance}/actions/change_dns_ptr");
        let body = json!({ "ip": address.to_string(), "dns_ptr": name });
        async move { self.action(&path, body).await.map(drop) }.boxed()
    }

    fn company_name(&self) -> BoxFuture<'_, Result<String, ProviderError>> {
        async move {
            Err(ProviderError::Unusable(
                "Hetzner Cloud's API has no account record to read a company name from".into(),
            ))
        }
        .boxed()
    }

    fn delete_instance(&self, id: &str) -> BoxFuture<'_, Result<(), ProviderError>> {
        let path = format!("servers/{id}");
        async move { self.api.delete(&path).await }.boxed()
    }

    fn volumes(&self) -> BoxFuture<'_, Result<Vec<Volume>, ProviderError>> {
        async move {
            self.all("volumes", "volumes")
                .await?
                .iter()
                .map(|row| {
                    Ok(Volume {
                        id: text(row, "id")?,
                        label: text(row, "name")?,
                        attached_to: row["server"].as_i64().map(|id| id.to_string()),
                        tags: labels(&row["labels"]),
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
            self.all("firewalls", "firewalls")
                .await?
                .iter()
                .map(|row| {
                    Ok(Firewall {
                        id: text(row, "id")?,
                        label: text(row, "name")?,
                        instances: row["applied_to"]
                            .as_array()
                            .map(|targets| {
                                targets
                                    .iter()
                                    .filter(|target| target["type"] == "server")
                                    .filter_map(|target| text(&target["server"], "id").ok())
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
            // Primary IPs move only between powered-off servers (PV-36: "On Hetzner the copy
            // is also powered off before and on after").
            let (one_ip, _) = self.primary_v4(&first).await?;
            let (two_ip, _) = self.primary_v4(&second).await?;
            for ip in [&one_ip, &two_ip] {
                self.action(&format!("primary_ips/{ip}/actions/unassign"), json!({}))
                    .await?;
            }
            for (ip, to) in [(&one_ip, &second), (&two_ip, &first)] {
                let assignee: i64 = to.parse().map_err(|_| {
                    ProviderError::Unusable(format!("{to:?} is not a Hetzner server id"))
                })?;
                self.action(
                    &format!("primary_ips/{ip}/actions/assign"),
                    json!({ "assignee_id": assignee, "assignee_type": "server" }),
                )
                .await?;
            }
            Ok(())
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_reads_from_the_published_shape_and_answers_on_the_64s_first_host() {
        let value = json!({
            "id": 42, "name": "capstan-5-shop", "status": "initializing",
            "public_net": {"ipv4": {"id": 7, "ip": "203.0.113.2"}, "ipv6": {"ip": "2001:db8:1::/64"}},
            "server_type": {"name": "cx22"}, "datacenter": {"location": {"name": "fsn1"}},
            "image": {"name": "debian-12"}, "labels": {"capstan": "", "keep": "yes"},
            "created": "2026-12-01T10:00:00+00:00"
        });
        let read = server(&value).unwrap();
        assert_eq!((read.id.as_str(), read.region.as_str()), ("42", "fsn1"));
        assert_eq!(read.status, Status::Starting("initializing".into()));
        assert_eq!(read.ipv6, vec!["2001:db8:1::1".parse::<IpAddr>().unwrap()]);
        assert_eq!(read.tags, vec!["capstan".to_string(), "keep".to_string()]);
    }

    #[test]
    fn hetzner_refuses_disk_encryption_and_swap_before_anything_is_made() {
        let request = CreateInstance {
            label: "capstan-1-a".into(),
            region: "fsn1".into(),
            size: "cx22".into(),
            image: "debian-12".into(),
            disk_encryption: Some(true),
            swap_mb: None,
            tags: vec!["capstan".into()],
            root_password: SecretString::from("unused"),
        };
        assert!(matches!(
            create_body(&request),
            Err(ProviderError::Unusable(_))
        ));
        let swap = CreateInstance {
            disk_encryption: Some(false),
            swap_mb: Some(512),
            ..request.clone()
        };
        assert!(create_body(&swap).is_err());
        let plain = CreateInstance {
            disk_encryption: Some(false),
            swap_mb: Some(0),
            ..request
        };
        let body = create_body(&plain).unwrap();
        assert_eq!(body["labels"], json!({"capstan": ""}));
        assert!(body.get("root_password").is_none(), "Hetzner makes its own");
    }

    #[test]
    fn hetzner_error_bodies_read_as_code_and_message() {
        let body = json!({"error": {"code": "invalid_input", "message": "invalid input in field 'server_type'"}});
        assert_eq!(
            error_words(&body).as_deref(),
            Some("invalid_input: invalid input in field 'server_type'")
        );
    }
}
