//! The two store contracts, below everything that names them (the schema,
//! the errors).

/// Which of the two store contracts a store follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dense,
    Ragged,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Dense => "dense",
            Kind::Ragged => "ragged",
        })
    }
}
