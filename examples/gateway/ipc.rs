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
//! a temporary name and linked to the path once it listens; gateways
//! starting or stopping at once on one path take turns, holding a lock
//! on its directory, so that none takes another's socket for a stale one
//! ([`listen`], [`DirLock`]); temporary names left by gateways killed
//! while starting are removed by the next ([`remove_leftovers`]).
//! Missing directories of the path are made 0751, as geth makes them.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
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
        // Held from the look to the removal: a gateway starting now may
        // have found this socket stale (its listener closed) and be about
        // to put its own at the path.
        let _turn = DirLock::take(&self.path);
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
/// by `link`, which fails when anything is there: no process ever finds
/// the path empty while a socket is replaced, nor a socket there that
/// does not listen yet. A listener keeps listening when its first name
/// is unlinked: the temporary name is removed before this returns.
/// Probing what is at the path, removing it when stale and linking are
/// done holding the directory's [`DirLock`]: two gateways starting at
/// once on one path cannot both take it, and neither can take the
/// other's live socket for a stale one.
pub fn listen(
    path: &Path,
) -> Result<(tokio::net::UnixListener, Socket), Box<dyn std::error::Error>> {
    let shown = path.display();
    // The lengths first (the path's own, then its temporary name's): a
    // path refused changes nothing on disk (its directories were made
    // before it was refused).
    address(path, path)?;
    address(
        path,
        &path.with_file_name(format!(".{:x}", std::process::id())),
    )?;
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
                    .map_err(|e| -> Box<dyn std::error::Error> {
                        let what = format!("--ipc {shown}: making {}: {e}", dir.display());
                        match e.kind() {
                            // A file where a directory of the path goes:
                            // the command line's to change.
                            io::ErrorKind::NotADirectory | io::ErrorKind::AlreadyExists => {
                                Refused(what).into()
                            }
                            _ => what.into(),
                        }
                    })?;
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
            return Err(Refused(format!(
                "--ipc {shown}: a part of the path before its name is not a directory"
            ))
            .into());
        }
        Err(e) => return Err(format!("--ipc {shown}: {e}").into()),
    }
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
    {
        let _turn = DirLock::take(path);
        take(path, &tmp.0)?;
    }
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
/// most, when a process that takes no [`DirLock`] races for the path);
/// never over a live one or anything but a socket. Called holding the
/// directory's lock.
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
        match probe(path) {
            // As a port another program listens on: status 1.
            Ok(()) => {
                return Err(format!(
                    "--ipc {shown}: another process serves this socket; not replaced"
                )
                .into());
            }
            // Nobody listens: a file left by a run that did not remove it.
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                remove_stale(path, (m.dev(), m.ino()))?;
            }
            // Gone since it was looked at (removed by its owner).
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

/// Whether a process listens on the socket at `path`: `Ok` when one
/// does, `ConnectionRefused` when none does (a stale file). The connect
/// does not block: to a live server whose backlog is full (busy or stuck)
/// a blocking one waited for ever, before the signals were acted on, so
/// the gateway hung silently and could not be stopped; a full backlog
/// (`EAGAIN`) says a process listens.
fn probe(path: &Path) -> io::Result<()> {
    let socket = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    socket.set_nonblocking(true)?;
    match socket.connect(&socket2::SockAddr::unix(path)?) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes the stale socket `stale` (device, inode) from `path`, and
/// nothing else: called holding the directory's [`DirLock`], so no other
/// gateway has put its socket there since the probe; the file is looked
/// at again for a process that takes no lock (it is then left, and
/// `take` probes whatever is there).
fn remove_stale(path: &Path, stale: (u64, u64)) -> Result<(), Box<dyn std::error::Error>> {
    let there = match std::fs::symlink_metadata(path) {
        Ok(m) => (m.dev(), m.ino()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("--ipc {}: {e}", path.display()).into()),
    };
    if there == stale {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(
                    format!("--ipc {}: removing the stale socket: {e}", path.display()).into(),
                );
            }
        }
    }
    Ok(())
}

/// An exclusive `flock(2)` on the directory holding a socket's path,
/// held while a gateway looks at what is at the path and replaces or
/// removes it. Without it, a gateway could move a stale socket aside (or
/// remove it) just as another, having done so first, linked its live
/// one there: one gateway then served a socket no longer reachable at
/// the path while it said it served there (seen once in CI, eight
/// gateways started at once on a stale socket's path). Released when
/// dropped, and by the kernel when the process dies (a gateway killed
/// holding it blocks nobody).
///
/// The directory itself is locked, so no lock file is left beside the
/// socket. A directory this user cannot open (execute permission only)
/// is not locked, nor one some other program keeps locked for more than
/// [`DirLock::PATIENCE`] (a gateway holds it for a few system calls):
/// such gateways then take turns only as `link` makes them, which a live
/// socket never loses to (its probe connects) but a stale one's removal
/// may race.
struct DirLock {
    _held: Option<File>,
}

impl DirLock {
    const PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

    fn take(path: &Path) -> DirLock {
        let Ok(dir) = File::open(directory(path)) else {
            return DirLock { _held: None };
        };
        let deadline = std::time::Instant::now() + Self::PATIENCE;
        loop {
            // SAFETY: `dir` owns the open descriptor for the whole call;
            // flock(2) reads and writes no memory of this process.
            if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return DirLock { _held: Some(dir) };
            }
            match io::Error::last_os_error().kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                _ => return DirLock { _held: None },
            }
        }
    }
}

/// The directory holding `path` (`.` for a bare file name).
fn directory(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// Removes, from `path`'s directory, the sockets that gateways killed
/// while starting left there under a temporary name (`.<pid in hex>`,
/// [`Temporary`]; between `bind` and `link`). Each would stay for ever:
/// only a process with that id looks at that name again.
///
/// Only names of exactly that form (the pid written as this code writes
/// it, no leading zero), only sockets (a file or a symbolic link of that
/// name is left, and a link is never followed), only when no process
/// with that id runs (`/proc/<pid>`; on systems without `/proc` nothing
/// is removed, as nothing can be told) and nobody listens there (a
/// program of another kind that happens to use such a name keeps a
/// socket it serves). A gateway starting now in the same directory runs,
/// so its temporary is left. The temporary name does not name `path`
/// (it must stay short to fit a socket's address), so one left by a
/// gateway on another path of the directory is removed too: a file of
/// the same kind, as stale.
fn remove_leftovers(path: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(directory(path)) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(pid) = file.to_str().and_then(leftover_pid) else {
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
        match probe(&at) {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                let _ = std::fs::remove_file(&at);
            }
            // Served, gone, or not ours to judge.
            _ => {}
        }
    }
}

/// The process id in `file`, when it is a gateway's temporary name
/// ([`remove_leftovers`]): `.<pid in hex>`, the pid as [`Temporary`]
/// writes it (lower case, no leading zero).
fn leftover_pid(file: &str) -> Option<u32> {
    let hex = file.strip_prefix('.')?;
    let canonical = !hex.is_empty()
        && !hex.starts_with('0')
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    canonical
        .then(|| u32::from_str_radix(hex, 16).ok())
        .flatten()
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
