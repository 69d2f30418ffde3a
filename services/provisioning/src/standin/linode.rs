//! The Linode API v4 stand-in: `/v4/...` in the published shapes (an instance's `id`, `label`,
//! `status`, `ipv4`, `ipv6`, `region`, `type`, `image`, `tags`, `created`; pages of `data`,
//! `page`, `pages`, `results`; errors as `{"errors": [{"reason"}]}`).

use serde_json::{json, Value};

use super::{ip, page_of, Answer, Asked, Server, World};

pub fn error(reason: &str) -> Value {
    json!({ "errors": [{ "reason": reason }] })
}

fn not_found() -> Answer {
    (404, error("Not found"))
}

fn instance(server: &Server, running: bool) -> Value {
    let status = match (server.powered, running) {
        (false, _) => "offline",
        (true, true) => "running",
        (true, false) if server.polls <= 1 => "provisioning",
        (true, false) => "booting",
    };
    json!({
        "id": server.id,
        "label": server.label,
        "status": status,
        "ipv4": [ip(server.ipv4)],
        "ipv6": format!("{}/128", server.ipv6),
        "region": server.region,
        "type": server.size,
        "image": server.image,
        "tags": server.tags,
        "created": server.created.format("%Y-%m-%dT%H:%M:%S").to_string(),
        "disk_encryption": server.disk_encryption.clone().unwrap_or_else(|| "enabled".into()),
    })
}

fn paged(asked: &Asked, world: &World, rows: Vec<Value>) -> Answer {
    let page: usize = asked
        .query("page")
        .and_then(|page| page.parse().ok())
        .unwrap_or(1);
    let size: usize = asked
        .query("page_size")
        .and_then(|size| size.parse().ok())
        .unwrap_or(100)
        .min(world.page_cap);
    let results = rows.len();
    let (data, pages) = page_of(rows, page, size);
    (
        200,
        json!({ "data": data, "page": page, "pages": pages, "results": results }),
    )
}

