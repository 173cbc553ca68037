//! The `--ipc` socket: a Unix-domain socket at a path, as geth's
//! `--ipcpath` (what `cast --rpc-url /path/geth.ipc`, web3.py's
//! `IPCProvider`, ethers' `IpcSocketProvider` and viem's `ipc` transport
//! connect to). Served by `App::serve_ipc`; this module owns the path:
//! what may be replaced there, the socket's permissions, and its removal.
//!
//! geth removes whatever is at the path before it listens, and makes the
//! socket 0600 once it listens. Here a regular file (a typo'd path naming
//! a chain's data, say) is never deleted, nor a symbolic link (an
//! operator's, wherever it leads, perhaps to a live socket), and neither
//! is a socket another process still serves (a second gateway would take
//! the path over from the first, whose clients then reach the wrong one);
//! only a socket nobody listens on (left by a run that was killed) is
//! replaced. The
//! socket is 0600 too, made so between `bind` and `listen`: a client of
//! another user cannot connect in between (geth's `chmod` after `listen`
//! leaves a moment when the umask's permissions hold). It is bound under
//! a temporary name and linked to the path once it listens, so that
//! gateways starting at once on one path never take each other's socket
//! for a stale one ([`listen`]); such names left by gateways killed while
//! starting are removed by the next ([`remove_leftovers`]). Missing
//! directories of the path are made 0751, as geth makes them.

use std::fmt;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A path the gateway refuses to take: the command line's fault, so the
/// gateway exits with status 2 (a bad command line), not 1.
#[derive(Debug)]
pub struct Refused(pub String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// The socket file the gateway made; removed by [`Socket::remove`] or
/// when dropped (an error return), but only while it is still the file
/// bound (an operator may have put another in its place since).
pub struct Socket {
    path: PathBuf,
    /// Device and inode of the file bound.
    id: (u64, u64),
}

impl Socket {
    /// Removes the socket file if it is still the one bound. Idempotent;
    /// call it before `std::process::exit`, which runs no destructors.
    pub fn remove(&self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path)
            && (m.dev(), m.ino()) == self.id
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Listens on a Unix socket at `path`, owner-only (0600), replacing a
/// stale socket file there; call it inside a runtime. `Err` is a
/// [`Refused`] for a path that holds something other than a socket.
///
/// The socket is bound, made 0600 and listening under a temporary name
/// in the same directory (`.<pid in hex>`) before it appears at `path`
/// by `link`, which fails when anything is there: two gateways starting
/// at once on one path cannot both take it, and neither can take the
/// other's live socket for a stale one (probing, then removing, then
/// binding left a moment in which the second removed the first's socket
/// and bound its own). A listener keeps listening when its first name
/// is unlinked: the temporary name is removed before this returns.
pub fn listen(
    path: &Path,
) -> Result<(tokio::net::UnixListener, Socket), Box<dyn std::error::Error>> {
    let shown = path.display();
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => return Err(not_a_socket(path, &m).into()),
        // Probed once the socket listens (`link` says it is taken).
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // A fresh data directory: made as geth makes its IPC path's
            // (owner-writable, others may only pass through).
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o751)
                    .create(dir)
                    .map_err(|e| format!("--ipc {shown}: making {}: {e}", dir.display()))?;
            }
        }
        Err(e) => return Err(format!("--ipc {shown}: {e}").into()),
    }
    // The path's own length first: the message an operator can act on.
    address(path, path)?;
    remove_leftovers(path);
    let tmp = Temporary::new(path)?;
    let at = address(path, &tmp.0)?;
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    socket
        .bind(&at)
        .map_err(|e| format!("--ipc {shown}: binding {}: {e}", tmp.0.display()))?;
    let bound = std::fs::symlink_metadata(&tmp.0).map_err(|e| format!("--ipc {shown}: {e}"))?;
    let id = (bound.dev(), bound.ino());
    // 0600 before `listen` (and before the path names it): a client of
    // another user can never connect.
    std::fs::set_permissions(&tmp.0, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("--ipc {shown}: {e}"))?;
    socket.listen(1024)?;
    take(path, &tmp.0)?;
    // From here on the file at `path` is ours: removed on every way out.
    let file = Socket {
        path: path.to_path_buf(),
        id,
    };
    drop(tmp);
    socket.set_nonblocking(true)?;
    let listener = tokio::net::UnixListener::from_std(socket.into())?;
    Ok((listener, file))
}

