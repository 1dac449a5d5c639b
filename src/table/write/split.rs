//! Splits: a version's rows cut into disjoint views by fractions, planned
//! here and saved as one view set (all of them or none).
//!
//! Without a grouping column, the rows are ordered by their record seeds
//! (`sampler::record_seed(seed, 0, row)`, a stable sort) and cut at
//! `floor(cumsum(fractions) * n + 0.5)`; each view's rows are sorted. With
//! one (`by`), the distinct values of that column, in ascending order
//! (numbers by value, with `-0.0` as `0.0` and every NaN one value, last;
//! text and bytes by their bytes; nulls first), are ordered by their
//! record seeds (`record_seed(seed, 0, group)`) and assigned whole, in that
//! order, to the first split whose running target `cumsum(fractions) * n`
//! is not yet within half a row. The plan is the Python implementation's
//! of the releases before it, so a seed splits a table as it did.

use crate::read::records::Records;
use crate::repr::{py_repr, py_str};
use crate::schema::{DType, Layout};
use crate::table::versions::{self, View};
use crate::table::Table;
use crate::{Error, Location, Result};

/// Splits version `version` (None: the latest) of the sharded table at
/// `at` into the views `fractions` names (`(name, fraction)`, fractions
/// non-negative and summing to 1): disjoint, covering every row, saved
/// at once ([`super::history::save_view_set`]). See the module
/// documentation for the plan. Errors ([`Error::InvalidValue`]): no
/// fractions, a fraction that is negative or not finite, fractions not
/// summing to 1 (within 1e-6), a `by` column the table does not have, a
/// view name the format refuses or one that exists already; nothing is
/// saved then.
pub fn split(
    at: &Location,
    version: Option<u64>,
    fractions: &[(String, f64)],
    seed: u64,
    by: Option<&str>,
) -> Result<Vec<View>> {
    let weights: Vec<f64> = fractions.iter().map(|(_, f)| *f).collect();
    let shown = || {
        let inner: Vec<String> = fractions
            .iter()
            .map(|(n, f)| format!("{}: {}", py_str(n), py_repr(&serde_json::json!(f))))
            .collect();
        format!("{{{}}}", inner.join(", "))
    };
    let sum: f64 = weights.iter().sum();
    if weights.is_empty()
        || weights.iter().any(|w| !w.is_finite() || *w < 0.0)
        || sum.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
    {
        return Err(Error::InvalidValue(format!(
            "fractions must be non-negative and sum above 0, got {}",
            shown()
        )));
    }
    if (sum - 1.0).abs() > 1e-6 {
        return Err(Error::InvalidValue(format!(
            "fractions must sum to 1, got {sum} ({})",
            shown()
        )));
    }
    let at = at.fresh();
    let resolved = versions::planned_on(&at, version)?;
    let version = resolved.manifest.version();
    let n = resolved.manifest.num_rows();
    let parts = match by {
        None => by_rows(n, &weights, seed),
        Some(column) => {
            let table = Table::open_pinned(&at, &resolved.bytes)?;
            let found = table.column(column).ok_or_else(|| {
                Error::InvalidValue(format!(
                    "by names {}, which table {} does not have",
                    py_str(column),
                    py_str(&at.path().display().to_string())
                ))
            });
            let planned = found.and_then(|c| by_groups(c, n, &weights, seed));
            for c in table.into_columns() {
                let _ = c.close();
            }
            planned?
        }
    };
    let views: Vec<(String, Vec<u64>)> = fractions
        .iter()
        .map(|(name, _)| name.clone())
        .zip(parts)
        .collect();
    super::history::save_view_set(&at, Some(version), &views)
}

/// `order` stably sorted by the record seeds of its positions.
fn seeded_order(count: u64, seed: u64) -> Vec<u64> {
    let idx: Vec<u64> = (0..count).collect();
    let mut keys = vec![0u64; idx.len()];
    crate::sampler::record_seeds(&[seed], 0, &idx, &mut keys);
    let mut order = idx;
    order.sort_by_key(|&i| keys[i as usize]);
    order
}