fn create(asked: &Asked, world: &mut World) -> Answer {
    let body = &asked.body;
    let field = |name: &str| body[name].as_str().unwrap_or_default().to_string();
    let (label, region, size, image) = (
        field("label"),
        field("region"),
        field("type"),
        field("image"),
    );
    let mut problems = Vec::new();
    if !world.regions.iter().any(|(name, _)| *name == region) {
        problems.push(json!({"field": "region", "reason": "region is not valid"}));
    } else if !world.sells(&region, &size) {
        problems
            .push(json!({"field": "type", "reason": "A valid plan type by that ID was not found"}));
    }
    if !world.images.contains(&image) {
        problems.push(json!({"field": "image", "reason": "image is not valid"}));
    }
    if field("root_pass").len() < 11 {
        problems.push(
            json!({"field": "root_pass", "reason": "root_pass must be at least 11 characters"}),
        );
    }
    if world.servers.iter().any(|server| server.label == label) {
        problems
            .push(json!({"field": "label", "reason": "Label must be unique among your linodes"}));
    }
    if !problems.is_empty() {
        return (400, json!({ "errors": problems }));
    }
    let tags = body["tags"]
        .as_array()
        .map(|tags| {
            tags.iter()
                .filter_map(|tag| tag.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut server = world.make(&label, &region, &size, &image, tags, field("root_pass"));
    server.disk_encryption = body["disk_encryption"].as_str().map(str::to_string);
    server.swap_size = body["swap_size"].as_u64();
    if let Some(kept) = world.servers.iter_mut().find(|kept| kept.id == server.id) {
        kept.disk_encryption = server.disk_encryption.clone();
        kept.swap_size = server.swap_size;
    }
    (200, instance(&server, false))
}

/// The instances, or the account's other answers.
pub fn answer(asked: &Asked, world: &mut World) -> Answer {
    let segments = asked.segments();
    let id = |index: usize| -> Option<u64> { segments.get(index)?.parse().ok() };
    match (asked.method.as_str(), segments.as_slice()) {
        ("GET", ["linode", "instances"]) => {
            let rows = world
                .servers
                .clone()
                .iter()
                .map(|server| {
                    let (server, running) = world.look(server.id).expect("listed");
                    instance(&server, running)
                })
                .collect();
            paged(asked, world, rows)
        }
        ("POST", ["linode", "instances"]) => create(asked, world),
        ("GET", ["linode", "instances", _]) => match id(2).and_then(|id| world.look(id)) {
            Some((server, running)) => (200, instance(&server, running)),
            None => not_found(),
        },
        ("DELETE", ["linode", "instances", _]) => {
            let before = world.servers.len();
            world.servers.retain(|server| Some(server.id) != id(2));
            if world.servers.len() == before {
                not_found()
            } else {
                (200, json!({}))
            }
        }
        ("POST", ["linode", "instances", _, action @ ("boot" | "shutdown")]) => {
            match world
                .servers
                .iter_mut()
                .find(|server| Some(server.id) == id(2))
            {
                Some(server) => {
                    server.powered = *action == "boot";
                    (200, json!({}))
                }
                None => not_found(),
            }
        }
        _ => account(asked, world),
    }
}

/// The regions and the sizes each sells, or the account's other answers.
fn account(asked: &Asked, world: &mut World) -> Answer {
    let segments = asked.segments();
    match (asked.method.as_str(), segments.as_slice()) {
        ("GET", ["regions"]) => {
            let rows = world.regions.iter().map(|(name, _)| json!({"id": name, "status": "ok", "capabilities": ["Linodes", "Disk Encryption"]})).collect();
            paged(asked, world, rows)
        }
        ("GET", ["regions", "availability"]) => {
            let mut rows = Vec::new();
            let every: Vec<String> = world
                .regions
                .iter()
                .flat_map(|(_, sizes)| sizes.clone())
                .collect();
            for (region, sizes) in &world.regions {
                for plan in &every {
                    rows.push(
                        json!({"region": region, "plan": plan, "available": sizes.contains(plan)}),
                    );
                }
            }
            paged(asked, world, rows)
        }
        ("GET", ["linode", "types"]) => {
            let mut names: Vec<String> = world
                .regions
                .iter()
                .flat_map(|(_, sizes)| sizes.clone())
                .collect();
            names.sort();
            names.dedup();
            let rows = names.iter().map(|name| json!({"id": name, "vcpus": 1, "memory": 1024, "disk": 25600, "class": "standard"})).collect();
            paged(asked, world, rows)
        }
        _ => networking(asked, world),
    }
}

/// Addresses, the account, volumes and firewalls.
fn networking(asked: &Asked, world: &mut World) -> Answer {
    let segments = asked.segments();
    let id = |index: usize| -> Option<u64> { segments.get(index)?.parse().ok() };
    match (asked.method.as_str(), segments.as_slice()) {
        ("PUT", ["networking", "ips", address]) => {
            let rdns = asked.body["rdns"].as_str().map(str::to_string);
            match world.servers.iter_mut().find(|server| {
                server.ipv4.to_string() == *address || server.ipv6.to_string() == *address
            }) {
                Some(server) => {
                    server.rdns = rdns.clone();
                    (
                        200,
                        json!({"address": address, "rdns": rdns, "linode_id": server.id}),
                    )
                }
                None => not_found(),
            }
        }
        ("POST", ["networking", "ips", "assign"]) => {
            for assignment in asked.body["assignments"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                let (Some(address), Some(to)) = (
                    assignment["address"].as_str(),
                    assignment["linode_id"].as_u64(),
                ) else {
                    return (400, error("assignments need address and linode_id"));
                };
                let Ok(address) = address.parse() else {
                    return (400, error("address is not valid"));
                };
                if let Some(server) = world.servers.iter_mut().find(|server| server.id == to) {
                    server.ipv4 = address;
                }
            }
            (200, json!({}))
        }
        ("GET", ["account"]) => (
            200,
            json!({"company": world.company, "email": "ops@example.com"}),
        ),
        ("GET", ["volumes"]) => {
            let rows = world.volumes.iter().map(|volume| json!({
                "id": volume.id, "label": volume.label, "linode_id": volume.attached_to,
                "tags": volume.tags, "created": volume.created.format("%Y-%m-%dT%H:%M:%S").to_string(),
            })).collect();
            paged(asked, world, rows)
        }
        ("DELETE", ["volumes", _]) => {
            let before = world.volumes.len();
            world.volumes.retain(|volume| Some(volume.id) != id(1));
            if world.volumes.len() == before {
                not_found()
            } else {
                (200, json!({}))
            }
        }
        ("GET", ["networking", "firewalls"]) => paged(asked, world, Vec::new()),
        _ => not_found(),
    }
}