/// Links the listening socket at `tmp` to `path`: at once when nothing
/// is there; after removing a stale socket when one is (twice more at
/// most, when other gateways starting at the same time race for it);
/// never over a live one or anything but a socket.
fn take(path: &Path, tmp: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let shown = path.display();
    for _ in 0..3 {
        match std::fs::hard_link(tmp, path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("--ipc {shown}: linking {}: {e}", tmp.display()).into()),
        }
        let m = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            // Removed since `link` failed: link again.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("--ipc {shown}: {e}").into()),
        };
        if !m.file_type().is_socket() {
            return Err(not_a_socket(path, &m).into());
        }
        match std::os::unix::net::UnixStream::connect(path) {
            // As a port another program listens on: status 1.
            Ok(_) => {
                return Err(format!(
                    "--ipc {shown}: another process serves this socket; not replaced"
                )
                .into());
            }
            // Nobody listens: a file left by a run that did not remove it.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                remove_stale(path, (m.dev(), m.ino()))?;
            }
            // Gone since it was looked at (another gateway moved it aside).
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(format!("--ipc {shown}: cannot tell whether it is in use: {e}").into());
            }
        }
    }
    Err(
        format!("--ipc {shown}: other processes keep replacing the socket there; not replaced")
            .into(),
    )
}

/// Removes the stale socket `stale` (device, inode) from `path`, and
/// nothing else: another gateway starting now may have removed it and
/// linked its live socket there since it was probed. Moved aside first
/// (`rename` moves whatever is there at that instant), then removed if
/// it is the one probed, else put back.
fn remove_stale(path: &Path, stale: (u64, u64)) -> Result<(), Box<dyn std::error::Error>> {
    let shown = path.display();
    let aside = sibling(path, "stale.tmp");
    match std::fs::rename(path, &aside) {
        Ok(()) => {}
        // Removed by another gateway already.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("--ipc {shown}: removing the stale socket: {e}").into()),
    }
    let moved = std::fs::symlink_metadata(&aside).map(|m| (m.dev(), m.ino()));
    if moved.as_ref().is_ok_and(|&id| id != stale) {
        // Another gateway's socket, linked after the probe: put back.
        // (Failing only if a third one linked its own meanwhile, which
        // then serves the path.)
        let _ = std::fs::hard_link(&aside, path);
    }
    let _ = std::fs::remove_file(&aside);
    Ok(())
}

/// A name in `path`'s directory for this process: `PATH.<pid>.<what>`.
fn sibling(path: &Path, what: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.{what}", std::process::id()));
    path.with_file_name(name)
}

/// Removes, from `path`'s directory, the sockets that gateways killed
/// while starting left there: under a temporary name (`.<pid in hex>`,
/// [`Temporary`]; between `bind` and `link`) or moved aside from `path`
/// (`PATH.<pid>.stale.tmp`, [`remove_stale`]). Each would stay for ever:
/// only a process with that id looks at that name again.
///
/// Only names of exactly those forms (the pid written as this code
/// writes it, no leading zero), only sockets (a file or a symbolic link
/// of that name is left, and a link is never followed), only when no
/// process with that id runs (`/proc/<pid>`; on systems without `/proc`
/// nothing is removed, as nothing can be told) and nobody listens there
/// (a program of another kind that happens to use such a name keeps a
/// socket it serves). A gateway starting now in the same directory runs,
/// so its temporary is left. The temporary name does not name `path`
/// (it must stay short to fit a socket's address), so one left by a
/// gateway on another path of the directory is removed too: a file of
/// the same kind, as stale.
fn remove_leftovers(path: &Path) {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return;
    };
    if !Path::new("/proc/self").exists() {
        return;
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(pid) = file.to_str().and_then(|f| leftover_pid(name, f)) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let at = entry.path();
        // Not followed: a link of that name is not one of these files.
        let Ok(m) = std::fs::symlink_metadata(&at) else {
            continue;
        };
        if !m.file_type().is_socket() {
            continue;
        }
        match std::os::unix::net::UnixStream::connect(&at) {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                let _ = std::fs::remove_file(&at);
            }
            // Served, gone, or not ours to judge.
            _ => {}
        }
    }
}

