//! Where and as whom to connect for `--coordinate`: the URL first, then the standard `PG*`
//! environment variables (`PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`,
//! `PGPASSFILE`), then the password file (`~/.pgpass`), as libpq resolves them
//! (<https://www.postgresql.org/docs/current/libpq-envars.html>,
//! <https://www.postgresql.org/docs/current/libpq-pgpass.html>). A password is kept in the
//! client's configuration only: [`Params`]'s `Display` never shows it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use tokio_postgres::config::Host;
use tokio_postgres::Config;

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A Unix socket: the socket file `DIR/.s.PGSQL.PORT`.
    Unix(PathBuf),
    /// A TCP host and port.
    Tcp(String, u16),
}

/// A connection's parameters, resolved.
#[derive(Clone)]
pub(crate) struct Params {
    /// The client configuration (user, password, database) for `connect_raw`.
    pub(crate) config: Config,
    /// Where to connect.
    pub(crate) target: Target,
    /// The user name.
    pub(crate) user: String,
    /// The database name.
    pub(crate) dbname: String,
}

impl fmt::Display for Params {
    /// `postgres://USER@HOST:PORT/DB` (a socket directory as the host): never the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Unix(socket) => write!(
                f,
                "postgres://{}@[{}]/{}",
                self.user,
                socket.display(),
                self.dbname
            ),
            Target::Tcp(host, port) => {
                write!(f, "postgres://{}@{host}:{port}/{}", self.user, self.dbname)
            }
        }
    }
}

/// Why the URL cannot be used; never quotes the URL (it may hold a password).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ParamsError {
    /// Not a `postgres://` URL or `key=value` string tokio-postgres accepts.
    #[error(
        "--coordinate: not a valid PostgreSQL URL ({0}); expected \
         postgres://[USER[:PASSWORD]@][HOST][:PORT][/DB][?PARAM=VALUE&...] (a Unix socket's \
         directory as ?host=/DIR) or libpq's KEY=VALUE pairs (host=... user=... dbname=...)"
    )]
    Invalid(String),
    /// More than one host (libpq's failover list, or a host in the URL's authority and
    /// another in `?host=`): lanes connects to one server. The hosts named, joined.
    #[error(
        "--coordinate: the URL (or PGHOST) names several hosts ({0}); lanes connects to one \
         server (the fleet's keys are its locks): give one host (a Unix socket's directory \
         alone, as postgres://USER@/DB?host=/DIR)"
    )]
    SeveralHosts(String),
}