/// The rows of each split without a grouping column.
fn by_rows(n: u64, weights: &[f64], seed: u64) -> Vec<Vec<u64>> {
    let order = seeded_order(n, seed);
    let mut out = Vec::with_capacity(weights.len());
    let (mut lo, mut acc) = (0usize, 0.0f64);
    for (i, w) in weights.iter().enumerate() {
        acc += w;
        let hi = if i + 1 == weights.len() {
            n as usize
        } else {
            ((acc * n as f64 + 0.5).floor() as usize).clamp(lo, n as usize)
        };
        let mut rows = order[lo..hi].to_vec();
        rows.sort_unstable();
        out.push(rows);
        lo = hi;
    }
    out
}

/// Each row's value of `column` as bytes that sort as the values do (see
/// the module documentation), end to end, with its span, or None for a
/// null.
struct Keys {
    bytes: Vec<u8>,
    spans: Vec<Option<(usize, usize)>>,
}

impl Keys {
    fn of(column: &dyn Records, n: u64) -> Result<Keys> {
        let all: Vec<u64> = (0..n).collect();
        let valid = match column.validity() {
            Some(v) => Some(v.gather_dense(&all)?),
            None => None,
        };
        let is_null = |i: usize| {
            valid
                .as_ref()
                .is_some_and(|v| v.as_slice().get(i) == Some(&0))
        };
        let schema = column.schema();
        let mut bytes = Vec::new();
        let mut spans = Vec::with_capacity(n as usize);
        match &schema.layout {
            Layout::Dense { item_shape } if item_shape.is_empty() => {
                let buf = column.gather_dense(&all)?;
                let w = schema.dtype.itemsize();
                for (i, v) in buf.as_slice().chunks_exact(w).enumerate() {
                    if is_null(i) {
                        spans.push(None);
                        continue;
                    }
                    let start = bytes.len();
                    sortable(schema.dtype, v, &mut bytes);
                    spans.push(Some((start, bytes.len() - start)));
                }
            }
            Layout::Dense { .. } => {
                let buf = column.gather_dense(&all)?;
                let w = schema.record_width().unwrap_or(1).max(1) as usize;
                for (i, v) in buf.as_slice().chunks_exact(w).enumerate() {
                    spans.push((!is_null(i)).then(|| {
                        bytes.extend_from_slice(v);
                        (bytes.len() - v.len(), v.len())
                    }));
                }
            }
            Layout::Ragged => {
                let batch = column.gather_ragged(&all)?;
                for i in 0..batch.len() {
                    let v = batch.record(i).payload;
                    spans.push((!is_null(i)).then(|| {
                        bytes.extend_from_slice(v);
                        (bytes.len() - v.len(), v.len())
                    }));
                }
            }
        }
        Ok(Keys { bytes, spans })
    }

    fn get(&self, i: usize) -> Option<&[u8]> {
        self.spans[i].map(|(s, l)| &self.bytes[s..s + l])
    }
}

/// `v` (one little-endian value of `dtype`) as big-endian bytes that sort
/// as the values do: signed integers with the sign bit flipped, floats
/// with `-0.0` as `0.0`, every NaN one value above every number.
fn sortable(dtype: DType, v: &[u8], out: &mut Vec<u8>) {
    let mut be: Vec<u8> = v.iter().rev().copied().collect();
    match dtype {
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => be[0] ^= 0x80,
        DType::F16 | DType::F32 | DType::F64 => {
            let (exp_bits, width) = match dtype {
                DType::F16 => (5u32, 16u32),
                DType::F32 => (8, 32),
                _ => (11, 64),
            };
            let mut bits = be.iter().fold(0u64, |acc, &b| (acc << 8) | b as u64);
            let sign = 1u64 << (width - 1);
            let mant_bits = width - 1 - exp_bits;
            let exp_mask = ((1u64 << exp_bits) - 1) << mant_bits;
            let mant_mask = (1u64 << mant_bits) - 1;
            if bits & exp_mask == exp_mask && bits & mant_mask != 0 {
                bits = exp_mask | (1 << (mant_bits - 1)); // one NaN
            } else if bits == sign {
                bits = 0; // -0.0 is 0.0
            }
            bits = if bits & sign != 0 { !bits } else { bits | sign };
            let mask = if width == 64 {
                u64::MAX
            } else {
                (1u64 << width) - 1
            };
            bits &= mask;
            for (k, b) in be.iter_mut().enumerate() {
                *b = (bits >> (8 * (be_len(width) - 1 - k))) as u8;
            }
        }
        _ => {}
    }
    out.extend_from_slice(&be);
}

