//! A run's state: everything that resumes a [`super::DataLoader`] exactly.
//!
//! A [`LoaderState`] is plain data: the step, the sampler's settings (seed,
//! mode, batch size, block size), a mixture's source names and fixed
//! weights, where each table source was read ([`Pin`]: location, version,
//! view) and the plan's edits ([`Event`]s: exclusions and skips, in step
//! order). A loader built from the same data and settings at
//! `state.step` with `state.events` gives the batches of the run that
//! never stopped, bit for bit.
//!
//! Its JSON is the Python `DataLoader.state_dict()`'s, key for key:
//!
//! ```json
//! {"step": 9, "seed": 4, "mode": "cyclic", "batch_size": 8,
//!  "block_size": 16,
//!  "sources": ["web", "books"], "mix_weights": {"web": 3.0, "books": 1.0},
//!  "tables": [{"path": "/data/t", "version": 2, "view": null}],
//!  "events": [{"step": 6, "exclude": [0, 1], "source": "books"},
//!             {"step": 7, "skip": 2}]}
//! ```
//!
//! `block_size` appears for mode `"blocked"` only; `sources` and
//! `mix_weights` for a mixture only (`mix_weights` is null for a schedule:
//! a schedule is code, given again on resume); `tables` when a source is a
//! table (null for a source that is not); `events` once the plan is
//! edited. States saved before the state moved into the core load as they
//! are (tests/data/loader_states keeps some). Parsing checks every key and
//! names the one it refuses ([`Error::InvalidValue`]); whether the events
//! fit the data is checked when a loader takes them.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::{DataLoader, MixSource, MixWeights, Options, Subset};
use crate::error::{Error, Result};
use crate::read::records::StoreAccess;
use crate::repr::{py_list, py_repr, py_str};
use crate::sampler::Mode;

/// Where a table source was read: its location (a local path made
/// absolute, or a URI; never storage options), the version it opened at
/// (None for a plain table) and the view it read through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    pub path: String,
    pub version: Option<u64>,
    pub view: Option<String>,
}

/// An edit of a run's plan, at the step the caller was at when it made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// From `step` on, `records` (record ids of the streams, or of the
    /// mixture's source `source`) are never drawn.
    Exclude {
        step: u64,
        records: Vec<u64>,
        source: Option<String>,
    },
    /// Steps `step..step + n` are stepped past without being read.
    Skip { step: u64, n: u64 },
}

impl Event {
    /// The step the edit was made at.
    pub fn step(&self) -> u64 {
        match self {
            Event::Exclude { step, .. } | Event::Skip { step, .. } => *step,
        }
    }
}

/// An event as the state's JSON writes it.
#[derive(Serialize)]
#[serde(untagged)]
enum WireEvent<'a> {
    Exclude {
        step: u64,
        exclude: &'a [u64],
        source: Option<&'a str>,
    },
    Skip {
        step: u64,
        skip: u64,
    },
}

/// A pin as the state's JSON writes it.
#[derive(Serialize)]
struct WirePin<'a> {
    path: &'a str,
    version: Option<u64>,
    view: Option<&'a str>,
}

/// A mixture's weights: `{name: weight}` in source order.
struct WireWeights<'a>(&'a [String], &'a [f64]);

impl Serialize for WireWeights<'_> {
    fn serialize<Z: Serializer>(&self, s: Z) -> std::result::Result<Z::Ok, Z::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (name, w) in self.0.iter().zip(self.1) {
            m.serialize_entry(name, w)?;
        }
        m.end()
    }
}

/// The state as its JSON writes it, key by key in this order.
#[derive(Serialize)]
struct Wire<'a> {
    step: u64,
    seed: u64,
    mode: &'a str,
    batch_size: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    block_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sources: Option<&'a [String]>,
    /// `Some(None)`: a schedule (written as null).
    #[serde(skip_serializing_if = "Option::is_none")]
    mix_weights: Option<Option<WireWeights<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tables: Option<Vec<Option<WirePin<'a>>>>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    events: Vec<WireEvent<'a>>,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    decode: &'a std::collections::BTreeMap<String, Value>,
}

