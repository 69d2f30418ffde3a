//! The site's PostgreSQL database with the node's own client programs. The connection string
//! is read from `site.json` (or the file it names) when a word runs and given to each program
//! only through libpq's environment (`PGHOST`, `PGPASSWORD`, ...), never its command line,
//! where `ps` would show it (BK-29). Every program is found in the fixed directories and runs
//! with a cleared environment.

use std::{
    io::{self, BufRead, BufReader, Read, Write},
    path::PathBuf,
    process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio},
};

use crate::{
    domain::{
        backup::DatabaseCounts,
        site::{BadConnection, ConnectionFacts, DatabaseSource},
    },
    words::find_program,
};

/// What went wrong with the site's database or its client programs.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    #[error("the database URL file {}: {source}", path.display())]
    UrlFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    BadUrl(#[from] BadConnection),
    #[error("{program} is not installed on this node (the PostgreSQL client programs are needed)")]
    NotInstalled { program: &'static str },
    #[error("{program} could not start: {source}")]
    NotStarted {
        program: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{what}: {source}")]
    Lost {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("{what} failed ({status}): {stderr}")]
    Failed {
        what: &'static str,
        status: ExitStatus,
        stderr: String,
    },
    #[error("psql failed: {stderr}")]
    Refused { stderr: String },
    #[error("the site's database cannot be read: {stderr}")]
    Unreadable { stderr: String },
    #[error("the table count did not read: {line:?}")]
    BadCount { line: String },
    #[error("reading the dump: {0}")]
    DumpUnreadable(#[source] io::Error),
    #[error("writing the dump: {0}")]
    DumpUnwritable(#[source] io::Error),
    #[error("writing the dump to the program: {0}")]
    ProgramUnwritable(#[source] io::Error),
    #[error("the scratch database cannot be created: {0}")]
    NoScratch(#[source] Box<DatabaseError>),
}

/// The site's database connection, read now.
pub fn connection(source: &DatabaseSource) -> Result<ConnectionFacts, DatabaseError> {
    match source {
        DatabaseSource::Url(url) => Ok(ConnectionFacts::parse(url)?),
        DatabaseSource::UrlFile(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| DatabaseError::UrlFile {
                path: path.clone(),
                source,
            })?;
            Ok(ConnectionFacts::parse(text.trim())?)
        }
    }
}

fn program(name: &'static str) -> Result<PathBuf, DatabaseError> {
    find_program(name).ok_or(DatabaseError::NotInstalled { program: name })
}

fn not_started(program: &'static str) -> impl FnOnce(io::Error) -> DatabaseError {
    move |source| DatabaseError::NotStarted { program, source }
}

/// A PostgreSQL program with the site's connection in its environment.
fn command(
    name: &'static str,
    facts: &ConnectionFacts,
    dbname: Option<&str>,
) -> Result<Command, DatabaseError> {
    let mut command = Command::new(program(name)?);
    command
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .env("PGCONNECT_TIMEOUT", "15")
        .envs(facts.env(dbname))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Ok(command)
}

/// The last lines a program wrote to stderr, for an error.
fn stderr_of(child: &mut Child) -> String {
    let mut text = String::new();
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join("; ")
}

fn finish(mut child: Child, what: &'static str) -> Result<(), DatabaseError> {
    let stderr = stderr_of(&mut child);
    let status = child
        .wait()
        .map_err(|source| DatabaseError::Lost { what, source })?;
    if status.success() {
        Ok(())
    } else {
        Err(DatabaseError::Failed {
            what,
            status,
            stderr,
        })
    }
}

/// Counts every table of the public schema and its rows, as one query.
const COUNT_QUERY: &str = "SELECT count(*), coalesce(sum((xpath('/row/c/text()', \
     query_to_xml(format('SELECT count(*) AS c FROM %I.%I', schemaname, tablename), \
     false, true, '')))[1]::text::bigint), 0) FROM pg_tables WHERE schemaname = 'public';";

/// An open psql session holding a repeatable-read snapshot, so the counts and the dump see
/// the same database.
struct Snapshot {
    child: Child,
    stdin: ChildStdin,
    lines: io::Lines<BufReader<ChildStdout>>,
}

impl Snapshot {
    fn open(facts: &ConnectionFacts) -> Result<(Snapshot, String, DatabaseCounts), DatabaseError> {
        let mut child = command("psql", facts, None)?
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .stdin(Stdio::piped())
            .spawn()
            .map_err(not_started("psql"))?;
        let mut stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let mut lines = BufReader::new(stdout).lines();
        let asked = writeln!(
            stdin,
            "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY;\nSELECT pg_export_snapshot();\n{COUNT_QUERY}"
        );
        let mut next = || lines.next().and_then(Result::ok);
        let (snapshot, counts) = match (asked, next(), next()) {
            (Ok(()), Some(snapshot), Some(counts)) => (snapshot, counts),
            _ => {
                drop(stdin);
                let stderr = stderr_of(&mut child);
                let _ = child.wait();
                return Err(DatabaseError::Unreadable { stderr });
            }
        };
        let counts = parse_counts(&counts)?;
        Ok((
            Snapshot {
                child,
                stdin,
                lines,
            },
            snapshot.trim().to_string(),
            counts,
        ))
    }

    fn close(mut self) -> Result<(), DatabaseError> {
        let _ = writeln!(self.stdin, "COMMIT;");
        drop(self.stdin);
        drop(self.lines);
        finish(self.child, "psql")
    }
}

fn parse_counts(line: &str) -> Result<DatabaseCounts, DatabaseError> {
    let mut fields = line.trim().split('|').map(|field| field.parse::<u64>());
    match (fields.next(), fields.next()) {
        (Some(Ok(tables)), Some(Ok(rows))) => Ok(DatabaseCounts { tables, rows }),
        _ => Err(DatabaseError::BadCount {
            line: line.to_string(),
        }),
    }
}

/// `pg_dump --format=custom` of the site's database into `out` (blocking), with the tables
/// and rows the dump holds (counted in the dump's own snapshot).
pub fn dump(facts: &ConnectionFacts, out: &mut dyn Write) -> Result<DatabaseCounts, DatabaseError> {
    let (snapshot, id, counts) = Snapshot::open(facts)?;
    let mut child = command("pg_dump", facts, None)?
        .args(["--format=custom", "--compress=0"])
        .arg(format!("--snapshot={id}"))
        .spawn()
        .map_err(not_started("pg_dump"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let copied = io::copy(&mut stdout, out);
    drop(stdout);
    let finished = finish(child, "pg_dump");
    snapshot.close()?;
    finished?;
    copied.map_err(DatabaseError::DumpUnwritable)?;
    Ok(counts)
}

/// What feeding a dump to a program found.
#[derive(Debug)]
enum Fed {
    /// Every byte of the dump was read (and written, unless the program stopped reading).
    Whole,
    /// The dump could not be read to its end: its decryption, decompression or hash failed.
    Unreadable(io::Error),
    /// The program's pipe failed other than by the program closing it.
    Unwritable(io::Error),
}

/// Copies `input` to `stdin`, then closes it. A program may stop reading early and close its
/// end (`pg_restore --list` reads only the table of contents; a failing restore exits at its
/// first error): the write then fails with a broken pipe, which is not the dump's fault, so
/// the rest of the dump is still read to its end (and dropped) — reading it is what checks its
/// decryption, decompression and hash — and the program's own exit status and words judge it.
fn feed(input: &mut dyn Read, stdin: ChildStdin) -> Fed {
    let mut stdin = Some(stdin);
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match input.read(&mut buffer) {
            Ok(0) => return Fed::Whole,
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Fed::Unreadable(error),
        };
        let Some(pipe) = stdin.as_mut() else {
            continue;
        };
        match pipe.write_all(&buffer[..read]) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::BrokenPipe => stdin = None,
            Err(error) => return Fed::Unwritable(error),
        }
    }
}

/// The verdict on a program fed a dump: the dump's own fault first (the program only saw it
/// cut short), then the program's exit status and stderr; a broken pipe alone is no failure.
fn judge(fed: Fed, finished: Result<(), DatabaseError>) -> Result<(), DatabaseError> {
    match fed {
        Fed::Unreadable(error) => Err(DatabaseError::DumpUnreadable(error)),
        Fed::Unwritable(error) => {
            finished?;
            Err(DatabaseError::ProgramUnwritable(error))
        }
        Fed::Whole => finished,
    }
}

/// `pg_restore --list` of a dump read from `input` (level 2): the number of entries it lists.
/// The dump is read to its end even though `pg_restore` stops after the table of contents.
pub fn list(input: &mut dyn Read) -> Result<u64, DatabaseError> {
    let mut child = Command::new(program("pg_restore")?)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .arg("--list")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(not_started("pg_restore"))?;
    let stdout = child.stdout.take().expect("piped");
    let counting = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .filter(|line| !line.starts_with(';') && !line.trim().is_empty())
            .count() as u64
    });
    let fed = feed(input, child.stdin.take().expect("piped"));
    let entries = counting.join().unwrap_or(0);
    judge(fed, finish(child, "pg_restore --list"))?;
    Ok(entries)
}

/// Runs SQL on `dbname` (or the site's database) with psql, stopping at the first error.
pub fn psql(
    facts: &ConnectionFacts,
    dbname: Option<&str>,
    sql: &str,
) -> Result<String, DatabaseError> {
    let child = command("psql", facts, dbname)?
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .spawn()
        .map_err(not_started("psql"))?;
    let output = child
        .wait_with_output()
        .map_err(|source| DatabaseError::Lost {
            what: "psql",
            source,
        })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    } else {
        Err(DatabaseError::Refused {
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

/// The tables and rows of the public schema of `dbname` (or the site's database).
pub fn counts(
    facts: &ConnectionFacts,
    dbname: Option<&str>,
) -> Result<DatabaseCounts, DatabaseError> {
    parse_counts(&psql(facts, dbname, COUNT_QUERY)?)
}

/// Loads a dump read from `input` into `dbname` (or the site's database), stopping at the
/// first error (BK-28: `pg_restore --exit-on-error`). A load that stops early reports
/// `pg_restore`'s own error, not the broken pipe its early exit left the writer.
pub fn restore(
    facts: &ConnectionFacts,
    dbname: Option<&str>,
    input: &mut dyn Read,
) -> Result<(), DatabaseError> {
    let target = dbname.unwrap_or(&facts.dbname).to_string();
    let mut child = command("pg_restore", facts, dbname)?
        .args([
            "--exit-on-error",
            "--no-owner",
            "--single-transaction",
            "--dbname",
        ])
        .arg(&target)
        .stdin(Stdio::piped())
        .spawn()
        .map_err(not_started("pg_restore"))?;
    let fed = feed(input, child.stdin.take().expect("piped"));
    judge(fed, finish(child, "pg_restore"))
}

/// Drops and recreates the public schema of the site's database (BK-28), and removes its
/// large objects: they belong to no schema, and the dump recreates each with its own OID, so
/// one left behind stops the load ("duplicate key ... pg_largeobject_metadata").
pub fn reset_public_schema(facts: &ConnectionFacts) -> Result<(), DatabaseError> {
    psql(
        facts,
        None,
        "DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public; \
         SELECT count(lo_unlink(oid)) FROM pg_largeobject_metadata;",
    )
    .map(|_| ())
}

/// A scratch database for a rehearsal, created with the site's connection and dropped after.
pub struct Scratch<'a> {
    facts: &'a ConnectionFacts,
    pub name: String,
}

impl<'a> Scratch<'a> {
    pub fn create(facts: &'a ConnectionFacts, seq: u64) -> Result<Scratch<'a>, DatabaseError> {
        let name = format!("capstan_rehearse_{seq}_{:08x}", rand::random::<u32>());
        psql(facts, None, &format!("CREATE DATABASE \"{name}\""))
            .map_err(|error| DatabaseError::NoScratch(Box::new(error)))?;
        Ok(Scratch { facts, name })
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        let _ = psql(
            self.facts,
            None,
            &format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program that reads `bytes` of its input and exits (as `pg_restore --list` does after
    /// the table of contents).
    fn stops_after(bytes: usize) -> Child {
        Command::new("/bin/sh")
            .args(["-c", &format!("head -c {bytes} > /dev/null")])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Counts what it hands out, so the test sees the dump read to its end.
    struct Counted<R> {
        inner: R,
        read: usize,
    }

    impl<R: Read> Read for Counted<R> {
        fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
            let read = self.inner.read(buffer)?;
            self.read += read;
            Ok(read)
        }
    }

    #[test]
    fn a_program_that_stops_reading_early_is_judged_by_its_exit_and_the_dump_is_read_whole() {
        let dump = vec![7u8; 8 * 1024 * 1024];
        let mut input = Counted {
            inner: dump.as_slice(),
            read: 0,
        };
        let mut child = stops_after(1024);
        let fed = feed(&mut input, child.stdin.take().unwrap());
        assert!(matches!(fed, Fed::Whole), "{fed:?}");
        assert_eq!(input.read, dump.len());
        assert!(matches!(judge(fed, finish(child, "the reader")), Ok(())));
    }

    #[test]
    fn a_dump_that_cannot_be_read_is_its_own_fault_and_a_failed_program_speaks_for_itself() {
        struct Damaged;
        impl Read for Damaged {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("MAC is invalid"))
            }
        }
        let mut child = stops_after(1);
        let fed = feed(&mut Damaged, child.stdin.take().unwrap());
        assert_eq!(
            judge(fed, finish(child, "the reader"))
                .unwrap_err()
                .to_string(),
            "reading the dump: MAC is invalid"
        );
        let mut child = Command::new("/bin/sh")
            .args([
                "-c",
                "head -c 1 > /dev/null; echo 'error: bad entry' >&2; exit 1",
            ])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let fed = feed(&mut [1u8; 1 << 20].as_slice(), child.stdin.take().unwrap());
        let judged = judge(fed, finish(child, "pg_restore"))
            .unwrap_err()
            .to_string();
        assert!(
            judged.starts_with("pg_restore failed") && judged.ends_with("error: bad entry"),
            "{judged}"
        );
    }
}
