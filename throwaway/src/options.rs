//! The one list of `mariadbd` options every throwaway server gets, kept in `mariadbd-common.opts`
//! (a plain file, so that scripts/mariadb-cluster.sh reads the very same list).

/// The option file, compiled in: one option a line, `#` comment lines, blank lines.
const COMMON_FILE: &str = include_str!("../mariadbd-common.opts");

/// The options of `mariadbd-common.opts`, in order.
pub fn common() -> Vec<&'static str> {
    COMMON_FILE
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect()
}

/// The options `mariadb-install-db` gets as well: the InnoDB ones, so that the files it creates
/// (the redo log's size) are the ones the server expects.
pub fn for_install() -> Vec<&'static str> {
    common()
        .into_iter()
        .filter(|option| option.starts_with("--innodb-"))
        .collect()
}

/// `--user=root` when running as root (mariadbd refuses to run as root unless told so), else
/// nothing: the server runs as whoever starts it.
pub fn user() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    (unsafe { libc::geteuid() } == 0).then_some("--user=root")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_is_one_long_option_and_none_repeats() {
        let options = common();
        assert!(options.len() > 5, "{options:?}");
        for option in &options {
            assert!(option.starts_with("--"), "{option:?} is not a long option");
            assert!(!option.contains(' '), "{option:?}: one option a line");
        }
        let mut names: Vec<&str> = options
            .iter()
            .map(|o| o.split('=').next().unwrap_or(o))
            .collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(
            before,
            names.len(),
            "an option is listed twice: {options:?}"
        );
    }

    #[test]
    fn what_the_binlog_watcher_needs_is_in_the_list() {
        let options = common();
        for needed in [
            "--log-bin=mysql-bin",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL",
            "--bind-address=127.0.0.1",
        ] {
            assert!(options.contains(&needed), "{needed} missing: {options:?}");
        }
        assert!(for_install().iter().all(|o| o.starts_with("--innodb-")));
        assert!(for_install().contains(&"--innodb-log-file-size=16M"));
    }
}