/// A run's state (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct LoaderState {
    /// The step the next batch is: batches handed over plus steps skipped.
    pub step: u64,
    pub seed: u64,
    pub mode: Mode,
    /// Records per batch on each rank.
    pub batch_size: usize,
    /// Records per block, for [`Mode::Blocked`].
    pub block_size: Option<u64>,
    /// A mixture's source names, in source order.
    pub sources: Option<Vec<String>>,
    /// A mixture's fixed weights, in source order; None for a schedule
    /// (and for a loader that is not a mixture).
    pub mix_weights: Option<Vec<f64>>,
    /// Per source, where its table was read (None for a source that is not
    /// a table); None when no source is a table.
    pub tables: Option<Vec<Option<Pin>>>,
    /// The plan's edits, in step order: skips end by `step`; an exclusion
    /// may be planned for a later step.
    pub events: Vec<Event>,
    /// Per decoded column, its decode settings (`crate::image::Image`'s
    /// `to_value`), by column name; empty when no column is decoded.
    pub decode: std::collections::BTreeMap<String, Value>,
}

/// `state[key]` as a message names it.
fn at(path: &str) -> String {
    format!("state{path}")
}

fn invalid(what: String) -> Error {
    Error::InvalidValue(what)
}

fn uint(v: &Value, path: &str) -> Result<u64> {
    v.as_u64().ok_or_else(|| {
        invalid(format!(
            "{} must be an integer in 0..=18446744073709551615, got {}",
            at(path),
            py_repr(v)
        ))
    })
}

fn opt_str(v: Option<&Value>, path: &str) -> Result<Option<String>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(invalid(format!(
            "{} must be a str or None, got {}",
            at(path),
            py_repr(other)
        ))),
    }
}

impl Pin {
    fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("path".into(), self.path.clone().into());
        m.insert("version".into(), self.version.into());
        m.insert("view".into(), self.view.clone().into());
        Value::Object(m)
    }

    fn from_value(v: &Value, path: &str) -> Result<Pin> {
        let Value::Object(m) = v else {
            return Err(invalid(format!(
                "{} must be a dict with 'path', 'version' and 'view', or None, got {}",
                at(path),
                py_repr(v)
            )));
        };
        let location = match m.get("path") {
            Some(Value::String(s)) => s.clone(),
            other => {
                return Err(invalid(format!(
                    "{} must be a str, got {}",
                    at(&format!("{path}['path']")),
                    other.map_or("nothing".into(), py_repr)
                )))
            }
        };
        let version = match m.get("version") {
            None | Some(Value::Null) => None,
            Some(v) => Some(uint(v, &format!("{path}['version']"))?),
        };
        Ok(Pin {
            path: location,
            version,
            view: opt_str(m.get("view"), &format!("{path}['view']"))?,
        })
    }

    /// The pin as Python prints the dict (`{'path': ..., 'version': 1,
    /// 'view': None}`), for messages.
    pub(crate) fn describe(pins: &[Option<Pin>]) -> String {
        let inner: Vec<String> = pins
            .iter()
            .map(|p| p.as_ref().map_or("None".into(), |p| py_repr(&p.to_value())))
            .collect();
        format!("[{}]", inner.join(", "))
    }
}

