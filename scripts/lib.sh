# shellcheck shell=bash
# Shared helpers for the scripts in scripts/ and .ci/run. Source it, do not run it:
#     . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Every function is prefixed with `msgproxy_`; messages go to stderr so that stdout stays usable.

# The repository root (the parent of scripts/), as an absolute physical path.
MSGPROXY_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
export MSGPROXY_REPO

# Directories searched for the MariaDB binaries in addition to PATH (Debian puts mariadbd in /usr/sbin,
# which is not in an ordinary user's PATH; tarball installs live in /usr/local/mysql).
MSGPROXY_MARIADB_DIRS=(/usr/sbin /usr/bin /usr/local/sbin /usr/local/bin /usr/local/mysql/bin /usr/local/mysql/scripts)

msgproxy_info() { printf '%s\n' "$*" >&2; }
msgproxy_warn() { printf 'warning: %s\n' "$*" >&2; }
msgproxy_die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

# msgproxy_find_tool NAME: print the absolute path of NAME (PATH first, then MSGPROXY_MARIADB_DIRS).
msgproxy_find_tool() {
    local name=$1 dir found
    if found=$(command -v "$name" 2>/dev/null) && [ -x "$found" ]; then
        printf '%s\n' "$found"
        return 0
    fi
    for dir in "${MSGPROXY_MARIADB_DIRS[@]}"; do
        if [ -x "$dir/$name" ]; then
            printf '%s\n' "$dir/$name"
            return 0
        fi
    done
    return 1
}

msgproxy_find_mariadbd() { msgproxy_find_tool mariadbd; }

# msgproxy_as_root CMD...: run CMD as root: directly when we are root, else through sudo (which may ask for a
# password when there is a terminal; without one it must not prompt). Fails when neither is possible.
msgproxy_as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        if [ -t 0 ]; then
            sudo "$@"
        else
            sudo -n "$@"
        fi
    else
        return 1
    fi
}

msgproxy_can_be_root() {
    [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null 2>&1
}

# msgproxy_apt_install PKG...: apt-get update && apt-get install the packages (no recommends).
msgproxy_apt_install() {
    command -v apt-get >/dev/null 2>&1 ||
        msgproxy_die "apt-get not found: install these packages with your system's package manager: $*"
    msgproxy_can_be_root ||
        msgproxy_die "need root to install $*: run as root, install sudo, or install them yourself:
    sudo apt-get update && sudo apt-get install -y --no-install-recommends $*"
    msgproxy_info "installing $* with apt-get ..."
    if ! msgproxy_as_root env DEBIAN_FRONTEND=noninteractive apt-get update ||
        ! msgproxy_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"; then
        msgproxy_die "could not install $* (needs root or sudo). Install them yourself:
    sudo apt-get update && sudo apt-get install -y --no-install-recommends $*"
    fi
}

# msgproxy_ensure_mariadb: make sure mariadbd, mariadb-install-db, mariadb-admin and mariadb exist (installing the
# Debian packages mariadb-server and mariadb-client when one is missing), and put the directories they live
# in on PATH (so that child processes, e.g. the integration tests, find mariadbd even outside PATH).
msgproxy_ensure_mariadb() {
    local tool missing=0 path dir
    for tool in mariadbd mariadb-install-db mariadb-admin mariadb; do
        msgproxy_find_tool "$tool" >/dev/null || missing=1
    done
    if [ "$missing" -eq 1 ]; then
        msgproxy_info "MariaDB server/client binaries not found (looked in PATH and ${MSGPROXY_MARIADB_DIRS[*]})"
        msgproxy_apt_install mariadb-server mariadb-client
    fi
    for tool in mariadbd mariadb-install-db mariadb-admin mariadb; do
        path=$(msgproxy_find_tool "$tool") ||
            msgproxy_die "$tool still not found after installing mariadb-server and mariadb-client"
        dir=$(dirname "$path")
        case ":$PATH:" in
        *":$dir:"*) ;;
        *) PATH="$PATH:$dir" ;;
        esac
    done
    export PATH
}

# msgproxy_ensure_chromium: make sure a headless-capable chromium exists for the operator's page tests
# (integration/admin.rs), installing Debian's `chromium` package when none is found; CHROMIUM=/path overrides.
msgproxy_ensure_chromium() {
    if [ -n "${CHROMIUM:-}" ] && [ -x "$CHROMIUM" ]; then
        return 0
    fi
    command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 ||
        msgproxy_apt_install chromium
    command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 ||
        msgproxy_die "chromium still not found after installing Debian's chromium package"
}

# msgproxy_require_cargo: make sure `cargo` runs (also picks up a rustup install not yet on PATH).
msgproxy_require_cargo() {
    if ! command -v cargo >/dev/null 2>&1 && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
        PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
        export PATH
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        cat >&2 <<'EOF'
error: `cargo` (the Rust toolchain) was not found.
Install Rust with rustup (https://rustup.rs):
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component rustfmt,clippy
    . "$HOME/.cargo/env"
then run this command again.
EOF
        exit 1
    fi
}

# msgproxy_require_cargo_subcommand SUBCOMMAND COMPONENT: fail with a hint when e.g. `cargo fmt` is missing.
msgproxy_require_cargo_subcommand() {
    local sub=$1 component=$2
    cargo "$sub" --version >/dev/null 2>&1 ||
        msgproxy_die "\`cargo $sub\` is not available; install it with: rustup component add $component"
}

# msgproxy_port_in_use PORT: true when something accepts TCP connections on 127.0.0.1:PORT.
msgproxy_port_in_use() {
    local port=$1
    # shellcheck disable=SC2016 # $1 is expanded by the inner bash
    if command -v timeout >/dev/null 2>&1; then
        timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$port" 2>/dev/null
    else
        bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$port" 2>/dev/null
    fi
}

# msgproxy_ensure_galera: make sure the Galera provider (galera-4) and what its state transfers use (rsync for
# SST, iproute2's `ss` for the SST script's port checks) are installed, with apt-get when one is missing.
msgproxy_ensure_galera() {
    local missing=()
    [ -f /usr/lib/galera/libgalera_smm.so ] || missing+=(galera-4)
    command -v rsync >/dev/null 2>&1 || missing+=(rsync)
    command -v ss >/dev/null 2>&1 || missing+=(iproute2)
    if [ "${#missing[@]}" -gt 0 ]; then
        msgproxy_info "Galera cluster tests need ${missing[*]}"
        msgproxy_apt_install "${missing[@]}"
    fi
}
