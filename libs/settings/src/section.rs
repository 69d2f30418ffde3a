//! The loader every process shares and the [`Section`] a service's own settings implement.
//! Each section is read, its `*_FILE` secrets resolved and its values checked on its own, and
//! every problem found in every section is kept, so one start names them all (not the first).

use crate::problem::{Problem, SettingsError};
use capstan_events::Domain;
use serde::de::DeserializeOwned;
use std::collections::BTreeSet;

/// One table of the configuration (`[monitor]` in `capstan.toml`, `CAPSTAN__MONITOR__*` in the
/// environment), defined beside the code that reads it. Missing keys take their value from
/// [`Default`] (the struct carries `#[serde(default, deny_unknown_fields)]`), so every service
/// runs with no file at all.
pub trait Section: DeserializeOwned + Default {
    /// The section's key: `monitor` for `[monitor]` and `CAPSTAN__MONITOR__*`.
    const KEY: &'static str;

    /// Every value that cannot be used, each naming its key (`monitor.tick_ms`); empty when
    /// the section is good. Runs after [`Section::resolve_files`].
    fn validate(&self) -> Vec<Problem>;

    /// Reads the secrets kept in files (`*_FILE` keys) into their values; a file that cannot
    /// be read is a problem naming its key.
    fn resolve_files(&mut self) -> Vec<Problem> {
        Vec::new()
    }
}

/// What a process reads beyond the shared sections: one [`Section`], several as a tuple, or a
/// type of its own that reads a key of another section too (incidents reads the plane's name).
pub trait Sections: Sized {
    fn read(loader: &mut Loader) -> Self;
}

impl<S: Section> Sections for S {
    fn read(loader: &mut Loader) -> S {
        loader.section()
    }
}

impl Sections for () {
    fn read(_: &mut Loader) {}
}

macro_rules! tuple_sections {
    ($($part:ident),+) => {
        impl<$($part: Sections),+> Sections for ($($part,)+) {
            fn read(loader: &mut Loader) -> Self {
                ($($part::read(loader),)+)
            }
        }
    };
}
tuple_sections!(A);
tuple_sections!(A, B);
tuple_sections!(A, B, C);
tuple_sections!(A, B, C, D);
tuple_sections!(A, B, C, D, E);
tuple_sections!(A, B, C, D, E, F);

/// The sections every process shares, read by `capstan_settings` itself.
pub const SHARED_SECTIONS: &[&str] =
    &["database", "nats", "bus", "outbox", "telemetry", "outbound"];

/// The names a service's own section may have: its domain's (`monitor`, `agent_channel`). A
/// process reads only its own section, yet accepts these in the shared file and environment
/// (their services check them); any other section is refused by name, so a typo never passes
/// silently. The sections there are, are the ones `capstan all` reads (`AllSections`), which
/// refuses a domain's name it does not read ([`Loader::refuse_unread_sections`]): a service adds
/// its section there, and nowhere else.
pub fn service_sections() -> impl Iterator<Item = &'static str> {
    Domain::ALL.into_iter().map(<&'static str>::from)
}

/// Defaults < `file` < `CAPSTAN__*` environment, read section by section; problems are kept
/// until [`Loader::finish`].
pub struct Loader {
    config: config::Config,
    problems: Vec<Problem>,
    read: BTreeSet<&'static str>,
    /// Whether this process reads every section there is, so that a section it did not read
    /// is nobody's.
    reads_every_section: bool,
}