impl LoaderState {
    /// The state as JSON, keys in the order the module documentation
    /// lists them.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a state serializes")
    }

    /// Parses a state saved as JSON ([`LoaderState::from_value`]).
    pub fn from_json(text: &str) -> Result<LoaderState> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| invalid(format!("state is not JSON: {e}")))?;
        LoaderState::from_value(&value)
    }

    /// Parses a state (a JSON object with the keys of the module
    /// documentation; other keys are ignored). Errors
    /// ([`Error::InvalidValue`]) name the key: a missing `step`, `seed` or
    /// `mode`, a value of the wrong type or range, mixture weights that do
    /// not name each source once, events out of step order or a skip past
    /// the state's step, an event that is neither an exclusion nor a skip.
    pub fn from_value(v: &Value) -> Result<LoaderState> {
        let Value::Object(m) = v else {
            return Err(invalid(format!(
                "state must be a dict (a state_dict()), got {}",
                py_repr(v)
            )));
        };
        for key in ["step", "seed", "mode"] {
            if !m.contains_key(key) {
                let keys: Vec<&String> = m.keys().collect();
                return Err(invalid(format!(
                    "state has no {} (keys: {})",
                    py_str(key),
                    py_list(&keys)
                )));
            }
        }
        let step = uint(&m["step"], "['step']")?;
        let seed = uint(&m["seed"], "['seed']")?;
        let mode = match &m["mode"] {
            Value::String(s) => Mode::from_name(s),
            _ => None,
        }
        .ok_or_else(|| {
            invalid(format!(
                "state['mode'] must be 'sequential', 'iid', 'cyclic', 'blocked' or 'weighted', got {}",
                py_repr(&m["mode"])
            ))
        })?;
        let batch_size = match m.get("batch_size") {
            None | Some(Value::Null) => 256,
            Some(v) => match uint(v, "['batch_size']")? {
                0 => {
                    return Err(invalid(
                        "state['batch_size'] must be >= 1, got 0".to_string(),
                    ))
                }
                b => usize::try_from(b)
                    .map_err(|_| invalid(format!("state['batch_size'] is too large: {b}")))?,
            },
        };
        let block_size = match m.get("block_size") {
            None | Some(Value::Null) => None,
            Some(v) => Some(uint(v, "['block_size']")?),
        };
        let sources = match m.get("sources") {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) => Some(
                a.iter()
                    .enumerate()
                    .map(|(i, s)| match s {
                        Value::String(s) => Ok(s.clone()),
                        other => Err(invalid(format!(
                            "state['sources'][{i}] must be a str, got {}",
                            py_repr(other)
                        ))),
                    })
                    .collect::<Result<Vec<_>>>()?,
            ),
            Some(other) => {
                return Err(invalid(format!(
                    "state['sources'] must be a list of source names, got {}",
                    py_repr(other)
                )))
            }
        };
        let mix_weights = match (m.get("mix_weights"), &sources) {
            // Weights only mean something beside a mixture's sources.
            (None | Some(Value::Null), _) | (_, None) => None,
            (Some(Value::Object(w)), Some(names)) => {
                let unknown: Vec<&String> = w.keys().filter(|k| !names.contains(k)).collect();
                let missing: Vec<&String> = names.iter().filter(|n| !w.contains_key(*n)).collect();
                if !unknown.is_empty() || !missing.is_empty() {
                    return Err(invalid(format!(
                        "state['mix_weights'] must name every source of state['sources'] \
                         ({}) once: unknown {}, missing {}",
                        py_list(names),
                        py_list(&unknown),
                        py_list(&missing)
                    )));
                }
                Some(
                    names
                        .iter()
                        .map(|n| {
                            w[n].as_f64().ok_or_else(|| {
                                invalid(format!(
                                    "state['mix_weights'][{}] must be a number, got {}",
                                    py_str(n),
                                    py_repr(&w[n])
                                ))
                            })
                        })
                        .collect::<Result<Vec<f64>>>()?,
                )
            }
            (Some(other), Some(_)) => {
                return Err(invalid(format!(
                    "state['mix_weights'] must be a dict of source name -> weight, or None, got {}",
                    py_repr(other)
                )))
            }
        };
        let tables = match m.get("tables") {
            None | Some(Value::Null) => None,
            Some(Value::Array(a)) => Some(
                a.iter()
                    .enumerate()
                    .map(|(i, p)| match p {
                        Value::Null => Ok(None),
                        p => Pin::from_value(p, &format!("['tables'][{i}]")).map(Some),
                    })
                    .collect::<Result<Vec<_>>>()?,
            ),
            Some(other) => {
                return Err(invalid(format!(
                    "state['tables'] must be a list (one pin per source), got {}",
                    py_repr(other)
                )))
            }
        };
        let decode = match m.get("decode") {
            None | Some(Value::Null) => Default::default(),
            Some(Value::Object(d)) if d.values().all(Value::is_object) => {
                d.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
            }
            Some(other) => {
                return Err(invalid(format!(
                    "state['decode'] must be a dict of column name -> decode settings, got {}",
                    py_repr(other)
                )))
            }
        };
        let events = match m.get("events") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => parse_events(a, step)?,
            Some(other) => {
                return Err(invalid(format!(
                    "state['events'] must be a list, got {}",
                    py_repr(other)
                )))
            }
        };
        Ok(LoaderState {
            step,
            seed,
            mode,
            batch_size,
            block_size,
            sources,
            mix_weights,
            tables,
            events,
            decode,
        })
    }

    /// The steps skips stepped past, as `start..end` ranges in step order.
    pub fn skipped(&self) -> impl Iterator<Item = std::ops::Range<u64>> + '_ {
        skipped(&self.events)
    }
}

