//! Sequence packing: variable-length token records into fixed-length rows,
//! first-fit decreasing, with segment ids and positions (what a
//! document-masked attention needs).
//!
//! Records are taken longest first (ties in their given order); each goes
//! into the first row with room for all of it. When none has room, a new
//! row is opened if the row count is free (`rows = None`); otherwise, with
//! `split`, the record is cut across the rows that have room, first-fit,
//! and without it the record is dropped. A record longer than a row is cut
//! across rows with `split` and dropped without it. `max_segments` caps the
//! segments of a row. Each placed piece is one segment of its row:
//! `segment_ids` counts them from 1 in the row (0 is padding) and
//! `positions` restarts at 0 in each. The tokens a row does not fill are
//! `pad`; `dropped` counts the tokens left out.

/// How to pack.
#[derive(Clone, Debug)]
pub struct PackOptions {
    /// Tokens per row (>= 1).
    pub seq_len: usize,
    /// A fixed number of rows, or None for as many as the records need.
    pub rows: Option<usize>,
    /// At most this many segments per row (>= 1), or None.
    pub max_segments: Option<usize>,
    /// Cut records across rows rather than drop them.
    pub split: bool,
}

/// Packed rows, each `seq_len` long, row after row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedRows<T> {
    pub rows: usize,
    pub tokens: Vec<T>,
    pub segment_ids: Vec<i32>,
    pub positions: Vec<i32>,
    /// Tokens that did not fit.
    pub dropped: u64,
}

struct Row {
    used: usize,
    segments: usize,
}

/// Where [`place`] put each record: the row count, the pieces, and the
/// tokens left out. [`Placement::write`] turns it into rows.
#[derive(Clone, Debug)]
pub struct Placement {
    /// Rows of `seq_len` tokens.
    pub rows: usize,
    /// Tokens that did not fit.
    pub dropped: u64,
    seq_len: usize,
    /// (row, record, start, len) of each placed piece, by row and, within
    /// a row, in placement order (its segments' order).
    pieces: Vec<(usize, usize, usize, usize)>,
}

/// Packs `records` (see the module documentation). `InvalidValue` for a
/// `seq_len` or `max_segments` of 0, or a row that would hold more than
/// `i32::MAX` segments or positions.
pub fn pack<T: Copy>(
    records: &[&[T]],
    pad: T,
    options: &PackOptions,
) -> crate::Result<PackedRows<T>> {
    let placed = place(records, options)?;
    let n = placed.rows * placed.seq_len;
    let mut tokens = vec![pad; n];
    let mut segment_ids = vec![0i32; n];
    let mut positions = vec![0i32; n];
    placed.write(records, pad, &mut tokens, &mut segment_ids, &mut positions);
    Ok(PackedRows {
        rows: placed.rows,
        tokens,
        segment_ids,
        positions,
        dropped: placed.dropped,
    })
}

/// Places `records` into rows (the first half of [`pack`]): only their
/// lengths matter. Errors as [`pack`].
pub fn place<T>(records: &[&[T]], options: &PackOptions) -> crate::Result<Placement> {
    let PackOptions {
        seq_len,
        rows: fixed,
        max_segments,
        split,
    } = *options;
    let bad = |m: String| Err(crate::Error::InvalidValue(m));
    if seq_len == 0 {
        return bad("seq_len must be >= 1, got 0".into());
    }
    if seq_len > i32::MAX as usize {
        return bad(format!(
            "seq_len must be at most {}, got {seq_len}",
            i32::MAX
        ));
    }
    if max_segments == Some(0) {
        return bad("max_segments must be >= 1 (or None), got 0".into());
    }
    let cap = max_segments.unwrap_or(usize::MAX);
    let mut order: Vec<usize> = (0..records.len()).collect();
    // Longest first; the sort is stable, so ties keep their given order.
    order.sort_by(|&a, &b| records[b].len().cmp(&records[a].len()));

    let mut rows: Vec<Row> = Vec::new();
    // (row, record, start, len) of each placed piece, in placement order.
    let mut pieces: Vec<(usize, usize, usize, usize)> = Vec::new();
    if let Some(n) = fixed {
        rows.extend((0..n).map(|_| Row {
            used: 0,
            segments: 0,
        }));
    }
    let room = |r: &Row| {
        if r.segments >= cap {
            0
        } else {
            seq_len - r.used
        }
    };
    let mut dropped = 0u64;
    for &i in &order {
        let len = records[i].len();
        if len == 0 {
            continue; // nothing to place
        }
        if let Some(r) = rows.iter().position(|r| room(r) >= len) {
            pieces.push((r, i, 0, len));
            rows[r].used += len;
            rows[r].segments += 1;
            continue;
        }
        if len <= seq_len && fixed.is_none() {
            pieces.push((rows.len(), i, 0, len));
            rows.push(Row {
                used: len,
                segments: 1,
            });
            continue;
        }
        if !split {
            dropped += len as u64;
            continue;
        }
        // Cut across the rows with room, opening new ones when free.
        let mut start = 0;
        let mut r = 0;
        while start < len {
            if r == rows.len() {
                if fixed.is_some() {
                    break;
                }
                rows.push(Row {
                    used: 0,
                    segments: 0,
                });
            }
            let take = room(&rows[r]).min(len - start);
            if take > 0 {
                pieces.push((r, i, start, take));
                rows[r].used += take;
                rows[r].segments += 1;
                start += take;
            }
            r += 1;
        }
        dropped += (len - start) as u64;
    }

    // By row, keeping the placement order within a row (a stable sort).
    pieces.sort_by_key(|p| p.0);
    Ok(Placement {
        rows: rows.len(),
        dropped,
        seq_len,
        pieces,
    })
}