impl Loader {
    /// The file (which must exist when named) and the environment's `CAPSTAN__*` variables; an
    /// unreadable file or one that is not TOML is refused at once.
    pub fn new(
        file: Option<&str>,
        environment: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Loader, SettingsError> {
        let mut builder = config::Config::builder();
        if let Some(file) = file {
            builder = builder.add_source(config::File::new(file, config::FileFormat::Toml));
        }
        let environment: config::Map<String, String> = environment
            .into_iter()
            .filter(|(key, _)| key.starts_with("CAPSTAN__"))
            .collect();
        builder = builder.add_source(
            config::Environment::with_prefix("CAPSTAN")
                .prefix_separator("__")
                .separator("__")
                .source(Some(environment)),
        );
        let config = builder
            .build()
            .map_err(|error| SettingsError::Invalid(error.to_string()))?;
        Ok(Loader {
            config,
            problems: Vec::new(),
            read: BTreeSet::new(),
            reads_every_section: false,
        })
    }

    /// Reads section `S` (its defaults when absent), resolves its files and checks it. Each key
    /// is read on its own first, so a key that cannot be read (a string where a number goes, a
    /// key the section does not have) is a problem naming it while the section's other keys
    /// are still read and checked; the bad key's default stands in until [`Loader::finish`]
    /// refuses the whole.
    pub fn section<S: Section>(&mut self) -> S {
        self.read.insert(S::KEY);
        // Deserialized from its value rather than by `Config::get`, which would name the
        // section instead of the key inside it that is wrong.
        let value = match self.config.get::<config::Value>(S::KEY) {
            Ok(value) => value,
            Err(config::ConfigError::NotFound(_)) => {
                config::Value::from(config::Map::<String, config::Value>::new())
            }
            Err(error) => {
                self.problems.push(unreadable(S::KEY, None, error));
                return S::default();
            }
        };
        let mut section = match self.readable_keys::<S>(value).and_then(S::deserialize) {
            Ok(section) => section,
            Err(error) => {
                self.problems.push(unreadable(S::KEY, None, error));
                return S::default();
            }
        };
        self.problems.extend(section.resolve_files());
        self.problems.extend(section.validate());
        section
    }

    /// The keys of section `S`'s `value` that read as `S` each on its own (the section's
    /// `#[serde(default)]` fills the rest); every other key is a problem naming it.
    fn readable_keys<S: Section>(
        &mut self,
        value: config::Value,
    ) -> Result<config::Value, config::ConfigError> {
        let origin = value.origin().map(str::to_string);
        let table = value.into_table()?;
        let mut readable = config::Map::new();
        for (key, entry) in table {
            let alone = config::Map::from([(key.clone(), entry.clone())]);
            match S::deserialize(config::Value::new(origin.as_ref(), alone)) {
                Ok(_) => {
                    readable.insert(key, entry);
                }
                Err(error) => self.problems.push(unreadable(S::KEY, Some(&key), error)),
            }
        }
        Ok(config::Value::new(origin.as_ref(), readable))
    }

    /// One key of a section another crate owns (`gateway.plane_name`), `default` when absent.
    pub fn value<T: DeserializeOwned>(&mut self, key: &'static str, default: T) -> T {
        match self
            .config
            .get::<config::Value>(key)
            .and_then(T::deserialize)
        {
            Ok(value) => value,
            Err(config::ConfigError::NotFound(_)) => default,
            Err(error) => {
                self.problems.push(unreadable(key, None, error));
                default
            }
        }
    }

    /// A problem found while reading, beside the sections' own.
    pub fn push(&mut self, problems: impl IntoIterator<Item = Problem>) {
        self.problems.extend(problems);
    }

    /// `value` when nothing was wrong; else every problem at once, an unknown section among
    /// them. A problem found twice (a key two readers check) is named once.
    pub fn finish<T>(mut self, value: T) -> Result<T, SettingsError> {
        let top = config::Source::collect(&self.config)
            .map_err(|error| SettingsError::Invalid(error.to_string()))?;
        for key in top.keys() {
            let known = self.read.contains(key.as_str())
                || (!self.reads_every_section
                    && (SHARED_SECTIONS.contains(&key.as_str())
                        || service_sections().any(|service| service == key)));
            if !known {
                let known: Vec<&str> = if self.reads_every_section {
                    self.read.iter().copied().collect()
                } else {
                    SHARED_SECTIONS
                        .iter()
                        .copied()
                        .chain(service_sections())
                        .collect()
                };
                self.problems.push(Problem::new(
                    key.clone(),
                    format!("is not a section: known are {}", known.join(", ")),
                ));
            }
        }
        let mut seen = BTreeSet::new();
        self.problems
            .retain(|problem| seen.insert((problem.key.clone(), problem.reason.clone())));
        if self.problems.is_empty() {
            Ok(value)
        } else {
            Err(SettingsError::Problems(self.problems))
        }
    }

    /// This process reads every section there is (`capstan all`): a section it has not read
    /// by [`Loader::finish`] is refused, a domain's name without a section included.
    pub fn refuse_unread_sections(&mut self) {
        self.reads_every_section = true;
    }

    /// The sections read so far (shared and own), for a test that compares them with the names
    /// a service alone leaves to their owners ([`service_sections`]).
    pub fn sections_read(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.read.iter().copied()
    }
}

/// A value of the wrong type or an unknown key, named as precisely as `config` tells: the key
/// inside `at` when it says which, else `entry` of `at` when the problem is known to be that
/// key's, else `at` itself.
fn unreadable(at: &str, entry: Option<&str>, error: config::ConfigError) -> Problem {
    let within = |key: Option<String>| match (key, entry) {
        (Some(key), _) if key != at => format!("{at}.{key}"),
        (_, Some(entry)) => format!("{at}.{entry}"),
        _ => at.to_string(),
    };
    match error {
        config::ConfigError::Type {
            unexpected,
            expected,
            key,
            ..
        } => Problem::new(within(key), format!("is {unexpected}, expected {expected}")),
        config::ConfigError::At { error, key, .. } => Problem::new(within(key), error.to_string()),
        other => Problem::new(within(None), other.to_string()),
    }
}