/// The ranges of steps `events`' skips stepped past.
pub(crate) fn skipped(events: &[Event]) -> impl Iterator<Item = std::ops::Range<u64>> + '_ {
    events.iter().filter_map(|e| match e {
        Event::Skip { step, n } => Some(*step..step.saturating_add(*n)),
        Event::Exclude { .. } => None,
    })
}

/// `state['events']`: in step order, none after `step`; each an exclusion
/// or a skip.
fn parse_events(list: &[Value], step: u64) -> Result<Vec<Event>> {
    let mut out = Vec::with_capacity(list.len());
    let mut last = 0;
    for (i, event) in list.iter().enumerate() {
        let here = format!("['events'][{i}]");
        let m = match event {
            Value::Object(m) if m.contains_key("step") => m,
            other => {
                return Err(invalid(format!(
                    "state['events'][{i}] must be a dict with a 'step', got {}",
                    py_repr(other)
                )))
            }
        };
        let at_step = uint(&m["step"], &format!("{here}['step']"))?;
        // An exclusion may be planned ahead; a skip is where the run went.
        let ahead = at_step > step && !m.contains_key("exclude");
        if at_step < last || ahead {
            return Err(invalid(format!(
                "state['events'][{i}] is at step {at_step}: events come in step order, \
                 from {last} (a skip by the state's step {step})"
            )));
        }
        last = at_step;
        if let Some(ids) = m.get("exclude") {
            let Value::Array(ids) = ids else {
                return Err(invalid(format!(
                    "state['events'][{i}]['exclude'] must be a list of record ids, got {}",
                    py_repr(ids)
                )));
            };
            let records = ids
                .iter()
                .map(|r| uint(r, &format!("{here}['exclude']")))
                .collect::<Result<Vec<u64>>>()?;
            out.push(Event::Exclude {
                step: at_step,
                records,
                source: opt_str(m.get("source"), &format!("{here}['source']"))?,
            });
        } else if let Some(n) = m.get("skip") {
            let n = uint(n, &format!("{here}['skip']"))?;
            if at_step.checked_add(n).is_none_or(|end| end > step) {
                return Err(invalid(format!(
                    "state['events'][{i}] skips {n} steps from step {at_step}, past the \
                     state's step {step}"
                )));
            }
            last = at_step + n;
            out.push(Event::Skip { step: at_step, n });
        } else {
            let keys: Vec<&String> = m.keys().collect();
            return Err(invalid(format!(
                "state['events'][{i}] must hold 'exclude' or 'skip', got keys {}",
                py_list(&keys)
            )));
        }
    }
    Ok(out)
}

