//! Which files the agent may believe: its own state must be its own, and a file that decides
//! what it runs (the policy, the switches) must be one no other user could have written
//! (AG-02: "a file not owned by root, or writable by group/other, is refused").

/// What `lstat`/`fstat` said about a file, reduced to what the rules read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileFacts {
    pub is_symlink: bool,
    pub is_dir: bool,
    pub is_file: bool,
    pub uid: u32,
    /// The permission bits (`st_mode & 0o7777`).
    pub mode: u32,
}

/// Why a file is not trusted, in words a person can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Distrust {
    #[error("{path} is a symbolic link, which the agent never follows")]
    Link { path: String },
    #[error("{path} is not a regular file")]
    NotAFile { path: String },
    #[error("{path} is not a directory")]
    NotADirectory { path: String },
    #[error("{path} is owned by uid {uid}, not by root or the agent's user (uid {agent_uid})")]
    ForeignOwner {
        path: String,
        uid: u32,
        agent_uid: u32,
    },
    #[error("{path} has mode {mode:o}: another user could have written it (fix with chmod go-w)")]
    WritableByOthers { path: String, mode: u32 },
    #[error("{path} has mode {mode:o}: the state directory must be 0700 (fix with chmod 700)")]
    OpenDirectory { path: String, mode: u32 },
    #[error("{path} has mode {mode:o}: it holds the node's secret key and must be 0600")]
    ReadableSecret { path: String, mode: u32 },
}

fn owner_ok(facts: &FileFacts, path: &str, agent_uid: u32) -> Result<(), Distrust> {
    if facts.uid == agent_uid || facts.uid == 0 {
        return Ok(());
    }
    Err(Distrust::ForeignOwner {
        path: path.to_string(),
        uid: facts.uid,
        agent_uid,
    })
}

/// A file that decides what the node does (policy, log access switch, approvals): a regular
/// file, never a link, owned by root or the agent's user, writable by nobody else.
pub fn deciding_file(facts: &FileFacts, path: &str, agent_uid: u32) -> Result<(), Distrust> {
    if facts.is_symlink {
        return Err(Distrust::Link { path: path.into() });
    }
    if !facts.is_file {
        return Err(Distrust::NotAFile { path: path.into() });
    }
    owner_ok(facts, path, agent_uid)?;
    if facts.mode & 0o022 != 0 {
        return Err(Distrust::WritableByOthers {
            path: path.into(),
            mode: facts.mode,
        });
    }
    Ok(())
}

/// The state directory: a real directory (not a link), the agent's user's or root's, and
/// closed to everyone else (0700).
pub fn state_directory(facts: &FileFacts, path: &str, agent_uid: u32) -> Result<(), Distrust> {
    if facts.is_symlink {
        return Err(Distrust::Link { path: path.into() });
    }
    if !facts.is_dir {
        return Err(Distrust::NotADirectory { path: path.into() });
    }
    owner_ok(facts, path, agent_uid)?;
    if facts.mode & 0o077 != 0 {
        return Err(Distrust::OpenDirectory {
            path: path.into(),
            mode: facts.mode,
        });
    }
    Ok(())
}

/// AG-45: the recipes' hold directory: a real directory, root's (or the agent's own user's, when
/// the agent does not run as root), writable by nobody else. A hold marker in any other
/// directory is ignored and the ledger says why.
pub fn hold_directory(facts: &FileFacts, path: &str, agent_uid: u32) -> Result<(), Distrust> {
    if facts.is_symlink {
        return Err(Distrust::Link { path: path.into() });
    }
    if !facts.is_dir {
        return Err(Distrust::NotADirectory { path: path.into() });
    }
    owner_ok(facts, path, agent_uid)?;
    if facts.mode & 0o022 != 0 {
        return Err(Distrust::WritableByOthers {
            path: path.into(),
            mode: facts.mode,
        });
    }
    Ok(())
}

