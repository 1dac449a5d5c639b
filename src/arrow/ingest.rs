//! Ingest: an Arrow stream written as one store per column.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, FixedSizeListArray, RecordBatch, RecordBatchReader};
use arrow_buffer::NullBuffer;
use arrow_schema::{ArrowError, DataType, Field};

use crate::codec::Codec;
use crate::columnar::{ColumnWriter, ValueKind, COLUMN_FILE};
use crate::error::{Error, Result};
use crate::schema::Kind;
use crate::schema::{DType, Logical, Schema};
use crate::store::Store;
use crate::table::{ColumnLayout, ColumnSpec, Layouts};

use super::gather::arrow_err;
use super::packing::{
    bytes_pack, element_bytes, pack_list, ragged_pack, struct_shapes, with_dense_bytes,
};
use super::types::{logical_of, schema_for_field};

/// The loaderx error an Arrow error carries (a store read failing inside a
/// batch stream, an I/O failure a connector reports) with its class kept;
/// any other Arrow error becomes `InvalidValue`, its message after
/// `context`. The one unwrapping of `ArrowError` for the core and the
/// connectors.
pub fn from_arrow_error(e: ArrowError, context: &str) -> Error {
    match e {
        ArrowError::ExternalError(inner) => match inner.downcast::<Error>() {
            Ok(err) => *err,
            Err(other) => {
                Error::InvalidValue(format!("{context}{}", ArrowError::ExternalError(other)))
            }
        },
        other => Error::InvalidValue(format!("{context}{other}")),
    }
}

/// Names the column in a validation error.
pub(super) fn in_column(e: Error, column: &str) -> Error {
    match e {
        Error::InvalidValue(m) => Error::InvalidValue(format!("column {column:?}: {m}")),
        Error::InvalidType(m) => Error::InvalidType(format!("column {column:?}: {m}")),
        other => other,
    }
}

pub(super) fn column_dir(root: &Path, name: &str) -> Result<PathBuf> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(Error::InvalidValue(format!(
            "column name {name:?} cannot name a store directory"
        )));
    }
    Ok(root.join(name))
}

/// Streams every batch of `reader` into one new store per column under
/// `root/<column>`, with memory bounded by one batch. FixedSizeList (with or
/// without the tensor extension) becomes a dense store, List/LargeList a
/// ragged store of 1-D records, the ragged struct a ragged store, a primitive
/// a dense store of scalars, a string or binary column a ragged uint8 store
/// of its values (typed in the table file). Null rows are allowed (not
/// nulls inside a row's tensor): a column with any gets a validity stream
/// (`.validity/<column>`, see [`crate::table`]) and a placeholder record in
/// each null row; a column without costs nothing extra. `progress` sees the
/// rows written so far. On any error the stores created by this call are
/// removed. Returns each column's name and store kind; the stores are
/// closed.
pub fn ingest(
    reader: impl RecordBatchReader,
    root: &Path,
    codec: Codec,
    dict: Option<&[u8]>,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<(String, Kind)>> {
    ingest_table(reader, root, codec, dict, &Layouts::records(), progress)
}

/// [`ingest`] as a table writer does it: each column in the layout that
/// `layouts` resolves for it ([`Layouts::resolve`]): a columnar column is
/// one `column.zc` (recorded in the table file), the others stores.
pub fn ingest_table(
    reader: impl RecordBatchReader,
    root: &Path,
    codec: Codec,
    dict: Option<&[u8]>,
    layouts: &Layouts,
    progress: &mut dyn FnMut(u64),
) -> Result<Vec<(String, Kind)>> {
    let schema = reader.schema();
    let names: Vec<&String> = schema.fields().iter().map(|f| f.name()).collect();
    layouts.check_names(&names)?;
    let mut plan = Vec::new();
    for field in schema.fields() {
        let logical = logical_of(field.data_type());
        let schema = schema_for_field(field)?;
        let spec = ColumnSpec::records(schema.clone(), logical);
        plan.push(Planned {
            name: field.name().clone(),
            layout: layouts.resolve(field.name(), spec.value_kind())?,
            logical,
            schema,
        });
    }
    let batches = reader.map(|b| b.map_err(|e| from_arrow_error(e, "reading the source: ")));
    write_columns(&plan, batches, root, codec, dict, progress)?;
    Ok(plan
        .into_iter()
        .map(|p| (p.name, p.schema.kind()))
        .collect())
}

/// One column of an ingest: its name, its logical type, the schema its
/// records have and its layout.
pub(super) struct Planned {
    pub name: String,
    pub logical: Logical,
    pub schema: Schema,
    pub layout: ColumnLayout,
}

impl Planned {
    /// What the column holds as a columnar column.
    fn value_kind(&self) -> Result<ValueKind> {
        ColumnSpec::records(self.schema.clone(), self.logical)
            .value_kind()
            .ok_or_else(|| {
                Error::InvalidValue(format!(
                    "column {:?} holds tensors, which cannot be columnar",
                    self.name
                ))
            })
    }
}

/// Where one column's rows go.
// One per column of an ingest: boxing the stores would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Sink {
    /// A store, and its validity stream from the first null on.
    Records(Store, Option<Store>),
    Columnar(ColumnWriter),
}