impl Serialize for LoaderState {
    fn serialize<Z: Serializer>(&self, s: Z) -> std::result::Result<Z::Ok, Z::Error> {
        let sources = self.sources.as_deref();
        Wire {
            step: self.step,
            seed: self.seed,
            mode: self.mode.name(),
            batch_size: self.batch_size,
            block_size: self.block_size,
            sources,
            mix_weights: sources
                .map(|names| self.mix_weights.as_deref().map(|w| WireWeights(names, w))),
            tables: self.tables.as_ref().map(|t| {
                t.iter()
                    .map(|p| {
                        p.as_ref().map(|p| WirePin {
                            path: &p.path,
                            version: p.version,
                            view: p.view.as_deref(),
                        })
                    })
                    .collect()
            }),
            events: self
                .events
                .iter()
                .map(|e| match e {
                    Event::Exclude {
                        step,
                        records,
                        source,
                    } => WireEvent::Exclude {
                        step: *step,
                        exclude: records,
                        source: source.as_deref(),
                    },
                    Event::Skip { step, n } => WireEvent::Skip {
                        step: *step,
                        skip: *n,
                    },
                })
                .collect(),
            decode: &self.decode,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for LoaderState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        LoaderState::from_value(&value).map_err(serde::de::Error::custom)
    }
}

/// Saving a run's state and going on from one.
impl<S: StoreAccess + 'static> DataLoader<S> {
    /// The run's state: the step the next [`DataLoader::next`] returns, the
    /// sampler's settings, a mixture's sources and fixed weights, where the
    /// sources were read and the plan's edits. A loader built from it
    /// ([`DataLoader::from_state`], or [`DataLoader::load_state`] on a
    /// loader over the same data) goes on bit-exactly.
    pub fn state(&self) -> LoaderState {
        let o = &self.recipe.options;
        let (sources, mix_weights) = match &self.recipe.mix {
            Some((names, weights)) => (
                Some(names.clone()),
                match weights {
                    MixWeights::Fixed(w) => Some(w.clone()),
                    MixWeights::Schedule => None,
                },
            ),
            None => (None, None),
        };
        LoaderState {
            step: self.step(),
            seed: o.seed,
            mode: o.mode,
            batch_size: o.batch_size,
            block_size: o.block_size,
            sources,
            mix_weights,
            tables: self.recipe.pins.clone(),
            events: self.recipe.events.clone(),
            decode: self.decode_state(),
        }
    }

    /// The decode settings of the run's state.
    fn decode_state(&self) -> std::collections::BTreeMap<String, serde_json::Value> {
        #[cfg(feature = "image")]
        return self
            .recipe
            .options
            .decode
            .iter()
            .map(|(c, image)| (c.clone(), image.to_value()))
            .collect();
        #[cfg(not(feature = "image"))]
        Default::default()
    }

    /// Checks that `state` is this loader's run: the same seed, mode, block
    /// size and mixture sources and, when both name tables, the same
    /// tables at the same versions and views. `batch_size` and the ranks
    /// may differ (a run resumes on another number of ranks).
    fn check_state(&self, state: &LoaderState) -> Result<()> {
        let o = &self.recipe.options;
        let opt = |v: Option<u64>| v.map_or("None".into(), |v| v.to_string());
        let names = |v: Option<&Vec<String>>| v.map_or("None".into(), |v| py_list(v));
        let ours_names = self.recipe.mix.as_ref().map(|(n, _)| n);
        let pairs = [
            ("seed", state.seed.to_string(), o.seed.to_string()),
            ("mode", py_str(state.mode.name()), py_str(o.mode.name())),
            ("block_size", opt(state.block_size), opt(o.block_size)),
            ("sources", names(state.sources.as_ref()), names(ours_names)),
        ];
        for (key, theirs, ours) in pairs {
            if theirs != ours {
                return Err(Error::InvalidValue(format!(
                    "state[{}] is {theirs}, but this loader's {key} is {ours}: a state resumes \
                     the loader that made it (same streams, seed and mode)",
                    py_str(key)
                )));
            }
        }
        let ours = self.decode_state();
        if state.decode != ours {
            let show = |d: &std::collections::BTreeMap<String, serde_json::Value>| {
                crate::repr::py_repr(&serde_json::Value::Object(
                    d.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                ))
            };
            return Err(Error::InvalidValue(format!(
                "state['decode'] is {}, but this loader's decode is {}: a run resumes with the \
                 decode settings it was made with",
                show(&state.decode),
                show(&ours)
            )));
        }
        match (&state.tables, &self.recipe.pins) {
            (Some(theirs), Some(ours)) if theirs != ours => Err(pins_differ(theirs, ours)),
            _ => Ok(()),
        }
    }