/// The identity file: a deciding file that nobody else may even read (AG-05: mode 0600).
pub fn identity_file(facts: &FileFacts, path: &str, agent_uid: u32) -> Result<(), Distrust> {
    deciding_file(facts, path, agent_uid)?;
    if facts.mode & 0o077 != 0 {
        return Err(Distrust::ReadableSecret {
            path: path.into(),
            mode: facts.mode,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: u32 = 1000;

    fn file(uid: u32, mode: u32) -> FileFacts {
        FileFacts {
            is_symlink: false,
            is_dir: false,
            is_file: true,
            uid,
            mode,
        }
    }

    #[test]
    fn ag_02_a_policy_owned_by_root_or_the_agent_and_closed_to_others_is_trusted() {
        assert!(deciding_file(&file(0, 0o644), "p", AGENT).is_ok());
        assert!(deciding_file(&file(AGENT, 0o600), "p", AGENT).is_ok());
    }

    #[test]
    fn ag_02_a_policy_writable_by_group_or_others_is_refused() {
        for mode in [0o664, 0o646, 0o666, 0o620] {
            assert!(
                matches!(
                    deciding_file(&file(0, mode), "p", AGENT),
                    Err(Distrust::WritableByOthers { .. })
                ),
                "{mode:o}"
            );
        }
    }

    #[test]
    fn ag_02_a_policy_owned_by_another_user_is_refused() {
        assert_eq!(
            deciding_file(&file(33, 0o644), "p", AGENT),
            Err(Distrust::ForeignOwner {
                path: "p".into(),
                uid: 33,
                agent_uid: AGENT
            })
        );
    }

    #[test]
    fn a_link_is_never_trusted_whoever_owns_it() {
        let link = FileFacts {
            is_symlink: true,
            ..file(0, 0o777)
        };
        assert!(matches!(
            deciding_file(&link, "p", AGENT),
            Err(Distrust::Link { .. })
        ));
        assert!(matches!(
            state_directory(&link, "d", AGENT),
            Err(Distrust::Link { .. })
        ));
    }

    #[test]
    fn the_state_directory_must_be_0700() {
        let dir = |mode| FileFacts {
            is_dir: true,
            is_file: false,
            ..file(AGENT, mode)
        };
        assert!(state_directory(&dir(0o700), "d", AGENT).is_ok());
        assert!(matches!(
            state_directory(&dir(0o750), "d", AGENT),
            Err(Distrust::OpenDirectory { .. })
        ));
        assert!(matches!(
            state_directory(&file(AGENT, 0o700), "d", AGENT),
            Err(Distrust::NotADirectory { .. })
        ));
    }

    #[test]
    fn ag_45_a_hold_directory_is_honoured_only_when_root_or_the_agent_alone_may_write_it() {
        let dir = |uid, mode| FileFacts {
            is_dir: true,
            is_file: false,
            ..file(uid, mode)
        };
        assert!(hold_directory(&dir(0, 0o755), "h", AGENT).is_ok());
        assert!(hold_directory(&dir(AGENT, 0o700), "h", AGENT).is_ok());
        assert!(matches!(
            hold_directory(&dir(0, 0o775), "h", AGENT),
            Err(Distrust::WritableByOthers { .. })
        ));
        assert!(matches!(
            hold_directory(&dir(33, 0o755), "h", AGENT),
            Err(Distrust::ForeignOwner { .. })
        ));
        assert!(matches!(
            hold_directory(&file(0, 0o755), "h", AGENT),
            Err(Distrust::NotADirectory { .. })
        ));
    }

    #[test]
    fn ag_05_an_identity_readable_by_others_is_refused() {
        assert!(identity_file(&file(AGENT, 0o600), "i", AGENT).is_ok());
        assert!(matches!(
            identity_file(&file(AGENT, 0o640), "i", AGENT),
            Err(Distrust::ReadableSecret { .. })
        ));
    }
}