impl Placement {
    /// Tokens (and segment ids, and positions) in all the rows.
    pub fn len(&self) -> usize {
        self.rows * self.seq_len
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Writes the rows of `records` (those given to [`place`]) into
    /// `tokens`, `segment_ids` and `positions`, each [`Placement::len`]
    /// long, in one pass that sets every element: a row's pieces in order,
    /// then `pad` (segment id and position 0) to its end.
    ///
    /// Panics if a slice has another length.
    pub fn write<T: Copy>(
        &self,
        records: &[&[T]],
        pad: T,
        tokens: &mut [T],
        segment_ids: &mut [i32],
        positions: &mut [i32],
    ) {
        let (n, seq_len) = (self.len(), self.seq_len);
        assert!(
            tokens.len() == n && segment_ids.len() == n && positions.len() == n,
            "pack output slices of {}, {} and {} elements for {n}",
            tokens.len(),
            segment_ids.len(),
            positions.len()
        );
        let mut pieces = self.pieces.iter().peekable();
        for r in 0..self.rows {
            let row = r * seq_len..(r + 1) * seq_len;
            let (tok, seg, pos) = (
                &mut tokens[row.clone()],
                &mut segment_ids[row.clone()],
                &mut positions[row],
            );
            let mut used = 0;
            let mut segment = 0i32;
            while let Some(&&(_, i, start, len)) = pieces.peek().filter(|p| p.0 == r) {
                pieces.next();
                segment += 1;
                tok[used..used + len].copy_from_slice(&records[i][start..start + len]);
                seg[used..used + len].fill(segment);
                for (k, p) in pos[used..used + len].iter_mut().enumerate() {
                    *p = k as i32;
                }
                used += len;
            }
            tok[used..].fill(pad);
            seg[used..].fill(0);
            pos[used..].fill(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(seq_len: usize, rows: Option<usize>, split: bool) -> PackOptions {
        PackOptions {
            seq_len,
            rows,
            max_segments: None,
            split,
        }
    }

    #[test]
    fn first_fit_decreasing_with_segments_and_positions() {
        let recs: Vec<Vec<i32>> = vec![vec![1, 1], vec![2, 2, 2, 2], vec![3], vec![4, 4, 4]];
        let refs: Vec<&[i32]> = recs.iter().map(Vec::as_slice).collect();
        let p = pack(&refs, 0, &opts(5, None, false)).unwrap();
        // Longest first: [2 2 2 2] row 0, [4 4 4] row 1, [1 1] row 1, [3] row 0.
        assert_eq!(p.rows, 2);
        assert_eq!(p.tokens, [2, 2, 2, 2, 3, 4, 4, 4, 1, 1]);
        assert_eq!(p.segment_ids, [1, 1, 1, 1, 2, 1, 1, 1, 2, 2]);
        assert_eq!(p.positions, [0, 1, 2, 3, 0, 0, 1, 2, 0, 1]);
        assert_eq!(p.dropped, 0);
    }

    #[test]
    fn fixed_rows_drop_or_split_what_does_not_fit() {
        let recs: Vec<Vec<u8>> = vec![vec![7; 6], vec![8; 3]];
        let refs: Vec<&[u8]> = recs.iter().map(Vec::as_slice).collect();
        let p = pack(&refs, 0, &opts(4, Some(2), false)).unwrap();
        assert_eq!(p.tokens, [8, 8, 8, 0, 0, 0, 0, 0]);
        assert_eq!(p.dropped, 6);
        let p = pack(&refs, 9, &opts(4, Some(2), true)).unwrap();
        assert_eq!(p.tokens, [7, 7, 7, 7, 7, 7, 8, 8]);
        assert_eq!(p.segment_ids, [1, 1, 1, 1, 1, 1, 2, 2]);
        assert_eq!(p.positions, [0, 1, 2, 3, 0, 1, 0, 1]);
        assert_eq!(p.dropped, 1);
        // A record longer than a row, with free rows: cut across new ones.
        let p = pack(&refs[..1], 0, &opts(4, None, true)).unwrap();
        assert_eq!((p.rows, p.dropped), (2, 0));
        let p = pack(&refs[..1], 0, &opts(4, None, false)).unwrap();
        assert_eq!((p.rows, p.dropped), (0, 6));
    }

    #[test]
    fn max_segments_caps_a_row_and_bad_options_are_refused() {
        let recs: Vec<Vec<i64>> = vec![vec![1]; 5];
        let refs: Vec<&[i64]> = recs.iter().map(Vec::as_slice).collect();
        let mut o = opts(10, None, false);
        o.max_segments = Some(2);
        let p = pack(&refs, -1, &o).unwrap();
        assert_eq!(p.rows, 3);
        assert_eq!(&p.tokens[..3], &[1, 1, -1]);
        o.max_segments = Some(0);
        assert!(pack(&refs, 0, &o)
            .unwrap_err()
            .to_string()
            .contains("max_segments"));
        assert!(pack(&refs, 0, &opts(0, None, false)).is_err());
        let empty: [&[i64]; 0] = [];
        assert_eq!(pack(&empty, 0, &opts(3, None, false)).unwrap().rows, 0);
    }
}