    /// A loader over the tables `state` pins, reopened by `open` (which
    /// returns a pinned table's streams, in column order, and where it
    /// actually read: the version a view selects now may differ), at the
    /// state's step with its edits: it goes on bit-exactly. The state's
    /// seed, mode, block size, step and edits replace `options`'; the
    /// batch size, ranks, prefetching and output are `options`' (a run may
    /// resume on another number of ranks). A mixture's state reopens each
    /// source with its fixed weights, or with [`MixWeights::Schedule`]
    /// (push the weights from step 0 again: a schedule is code, not state).
    ///
    /// Errors ([`Error::InvalidValue`]): a state with a source that is not
    /// a table (build the loader and call [`DataLoader::load_state`]), a
    /// table that opens at another version than the state's (naming
    /// both), what `open` fails with, and the checks of [`DataLoader::new`]
    /// and [`DataLoader::mixture`].
    pub fn from_state(
        state: &LoaderState,
        mut open: impl FnMut(&Pin) -> Result<(Vec<(String, S)>, Pin)>,
        options: Options,
    ) -> Result<DataLoader<S>> {
        let pins: Vec<&Pin> = match &state.tables {
            Some(t) if !t.is_empty() && t.iter().all(Option::is_some) => {
                t.iter().flatten().collect()
            }
            _ => {
                return Err(Error::InvalidValue(
                    "state pins no table for some source (a loader over streams that are not \
                     a table): build the loader and call load_state"
                        .into(),
                ))
            }
        };
        let sources = state.sources.as_deref().unwrap_or_default();
        let want = if state.sources.is_some() {
            sources.len()
        } else {
            1
        };
        if pins.len() != want {
            return Err(Error::InvalidValue(format!(
                "state['tables'] pins {} tables, but the state has {want} sources",
                pins.len()
            )));
        }
        let mut opened = Vec::with_capacity(pins.len());
        let mut read = Vec::with_capacity(pins.len());
        for pin in pins {
            let (streams, at) = open(pin)?;
            opened.push(streams);
            read.push(Some(at));
        }
        if state.tables.as_ref() != Some(&read) {
            return Err(pins_differ(
                state.tables.as_deref().unwrap_or_default(),
                &read,
            ));
        }
        let options = Options {
            seed: state.seed,
            mode: state.mode,
            block_size: state.block_size,
            start_step: state.step,
            events: state.events.clone(),
            pins: Some(read),
            ..options
        };
        let loader = match &state.sources {
            None => DataLoader::new(opened.pop().unwrap_or_default(), options)?,
            Some(names) => {
                let weights = match &state.mix_weights {
                    Some(w) => MixWeights::Fixed(w.clone()),
                    None => MixWeights::Schedule,
                };
                let sources = names
                    .iter()
                    .zip(opened)
                    .map(|(name, streams)| MixSource {
                        name: name.clone(),
                        streams,
                        weights: None,
                    })
                    .collect();
                DataLoader::mixture(sources, weights, options)?
            }
        };
        // The decode settings must be the state's too.
        loader.check_state(state)?;
        Ok(loader)
    }
}

