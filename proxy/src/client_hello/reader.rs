//! A cursor over untrusted bytes, after rustls' `codec::Reader`: every read is bounds-checked and
//! returns `None` instead of panicking, and a length-prefixed field is read through a sub-reader
//! that cannot see past the field's end.

/// Reads big-endian integers and slices from the front of a byte slice.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }

    /// Takes the next `n` bytes, or nothing if fewer remain.
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = self.rest.split_at_checked(n)?;
        self.rest = tail;
        Some(head)
    }

    pub(super) fn u8(&mut self) -> Option<u8> {
        let (&b, tail) = self.rest.split_first()?;
        self.rest = tail;
        Some(b)
    }

    pub(super) fn u16(&mut self) -> Option<u16> {
        let b = self.take(2)?;
        Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
    }

    /// Reads a length prefix of `prefix` bytes (1 or 2) and returns a reader over exactly the
    /// field it announces.
    pub(super) fn sub(&mut self, prefix: LenPrefix) -> Option<Reader<'a>> {
        let len = match prefix {
            LenPrefix::U8 => usize::from(self.u8()?),
            LenPrefix::U16 => usize::from(self.u16()?),
        };
        self.take(len).map(Reader::new)
    }

    /// Everything not read yet.
    pub(super) fn rest(self) -> &'a [u8] {
        self.rest
    }

    pub(super) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.rest.len()
    }
}

/// Width of a length prefix.
#[derive(Debug, Clone, Copy)]
pub(super) enum LenPrefix {
    U8,
    U16,
}
