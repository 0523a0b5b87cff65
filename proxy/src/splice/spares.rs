//! Spare copy buffers and pipes of one splicer, and the bytes a flow holds in them.

#[cfg(target_os = "linux")]
use crate::sys::Pipe;

/// Bytes a copy buffer holds; a read that fills it marks a bulk burst, which moves on with
/// `splice(2)` instead of copying.
pub const BUF_SIZE: usize = 64 * 1024;

/// Bytes read from the source and not yet written to the destination. Exists only while the
/// destination pushes back, so an idle connection holds no buffer and no pipe.
#[derive(Debug)]
pub enum Held {
    Copy {
        buf: Vec<u8>,
        at: usize,
        end: usize,
    },
    #[cfg(target_os = "linux")]
    Pipe(Pipe),
}

/// Spare buffers and pipes kept per splicer; beyond that they are freed.
const MAX_SPARE: usize = 16;

/// Spare copy buffers and pipes of one splicer: a busy worker does not pay a 64 KiB
/// malloc/free (and the page faults after glibc trims its heap) per message, nor `pipe2` and
/// two `close` per bulk burst, while idle connections hold neither.
#[derive(Debug, Default)]
pub struct Spares {
    bufs: Vec<Vec<u8>>,
    #[cfg(target_os = "linux")]
    pipes: Vec<Pipe>,
}

impl Spares {
    /// A buffer of `BUF_SIZE` initialised bytes (zeroed once, when first allocated).
    pub fn buf(&mut self) -> Vec<u8> {
        self.bufs.pop().unwrap_or_else(|| vec![0; BUF_SIZE])
    }

    pub fn give_buf(&mut self, mut buf: Vec<u8>) {
        if self.bufs.len() < MAX_SPARE && buf.capacity() >= BUF_SIZE {
            buf.resize(BUF_SIZE, 0);
            self.bufs.push(buf);
        }
    }

    /// A spare pipe or a new one; `None` when no descriptor is left for one.
    #[cfg(target_os = "linux")]
    pub fn pipe(&mut self) -> Option<Pipe> {
        self.pipes.pop().or_else(|| Pipe::new().ok())
    }

    /// Keeps an empty pipe; one still holding bytes is closed.
    #[cfg(target_os = "linux")]
    pub fn give_pipe(&mut self, pipe: Pipe) {
        if pipe.held == 0 && self.pipes.len() < MAX_SPARE {
            self.pipes.push(pipe);
        }
    }

    /// Keeps the buffer or pipe of bytes that are all written out.
    pub fn recycle(&mut self, held: Held) {
        match held {
            Held::Copy { buf, .. } => self.give_buf(buf),
            #[cfg(target_os = "linux")]
            Held::Pipe(p) => self.give_pipe(p),
        }
    }
}