/// The edits of a run (they rebuild the plan over the same streams, so the
/// streams are cloned: an `Arc`, a reference or a binding's handle).
impl<S: StoreAccess + Clone + 'static> DataLoader<S> {
    /// A loader over the same streams and settings at `start` with the
    /// plan's edits `events`.
    fn rebuilt(&self, start: u64, events: Vec<Event>) -> Result<DataLoader<S>> {
        let mut options = self.recipe.options.clone();
        options.start_step = start;
        options.events = events;
        options.pins = self.recipe.pins.clone();
        match (&self.plan.mix, &self.recipe.mix) {
            (Some(mix), Some((_, weights))) => {
                DataLoader::mixture(mix.sources().cloned().collect(), weights.clone(), options)
            }
            _ => {
                options.indices = self.plan.indices.clone().map(Subset::Unsigned);
                DataLoader::new(self.plan.streams.clone(), options)
            }
        }
    }

    /// This loader with one more edit of its plan, made at `event.step()`
    /// (where the caller's consumer is: [`DataLoader::step`], or the step
    /// of a caller whose own threads take batches ahead of it): a new
    /// loader continuing at that step (after a skip's steps), with the
    /// same streams and settings. An exclusion of no record and a skip of
    /// 0 steps change nothing. This loader is left as it is; a scheduled
    /// mixture's weights are pushed again from step 0 to the new one.
    ///
    /// Errors ([`Error::InvalidValue`]): an edit before the last one, a
    /// record outside the streams (or the source) it names, a source that
    /// is not the mixture's, an exclusion that leaves nothing (or, for
    /// cyclic and blocked modes, less than a global batch) to draw.
    pub fn edited(&self, event: Event) -> Result<DataLoader<S>> {
        let (start, nothing) = match &event {
            Event::Exclude { step, records, .. } => (*step, records.is_empty()),
            Event::Skip { step, n } => (
                step.checked_add(*n).ok_or_else(|| {
                    Error::InvalidValue(format!("n must be in 0..={}, got {n}", u64::MAX - step))
                })?,
                *n == 0,
            ),
        };
        let mut events = self.recipe.events.clone();
        if !nothing {
            events.push(event);
        }
        self.rebuilt(start, events)
    }

    /// This run continued from `state` (saved by [`DataLoader::state`]): a
    /// new loader over the same streams at the state's step with its
    /// edits. Errors: a state of another run (seed, mode, block size,
    /// mixture sources, or pinned tables differing, naming both), edits
    /// the streams cannot take (see [`DataLoader::edited`]).
    pub fn resumed(&self, state: &LoaderState) -> Result<DataLoader<S>> {
        self.check_state(state)?;
        self.rebuilt(state.step, state.events.clone())
    }

    /// This run restarted at `step` (not before its last edit) with its
    /// edits: what a `fork()`ed child builds to go on where its parent was.
    pub fn restarted(&self, step: u64) -> Result<DataLoader<S>> {
        self.rebuilt(step, self.recipe.events.clone())
    }

    /// From the next step on, `records` (record ids of the streams, or of
    /// the mixture's source `source`) are never drawn. Cyclic and blocked
    /// modes finish the cycle under way without them and then cover every
    /// other record once per cycle; sequential goes on with the next
    /// record; iid and weighted draw as if their weight were zero. Kept in
    /// [`DataLoader::state`] and replayed exactly on resume. Prefetched
    /// batches are dropped. On error (see [`DataLoader::edited`]) nothing
    /// changes.
    pub fn exclude(&mut self, records: &[u64], source: Option<&str>) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let event = Event::Exclude {
            step: self.step(),
            records: records.to_vec(),
            source: source.map(str::to_string),
        };
        *self = self.edited(event)?;
        Ok(())
    }

    /// Steps past the next `n` steps without reading them: the next
    /// [`DataLoader::next`] returns step `step() + n`. Kept in
    /// [`DataLoader::state`] and left out of [`DataLoader::provenance`].
    pub fn skip(&mut self, n: u64) -> Result<()> {
        if n > 0 {
            *self = self.edited(Event::Skip {
                step: self.step(),
                n,
            })?;
        }
        Ok(())
    }

    /// Continues from `state` (see [`DataLoader::resumed`]); on error
    /// nothing changes.
    pub fn load_state(&mut self, state: &LoaderState) -> Result<()> {
        *self = self.resumed(state)?;
        Ok(())
    }
}