/// The environment as a lookup, so that tests give their own.
pub(crate) type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Resolves `url` with the environment `env` and the OS user `os_user` (libpq's last default
/// for the user name); `home` locates `~/.pgpass`.
///
/// # Errors
/// The URL does not parse (the message says why, without quoting it).
pub(crate) fn resolve(
    url: &str,
    env: Env<'_>,
    os_user: &str,
    home: Option<&Path>,
) -> Result<Params, ParamsError> {
    let url = userinfo_at_signs_encoded(url);
    let mut config = Config::from_str(&url).map_err(|err| {
        // tokio-postgres's messages name the part that is wrong, not the text of the URL.
        ParamsError::Invalid(err.to_string())
    })?;
    let nonempty = |name: &str| env(name).filter(|v| !v.is_empty());
    let several = |name: &str| name.contains(',');
    let hosts = config.get_hosts();
    let named_several = hosts.len() > 1
        || hosts.iter().any(|host| match host {
            Host::Unix(dir) => several(&dir.to_string_lossy()),
            Host::Tcp(name) => several(name),
        })
        || (hosts.is_empty() && nonempty("PGHOST").is_some_and(|host| several(&host)));
    if named_several {
        let named: Vec<String> = if hosts.is_empty() {
            nonempty("PGHOST").into_iter().collect()
        } else {
            hosts
                .iter()
                .map(|host| match host {
                    Host::Unix(dir) => dir.display().to_string(),
                    Host::Tcp(name) => name.clone(),
                })
                .collect()
        };
        return Err(ParamsError::SeveralHosts(named.join(", ")));
    }
    let host = match config.get_hosts().first() {
        Some(Host::Unix(dir)) => HostName::Dir(dir.clone()),
        Some(Host::Tcp(name)) => HostName::Name(name.clone()),
        None => match nonempty("PGHOST") {
            Some(host) => {
                if host.starts_with('/') {
                    HostName::Dir(PathBuf::from(host))
                } else {
                    HostName::Name(host)
                }
            }
            None => HostName::Dir(PathBuf::from("/var/run/postgresql")),
        },
    };
    let port = match config.get_ports().first() {
        Some(&port) => port,
        None => nonempty("PGPORT")
            .and_then(|p| p.parse().ok())
            .unwrap_or(5432),
    };
    let user = config
        .get_user()
        .map(str::to_owned)
        .or_else(|| nonempty("PGUSER"))
        .unwrap_or_else(|| os_user.to_owned());
    let dbname = config
        .get_dbname()
        .map(str::to_owned)
        .or_else(|| nonempty("PGDATABASE"))
        .unwrap_or_else(|| user.clone());
    if config.get_password().is_none() {
        let password = nonempty("PGPASSWORD").or_else(|| {
            let file = nonempty("PGPASSFILE")
                .map(PathBuf::from)
                .or_else(|| home.map(|home| home.join(".pgpass")))?;
            // A socket connection: its directory as given, as libpq matches it, then
            // `localhost`, libpq's name for its default directory's socket (so a line
            // written for either is found).
            match &host {
                HostName::Dir(dir) => {
                    password_from_file(&file, &dir.to_string_lossy(), port, &dbname, &user)
                        .or_else(|| password_from_file(&file, "localhost", port, &dbname, &user))
                }
                HostName::Name(name) => password_from_file(&file, name, port, &dbname, &user),
            }
        });
        if let Some(password) = password {
            config.password(password);
        }
    }
    config.user(&user).dbname(&dbname);
    if matches!(host, HostName::Dir(_)) {
        // libpq ignores `sslmode` on a Unix socket: a URL that asks for TLS elsewhere works
        // here too, as it does with libpq.
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
    }
    let target = match host {
        HostName::Dir(dir) => Target::Unix(dir.join(format!(".s.PGSQL.{port}"))),
        HostName::Name(name) => Target::Tcp(name, port),
    };
    Ok(Params {
        config,
        target,
        user,
        dbname,
    })
}

/// `url` with every `@` of its user and password percent-encoded, where they hold one
/// (`postgres://u:p@ss@host/db`, a password pasted as it is). tokio-postgres, like libpq,
/// ends the user and password at the first `@`, so the rest of the password became part of
/// the host: shown in messages, and looked up in DNS. The user and password end here at the
/// last `@` before the host's end (the next `/` or `?`), as WHATWG URLs end them at the last
/// `@` of the authority; percent-encoded, they are decoded as before. A `KEY=VALUE` string,
/// or a URL with one `@` or none there, is returned as it is. (A password with a `/` or `?`
/// before an `@` still needs them encoded: the host seems to end there; such a URL does not
/// parse, and is refused without being quoted.)
fn userinfo_at_signs_encoded(url: &str) -> std::borrow::Cow<'_, str> {
    let Some(rest_at) = ["postgres://", "postgresql://"]
        .iter()
        .find_map(|scheme| url.starts_with(scheme).then_some(scheme.len()))
    else {
        return url.into();
    };
    let rest = &url[rest_at..];
    let Some(first) = rest.find('@') else {
        return url.into();
    };
    // The `@` that ends the user and password: none after it before the host's end.
    let mut last = first;
    loop {
        let after = &rest[last + 1..];
        let host_end = after.find(['/', '?']).unwrap_or(after.len());
        match after[..host_end].find('@') {
            Some(next) => last += 1 + next,
            None => break,
        }
    }
    if last == first {
        return url.into();
    }
    let userinfo = rest[..last].replace('@', "%40");
    format!("{}{userinfo}{}", &url[..rest_at], &rest[last..]).into()
}

enum HostName {
    Dir(PathBuf),
    Name(String),
}

