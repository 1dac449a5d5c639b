//! A thread's flag, set for the length of one call.

use std::cell::Cell;
use std::thread::LocalKey;

/// Runs `f` with this thread's `flag` set, then puts it back as it was,
/// also when `f` panics (so an inner call inside an outer one leaves the
/// outer one's setting).
pub(crate) fn set_during<R>(flag: &'static LocalKey<Cell<bool>>, f: impl FnOnce() -> R) -> R {
    struct Restore(&'static LocalKey<Cell<bool>>, bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            self.0.with(|c| c.set(self.1));
        }
    }
    let _restore = Restore(flag, flag.with(|c| c.replace(true)));
    f()
}