/// A state's pins against a loader's, both named.
fn pins_differ(theirs: &[Option<Pin>], ours: &[Option<Pin>]) -> Error {
    Error::InvalidValue(format!(
        "state['tables'] pins {}, but this loader reads {}: a state resumes on the data it was \
         made on (DataLoader.from_state reopens it)",
        Pin::describe(theirs),
        Pin::describe(ours)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(text: &str) -> Result<LoaderState> {
        LoaderState::from_json(text)
    }

    fn refused(text: &str, what: &str) {
        match state(text) {
            Err(Error::InvalidValue(m)) => assert!(m.contains(what), "{m:?} lacks {what:?}"),
            other => panic!("{text}: expected InvalidValue, got {other:?}"),
        }
    }

    #[test]
    fn a_state_goes_through_json_unchanged() {
        let s = LoaderState {
            step: 9,
            seed: u64::MAX,
            mode: Mode::Blocked,
            batch_size: 8,
            block_size: Some(16),
            sources: Some(vec!["web".into(), "books".into()]),
            mix_weights: Some(vec![3.0, 0.5]),
            tables: Some(vec![
                Some(Pin {
                    path: "/data/t".into(),
                    version: Some(2),
                    view: Some("even".into()),
                }),
                None,
            ]),
            events: vec![
                Event::Exclude {
                    step: 6,
                    records: vec![0, 1],
                    source: Some("books".into()),
                },
                Event::Skip { step: 7, n: 2 },
            ],
            decode: [(
                "image".to_string(),
                serde_json::json!({"size": [224, 224], "crop": "center"}),
            )]
            .into(),
        };
        let text = s.to_json();
        assert_eq!(LoaderState::from_json(&text).unwrap(), s);
        let back: LoaderState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back, s);
        assert!(text.starts_with(r#"{"step":9,"seed":18446744073709551615,"mode":"blocked""#));
        assert!(text.contains(r#""mix_weights":{"web":3.0,"books":0.5}"#));
        assert!(text.contains(
            r#""events":[{"step":6,"exclude":[0,1],"source":"books"},{"step":7,"skip":2}]"#
        ));
    }

    #[test]
    fn a_plain_state_has_only_its_keys() {
        let s = state(r#"{"step": 3, "seed": 1, "mode": "iid", "batch_size": 4}"#).unwrap();
        assert_eq!(
            s.to_json(),
            r#"{"step":3,"seed":1,"mode":"iid","batch_size":4}"#
        );
        let schedule = state(
            r#"{"step": 0, "seed": 1, "mode": "cyclic", "sources": ["a"], "mix_weights": null}"#,
        )
        .unwrap();
        assert_eq!(schedule.mix_weights, None);
        assert!(schedule.to_json().contains(r#""mix_weights":null"#));
    }

    #[test]
    fn bad_states_name_the_key() {
        refused(r#"[1]"#, "state must be a dict");
        refused(
            r#"{"seed": 1, "mode": "iid"}"#,
            "state has no 'step' (keys: ['mode', 'seed'])",
        );
        refused(
            r#"{"step": -1, "seed": 1, "mode": "iid"}"#,
            "state['step'] must be an integer",
        );
        refused(
            r#"{"step": 1, "seed": 1.5, "mode": "iid"}"#,
            "state['seed']",
        );
        refused(
            r#"{"step": 1, "seed": 1, "mode": "zigzag"}"#,
            "state['mode'] must be",
        );
        refused(
            r#"{"step": 1, "seed": 1, "mode": "iid", "batch_size": 0}"#,
            "batch_size",
        );
        refused(
            r#"{"step": 1, "seed": 1, "mode": "iid", "sources": ["a", "b"], "mix_weights": {"a": 1}}"#,
            "missing ['b']",
        );
        refused(
            r#"{"step": 1, "seed": 1, "mode": "iid", "tables": [{"path": 3}]}"#,
            "state['tables'][0]['path'] must be a str",
        );
        refused(
            r#"{"step": 5, "seed": 1, "mode": "iid", "events": [{"step": 6, "skip": 1}]}"#,
            "events come in step order",
        );
        refused(
            r#"{"step": 5, "seed": 1, "mode": "iid", "events": [{"step": 4, "skip": 3}]}"#,
            "past the state's step 5",
        );
        refused(
            r#"{"step": 5, "seed": 1, "mode": "iid", "events": [{"step": 2, "skip": 2}, {"step": 3, "exclude": [1]}]}"#,
            "events come in step order, from 4",
        );
        refused(
            r#"{"step": 5, "seed": 1, "mode": "iid", "events": [{"step": 4, "drop": 3}]}"#,
            "must hold 'exclude' or 'skip', got keys ['drop', 'step']",
        );
        refused(
            r#"{"step": 5, "seed": 1, "mode": "iid", "events": [{"step": 4, "exclude": [-2]}]}"#,
            "state['events'][0]['exclude'] must be an integer",
        );
    }
}