/// The body of every ingest: creates one column per planned column under
/// `root` (a store, or a columnar column) and appends each of `batches`
/// (whose columns come in plan order; each batch's own fields say how its
/// arrays are laid out) to them. On any error the columns created here are
/// removed. Returns the rows written.
pub(super) fn write_columns(
    plan: &[Planned],
    batches: impl Iterator<Item = Result<RecordBatch>>,
    root: &Path,
    codec: Codec,
    dict: Option<&[u8]>,
    progress: &mut dyn FnMut(u64),
) -> Result<u64> {
    use crate::table::{self, ColumnType};

    let mut dirs = Vec::with_capacity(plan.len());
    for p in plan {
        let dir = column_dir(root, &p.name)?;
        for d in [dir.clone(), table::validity_dir(root, &p.name)] {
            if d.join(crate::format::META_FILE).exists() || d.join(COLUMN_FILE).exists() {
                return Err(Error::AlreadyExists {
                    path: d,
                    reason: format!("a column already exists here (column {:?})", p.name),
                });
            }
        }
        dirs.push(dir);
    }
    // Column types go to the table file first, so a column that exists
    // never lacks its type; validity streams are recorded as they appear.
    // (A columnar column needs no entry: its file says what it holds.)
    let mut recorded: Vec<(String, ColumnType)> = plan
        .iter()
        .filter(|p| p.logical.is_bytes() && p.layout == ColumnLayout::Records)
        .map(|p| {
            let t = ColumnType {
                logical: p.logical,
                nullable: false,
            };
            (p.name.clone(), t)
        })
        .collect();
    if !recorded.is_empty() {
        std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
        table::write_types(root, &recorded)?;
    }
    let validity_codec = if codec == Codec::Raw {
        Codec::Raw
    } else {
        Codec::Zstd
    };
    let mut sinks: Vec<Sink> = Vec::with_capacity(plan.len());
    let mut rows = 0u64;
    let written = || -> Result<()> {
        for (p, dir) in plan.iter().zip(&dirs) {
            sinks.push(match p.layout {
                ColumnLayout::Records => {
                    Sink::Records(Store::create(dir, p.schema.clone(), codec, dict)?, None)
                }
                ColumnLayout::Columnar => Sink::Columnar(ColumnWriter::create(
                    dir,
                    p.value_kind()?,
                    codec != Codec::Raw,
                )?),
            });
        }
        for batch in batches {
            let batch = batch?;
            let fields = batch.schema();
            for ((p, field), (sink, column)) in plan
                .iter()
                .zip(fields.fields())
                .zip(sinks.iter_mut().zip(batch.columns()))
            {
                let nulls = column.logical_nulls().filter(|n| n.null_count() > 0);
                let (store, validity) = match sink {
                    Sink::Columnar(w) => {
                        push_columnar(w, field, column, nulls.as_ref())
                            .map_err(|e| in_column(e, &p.name))?;
                        continue;
                    }
                    Sink::Records(store, validity) => (store, validity),
                };
                if nulls.is_some() && validity.is_none() {
                    // The first null of this column: its validity stream
                    // starts with every earlier row valid.
                    let name = p.name.clone();
                    let t = ColumnType {
                        logical: p.logical,
                        nullable: true,
                    };
                    std::fs::create_dir_all(root).map_err(|e| Error::io(root, e))?;
                    table::write_types(root, &[(name.clone(), t)])?;
                    recorded.retain(|(n, _)| *n != name);
                    recorded.push((name.clone(), t));
                    let schema = Schema::dense(DType::Bool, &[])?;
                    let mut v = Store::create(
                        table::validity_dir(root, &name),
                        schema,
                        validity_codec,
                        None,
                    )?;
                    v.append_dense(&vec![1u8; rows as usize])?;
                    *validity = Some(v);
                }
                if let Some(v) = validity.as_mut() {
                    let bits: Vec<u8> = match &nulls {
                        Some(n) => n.iter().map(u8::from).collect(),
                        None => vec![1u8; column.len()],
                    };
                    v.append_dense(&bits)?;
                }
                append_column(store, &p.schema, field, column, nulls.as_ref())
                    .map_err(|e| in_column(e, &p.name))?;
            }
            rows += batch.num_rows() as u64;
            progress(rows);
        }
        Ok(())
    };
    let done = written().and_then(|()| close_sinks(std::mem::take(&mut sinks)));
    drop(sinks);
    match done {
        Ok(()) => Ok(rows),
        Err(e) => {
            // Nothing half-written: drop what this call created.
            for dir in &dirs {
                let _ = std::fs::remove_dir_all(dir);
            }
            for p in plan {
                let _ = std::fs::remove_dir_all(table::validity_dir(root, &p.name));
            }
            let _ = std::fs::remove_dir(root.join(table::VALIDITY_DIR));
            if !recorded.is_empty() {
                let plain: Vec<_> = recorded
                    .iter()
                    .map(|(n, _)| (n.clone(), ColumnType::default()))
                    .collect();
                let _ = table::write_types(root, &plain);
            }
            Err(e)
        }
    }
}