/// The password of the first line of the password file `file` that matches (`*` matches
/// anything; `\:` and `\\` are a colon and a backslash). As libpq does, a file readable by
/// group or others is ignored.
fn password_from_file(
    file: &Path,
    host: &str,
    port: u16,
    dbname: &str,
    user: &str,
) -> Option<String> {
    use std::os::unix::fs::PermissionsExt as _;
    let meta = std::fs::metadata(file).ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.permissions().mode() & 0o077 != 0 {
        // libpq's own warning, so that an ignored file is not a mystery.
        eprintln!(
            "lanes: warning: password file {:?} has group or world access; permissions should \
             be u=rw (0600) or less: it is ignored",
            file.display().to_string()
        );
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    password_from_text(&text, host, port, dbname, user)
}

fn password_from_text(
    text: &str,
    host: &str,
    port: u16,
    dbname: &str,
    user: &str,
) -> Option<String> {
    let port = port.to_string();
    text.lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .find_map(|line| {
            let fields = split_fields(line);
            let [h, p, d, u, password] = <[String; 5]>::try_from(fields).ok()?;
            let matches = |field: &str, value: &str| field == "*" || field == value;
            (matches(&h, host) && matches(&p, &port) && matches(&d, dbname) && matches(&u, user))
                .then_some(password)
        })
}

/// A password file line's fields, split at unescaped colons, escapes undone.
fn split_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    fields.last_mut().expect("one field").push(next);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut().expect("one field").push(c),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn resolve_with(url: &str, vars: &HashMap<String, String>, home: Option<&Path>) -> Params {
        resolve(url, &|name| vars.get(name).cloned(), "osuser", home).unwrap()
    }

    #[test]
    fn the_url_wins_then_the_environment_then_the_defaults() {
        let vars = env(&[
            ("PGHOST", "db.example"),
            ("PGPORT", "6000"),
            ("PGUSER", "envuser"),
            ("PGDATABASE", "envdb"),
        ]);
        let p = resolve_with("postgres://u@h:7000/d", &vars, None);
        assert_eq!(p.target, Target::Tcp("h".into(), 7000));
        assert_eq!((p.user.as_str(), p.dbname.as_str()), ("u", "d"));
        let p = resolve_with("postgres://", &vars, None);
        assert_eq!(p.target, Target::Tcp("db.example".into(), 6000));
        assert_eq!((p.user.as_str(), p.dbname.as_str()), ("envuser", "envdb"));
        let p = resolve_with("postgres://", &env(&[]), None);
        assert_eq!(
            p.target,
            Target::Unix("/var/run/postgresql/.s.PGSQL.5432".into())
        );
        assert_eq!((p.user.as_str(), p.dbname.as_str()), ("osuser", "osuser"));
        let p = resolve_with("postgres:///d?host=/tmp/s&port=5499", &env(&[]), None);
        assert_eq!(p.target, Target::Unix("/tmp/s/.s.PGSQL.5499".into()));
    }

    #[test]
    fn a_password_never_shows_and_comes_from_url_env_or_pgpass_in_that_order() {
        let p = resolve_with(
            "postgres://u:s3cret@h/d",
            &env(&[("PGPASSWORD", "x")]),
            None,
        );
        assert_eq!(p.config.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(p.to_string(), "postgres://u@h:5432/d");
        assert!(!format!("{}", p).contains("s3cret"));
        let p = resolve_with("postgres://u@h/d", &env(&[("PGPASSWORD", "fromenv")]), None);
        assert_eq!(p.config.get_password(), Some(&b"fromenv"[..]));

        let home = tempfile::tempdir().unwrap();
        let file = home.path().join(".pgpass");
        std::fs::write(
            &file,
            "# comment\nother:*:*:*:no\nlocalhost:5432:d:u:sock\\:pw\nh:*:*:u:tcp\\\\pw\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let p = resolve_with("postgres://u@h/d", &env(&[]), Some(home.path()));
        assert_eq!(p.config.get_password(), Some(&b"tcp\\pw"[..]));
        let p = resolve_with("postgres://u@/d?host=/run/x", &env(&[]), Some(home.path()));
        assert_eq!(
            p.config.get_password(),
            Some(&b"sock:pw"[..]),
            "a socket is localhost"
        );
        let p = resolve_with("postgres://v@h/d", &env(&[]), Some(home.path()));
        assert_eq!(p.config.get_password(), None, "no line matches");
        // A line for the socket's directory, as libpq matches one, comes first.
        std::fs::write(
            &file,
            "localhost:5432:d:u:local\n/run/x:5432:d:u:by\\:dir\n",
        )
        .unwrap();
        let p = resolve_with("postgres://u@/d?host=/run/x", &env(&[]), Some(home.path()));
        assert_eq!(p.config.get_password(), Some(&b"by:dir"[..]));
        let p = resolve_with("postgres://u@/d?host=/run/y", &env(&[]), Some(home.path()));
        assert_eq!(p.config.get_password(), Some(&b"local"[..]));
        // Readable by others: ignored, as libpq does.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let p = resolve_with("postgres://u@h/d", &env(&[]), Some(home.path()));
        assert_eq!(p.config.get_password(), None);
        // PGPASSFILE names another file.
        let other = home.path().join("pw");
        std::fs::write(&other, "*:*:*:*:any\n").unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o600)).unwrap();
        let vars = env(&[("PGPASSFILE", other.to_str().unwrap())]);
        let p = resolve_with("postgres://u@h/d", &vars, Some(home.path()));
        assert_eq!(p.config.get_password(), Some(&b"any"[..]));
    }

    #[test]
    fn a_password_with_an_at_sign_stays_the_password_and_never_becomes_the_host() {
        for (url, user, password, target) in [
            (
                "postgres://fleet:pa@ss_Secret9@localhost/d",
                "fleet",
                "pa@ss_Secret9",
                Target::Tcp("localhost".into(), 5432),
            ),
            (
                "postgresql://fleet:pa@ss@/d?host=/run/pg",
                "fleet",
                "pa@ss",
                Target::Unix("/run/pg/.s.PGSQL.5432".into()),
            ),
            (
                "postgres://me@corp:a@b@h:6000/d",
                "me@corp",
                "a@b",
                Target::Tcp("h".into(), 6000),
            ),
            // One `@`, or an encoded one: as before.
            (
                "postgres://u:p%40w@h/d",
                "u",
                "p@w",
                Target::Tcp("h".into(), 5432),
            ),
            (
                "postgres://u:p/w?x@h/d",
                "u",
                "p/w?x",
                Target::Tcp("h".into(), 5432),
            ),
        ] {
            let p = resolve_with(url, &env(&[]), None);
            assert_eq!(p.user, user, "{url}");
            assert_eq!(p.config.get_password(), Some(password.as_bytes()), "{url}");
            assert_eq!(p.target, target, "{url}");
            assert!(!p.to_string().contains(password), "{url}: {p}");
        }
    }

    #[test]
    fn a_unix_socket_ignores_sslmode_as_libpq_does() {
        let p = resolve_with(
            "postgres://u@/d?host=/run/pg&sslmode=require",
            &env(&[]),
            None,
        );
        assert_eq!(
            p.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Disable
        );
        let p = resolve_with("postgres://u@h/d?sslmode=require", &env(&[]), None);
        assert_eq!(
            p.config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
    }

    #[test]
    fn a_bad_url_is_refused_without_quoting_it() {
        let err = resolve("postgres://u:pw@h:notaport/d", &|_| None, "o", None)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.starts_with("--coordinate: not a valid PostgreSQL URL"),
            "{err}"
        );
        assert!(!err.contains("pw"), "{err}");
    }

    #[test]
    fn several_hosts_are_refused_wherever_they_are_named() {
        for (url, pghost) in [
            ("postgres://u:pw@a,b/d", None),
            ("postgres://u:pw@/d?host=/run/a,/run/b", None),
            ("host=a,b user=u password=pw", None),
            ("postgres://u:pw@/d", Some("/run/a,/run/b")),
            ("postgres://u:pw@localhost/d?host=/run/a", None),
        ] {
            let vars = move |name: &str| pghost.filter(|_| name == "PGHOST").map(str::to_owned);
            let err = resolve(url, &vars, "o", None).err().map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(|e| e.contains("several hosts")),
                "{url} {pghost:?}: {err:?}"
            );
            assert!(!err.unwrap().contains("pw"));
        }
        assert!(resolve("postgres://u@/d?host=/run/a", &|_| None, "o", None).is_ok());
        // The hosts are named, so that a host and a `?host=` directory are seen as two.
        let both = resolve(
            "postgres://u:pw@localhost/d?host=/run/a",
            &|_| None,
            "o",
            None,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(both.contains("(localhost, /run/a)"), "{both}");
    }
}