fn be_len(width: u32) -> usize {
    (width / 8) as usize
}

/// The rows of each split with the grouping column `column`.
fn by_groups(column: &dyn Records, n: u64, weights: &[f64], seed: u64) -> Result<Vec<Vec<u64>>> {
    let keys = Keys::of(column, n)?;
    let mut rows: Vec<usize> = (0..n as usize).collect();
    rows.sort_by(|&a, &b| keys.get(a).cmp(&keys.get(b)));
    // Each row's group, groups numbered in ascending order of value.
    let mut group_of = vec![0u64; n as usize];
    let mut counts: Vec<u64> = Vec::new();
    for (k, &r) in rows.iter().enumerate() {
        if k == 0 || keys.get(r) != keys.get(rows[k - 1]) {
            counts.push(0);
        }
        let g = counts.len() - 1;
        group_of[r] = g as u64;
        counts[g] += 1;
    }
    let mut targets = Vec::with_capacity(weights.len());
    let mut acc = 0.0f64;
    for w in weights {
        acc += w;
        targets.push(acc * n as f64);
    }
    let mut split_of = vec![0usize; counts.len()];
    let (mut filled, mut s) = (0u64, 0usize);
    for g in seeded_order(counts.len() as u64, seed) {
        while s + 1 < weights.len() && filled as f64 >= targets[s] - 0.5 {
            s += 1;
        }
        split_of[g as usize] = s;
        filled += counts[g as usize];
    }
    let mut out = vec![Vec::new(); weights.len()];
    for (r, &g) in group_of.iter().enumerate() {
        out[split_of[g as usize]].push(r as u64);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(dtype: DType, v: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        sortable(dtype, v, &mut out);
        out
    }

    #[test]
    fn sortable_bytes_order_as_the_values_do() {
        let ints: Vec<Vec<u8>> = [-5i64, -1, 0, 3, i64::MAX]
            .iter()
            .map(|v| key(DType::I64, &v.to_le_bytes()))
            .collect();
        assert!(ints.windows(2).all(|w| w[0] < w[1]));
        let floats: Vec<Vec<u8>> = [
            f64::NEG_INFINITY,
            -2.5,
            -0.0,
            1e-300,
            7.0,
            f64::INFINITY,
            f64::NAN,
        ]
        .iter()
        .map(|v| key(DType::F64, &v.to_le_bytes()))
        .collect();
        assert!(floats.windows(2).all(|w| w[0] < w[1]), "{floats:?}");
        assert_eq!(
            key(DType::F64, &(-0.0f64).to_le_bytes()),
            key(DType::F64, &0.0f64.to_le_bytes())
        );
        assert_eq!(
            key(DType::F32, &f32::from_bits(0xffc0_0001).to_le_bytes()),
            key(DType::F32, &f32::NAN.to_le_bytes())
        );
        let halves: Vec<Vec<u8>> = [0xfc00u16, 0xc000, 0x0000, 0x3c00, 0x7c00, 0x7e00]
            .iter()
            .map(|v| key(DType::F16, &v.to_le_bytes()))
            .collect();
        assert!(halves.windows(2).all(|w| w[0] < w[1]), "{halves:?}");
        let u: Vec<Vec<u8>> = [1u16, 256, 65535]
            .iter()
            .map(|v| key(DType::U16, &v.to_le_bytes()))
            .collect();
        assert!(u.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn rows_are_cut_at_the_rounded_fractions_and_cover_every_row_once() {
        let parts = by_rows(10, &[0.5, 0.25, 0.25], 3);
        assert_eq!(parts.iter().map(Vec::len).collect::<Vec<_>>(), [5, 3, 2]);
        let mut all: Vec<u64> = parts.concat();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert_eq!(
            by_rows(10, &[0.5, 0.25, 0.25], 3),
            parts,
            "the same seed, the same split"
        );
        assert_ne!(by_rows(10, &[0.5, 0.25, 0.25], 4), parts);
    }
}
