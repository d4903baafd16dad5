//! Primitive Kafka wire types for the hand-written hot-path codecs (Produce decode, Fetch
//! encode). Reads never panic: every read checks the bytes left and returns `WireError`.

use bytes::{Buf, BufMut, Bytes, BytesMut};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireError(pub &'static str);

pub type WireResult<T> = Result<T, WireError>;

/// A cursor over a request body. Byte fields are returned as `Bytes` slices of the same
/// buffer: no copy.
pub struct Reader {
    buf: Bytes,
    flexible: bool,
}

impl Reader {
    pub fn new(buf: Bytes, flexible: bool) -> Reader {
        Reader { buf, flexible }
    }

    /// The bytes not read yet.
    pub fn into_rest(self) -> Bytes {
        self.buf
    }

    pub fn remaining(&self) -> usize {
        self.buf.remaining()
    }

    fn need(&self, n: usize) -> WireResult<()> {
        if self.buf.remaining() < n {
            Err(WireError("truncated request"))
        } else {
            Ok(())
        }
    }

    pub fn i8(&mut self) -> WireResult<i8> {
        self.need(1)?;
        Ok(self.buf.get_i8())
    }

    pub fn i16(&mut self) -> WireResult<i16> {
        self.need(2)?;
        Ok(self.buf.get_i16())
    }

    pub fn i32(&mut self) -> WireResult<i32> {
        self.need(4)?;
        Ok(self.buf.get_i32())
    }

    pub fn i64(&mut self) -> WireResult<i64> {
        self.need(8)?;
        Ok(self.buf.get_i64())
    }

    /// A UUID (a topic id): 16 bytes.
    pub fn uuid(&mut self) -> WireResult<[u8; 16]> {
        self.need(16)?;
        let mut id = [0u8; 16];
        self.buf.copy_to_slice(&mut id);
        Ok(id)
    }

    pub fn uvarint(&mut self) -> WireResult<u32> {
        let mut value: u32 = 0;
        for shift in (0..35).step_by(7) {
            self.need(1)?;
            let b = self.buf.get_u8();
            value |= ((b & 0x7f) as u32) << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(WireError("varint too long"))
    }

    fn take(&mut self, n: usize) -> WireResult<Bytes> {
        self.need(n)?;
        Ok(self.buf.split_to(n))
    }

    /// Length of a (compact) array; None for a null array.
    pub fn array_len(&mut self) -> WireResult<Option<usize>> {
        let len = if self.flexible {
            match self.uvarint()? {
                0 => return Ok(None),
                n => (n - 1) as usize,
            }
        } else {
            match self.i32()? {
                -1 => return Ok(None),
                n if n < 0 => return Err(WireError("negative array length")),
                n => n as usize,
            }
        };
        // Every element takes at least one byte, so a longer count is a lie; checking here keeps
        // a hostile count from driving an allocation.
        if len > self.remaining() {
            return Err(WireError("array longer than the request"));
        }
        Ok(Some(len))
    }

    pub fn nullable_string(&mut self) -> WireResult<Option<String>> {
        let len = if self.flexible {
            match self.uvarint()? {
                0 => return Ok(None),
                n => (n - 1) as usize,
            }
        } else {
            match self.i16()? {
                -1 => return Ok(None),
                n if n < 0 => return Err(WireError("negative string length")),
                n => n as usize,
            }
        };
        let raw = self.take(len)?;
        String::from_utf8(raw.to_vec())
            .map(Some)
            .map_err(|_| WireError("string is not UTF-8"))
    }

    pub fn string(&mut self) -> WireResult<String> {
        self.nullable_string()?.ok_or(WireError("null string"))
    }

    pub fn nullable_bytes(&mut self) -> WireResult<Option<Bytes>> {
        let len = if self.flexible {
            match self.uvarint()? {
                0 => return Ok(None),
                n => (n - 1) as usize,
            }
        } else {
            match self.i32()? {
                -1 => return Ok(None),
                n if n < 0 => return Err(WireError("negative bytes length")),
                n => n as usize,
            }
        };
        self.take(len).map(Some)
    }

    /// Skips a tagged-field section (flexible versions only).
    pub fn skip_tagged_fields(&mut self) -> WireResult<()> {
        self.tagged_fields(|_, _| Ok(()))
    }

    /// Reads a tagged-field section (flexible versions only), handing each field's tag and
    /// bytes to `field`.
    pub fn tagged_fields(
        &mut self,
        mut field: impl FnMut(u32, Bytes) -> WireResult<()>,
    ) -> WireResult<()> {
        if !self.flexible {
            return Ok(());
        }
        let count = self.uvarint()?;
        for _ in 0..count {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            field(tag, self.take(size)?)?;
        }
        Ok(())
    }
}

/// Encoding helpers for flexible (compact) and classic formats.
pub struct Writer<'a> {
    pub buf: &'a mut BytesMut,
    pub flexible: bool,
}

impl Writer<'_> {
    pub fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.buf.put_u8((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.buf.put_u8(v as u8);
    }

    pub fn array_len(&mut self, len: usize) {
        if self.flexible {
            self.uvarint(len as u32 + 1);
        } else {
            self.buf.put_i32(len as i32);
        }
    }

    pub fn null_array(&mut self) {
        if self.flexible {
            self.uvarint(0);
        } else {
            self.buf.put_i32(-1);
        }
    }

    pub fn string(&mut self, s: &str) {
        if self.flexible {
            self.uvarint(s.len() as u32 + 1);
        } else {
            self.buf.put_i16(s.len() as i16);
        }
        self.buf.put_slice(s.as_bytes());
    }

    /// The length prefix of a nullable bytes field whose content is written separately.
    pub fn bytes_len(&mut self, len: Option<usize>) {
        match (len, self.flexible) {
            (None, true) => self.uvarint(0),
            (None, false) => self.buf.put_i32(-1),
            (Some(n), true) => self.uvarint(n as u32 + 1),
            (Some(n), false) => self.buf.put_i32(n as i32),
        }
    }

    pub fn empty_tagged_fields(&mut self) {
        if self.flexible {
            self.uvarint(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip() {
        for v in [0u32, 1, 127, 128, 300, 16_383, 16_384, u32::MAX] {
            let mut b = BytesMut::new();
            Writer {
                buf: &mut b,
                flexible: true,
            }
            .uvarint(v);
            assert_eq!(Reader::new(b.freeze(), true).uvarint().unwrap(), v);
        }
    }

    #[test]
    fn lying_lengths_are_errors() {
        let mut r = Reader::new(Bytes::from_static(&[0, 0, 0, 100]), false);
        assert!(r.array_len().is_err());
        let mut r = Reader::new(
            Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            true,
        );
        assert!(r.uvarint().is_err());
        let mut r = Reader::new(Bytes::from_static(&[0, 5, b'a']), false);
        assert!(r.string().is_err());
    }
}
