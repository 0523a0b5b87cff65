//! Zero-copy forwarding with `splice(2)` (Linux): socket → pipe → socket, the bytes never
//! enter user space. This is the one module of the proxy allowed `unsafe`: three libc calls
//! (`pipe2`, `splice`, `fcntl`), each wrapped in a safe function whose descriptors are borrowed
//! from owned values, so they are open for the whole call.
//!
//! Pipes are pooled by the splicer that uses them (`splice::Spares`): a pipe is taken when a
//! bulk burst starts and given back empty when the socket is drained, so idle connections hold
//! no pipe (and no descriptors), and a busy worker does not pay `pipe2` + two `close` per burst.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

/// Bytes a pipe holds; a bigger pipe moves a bulk stream in fewer system calls (1 MiB is
/// `fs.pipe-max-size`'s default; pages are only taken while bytes sit in the pipe). Falls
/// back to the kernel default (64 KiB) where that limit or the per-user pipe budget refuses it.
const PIPE_SIZE: usize = 1024 * 1024;

/// A pipe with both ends non-blocking and close-on-exec.
#[derive(Debug)]
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Bytes in the pipe, moved in but not yet out.
    pub held: usize,
}

impl Pipe {
    /// A new empty pipe (`pipe2`, then `F_SETPIPE_SZ` to [`PIPE_SIZE`] where permitted).
    pub fn new() -> io::Result<Pipe> {
        let mut fds: [libc::c_int; 2] = [-1, -1];
        // SAFETY: `fds` is a writable array of two c_ints, which is what pipe2 fills.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
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
