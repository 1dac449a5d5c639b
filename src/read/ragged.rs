//! The logical bytes of a ragged record: `[u64 ndim][u64 dim]*ndim[payload]`,
//! little-endian. Shape and payload share one location and one codec frame.

use crate::read::buffer::Buffer;

/// NumPy's limit on array rank; a prefix claiming more is malformed.
pub const MAX_NDIM: usize = 64;

/// Logical size of a record of `shape` whose payload is `payload_len` bytes.
pub fn encoded_len(ndim: usize, payload_len: usize) -> usize {
    8 * (1 + ndim) + payload_len
}

/// Writes the shape prefix into `out` (exactly `8 * (1 + shape.len())` bytes).
pub fn write_prefix(shape: &[u64], out: &mut [u8]) {
    out[0..8].copy_from_slice(&(shape.len() as u64).to_le_bytes());
    for (d, chunk) in shape.iter().zip(out[8..].chunks_exact_mut(8)) {
        chunk.copy_from_slice(&d.to_le_bytes());
    }
}

/// One decoded ragged record, borrowing its logical bytes.
#[derive(Clone, Copy, Debug)]
pub struct RaggedRecord<'a> {
    dims: &'a [u8],
    pub payload: &'a [u8],
}

impl<'a> RaggedRecord<'a> {
    pub fn ndim(&self) -> usize {
        self.dims.len() / 8
    }

    pub fn dims(&self) -> impl ExactSizeIterator<Item = u64> + 'a {
        self.dims
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
    }

    pub fn shape(&self) -> Vec<u64> {
        self.dims().collect()
    }

    /// Offset of the payload within the record's logical bytes.
    pub fn payload_offset(&self) -> usize {
        8 + self.dims.len()
    }
}

/// Parses and checks a record's prefix against its length and element size.
pub fn parse(record: &[u8], itemsize: usize) -> Result<RaggedRecord<'_>, String> {
    if record.len() < 8 {
        return Err(format!(
            "ragged record of {} bytes is shorter than its 8-byte ndim prefix",
            record.len()
        ));
    }
    let ndim = u64::from_le_bytes(record[0..8].try_into().unwrap());
    if ndim > MAX_NDIM as u64 {
        return Err(format!("ragged record claims ndim {ndim} > {MAX_NDIM}"));
    }
    let header = 8 * (1 + ndim as usize);
    if record.len() < header {
        return Err(format!(
            "ragged record of {} bytes is shorter than its {header}-byte shape prefix",
            record.len()
        ));
    }
    let dims = &record[8..header];
    let payload = &record[header..];
    let mut elements: u64 = 1;
    for c in dims.chunks_exact(8) {
        let d = u64::from_le_bytes(c.try_into().unwrap());
        elements = elements
            .checked_mul(d)
            .ok_or("ragged shape overflows u64")?;
    }
    let expected = elements.checked_mul(itemsize as u64);
    if expected != Some(payload.len() as u64) || payload.is_empty() {
        return Err(format!(
            "ragged record shape {:?} needs {} payload bytes of {itemsize}-byte elements, found {}",
            dims.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect::<Vec<_>>(),
            expected.map_or("too many".to_string(), |e| e.to_string()),
            payload.len()
        ));
    }
    Ok(RaggedRecord { dims, payload })
}

/// Packs records (shape, payload) into one contiguous buffer plus record
/// boundaries, the form [`crate::Store::append_ragged`] takes.
#[derive(Default, Debug, Clone)]
pub struct Packed {
    pub bytes: Vec<u8>,
    /// `bounds[i]..bounds[i+1]` is record `i`; `bounds.len() == records + 1`.
    pub bounds: Vec<usize>,
}

impl Packed {
    pub fn with_capacity(records: usize, bytes: usize) -> Packed {
        let mut bounds = Vec::with_capacity(records + 1);
        bounds.push(0);
        let mut buf = Vec::with_capacity(bytes);
        crate::read::buffer::advise_huge_pages(buf.as_mut_ptr(), bytes);
        Packed { bytes: buf, bounds }
    }

    /// Lays out records of the given shapes and payload sizes (prefixes
    /// written, payload bytes zeroed) so payloads can then be filled in
    /// place, in parallel, through `Packed::payload_mut`.
    pub fn layout<'a>(
        records: impl ExactSizeIterator<Item = (&'a [u64], usize)> + Clone,
    ) -> Packed {
        let total: usize = records
            .clone()
            .map(|(shape, n)| encoded_len(shape.len(), n))
            .sum();
        let mut packed = Packed::with_capacity(records.len(), total);
        packed.bytes.resize(total, 0);
        let mut at = 0;
        for (shape, n) in records {
            let header = 8 * (1 + shape.len());
            write_prefix(shape, &mut packed.bytes[at..at + header]);
            at += header + n;
            packed.bounds.push(at);
        }
        packed
    }

