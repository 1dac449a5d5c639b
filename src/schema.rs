//! The record schema stored as one MsgPack map in `meta.zr`.
//!
//! Dense: `{"dtype": "<f4", "item_shape": [2, 4]}`; ragged: `{"dtype": "<i4"}`.
//! `dtype` is NumPy's `dtype.str` of a little-endian or byte-order-free
//! dtype. Any other key, a missing key or a wrong type is malformed.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::error::{Error, Result};
use crate::format::{MAX_RECORD_BYTES, SCHEMA_CAPACITY};

pub use crate::kind::Kind;

/// The element types a store can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 12] = [
        DType::Bool,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::F32,
        DType::F64,
    ];

    /// NumPy's `dtype.str` for this type on a little-endian host.
    pub fn numpy_str(self) -> &'static str {
        match self {
            DType::Bool => "|b1",
            DType::I8 => "|i1",
            DType::I16 => "<i2",
            DType::I32 => "<i4",
            DType::I64 => "<i8",
            DType::U8 => "|u1",
            DType::U16 => "<u2",
            DType::U32 => "<u4",
            DType::U64 => "<u8",
            DType::F16 => "<f2",
            DType::F32 => "<f4",
            DType::F64 => "<f8",
        }
    }

    /// Parses NumPy's `dtype.str`; only the exact canonical spellings above.
    pub fn from_numpy_str(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.numpy_str() == s)
    }

    /// Bytes per element.
    pub fn itemsize(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 | DType::F16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }

    /// NumPy's name (`float32`, `bool`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::F16 => "float16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Every record is one array of `item_shape`.
    Dense { item_shape: Vec<u64> },
    /// Every record carries its own shape in an inline prefix.
    Ragged,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schema {
    pub dtype: DType,
    pub layout: Layout,
}

impl fmt::Display for Schema {
    /// `dense int64 item_shape [3, 2]` or `ragged uint8`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.layout {
            Layout::Dense { item_shape } => {
                write!(f, "dense {} item_shape {item_shape:?}", self.dtype)
            }
            Layout::Ragged => write!(f, "ragged {}", self.dtype),
        }
    }
}

impl Schema {
    /// A dense schema; every dimension must be positive and a record at most 2 GiB.
    pub fn dense(dtype: DType, item_shape: &[u64]) -> Result<Schema> {
        if let Some(pos) = item_shape.iter().position(|&d| d == 0) {
            return Err(Error::InvalidValue(format!(
                "item_shape must have positive dimensions, got {item_shape:?} (dimension {pos} is 0)"
            )));
        }
        let schema = Schema {
            dtype,
            layout: Layout::Dense {
                item_shape: item_shape.to_vec(),
            },
        };
        match schema.record_width() {
            Some(w) if w <= MAX_RECORD_BYTES => {}
            _ => {
                return Err(Error::InvalidValue(format!(
                    "item_shape {item_shape:?} of {dtype} exceeds the 2 GiB record limit"
                )))
            }
        }
        if schema.encode().len() > SCHEMA_CAPACITY {
            return Err(Error::InvalidValue(format!(
                "item_shape of {} dimensions does not fit the {SCHEMA_CAPACITY}-byte schema area",
                item_shape.len()
            )));
        }
        Ok(schema)
    }

    pub fn ragged(dtype: DType) -> Schema {
        Schema {
            dtype,
            layout: Layout::Ragged,
        }
    }

    pub fn kind(&self) -> Kind {
        match self.layout {
            Layout::Dense { .. } => Kind::Dense,
            Layout::Ragged => Kind::Ragged,
        }
    }

    pub fn item_shape(&self) -> Option<&[u64]> {
        match &self.layout {
            Layout::Dense { item_shape } => Some(item_shape),
            Layout::Ragged => None,
        }
    }

    /// Bytes of one dense record (`None` for ragged or on overflow).
    pub fn record_width(&self) -> Option<u64> {
        let shape = self.item_shape()?;
        shape
            .iter()
            .try_fold(self.dtype.itemsize() as u64, |acc, &d| acc.checked_mul(d))
    }

