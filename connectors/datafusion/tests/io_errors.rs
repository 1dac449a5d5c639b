//! A store read that fails with an OS error reaches the caller of a query
//! as that loaderx error (path and errno intact), however DataFusion wraps it
//! on the way: the Python binding maps it to `OSError` from there.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use datafusion::error::DataFusionError;
use datafusion::prelude::SessionContext;
use loaderx::arrow::{Records, StoreAccess};
use loaderx::error::{cause, Cause};
use loaderx::{Codec, DType, Error, Schema, Store};
use loaderx_datafusion::{Options, StoreTable};

const N: u64 = 5000;

/// A store whose reads fail with EIO once `failing` is set.
struct Flaky {
    store: Store,
    failing: Arc<AtomicBool>,
}

impl StoreAccess for Flaky {
    fn with<T>(&self, f: impl FnOnce(&dyn Records) -> loaderx::Result<T>) -> loaderx::Result<T> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(Error::Io {
                path: PathBuf::from("/flaky/image/data.zr"),
                source: std::io::Error::from_raw_os_error(EIO),
            });
        }
        f(&self.store)
    }
}

/// EIO on Linux.
const EIO: i32 = 5;

fn store(dir: &std::path::Path, name: &str, dtype: DType, shape: &[u64], width: usize) -> Store {
    let mut s = Store::create(
        dir.join(name),
        Schema::dense(dtype, shape).unwrap(),
        Codec::Raw,
        None,
    )
    .unwrap();
    s.append_dense(&vec![1u8; N as usize * width]).unwrap();
    s
}

async fn run(ctx: &SessionContext, sql: &str) -> DataFusionError {
    match ctx.sql(sql).await {
        Ok(df) => df.collect().await.expect_err(sql),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_read_surfaces_as_its_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let failing = Arc::new(AtomicBool::new(false));
    let image = Flaky {
        store: store(dir.path(), "image", DType::U8, &[16], 16),
        failing: Arc::clone(&failing),
    };
    let label = store(dir.path(), "label", DType::I64, &[], 8);
    let ctx = SessionContext::new();
    let t = StoreTable::try_new(
        vec![("image".to_string(), image)],
        Some("record_id".into()),
        Options::default(),
    )
    .unwrap();
    ctx.register_table("t", Arc::new(t)).unwrap();
    let u = StoreTable::try_new(
        vec![("label".to_string(), Arc::new(label))],
        Some("rid".into()),
        Options::default(),
    )
    .unwrap();
    ctx.register_table("u", Arc::new(u)).unwrap();
    failing.store(true, Ordering::SeqCst);
    for sql in [
        "SELECT image FROM t",
        "SELECT image FROM t WHERE record_id > 10",
        "SELECT t.image, u.label FROM t JOIN u ON t.record_id = u.rid",
        "SELECT record_id, image FROM t UNION ALL SELECT record_id, image FROM t ORDER BY record_id LIMIT 3",
    ] {
        let err = run(&ctx, sql).await;
        match cause(&err) {
            Some(Cause::Store(Error::Io { path, source })) => {
                assert!(path.ends_with("data.zr"), "{sql}: {path:?}");
                assert_eq!(source.raw_os_error(), Some(EIO), "{sql}");
            }
            other => panic!("{sql}: {other:?} in {err:?}"),
        }
    }
}
