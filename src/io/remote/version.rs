//! Which version of an object a reader pinned, and whether a response is
//! still that version.
//!
//! An entity tag is compared as HTTP defines one (RFC 9110, 8.8.3): the
//! opaque text between the quotes, whatever the quoting (GCS's emulator
//! lists `abc` and answers a GET with `"abc"`) and whether it carries the
//! weak prefix `W/` (the weak comparison). A request sends `If-Match` only
//! for a strong tag, in its quoted form (a weak tag never matches
//! `If-Match`). A server that sends no entity tag at all (a plain HTTP
//! server, some S3-compatible gateways) is pinned by size and
//! `Last-Modified` (to the second) where it sends that, else by size alone.

use std::sync::OnceLock;

/// An entity tag: its opaque text, and whether it is weak.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EntityTag {
    weak: bool,
    opaque: String,
}

impl EntityTag {
    /// The tag a header, a listing or a manifest gave (`"abc"`, `abc`,
    /// `W/"abc"`); None for an empty one.
    pub(crate) fn parse(raw: &str) -> Option<EntityTag> {
        let raw = raw.trim();
        let (weak, rest) = match raw.strip_prefix("W/").or_else(|| raw.strip_prefix("w/")) {
            Some(rest) => (true, rest.trim_start()),
            None => (false, raw),
        };
        let opaque = rest
            .strip_prefix('"')
            .and_then(|r| r.strip_suffix('"'))
            .unwrap_or(rest);
        (!opaque.is_empty()).then(|| EntityTag {
            weak,
            opaque: opaque.to_owned(),
        })
    }

    /// The weak comparison: the same opaque text.
    pub(crate) fn matches(&self, other: &EntityTag) -> bool {
        self.opaque == other.opaque
    }

    /// The `If-Match` value that asks for this version: a strong tag,
    /// quoted; None for a weak one.
    pub(crate) fn if_match(&self) -> Option<String> {
        (!self.weak).then(|| format!("\"{}\"", self.opaque))
    }
}

impl std::fmt::Display for EntityTag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.weak {
            f.write_str("W/")?;
        }
        write!(f, "\"{}\"", self.opaque)
    }
}

/// `Last-Modified` in whole seconds since the epoch, None when the server
/// sent none (`object_store` reports a missing one as the epoch itself).
/// Whole seconds: the header has no finer resolution, while a listing
/// (S3's, say) may.
pub(crate) fn modified_secs(meta: &object_store::ObjectMeta) -> Option<i64> {
    Some(meta.last_modified.timestamp()).filter(|&s| s != 0)
}

/// What a listing or a response said of one version of an object.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub(crate) size: u64,
    pub(crate) etag: Option<EntityTag>,
    pub(crate) modified: Option<i64>,
}

impl Seen {
    pub(crate) fn of(meta: &object_store::ObjectMeta) -> Seen {
        Seen {
            size: meta.size,
            etag: meta.e_tag.as_deref().and_then(EntityTag::parse),
            modified: modified_secs(meta),
        }
    }

    /// Size only (a manifest records no tag).
    pub(crate) fn sized(size: u64) -> Seen {
        Seen {
            size,
            etag: None,
            modified: None,
        }
    }
}

/// The version an open object is pinned at: its size from the first time
/// it was seen, its entity tag and `Last-Modified` from the first listing
/// or response that carried them.
#[derive(Debug)]
pub(crate) struct Pin {
    pub(crate) size: u64,
    etag: OnceLock<EntityTag>,
    modified: OnceLock<i64>,
}

/// How a response differs from the pinned version.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Differs {
    Size { now: u64, pinned: u64 },
    EntityTag,
    Modified,
}

impl Pin {
    pub(crate) fn new(seen: &Seen) -> Pin {
        let pin = Pin {
            size: seen.size,
            etag: OnceLock::new(),
            modified: OnceLock::new(),
        };
        if let Some(e) = &seen.etag {
            let _ = pin.etag.set(e.clone());
        }
        if let Some(m) = seen.modified {
            let _ = pin.modified.set(m);
        }
        pin
    }

    /// The `If-Match` value of a request for this version, if any.
    pub(crate) fn if_match(&self) -> Option<String> {
        self.etag.get().and_then(EntityTag::if_match)
    }