    /// The payload bytes of every record, for filling after [`Packed::layout`].
    pub fn payloads_mut(&mut self) -> Vec<&mut [u8]> {
        let mut out = Vec::with_capacity(self.len());
        let mut rest: &mut [u8] = &mut self.bytes;
        let mut consumed = 0;
        for w in self.bounds.windows(2) {
            let rec = &mut std::mem::take(&mut rest)[..];
            let (head, tail) = rec.split_at_mut(w[1] - consumed);
            let ndim = u64::from_le_bytes(head[0..8].try_into().unwrap()) as usize;
            out.push(&mut head[8 * (1 + ndim)..]);
            rest = tail;
            consumed = w[1];
        }
        out
    }

    pub fn len(&self) -> usize {
        self.bounds.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends one record.
    pub fn push(&mut self, shape: &[u64], payload: &[u8]) {
        if self.bounds.is_empty() {
            self.bounds.push(0);
        }
        let start = self.bytes.len();
        let header = 8 * (1 + shape.len());
        self.bytes.resize(start + header, 0);
        write_prefix(shape, &mut self.bytes[start..]);
        self.bytes.extend_from_slice(payload);
        self.bounds.push(self.bytes.len());
    }

    pub fn record(&self, i: usize) -> &[u8] {
        &self.bytes[self.bounds[i]..self.bounds[i + 1]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_round_trip() {
        let mut p = Packed::default();
        p.push(&[2, 3], &[7u8; 6]);
        p.push(&[], &[9u8; 4]);
        assert_eq!(p.len(), 2);
        let r = parse(p.record(0), 1).unwrap();
        assert_eq!(r.shape(), vec![2, 3]);
        assert_eq!(r.payload, &[7u8; 6]);
        let r = parse(p.record(1), 4).unwrap();
        assert_eq!(r.ndim(), 0);
        assert_eq!(r.payload.len(), 4);
        assert_eq!(r.payload_offset(), 8);
    }

    #[test]
    fn parse_rejects_inconsistent_prefixes() {
        assert!(parse(&[1, 2, 3], 1).is_err());
        let mut p = Packed::default();
        p.push(&[5], &[1u8; 5]);
        assert!(parse(p.record(0), 2).is_err()); // wrong dtype width
        let mut bad = p.record(0).to_vec();
        bad[0] = 200; // ndim too large
        assert!(parse(&bad, 1).is_err());
        let mut bad = p.record(0).to_vec();
        bad[0] = 3; // prefix longer than the record
        assert!(parse(&bad, 1).is_err());
        let mut bad = p.record(0).to_vec();
        bad[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse(&bad, 8).is_err());
    }
}

/// The records of a ragged gather, packed into one buffer.
#[derive(Debug)]
pub struct RaggedBatch {
    pub buffer: Buffer,
    /// `(start, len)` of each record's logical bytes in `buffer`; starts are
    /// 8-byte aligned so payloads of any dtype are aligned.
    pub spans: Vec<(usize, usize)>,
    itemsize: usize,
}

impl RaggedBatch {
    /// `records` (each a record's bytes: prefix and payload) copied into
    /// one buffer in order, at 8-byte aligned offsets as every gather lays
    /// them (readers pack payloads down in place).
    pub(crate) fn pack(records: &[&[u8]], itemsize: usize) -> Result<RaggedBatch, crate::Error> {
        let total: usize = records.iter().map(|v| v.len().next_multiple_of(8)).sum();
        let mut buf = Buffer::try_new(total).ok_or_else(|| crate::Error::OutOfMemory {
            bytes: total as u64,
            what: format!("a gather of {} records", records.len()),
        })?;
        let out = buf.as_mut_slice();
        let mut spans = Vec::with_capacity(records.len());
        let mut write = 0usize;
        for v in records {
            out[write..write + v.len()].copy_from_slice(v);
            spans.push((write, v.len()));
            write += v.len().next_multiple_of(8);
        }
        Ok(RaggedBatch::new(buf, spans, itemsize))
    }

    pub(crate) fn new(buffer: Buffer, spans: Vec<(usize, usize)>, itemsize: usize) -> RaggedBatch {
        RaggedBatch {
            buffer,
            spans,
            itemsize,
        }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Record `i` (already validated by the gather).
    pub fn record(&self, i: usize) -> RaggedRecord<'_> {
        let (start, len) = self.spans[i];
        parse(&self.buffer.as_slice()[start..start + len], self.itemsize)
            .expect("validated during gather")
    }
}