/// Closes every sink: stores synced, columnar columns finished.
fn close_sinks(sinks: Vec<Sink>) -> Result<()> {
    for sink in sinks {
        match sink {
            Sink::Records(s, v) => {
                s.close()?;
                if let Some(v) = v {
                    v.close()?;
                }
            }
            Sink::Columnar(w) => {
                w.finish()?;
            }
        }
    }
    Ok(())
}

/// Appends one batch's `column` to the columnar column `w`; `nulls` marks
/// its null rows.
fn push_columnar(
    w: &mut ColumnWriter,
    field: &Field,
    column: &ArrayRef,
    nulls: Option<&NullBuffer>,
) -> Result<()> {
    let valid = nulls.map(|n| move |i: usize| n.is_valid(i));
    let valid = valid.as_ref().map(|f| f as &dyn Fn(usize) -> bool);
    match w.kind() {
        ValueKind::Fixed(dtype) => {
            let stripped = match nulls {
                Some(n) => strip_row_nulls(column.as_ref(), n)?,
                None => Arc::clone(column),
            };
            let bytes = element_bytes(stripped.as_ref(), dtype, "the array")?;
            w.push_fixed(&bytes, valid)
        }
        ValueKind::Utf8 | ValueKind::Binary => {
            let n = column.len();
            macro_rules! push {
                ($arr:expr) => {{
                    let a = $arr;
                    w.push_bytes(n, &|i| a.value(i).as_ref(), valid)
                }};
            }
            match column.data_type() {
                DataType::Utf8 => push!(column.as_string::<i32>()),
                DataType::LargeUtf8 => push!(column.as_string::<i64>()),
                DataType::Utf8View => push!(column.as_string_view()),
                DataType::Binary => push!(column.as_binary::<i32>()),
                DataType::LargeBinary => push!(column.as_binary::<i64>()),
                DataType::BinaryView => push!(column.as_binary_view()),
                DataType::FixedSizeBinary(_) => push!(column.as_fixed_size_binary()),
                other => Err(Error::InvalidType(format!(
                    "column {:?}: expected a string or binary array, got {other}",
                    field.name()
                ))),
            }
        }
    }
}

