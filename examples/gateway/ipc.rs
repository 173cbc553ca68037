//! The `--ipc` socket: a Unix-domain socket at a path, as geth's
//! `--ipcpath` (what `cast --rpc-url /path/geth.ipc`, web3.py's
//! `IPCProvider`, ethers' `IpcSocketProvider` and viem's `ipc` transport
//! connect to). Served by `App::serve_ipc`; this module owns the path:
//! what may be replaced there, the socket's permissions, and its removal.
//!
//! geth removes whatever is at the path before it listens, and makes the
//! socket 0600 once it listens. Here a regular file (a typo'd path naming
//! a chain's data, say) is never deleted, and neither is a socket another
//! process still serves (a second gateway would take the path over from
//! the first, whose clients then reach the wrong one); only a socket
//! nobody listens on (left by a run that was killed) is replaced. The
//! socket is 0600 too, made so between `bind` and `listen`: a client of
//! another user cannot connect in between (geth's `chmod` after `listen`
//! leaves a moment when the umask's permissions hold). Missing directories
//! of the path are made 0751, as geth makes them.

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
pub fn listen(
    path: &Path,
) -> Result<(tokio::net::UnixListener, Socket), Box<dyn std::error::Error>> {
    let shown = path.display();
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            return Err(Refused(format!(
                "--ipc {shown}: exists and is not a socket ({}); not replaced",
                kind(&m.file_type())
            ))
            .into());
        }
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            // As a port another program listens on: status 1.
            Ok(_) => {
                return Err(format!(
                    "--ipc {shown}: another process serves this socket; not replaced"
                )
                .into());
            }
            // Nobody listens: a file left by a run that did not remove it
            // (gone already if another gateway starting now removed it).
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                match std::fs::remove_file(path) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => {
                        return Err(format!("--ipc {shown}: removing the stale socket: {e}").into());
                    }
                    _ => {}
                }
            }
            Err(e) => {
                return Err(format!("--ipc {shown}: cannot tell whether it is in use: {e}").into());
            }
        },
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
    let at = socket2::SockAddr::unix(path).map_err(|e| -> Box<dyn std::error::Error> {
        if e.kind() == io::ErrorKind::InvalidInput {
            // The one input socket2 refuses: a path that does not fit
            // `sun_path` (its own message names `SUN_LEN`, which tells an
            // operator nothing).
            Refused(format!(
                "--ipc {shown}: too long for a Unix socket's address ({} bytes; at most {MAX_PATH} here): choose a shorter path",
                path.as_os_str().len()
            ))
            .into()
        } else {
            format!("--ipc {shown}: {e}").into()
        }
    })?;
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    socket
        .bind(&at)
        .map_err(|e| format!("--ipc {shown}: {e}"))?;
    let bound = std::fs::symlink_metadata(path).map_err(|e| format!("--ipc {shown}: {e}"))?;
    // From here on the file is ours: removed on every way out.
    let file = Socket {
        path: path.to_path_buf(),
        id: (bound.dev(), bound.ino()),
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("--ipc {shown}: {e}"))?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    let listener = tokio::net::UnixListener::from_std(socket.into())?;
    Ok((listener, file))
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
