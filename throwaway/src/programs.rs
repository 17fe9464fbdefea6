//! Finding the MariaDB programs: an environment variable naming one, then PATH, then the
//! directories distributions put them in (Debian's mariadbd is in /usr/sbin, outside an ordinary
//! user's PATH; tarball installs live in /usr/local/mysql).

use std::path::{Path, PathBuf};

use crate::Error;

/// Searched after PATH.
pub const EXTRA_DIRS: &[&str] = &[
    "/usr/sbin",
    "/usr/bin",
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/local/mysql/bin",
    "/usr/local/mysql/scripts",
    "/opt/homebrew/bin",
];

/// One of the programs the harness runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    Server,
    InstallDb,
    Client,
    Admin,
}

impl Program {
    /// File names, current first (MySQL-era names are links to the same programs).
    fn names(self) -> &'static [&'static str] {
        match self {
            Program::Server => &["mariadbd", "mysqld"],
            Program::InstallDb => &["mariadb-install-db", "mysql_install_db"],
            Program::Client => &["mariadb", "mysql"],
            Program::Admin => &["mariadb-admin", "mysqladmin"],
        }
    }

    /// The variable that names the program directly (a build outside the usual places).
    pub fn env_var(self) -> &'static str {
        match self {
            Program::Server => "MARIADBD",
            Program::InstallDb => "MARIADB_INSTALL_DB",
            Program::Client => "MARIADB_CLIENT",
            Program::Admin => "MARIADB_ADMIN",
        }
    }

    /// Where the program is, if anywhere.
    pub fn find(self) -> Option<PathBuf> {
        if let Some(path) = std::env::var_os(self.env_var()) {
            return Some(PathBuf::from(path));
        }
        let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        dirs.extend(EXTRA_DIRS.iter().map(PathBuf::from));
        self.names()
            .iter()
            .flat_map(|name| dirs.iter().map(move |dir| dir.join(name)))
            .find(|candidate| candidate.is_file())
    }

    /// Like [`Program::find`], with an error that says how to get it.
    pub fn require(self) -> Result<PathBuf, Error> {
        self.find().ok_or_else(|| Error::ProgramMissing {
            program: self.names()[0],
            dirs: EXTRA_DIRS.join(", "),
            env_var: self.env_var(),
        })
    }
}

/// The MariaDB programs, all found.
#[derive(Clone, Debug)]
pub struct Programs {
    pub mariadbd: PathBuf,
    pub install_db: PathBuf,
    pub client: PathBuf,
    pub admin: PathBuf,
}

impl Programs {
    /// Finds all four, or says which one is missing.
    pub fn find() -> Result<Programs, Error> {
        Ok(Programs {
            mariadbd: Program::Server.require()?,
            install_db: Program::InstallDb.require()?,
            client: Program::Client.require()?,
            admin: Program::Admin.require()?,
        })
    }

    /// `--basedir=PREFIX` for a `mariadbd` outside the distribution's prefix (e.g.
    /// /usr/local/mysql/bin), which otherwise does not find its own files.
    pub fn basedir_option(&self) -> Option<String> {
        basedir_option(&self.mariadbd)
    }
}

fn basedir_option(mariadbd: &Path) -> Option<String> {
    if ["/usr/sbin/", "/usr/bin/", "/usr/libexec/"]
        .iter()
        .any(|prefix| mariadbd.starts_with(prefix))
    {
        return None;
    }
    let prefix = mariadbd.parent()?.parent()?;
    Some(format!("--basedir={}", prefix.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_server_outside_the_distribution_prefix_gets_a_basedir() {
        assert_eq!(basedir_option(Path::new("/usr/sbin/mariadbd")), None);
        assert_eq!(
            basedir_option(Path::new("/usr/local/mysql/bin/mariadbd")).as_deref(),
            Some("--basedir=/usr/local/mysql")
        );
    }
}