    /// The MsgPack bytes stored in `meta.zr`.
    pub fn encode(&self) -> Vec<u8> {
        rmp_serde::to_vec(self).expect("a schema always serializes")
    }

    /// Decodes the stored schema; the error says what is wrong with it.
    pub fn decode(bytes: &[u8]) -> Result<Schema, String> {
        let mut cursor = bytes;
        let schema: Schema =
            rmp_serde::from_read(&mut cursor).map_err(|e| format!("schema is not valid: {e}"))?;
        if !cursor.is_empty() {
            return Err(format!(
                "schema has {} trailing bytes after its MsgPack map",
                cursor.len()
            ));
        }
        if let Layout::Dense { item_shape } = &schema.layout {
            Schema::dense(schema.dtype, item_shape)
                .map_err(|e| format!("schema is not valid: {e}"))?;
        }
        Ok(schema)
    }
}

impl Serialize for Schema {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let shape = self.item_shape();
        let mut map = s.serialize_map(Some(if shape.is_some() { 2 } else { 1 }))?;
        map.serialize_entry("dtype", self.dtype.numpy_str())?;
        if let Some(shape) = shape {
            map.serialize_entry("item_shape", shape)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Schema {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Schema, D::Error> {
        struct SchemaVisitor;
        impl<'de> Visitor<'de> for SchemaVisitor {
            type Value = Schema;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map with key \"dtype\" and, for dense stores, \"item_shape\"")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Schema, A::Error> {
                let mut dtype: Option<String> = None;
                let mut shape: Option<Vec<u64>> = None;
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "dtype" if dtype.is_none() => dtype = Some(map.next_value()?),
                        "item_shape" if shape.is_none() => shape = Some(map.next_value()?),
                        "dtype" | "item_shape" => {
                            return Err(de::Error::custom(format!("duplicate key {key:?}")))
                        }
                        other => {
                            return Err(de::Error::custom(format!("unexpected key {other:?}")))
                        }
                    }
                }
                let dtype = dtype.ok_or_else(|| de::Error::missing_field("dtype"))?;
                let dtype = DType::from_numpy_str(&dtype)
                    .ok_or_else(|| de::Error::custom(format!("unsupported dtype {dtype:?}")))?;
                Ok(match shape {
                    Some(item_shape) => Schema {
                        dtype,
                        layout: Layout::Dense { item_shape },
                    },
                    None => Schema::ragged(dtype),
                })
            }
        }
        d.deserialize_map(SchemaVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_schema_bytes() {
        let s = Schema::dense(DType::F32, &[2, 4]).unwrap();
        let mut expected = vec![0x82, 0xa5];
        expected.extend_from_slice(b"dtype");
        expected.push(0xa3);
        expected.extend_from_slice(b"<f4");
        expected.push(0xaa);
        expected.extend_from_slice(b"item_shape");
        expected.extend_from_slice(&[0x92, 0x02, 0x04]);
        assert_eq!(s.encode(), expected);
        assert_eq!(Schema::decode(&expected).unwrap(), s);
    }

    #[test]
    fn ragged_schema_bytes() {
        let s = Schema::ragged(DType::I32);
        let mut expected = vec![0x81, 0xa5];
        expected.extend_from_slice(b"dtype");
        expected.push(0xa3);
        expected.extend_from_slice(b"<i4");
        assert_eq!(s.encode(), expected);
        assert_eq!(Schema::decode(&expected).unwrap(), s);
    }

    #[test]
    fn large_dims_round_trip() {
        let s = Schema::dense(DType::U8, &[70000, 3, 1]).unwrap();
        assert_eq!(Schema::decode(&s.encode()).unwrap(), s);
        let s = Schema::dense(DType::U8, &[]).unwrap();
        assert_eq!(s.record_width(), Some(1));
        assert_eq!(Schema::decode(&s.encode()).unwrap(), s);
    }

    #[test]
    fn rejects_malformed_maps() {
        // extra key
        let mut b = vec![0x82, 0xa5];
        b.extend_from_slice(b"dtype");
        b.push(0xa3);
        b.extend_from_slice(b"<i4");
        b.push(0xa4);
        b.extend_from_slice(b"meta");
        b.push(0x01);
        assert!(Schema::decode(&b).unwrap_err().contains("unexpected key"));
        // missing dtype
        let mut b = vec![0x81, 0xaa];
        b.extend_from_slice(b"item_shape");
        b.push(0x90);
        assert!(Schema::decode(&b).unwrap_err().contains("dtype"));
        // wrong type for dtype
        let mut b = vec![0x81, 0xa5];
        b.extend_from_slice(b"dtype");
        b.push(0x07);
        assert!(Schema::decode(&b).is_err());
        // big-endian dtype
        let mut b = vec![0x81, 0xa5];
        b.extend_from_slice(b"dtype");
        b.push(0xa3);
        b.extend_from_slice(b">i4");
        assert!(Schema::decode(&b)
            .unwrap_err()
            .contains("unsupported dtype"));
        // zero dimension
        let s = Schema {
            dtype: DType::U8,
            layout: Layout::Dense {
                item_shape: vec![3, 0],
            },
        };
        assert!(Schema::decode(&s.encode()).is_err());
        // nil item_shape, not a map, trailing bytes
        let mut b = vec![0x82, 0xa5];
        b.extend_from_slice(b"dtype");
        b.push(0xa3);
        b.extend_from_slice(b"<i4");
        b.push(0xaa);
        b.extend_from_slice(b"item_shape");
        b.push(0xc0);
        assert!(Schema::decode(&b).is_err());
        assert!(Schema::decode(&[0x93, 1, 2, 3]).is_err());
        let mut ok = Schema::ragged(DType::U8).encode();
        ok.push(0);
        assert!(Schema::decode(&ok).unwrap_err().contains("trailing"));
    }
}

/// How a table presents a column's records: as tensors of the store's
/// dtype (every store), or as text or bytes (a ragged `uint8` store whose
/// records are the values). A store never records this: it lives at table
/// level (`table.json`, the sharded manifest), so a bare store stays
/// byte-exact with the seed's format.
///
/// A text or binary value `v` is stored as the 1-D record `v` when it is
/// non-empty, and as a 0-d record holding the single byte 0 when it is
/// empty (ragged records are never empty).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Logical {
    #[default]
    Tensor,
    Utf8,
    Binary,
}