    /// Checks `seen` (a response) against this version, pinning what it
    /// carries that was not known yet. The entity tag decides where both
    /// sides have one; `Last-Modified` only where neither has.
    pub(crate) fn check(&self, seen: &Seen) -> Result<(), Differs> {
        if seen.size != self.size {
            return Err(Differs::Size {
                now: seen.size,
                pinned: self.size,
            });
        }
        let known_tag = self.etag.get().is_some();
        if let Some(got) = &seen.etag {
            if !self.etag.get_or_init(|| got.clone()).matches(got) {
                return Err(Differs::EntityTag);
            }
        }
        if !known_tag && seen.etag.is_none() {
            if let Some(got) = seen.modified {
                if *self.modified.get_or_init(|| got) != got {
                    return Err(Differs::Modified);
                }
            }
        }
        Ok(())
    }

    /// What identifies this version in a cache key.
    pub(crate) fn identity(&self) -> String {
        match (self.etag.get(), self.modified.get()) {
            (Some(e), _) => e.to_string(),
            (None, Some(m)) => format!("modified {m}"),
            (None, None) => String::new(),
        }
    }
}

/// The message of an object that is no longer the version pinned.
pub(crate) fn describe(path: &std::path::Path, d: &Differs) -> String {
    let path = path.display();
    match d {
        Differs::Size { now, pinned } => {
            format!("{path} changed while open: it is {now} bytes now, {pinned} when opened")
        }
        Differs::EntityTag => {
            format!("{path} changed while open (its ETag is no longer the one pinned at open)")
        }
        Differs::Modified => format!(
            "{path} changed while open (it sends no ETag, and its Last-Modified is no longer the one pinned at open)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(s: &str) -> EntityTag {
        EntityTag::parse(s).unwrap()
    }

    #[test]
    fn entity_tags_compare_by_their_opaque_text() {
        assert!(tag("\"abc\"").matches(&tag("abc")));
        assert!(tag("W/\"abc\"").matches(&tag("\"abc\"")));
        assert!(!tag("\"abc\"").matches(&tag("\"abd\"")));
        assert_eq!(tag("abc").if_match().as_deref(), Some("\"abc\""));
        assert_eq!(tag("W/\"abc\"").if_match(), None);
        assert_eq!(tag(" \"a-1\" ").to_string(), "\"a-1\"");
        assert!(EntityTag::parse("\"\"").is_none() && EntityTag::parse("").is_none());
    }

    fn seen(size: u64, etag: Option<&str>, modified: Option<i64>) -> Seen {
        Seen {
            size,
            etag: etag.map(tag),
            modified,
        }
    }

    #[test]
    fn a_pin_checks_size_then_tag_then_modified() {
        // A listing's unquoted tag, a response's quoted one: the same.
        let pin = Pin::new(&seen(10, Some("abc"), Some(5)));
        assert_eq!(pin.check(&seen(10, Some("\"abc\""), Some(6))), Ok(()));
        assert_eq!(
            pin.check(&seen(10, Some("\"abd\""), Some(5))),
            Err(Differs::EntityTag)
        );
        assert_eq!(
            pin.check(&seen(11, Some("abc"), None)),
            Err(Differs::Size {
                now: 11,
                pinned: 10
            })
        );
        // No tag anywhere: Last-Modified decides, pinned at first sight.
        let pin = Pin::new(&seen(10, None, None));
        assert_eq!(pin.check(&seen(10, None, None)), Ok(()));
        assert_eq!(pin.check(&seen(10, None, Some(7))), Ok(()));
        assert_eq!(pin.check(&seen(10, None, Some(7))), Ok(()));
        assert_eq!(pin.check(&seen(10, None, Some(8))), Err(Differs::Modified));
        assert_eq!(pin.identity(), "modified 7");
        // A tag seen later is pinned from then on.
        assert_eq!(pin.check(&seen(10, Some("x"), None)), Ok(()));
        assert_eq!(
            pin.check(&seen(10, Some("y"), None)),
            Err(Differs::EntityTag)
        );
        assert_eq!(pin.if_match().as_deref(), Some("\"x\""));
    }
}