/// Appends one batch's `column` to `store`; `nulls` marks its null rows,
/// which get a placeholder record (zeros; an empty value for text).
pub(super) fn append_column(
    store: &mut Store,
    schema: &Schema,
    field: &Field,
    column: &ArrayRef,
    nulls: Option<&NullBuffer>,
) -> Result<()> {
    let logical = logical_of(field.data_type());
    if let DataType::FixedSizeList(..) = column.data_type() {
        if column.as_fixed_size_list().values().logical_null_count() > 0 {
            // Names the row whose tensor holds a null (unless its row is null).
            let valid = NullBuffer::new_valid(column.len());
            strip_row_nulls(column.as_ref(), nulls.unwrap_or(&valid))?;
        }
    }
    let Some(nulls) = nulls else {
        return match schema.kind() {
            _ if logical.is_bytes() => bytes_pack(column.as_ref(), field, None)
                .and_then(|packed| store.append_ragged(&packed)),
            Kind::Dense => {
                with_dense_bytes(schema, column.as_ref(), field, |b| store.append_dense(b))
            }
            Kind::Ragged => ragged_pack(schema.dtype, column.as_ref(), field)
                .and_then(|packed| store.append_ragged(&packed)),
        };
    };
    let stripped = strip_row_nulls(column.as_ref(), nulls)?;
    match schema.kind() {
        _ if logical.is_bytes() => bytes_pack(stripped.as_ref(), field, Some(nulls))
            .and_then(|packed| store.append_ragged(&packed)),
        Kind::Dense => with_dense_bytes(schema, stripped.as_ref(), field, |b| {
            let width = b.len() / column.len().max(1);
            let mut bytes = b.to_vec();
            for (i, valid) in nulls.iter().enumerate() {
                if !valid {
                    bytes[i * width..(i + 1) * width].fill(0);
                }
            }
            store.append_dense(&bytes)
        }),
        Kind::Ragged => {
            let dtype = schema.dtype;
            let packed = match stripped.data_type() {
                DataType::List(_) => pack_list(dtype, stripped.as_list::<i32>(), None, Some(nulls)),
                DataType::LargeList(_) => {
                    pack_list(dtype, stripped.as_list::<i64>(), None, Some(nulls))
                }
                DataType::Struct(_) => {
                    // The ragged struct: its children's values in null rows
                    // are placeholders too.
                    let s = stripped.as_struct();
                    let (Some(data), Some(shape)) =
                        (s.column_by_name("data"), s.column_by_name("shape"))
                    else {
                        return Err(Error::InvalidType(format!(
                            "a struct array must have fields data and shape, got {}",
                            stripped.data_type()
                        )));
                    };
                    let data = strip_row_nulls(data.as_ref(), nulls)?;
                    let shape = strip_row_nulls(shape.as_ref(), nulls)?;
                    let shapes = struct_shapes(shape.as_ref())?;
                    match data.data_type() {
                        DataType::List(_) => {
                            pack_list(dtype, data.as_list::<i32>(), Some(&shapes), Some(nulls))
                        }
                        DataType::LargeList(_) => {
                            pack_list(dtype, data.as_list::<i64>(), Some(&shapes), Some(nulls))
                        }
                        other => Err(Error::InvalidType(format!(
                            "the data field must be a List or LargeList, got {other}"
                        ))),
                    }
                }
                other => Err(Error::InvalidType(format!(
                    "a ragged column takes List, LargeList or struct{{data, shape}}, got {other}"
                ))),
            };
            packed.and_then(|packed| store.append_ragged(&packed))
        }
    }
}

/// `array` without its row nulls (the rows stay, their values become
/// placeholders). Nulls inside a fixed-size row (a tensor element) are
/// refused: only whole rows may be null.
pub(super) fn strip_row_nulls(array: &dyn Array, nulls: &NullBuffer) -> Result<ArrayRef> {
    if let DataType::FixedSizeList(f, size) = array.data_type() {
        let list = array.as_fixed_size_list();
        let values = list.values();
        let size_u = *size as usize;
        let child_nulls = values.logical_nulls().filter(|n| n.null_count() > 0);
        let values = match child_nulls {
            None => Arc::clone(values),
            Some(cn) => {
                if let Some(j) = cn.iter().enumerate().find_map(|(j, valid)| {
                    (!valid && nulls.is_valid(j / size_u.max(1))).then_some(j)
                }) {
                    return Err(Error::InvalidValue(format!(
                        "row {} holds a null inside its tensor (element {}); only whole rows may be null",
                        j / size_u.max(1),
                        j % size_u.max(1)
                    )));
                }
                // Every child null lies in a null row: those elements are
                // placeholders too.
                let row_of = |j: usize| nulls.is_valid(j / size_u.max(1));
                let expanded = NullBuffer::from((0..values.len()).map(row_of).collect::<Vec<_>>());
                strip_row_nulls(values.as_ref(), &expanded)?
            }
        };
        let out =
            FixedSizeListArray::try_new(Arc::clone(f), *size, values, None).map_err(arrow_err)?;
        return Ok(Arc::new(out));
    }
    let data = array
        .to_data()
        .into_builder()
        .nulls(None)
        .build()
        .map_err(arrow_err)?;
    Ok(arrow_array::make_array(data))
}
