//! Installing MariaDB with apt-get when its programs are missing, for callers that allow it (the
//! scripts do; the tests and the bench do not: they say what to install instead).

use std::process::{Command, Stdio};

use crate::{Error, Programs};

/// The Debian packages that bring all four programs.
pub const PACKAGES: &[&str] = &["mariadb-server", "mariadb-client"];

/// The MariaDB programs; with `allow_apt`, installs [`PACKAGES`] first when one is missing (as
/// root, or through sudo, which asks for a password only when there is a terminal to ask on).
pub fn ensure_programs(allow_apt: bool) -> Result<Programs, Error> {
    match Programs::find() {
        Ok(programs) => Ok(programs),
        Err(missing) if !allow_apt => Err(missing),
        Err(missing) => {
            eprintln!("{missing}");
            apt_install(PACKAGES)?;
            Programs::find()
        }
    }
}

/// `apt-get update && apt-get install -y --no-install-recommends PACKAGES`, as root.
pub fn apt_install(packages: &[&str]) -> Result<(), Error> {
    let failed = |reason: String| Error::Install {
        packages: packages.join(" "),
        reason,
    };
    if which("apt-get").is_none() {
        return Err(failed("apt-get not found".into()));
    }
    let as_root: Vec<&str> = if is_root() {
        vec![]
    } else if which("sudo").is_some() {
        // Without a terminal sudo must not wait for a password nobody can type.
        if stdin_is_terminal() {
            vec!["sudo"]
        } else {
            vec!["sudo", "-n"]
        }
    } else {
        return Err(failed("not root, and no sudo".into()));
    };
    eprintln!("installing {} with apt-get ...", packages.join(" "));
    let steps: [Vec<&str>; 2] = [
        vec!["apt-get", "update"],
        [
            &["apt-get", "install", "-y", "--no-install-recommends"][..],
            packages,
        ]
        .concat(),
    ];
    for step in steps {
        let argv: Vec<&str> = as_root.iter().copied().chain(step).collect();
        let status = Command::new(argv[0])
            .args(&argv[1..])
            .env("DEBIAN_FRONTEND", "noninteractive")
            // apt-get's progress on stderr: stdout belongs to the caller's output contract.
            .stdout(Stdio::from(std::io::stderr()))
            .status()
            .map_err(|e| failed(format!("cannot run {}: {e}", argv.join(" "))))?;
        if !status.success() {
            return Err(failed(format!("`{}` {status}", argv.join(" "))));
        }
    }
    Ok(())
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn stdin_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal()
}