/// The process id in `file`, when it is the name of a temporary of a
/// gateway on the path named `name` ([`remove_leftovers`]): `.<pid in
/// hex>` or `<name>.<pid>.stale.tmp`, each pid as it is written here.
fn leftover_pid(name: &str, file: &str) -> Option<u32> {
    fn pid(digits: &str, radix: u32) -> Option<u32> {
        let canonical = !digits.is_empty()
            && !digits.starts_with('0')
            && digits.bytes().all(|b| match radix {
                16 => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
                _ => b.is_ascii_digit(),
            });
        canonical
            .then(|| u32::from_str_radix(digits, radix).ok())
            .flatten()
    }
    if let Some(hex) = file.strip_prefix('.') {
        return pid(hex, 16);
    }
    let decimal = file
        .strip_prefix(name)?
        .strip_prefix('.')?
        .strip_suffix(".stale.tmp")?;
    pid(decimal, 10)
}

/// The temporary name the socket is bound at, removed when dropped.
struct Temporary(PathBuf);

impl Temporary {
    /// `.<pid in hex>` in `path`'s directory; a socket left there by an
    /// earlier process with this process's id (killed while starting) is
    /// removed first. Short (7 bytes at most, Linux's largest pid being
    /// 2^22), so that it fits a socket's address whenever the path does,
    /// unless the path's own file name is shorter still (`geth.ipc` is 8).
    fn new(path: &Path) -> Result<Temporary, Box<dyn std::error::Error>> {
        let tmp = path.with_file_name(format!(".{:x}", std::process::id()));
        match std::fs::symlink_metadata(&tmp) {
            Ok(m) if m.file_type().is_socket() => {
                let _ = std::fs::remove_file(&tmp);
            }
            Ok(m) => {
                return Err(format!(
                    "--ipc {}: {} (its temporary name) exists and is not a socket ({})",
                    path.display(),
                    tmp.display(),
                    kind(&m.file_type())
                )
                .into());
            }
            Err(_) => {}
        }
        Ok(Temporary(tmp))
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `name`'s address as a Unix socket's; a [`Refused`] naming `path`
/// when it does not fit.
fn address(path: &Path, name: &Path) -> Result<socket2::SockAddr, Box<dyn std::error::Error>> {
    let shown = path.display();
    socket2::SockAddr::unix(name).map_err(|e| -> Box<dyn std::error::Error> {
        if e.kind() != io::ErrorKind::InvalidInput {
            return format!("--ipc {shown}: {e}").into();
        }
        // The one input socket2 refuses: a path that does not fit
        // `sun_path` (its own message names `SUN_LEN`, which tells an
        // operator nothing).
        let len = path.as_os_str().len();
        let extra = name.as_os_str().len().saturating_sub(len);
        Refused(if extra == 0 {
            format!(
                "--ipc {shown}: too long for a Unix socket's address ({len} bytes; at most {MAX_PATH} here): choose a shorter path"
            )
        } else {
            format!(
                "--ipc {shown}: too long for a Unix socket's address ({len} bytes, and {extra} more for the temporary name it is bound at first, {}; at most {MAX_PATH} here): choose a shorter path",
                name.display()
            )
        })
        .into()
    })
}

/// The refusal of `path`, holding something other than a socket.
///
/// A symbolic link is refused wherever it leads, where geth removes it
/// (as it removes anything at its path): the link is an operator's own
/// arrangement, and the socket it leads to may be another process's, a
/// live one that replacing the link would hide from its clients. Nor is
/// it followed: binding through it would make a socket wherever it
/// leads, outside the directory the path names.
fn not_a_socket(path: &Path, m: &std::fs::Metadata) -> Refused {
    let shown = path.display();
    if m.file_type().is_symlink() {
        let to = std::fs::read_link(path)
            .map(|t| t.display().to_string())
            .unwrap_or_else(|e| format!("unreadable: {e}"));
        return Refused(format!(
            "--ipc {shown}: a symbolic link (to {to}); neither followed nor replaced: the socket it leads to may be another process's, and the link is not the gateway's to remove; give --ipc the path it leads to, or remove the link"
        ));
    }
    Refused(format!(
        "--ipc {shown}: exists and is not a socket ({}); not replaced",
        kind(&m.file_type())
    ))
}

/// The longest path a Unix socket's address holds: `sun_path` less the
/// NUL that ends it (108 bytes on Linux, 104 on macOS and the BSDs).
const MAX_PATH: usize = if cfg!(any(target_os = "linux", target_os = "android")) {
    107
} else {
    103
};

/// What a file type is, in words.
fn kind(t: &std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_file() {
        "a regular file"
    } else {
        "a device or a pipe"
    }
}
