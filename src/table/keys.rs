//! Rows matched by key: what `merge_insert` and `add_columns(..., on=)`
//! do first. One hash map of the source's keys (which also finds a key it
//! repeats), then every key of the table looked up in it, in parallel.

use rayon::prelude::*;

use crate::hash::CheapMap;

/// Keys a lookup task takes at once.
const LOOKUP_CHUNK: usize = 1 << 16;

/// For each of `target`'s keys, in order, the place in `source` of the
/// same key, or -1 where `source` lacks it; `Err(key)` with the first key
/// `source` gives a second time (in source order).
pub fn key_index(target: &[i64], source: &[i64]) -> Result<Vec<i64>, i64> {
    let mut at: CheapMap<i64, i64> = CheapMap::default();
    at.reserve(source.len());
    for (i, &k) in source.iter().enumerate() {
        if at.insert(k, i as i64).is_some() {
            return Err(k);
        }
    }
    let mut out = vec![-1i64; target.len()];
    out.par_chunks_mut(LOOKUP_CHUNK)
        .zip(target.par_chunks(LOOKUP_CHUNK))
        .for_each(|(out, keys)| {
            for (o, k) in out.iter_mut().zip(keys) {
                if let Some(&i) = at.get(k) {
                    *o = i;
                }
            }
        });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_target_key_finds_its_source_place_or_none() {
        let source = [40, -7, 3, i64::MAX];
        let target: Vec<i64> = vec![3, 5, 40, 40, i64::MAX, -7, 0];
        assert_eq!(
            key_index(&target, &source).unwrap(),
            [2, -1, 0, 0, 3, 1, -1]
        );
        let many: Vec<i64> = (0..200_000).map(|i| i * 3).collect();
        let got = key_index(&many, &[600_000 - 3, 9]).unwrap();
        assert_eq!(got[3], 1);
        assert_eq!(got[199_999], 0);
        assert_eq!(got.iter().filter(|&&i| i >= 0).count(), 2);
        assert!(key_index(&[], &[]).unwrap().is_empty());
    }

    #[test]
    fn the_first_key_the_source_repeats_is_named() {
        assert_eq!(key_index(&[1], &[5, 6, 7, 6, 5]), Err(6));
    }
}
