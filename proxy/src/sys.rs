//! The system calls nothing safe wraps, and the only `unsafe` code of the workspace: pipes and
//! `splice(2)` for the splicer's zero-copy path, registering the listening sockets with the
//! runtime's epoll, `TCP_DEFER_ACCEPT` (which socket2 does not offer) and the scheduling policy
//! of the proxy's threads (`sched.rs`). Each call is wrapped in a
//! safe function or type whose descriptors are borrowed from, or owned by, live values, so they
//! are open for the whole call; every block says why it is sound.
//!
//! Pipes are pooled by the splicer that uses them (`splice::Spares`): a pipe is taken when a
//! bulk burst starts and given back empty when the socket is drained, so idle connections hold
//! no pipe (and no descriptors), and a busy worker does not pay `pipe2` + two `close` per burst.
//! A flow whose reader stalls keeps its pipe, though, so the process counts its pipes and
//! opens no more than [`limit_pipes`] allows: the open-files budget (`fds.rs`) sets their
//! descriptors aside, and a burst beyond the cap is copied, as when `pipe2` fails.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::unix::AsyncFd;

/// Bytes a pipe holds; a bigger pipe moves a bulk stream in fewer system calls (1 MiB is
/// `fs.pipe-max-size`'s default; pages are only taken while bytes sit in the pipe). Falls
/// back to the kernel default (64 KiB) where that limit or the per-user pipe budget refuses it.
const PIPE_SIZE: usize = 1024 * 1024;

/// Pipes open in the process, and the most allowed at once. Process-wide like the
/// descriptor table they are taken from; set at start from the open-files limit.
static PIPES_OPEN: AtomicUsize = AtomicUsize::new(0);
static PIPES_MAX: AtomicUsize = AtomicUsize::new(64);

/// Sets the most pipes open at once (see `fds::pipes_that_fit`).
pub fn limit_pipes(max: usize) {
    PIPES_MAX.store(max, Ordering::Relaxed);
}

/// A pipe with both ends non-blocking and close-on-exec.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Bytes in the pipe, moved in but not yet out.
    pub held: usize,
}

impl Pipe {
    /// A new empty pipe (`pipe2`, then `F_SETPIPE_SZ` to [`PIPE_SIZE`] where permitted), or
    /// an error when [`limit_pipes`] pipes are open already.
    pub fn new() -> io::Result<Pipe> {
        let max = PIPES_MAX.load(Ordering::Relaxed);
        PIPES_OPEN
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .map_err(|_| io::Error::other("pipe budget spent"))?;
        let mut fds: [libc::c_int; 2] = [-1, -1];
        // SAFETY: `fds` is a writable array of two c_ints, which is what pipe2 fills.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            PIPES_OPEN.fetch_sub(1, Ordering::AcqRel);
            return Err(e);
        }
        // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: F_SETPIPE_SZ takes an int argument; `write` is open (owned above). A refusal
        // (EPERM/EINVAL) only leaves the default size, which is correct, just slower.
        let _ = unsafe {
            libc::fcntl(
                write.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                PIPE_SIZE as libc::c_int,
            )
        };
        Ok(Pipe {
            read,
            write,
            held: 0,
        })
    }

    /// Moves what `from` has (up to the pipe's room) into the pipe. `Ok(0)` is end of stream.
    pub fn fill_from(&mut self, from: &impl AsFd) -> io::Result<usize> {
        let n = splice(from.as_fd().as_raw_fd(), self.write.as_raw_fd(), PIPE_SIZE)?;
        self.held += n;
        Ok(n)
    }

    /// Moves bytes held in the pipe out to `to`; returns how many.
    pub fn drain_to(&mut self, to: &impl AsFd) -> io::Result<usize> {
        let n = splice(self.read.as_raw_fd(), to.as_fd().as_raw_fd(), self.held)?;
        self.held -= n.min(self.held);
        Ok(n)
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        PIPES_OPEN.fetch_sub(1, Ordering::AcqRel);
    }
}

fn splice(from: libc::c_int, to: libc::c_int, len: usize) -> io::Result<usize> {
    // SAFETY: callers pass descriptors borrowed from live owners (`OwnedFd`, `TcpStream`), so
    // both are open for the duration of the call; null offsets are what splice requires for
    // pipes and sockets; no memory of ours is read or written.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// A listening socket registered with the runtime (readable: connections are waiting) whose
/// accepted sockets are not: non-blocking and close-on-exec from `accept4(2)`, they stay out
/// of the runtime's epoll unless the intake has to wait for their bytes (see
/// `intake::Down`), which saves the `EPOLL_CTL_ADD` and `EPOLL_CTL_DEL` a tokio listener's
/// sockets cost before the splicer takes them. The `mio` listener is never lent out mutably,
/// so its descriptor cannot be swapped while registered.
#[derive(Debug)]
pub struct Acceptor {
    fd: AsyncFd<mio::net::TcpListener>,
}

impl Acceptor {
    /// Registers `listener` (non-blocking) with the current runtime (must be called inside it).
    pub fn register(listener: std::net::TcpListener) -> io::Result<Acceptor> {
        let listener = mio::net::TcpListener::from_std(listener);
        // SAFETY: `mio::net::TcpListener` owns its descriptor from creation to drop and
        // `as_raw_fd` always returns that one; the `AsyncFd` owns the listener and this type
        // never lends it out mutably, so the descriptor stays open and the same for as long
        // as it is registered.
        let fd = unsafe {
            AsyncFd::register_with_interest(listener, tokio::io::Interest::READABLE)
                .map_err(|e| e.into_parts().1)?
        };
        Ok(Acceptor { fd })
    }

    /// The next connection: one `accept4` while connections are waiting, the wait for the
    /// listener's next readable edge only after one said `EAGAIN` (accept until `EAGAIN`).
    pub async fn accept(&self) -> io::Result<(std::net::TcpStream, std::net::SocketAddr)> {
        let (stream, peer) = self
            .fd
            .async_io(tokio::io::Interest::READABLE, |l| l.accept())
            .await?;
        Ok((stream.into(), peer))
    }
}

impl AsFd for Acceptor {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.get_ref().as_fd()
    }
}

/// `TCP_DEFER_ACCEPT` with `defer` rounded up to whole seconds (at least one).
pub fn set_defer_accept(socket: &impl AsFd, defer: Duration) -> io::Result<()> {
    let secs = libc::c_int::try_from(defer.as_secs().saturating_add(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: a descriptor borrowed from a live socket, and a pointer to a c_int that lives
    // across the call, with its size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            std::ptr::from_ref(&secs).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Puts the calling thread under `policy` (`SCHED_BATCH` or `SCHED_OTHER`) at nice level
/// unchanged; threads it starts afterwards inherit it. On Linux the policy is per thread,
/// pid 0 meaning the caller.
pub fn set_scheduling_policy(policy: libc::c_int) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid, initialised sched_param that outlives the call, which only
    // reads it.
    let rc = unsafe { libc::sched_setscheduler(0, policy, &param) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's scheduling policy.
pub fn scheduling_policy() -> io::Result<libc::c_int> {
    // SAFETY: no pointers; pid 0 is the calling thread.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(policy)
}
