//! `disk_usage`: the largest directories under the site root, bounded. The walk stays on the
//! site's filesystem, never follows a link, stops after a fixed number of entries and says
//! so when it did, and counts the space files take on disk.

use serde_json::{json, Value};
use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use super::{Failed, Finished, Redaction};
use crate::config::Config;

/// The most entries one walk looks at.
const MAX_VISITED: u64 = 1_000_000;
/// Directories this deep under the site root (1 = its children) are listed.
const LISTED_DEPTH: usize = 3;
/// The walk descends no deeper than this.
const MAX_DEPTH: usize = 64;

struct Walk {
    device: u64,
    visited: u64,
    partial: Option<String>,
    listed: Vec<(PathBuf, u64)>,
}

impl Walk {
    /// The bytes on disk under `directory` (itself included).
    fn directory(&mut self, directory: &Path, depth: usize) -> u64 {
        let mut total = 0;
        let entries = match std::fs::read_dir(directory) {
            Ok(entries) => entries,
            Err(error) => {
                self.partial
                    .get_or_insert_with(|| format!("{}: {error}", directory.display()));
                return 0;
            }
        };
        for entry in entries.flatten() {
            if self.visited >= MAX_VISITED {
                self.partial.get_or_insert_with(|| {
                    format!("stopped after {MAX_VISITED} entries; sizes are at least these")
                });
                break;
            }
            self.visited += 1;
            let Ok(metadata) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            let own = metadata.blocks().saturating_mul(512);
            if metadata.is_dir() && metadata.dev() == self.device {
                if depth >= MAX_DEPTH {
                    self.partial.get_or_insert_with(|| {
                        format!("directories deeper than {MAX_DEPTH} were not entered")
                    });
                    total += own;
                    continue;
                }
                total += own + self.directory(&entry.path(), depth + 1);
            } else {
                total += own;
            }
        }
        if (1..=LISTED_DEPTH).contains(&depth) {
            self.listed.push((directory.to_path_buf(), total));
        }
        total
    }
}

pub async fn disk_usage(config: &Config, params: &Value) -> Result<Finished, Failed> {
    let Some(root) = config.site_root.clone() else {
        return Err(Failed::new("this machine has no site"));
    };
    let max_entries = params
        .get("max_entries")
        .and_then(Value::as_u64)
        .unwrap_or(20) as usize;
    tokio::task::spawn_blocking(move || {
        let metadata = std::fs::symlink_metadata(&root)
            .map_err(|error| Failed::new(format!("{}: {error}", root.display())))?;
        if !metadata.is_dir() {
            return Err(Failed::new(format!(
                "{} is not a directory",
                root.display()
            )));
        }
        let mut walk = Walk {
            device: metadata.dev(),
            visited: 0,
            partial: None,
            listed: Vec::new(),
        };
        let total = walk.directory(&root, 0);
        walk.listed
            .sort_by(|left, right| right.1.cmp(&left.1).then(left.0.cmp(&right.0)));
        walk.listed.truncate(max_entries);
        let entries: Vec<Value> = walk
            .listed
            .iter()
            .map(|(path, bytes)| json!({"path": path.display().to_string(), "bytes": bytes}))
            .collect();
        let mut output: Vec<String> = walk
            .listed
            .iter()
            .map(|(path, bytes)| format!("{bytes:>16}  {}", path.display()))
            .collect();
        output.insert(0, format!("{total:>16}  {} (total)", root.display()));
        if let Some(why) = &walk.partial {
            output.push(format!("partial: {why}"));
        }
        Ok(Finished {
            output: output.join("\n"),
            result: json!({"root": root.display().to_string(), "total_bytes": total,
                           "entries": entries, "visited": walk.visited,
                           "partial": walk.partial}),
            redaction: Redaction::Text,
        })
    })
    .await
    .map_err(|error| Failed::new(error.to_string()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_largest_directories_are_listed_first_and_links_are_not_followed() {
        let site = tempfile::tempdir().unwrap();
        let big = site.path().join("uploads");
        std::fs::create_dir_all(big.join("2024")).unwrap();
        std::fs::write(big.join("2024/photo"), vec![7u8; 256 * 1024]).unwrap();
        std::fs::create_dir(site.path().join("cache")).unwrap();
        std::fs::write(site.path().join("cache/x"), b"x").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("huge"), vec![1u8; 1024 * 1024]).unwrap();
        std::os::unix::fs::symlink(outside.path(), site.path().join("link")).unwrap();
        let config = Config {
            site_root: Some(site.path().to_path_buf()),
            letsencrypt_dir: "/nonexistent".into(),
            postgres: "127.0.0.1:1".into(),
        };
        let finished = disk_usage(&config, &json!({"max_entries": 2}))
            .await
            .unwrap();
        let entries = finished.result["entries"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        assert!(entries[0]["path"].as_str().unwrap().ends_with("uploads"));
        assert!(entries[0]["bytes"].as_u64().unwrap() >= 256 * 1024);
        assert!(finished.result["total_bytes"].as_u64().unwrap() < 1024 * 1024);
    }
}