impl Logical {
    pub fn name(self) -> &'static str {
        match self {
            Logical::Tensor => "tensor",
            Logical::Utf8 => "utf8",
            Logical::Binary => "binary",
        }
    }

    pub fn from_name(name: &str) -> Option<Logical> {
        match name {
            "tensor" => Some(Logical::Tensor),
            "utf8" => Some(Logical::Utf8),
            "binary" => Some(Logical::Binary),
            _ => None,
        }
    }

    /// Whether values are variable-length byte strings.
    pub fn is_bytes(self) -> bool {
        matches!(self, Logical::Utf8 | Logical::Binary)
    }

    /// Checks that a store of `schema` can hold this logical type.
    pub fn check(self, schema: &Schema) -> Result<()> {
        if self.is_bytes() && *schema != Schema::ragged(DType::U8) {
            return Err(Error::InvalidValue(format!(
                "a {} column needs a ragged uint8 store, got a {schema} store",
                self.name()
            )));
        }
        Ok(())
    }
}

impl fmt::Display for Logical {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Appends the text or binary value `value` to `packed` as its record.
pub fn push_bytes_value(packed: &mut crate::read::ragged::Packed, value: &[u8]) {
    if value.is_empty() {
        packed.push(&[], &[0]);
    } else {
        packed.push(&[value.len() as u64], value);
    }
}

/// The value a text or binary record holds (see [`Logical`]), or why the
/// record is not one.
pub fn bytes_value<'a>(
    record: &crate::read::ragged::RaggedRecord<'a>,
) -> std::result::Result<&'a [u8], String> {
    match record.ndim() {
        0 => Ok(&[]),
        1 => Ok(record.payload),
        n => Err(format!(
            "a text or binary record is 1-D (0-d when empty), found ndim {n}"
        )),
    }
}
